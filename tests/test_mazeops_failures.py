"""mazeops.failures: a handler's failure is one line for Step Functions, its traceback in the log."""

from __future__ import annotations

import json

import pytest
from aws_lambda_powertools import Logger
from hypothesis import given, settings
from hypothesis import strategies as st
from mazeops_testing import FakeLambdaContext
from pydantic import BaseModel, ValidationError

from mazeops.failures import MAX_MESSAGE_CHARS, one_line, one_line_errors, readable
from mazeops.runspec import InvalidRunSpec

CONTEXT = FakeLambdaContext()


class Strict(BaseModel):
    n: int


def failing(error: Exception):
    logger = Logger(service="failures-test")

    @logger.inject_lambda_context
    @one_line_errors(logger)
    def lambda_handler(event, context):
        raise error

    return lambda_handler


def test_the_error_keeps_its_class_and_gets_a_one_line_message_with_the_request_id(capsys) -> None:
    with pytest.raises(InvalidRunSpec) as raised:
        failing(InvalidRunSpec("total_steps: must be\\n  positive\nlr: too large"))({}, CONTEXT)
    message = str(raised.value)
    assert message == (
        f"total_steps: must be\\n positive lr: too large "
        f"(request {CONTEXT.aws_request_id}; trace in the function's log)"
    )
    assert (
        raised.value.__traceback__ is not None and raised.value.__cause__ is None and raised.value.__suppress_context__
    )
    [line] = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"Handler failed"' in line]
    assert line["function_request_id"] == CONTEXT.aws_request_id and line["error_type"] == "InvalidRunSpec"
    assert "Traceback (most recent call last)" in line["exception"] and "raise error" in line["exception"]


def test_an_exception_whose_text_ignores_its_arguments_becomes_a_stand_in_of_the_same_name() -> None:
    try:
        Strict(n="many\nlines")
    except ValidationError as error:
        original = error
    with pytest.raises(Exception) as raised:
        failing(original)({}, CONTEXT)
    assert type(raised.value).__name__ == "ValidationError" and "\n" not in str(raised.value)
    assert str(raised.value).startswith("1 validation error for Strict n Input should be a valid integer")


def test_key_errors_and_empty_messages_still_say_something() -> None:
    assert str(readable(KeyError("x"), "r")) == "'x' (request r; trace in the function's log)"
    assert str(readable(RuntimeError(), "r")) == "RuntimeError (request r; trace in the function's log)"


def test_success_passes_through_untouched() -> None:
    logger = Logger(service="failures-test")
    handler = one_line_errors(logger)(lambda event, context: {"ok": event})
    assert handler(1, CONTEXT) == {"ok": 1}


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_one_line_has_no_line_break_and_a_bounded_length(text: str) -> None:
    line = one_line(text)
    assert len(line) <= MAX_MESSAGE_CHARS and not any(c in line for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
    assert line == " ".join(text.split()) or line.endswith("...")
