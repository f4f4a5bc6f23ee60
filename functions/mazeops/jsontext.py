"""JSON text from outside (an upload, an HTTP answer) read without letting the decoder's own errors out."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from mazeops.errors import describe_validation_error

Model = TypeVar("Model", bound=BaseModel)


class NotJson(ValueError):
    """The text is not JSON this process can read: bad UTF-8 or syntax, nesting deeper than the
    interpreter's recursion limit, or an integer longer than Python's 4,300-digit conversion limit."""


def loads(raw: bytes | str) -> Any:
    """`json.loads(raw)`, raising NotJson (with the decoder's reason) for anything it cannot read."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise NotJson(str(error)[:200] or type(error).__name__) from None


def parse_document(raw: bytes | str, model: type[Model], what: str, limit: int, error: type[Exception]) -> Model:
    """`raw` (at most `limit` bytes) validated as `model`; else raise `error` naming `what` and every problem."""
    if len(raw) > limit:
        raise error(f"{what} is {len(raw)} bytes; the limit is {limit}")
    try:
        return model.model_validate_json(raw)
    except ValidationError as problem:
        raise error(f"{what} is invalid: {describe_validation_error(problem)}") from None
