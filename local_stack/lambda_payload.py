"""The JSON payloads the Lambda service returns: a handler's result, or an AWS-shaped function error."""

from __future__ import annotations

import decimal
import json
from typing import Any


def result_payload(result: Any) -> str:
    """`result` as JSON, as the AWS Python runtime marshals it (Decimals, DynamoDB's numbers, become floats).

    Raises TypeError or ValueError when `result` is not JSON serializable.
    """
    return json.dumps(result, default=_decimal_to_float)


def error_payload(error_type: str, message: str, request_id: str, stack_trace: list[str]) -> str:
    """A function error as AWS reports it; Step Functions matches Retry/Catch error names on `errorType`."""
    return json.dumps(
        {
            "errorMessage": message,
            "errorType": error_type,
            "requestId": request_id,
            "stackTrace": stack_trace,
        }
    )


def _decimal_to_float(value: Any) -> float:
    if isinstance(value, decimal.Decimal):
        return float(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
