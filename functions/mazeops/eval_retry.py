"""Which failed evaluations to run again on their own: those the cluster failed, not the adapter, with backoff.

The evaluation state machine records a failure in the adapter's row as `error = "<Error>: <Cause>"`
(RecordEvalFailed in statemachines/evaluation.asl.json), where <Error> is the failing exception's class name
(a Lambda function's errorType) or a Step Functions error name. Those in INFRA_ERRORS say that the Ray head or the
Lambda service failed; any other (InvalidManifest, EvaluationJobFailed, InvalidEvalResult, ...) is about the adapter
or its job, and running it again would fail again.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from mazeops.adapter_rows import AdapterRecord
from mazeops.cluster_health import parse_time

INFRA_ERRORS = frozenset(
    {
        # mazeops.ray_jobs: the head did not answer (connection, timeout, HTTP 5xx), after the task's own retries.
        "RayUnavailable",
        # get_ray_job: the head no longer knows a submitted job (HTTP 404): it restarted and lost its jobs.
        "RayJobLost",
        # mazeops.ray_jobs: the same answer to a call other than a poll.
        "RayJobNotFound",
        # The Lambda service failed to run a task's function (the state machine's retried Lambda errors).
        "Lambda.ServiceException",
        "Lambda.AWSLambdaException",
        "Lambda.SdkClientException",
        "Lambda.TooManyRequestsException",
        "Lambda.Unknown",
        "Sandbox.Timedout",
        # A task or the execution ran out of time.
        "States.Timeout",
    }
)
FAILED_STATUS = "EVAL_FAILED"


class InvalidRetrySettings(ValueError):
    """A retry setting is out of range (attempts and max attempts >= 1, backoff >= 0)."""


def error_name(error_text: str | None) -> str:
    """The <Error> of an adapter row's `error` text "<Error>: <Cause>" ("" for no text)."""
    return (error_text or "").split(":", 1)[0].strip()


def is_infra_failure(error_text: str | None) -> bool:
    """True if the row's `error` text names an error of the cluster or the Lambda service (INFRA_ERRORS)."""
    return error_name(error_text) in INFRA_ERRORS


def retry_delay(attempts: int, backoff_seconds: float) -> timedelta:
    """How long after the failure of attempt number `attempts` the next attempt waits: backoff x 2^(attempts-1)."""
    if attempts < 1 or backoff_seconds < 0:
        raise InvalidRetrySettings(f"attempts must be >= 1 and backoff >= 0, got {attempts} and {backoff_seconds}")
    return timedelta(seconds=backoff_seconds * 2 ** (attempts - 1))


def retry_due(attempts: int, failed_at: datetime, now: datetime, backoff_seconds: float, max_attempts: int) -> bool:
    """True if an evaluation whose attempt number `attempts` failed at `failed_at` is to run again at `now`.

    It is once `retry_delay(attempts, backoff_seconds)` has passed, and only while fewer than `max_attempts`
    attempts have run.
    """
    if max_attempts < 1:
        raise InvalidRetrySettings(f"max attempts must be >= 1, got {max_attempts}")
    delay = retry_delay(attempts, backoff_seconds)
    return attempts < max_attempts and now - failed_at >= delay


def due_retries(
    records: Iterable[AdapterRecord], now: datetime, backoff_seconds: float, max_attempts: int
) -> list[AdapterRecord]:
    """The adapters among `records` whose evaluation is to run again at `now`.

    Those EVAL_FAILED for an infrastructure error (is_infra_failure) whose retry is due: attempts = the row's
    `eval_attempts` (1 when absent), failed at its `updated_at`.
    """
    return [
        record
        for record in records
        if record.status == FAILED_STATUS
        and is_infra_failure(record.error)
        and retry_due(record.eval_attempts or 1, parse_time(record.updated_at), now, backoff_seconds, max_attempts)
    ]
