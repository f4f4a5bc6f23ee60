"""The Lambda context object a handler receives as its second argument."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class LambdaContext:
    """The subset of the AWS Lambda context object that handlers and Powertools use."""

    function_name: str
    function_version: str
    invoked_function_arn: str
    memory_limit_in_mb: int
    aws_request_id: str
    log_group_name: str
    log_stream_name: str
    deadline: float = field(repr=False)  # time.monotonic() at which the function's timeout ends

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds left before the function's configured timeout (never negative)."""
        return max(0, int((self.deadline - time.monotonic()) * 1000))
