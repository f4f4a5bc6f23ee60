"""Readable messages for pydantic validation errors (one line, every problem listed)."""

from __future__ import annotations

from pydantic import ValidationError


def describe_validation_error(error: ValidationError) -> str:
    """`field.path: message; ...` for every problem in `error`."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in error.errors())
