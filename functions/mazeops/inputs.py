"""Fields of the small JSON inputs the state machines pass to the handlers, checked by type.

A missing or mistyped field raises InvalidInput naming it, instead of a KeyError deep inside
a handler; names inside the values are then validated by `mazeops.names`.
"""

from __future__ import annotations

from typing import Any, TypeVar

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
