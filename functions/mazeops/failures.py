"""Failures an operator can read: one line in Step Functions, the whole trace in the function's log."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

MAX_MESSAGE_CHARS = 600

Handler = TypeVar("Handler", bound=Callable[..., Any])


def one_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`text` with every run of white space (newlines included) folded into one space, cut to `limit`."""
    folded = " ".join(text.split())
    return folded if len(folded) <= limit else folded[: limit - 3] + "..."


def readable(error: Exception, request_id: str) -> Exception:
    """`error` (same class, so the same ASL error name) whose message is one line ending with `request_id`.

    Exceptions whose text does not come from their arguments (pydantic's ValidationError, say)
    become a plain exception of the same class name.
    """
    message = f"{one_line(str(error)) or type(error).__name__} (request {request_id}; trace in the function's log)"
    error.args = (message,)
    if str(error) == message:
        return error.with_traceback(None)
    stand_in = type(type(error).__name__, (Exception,), {"__module__": type(error).__module__})
    return stand_in(message)


def one_line_errors(logger: Any) -> Callable[[Handler], Handler]:
    """Decorate a `lambda_handler(event, context)` (below Powertools' decorators) so that its failures
    are logged with their traceback through `logger` and raised with a one-line message."""

    def decorate(handler: Handler) -> Handler:
        @functools.wraps(handler)
        def wrapper(event: Any, context: Any) -> Any:
            try:
                return handler(event, context)
            except Exception as error:
                logger.exception("Handler failed", extra={"error_type": type(error).__name__})
                raise readable(error, getattr(context, "aws_request_id", "unknown")) from None

        return wrapper  # type: ignore[return-value]

    return decorate
