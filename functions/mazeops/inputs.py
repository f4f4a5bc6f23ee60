"""Fields of the small JSON inputs the state machines pass to the handlers, checked by type.

A missing or mistyped field raises InvalidInput naming it, instead of a KeyError deep inside
a handler; names inside the values are then validated by `mazeops.names`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from mazeops.names import parse_adapter_name, validate_base_model_id

T = TypeVar("T")


class InvalidInput(ValueError):
    """A handler input that is not an object or lacks a field of the expected type."""


def field(event: Any, name: str, kind: type[T], optional: bool = False) -> T:
    """`event[name]`, which must be of type `kind` (None allowed when `optional`)."""
    if not isinstance(event, dict):
        raise InvalidInput(f"input must be a JSON object, got {type(event).__name__}")
    value = event.get(name)
    if value is None and optional:
        return value  # type: ignore[return-value]
    if value is None:
        raise InvalidInput(f"input lacks the field {name!r}")
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise InvalidInput(f"input field {name!r} must be {kind.__name__}, got {type(value).__name__}")
    return value


@dataclass(frozen=True)
class AdapterRef:
    """The adapter a state machine step is about: its base model, its name and the run and step it names."""

    base_model_id: str
    adapter_name: str
    run_id: str
    step: int


def adapter_ref(event: Any) -> AdapterRef:
    """`event["base_model_id"]` and `event["adapter_name"]`, typed (InvalidInput) and validated (InvalidName)."""
    base_model_id = validate_base_model_id(field(event, "base_model_id", str))
    adapter = field(event, "adapter_name", str)
    run_id, step = parse_adapter_name(adapter)
    return AdapterRef(base_model_id, adapter, run_id, step)
