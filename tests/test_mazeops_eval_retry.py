"""mazeops.eval_retry: which failed evaluations start again, and when (bounded attempts, exponential backoff)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mazeops_testing import BASE_MODEL

from mazeops.adapter_rows import AdapterRecord
from mazeops.eval_retry import (
    INFRA_ERRORS,
    InvalidRetrySettings,
    due_retries,
    error_name,
    is_infra_failure,
    retry_delay,
    retry_due,
)

FAILED_AT = datetime(2026, 12, 2, 16, 0, tzinfo=UTC)
BACKOFF = 300.0


def record(name: str = "r1-step20", status: str = "EVAL_FAILED", error: str | None = None, **fields) -> AdapterRecord:
    run_id, step = name.rsplit("-step", 1)
    return AdapterRecord(
        base_model_id=BASE_MODEL,
        adapter_name=name,
        run_id=run_id,
        step=int(step),
        status=status,
        manifest_key=f"runs/{run_id}/adapters/global_step_{step}/manifest.json",
        lora_rank=32,
        created_at="2026-12-02T15:00:00Z",
        updated_at=fields.pop("updated_at", "2026-12-02T16:00:00.123Z"),
        error=error,
        **fields,
    )


# The `error` texts RecordEvalFailed writes ("<Error>: <Cause>", statemachines/evaluation.asl.json).
UNAVAILABLE = "RayUnavailable: POST /api/jobs/: cannot reach Ray at http://ray:8265: [Errno 111] Connection refused"


@pytest.mark.parametrize(
    ("text", "infra"),
    [
        (UNAVAILABLE, True),
        ("RayJobNotFound: GET /api/jobs/eval-r1-step20: not found (Job not found)", True),
        ("Lambda.ServiceException: Lambda is unable to run the function", True),
        ("Lambda.TooManyRequestsException: Rate exceeded", True),
        ("Sandbox.Timedout: Task timed out after 60.00 seconds", True),
        ("States.Timeout: null", True),
        ("InvalidManifest: runs/r1/adapters/global_step_20/manifest.json: missing field files", False),
        ("EvaluationJobFailed: Ray job eval-r1-step20 ended FAILED: exit 1 | log tail: CUDA error", False),
        ("InvalidEvalResult: result covers 10 mazes", False),
        ("RayAuthRejected: GET /api/version: Ray refused the request's token (HTTP 401)", False),
        ("States.TaskFailed: RayUnavailable", False),
        ("", False),
        (None, False),
    ],
)
def test_is_infra_failure(text: str | None, infra: bool) -> None:
    assert is_infra_failure(text) is infra


def test_error_name_is_the_text_before_the_first_colon() -> None:
    assert error_name("Lambda.Unknown: The cause: more") == "Lambda.Unknown"
    assert error_name("RayUnavailable") == "RayUnavailable"
    assert "RayUnavailable" in INFRA_ERRORS and "InvalidManifest" not in INFRA_ERRORS


@pytest.mark.parametrize(
    ("attempts", "waited_seconds", "due"),
    [
        (1, 299, False),
        (1, 300, True),  # the first retry: backoff after the failure
        (2, 599, False),
        (2, 600, True),  # the second: twice the backoff
        (3, 10**6, False),  # the third attempt was the last
        (4, 10**6, False),
    ],
)
def test_retry_due(attempts: int, waited_seconds: int, due: bool) -> None:
    now = FAILED_AT + timedelta(seconds=waited_seconds)
    assert retry_due(attempts, FAILED_AT, now, BACKOFF, max_attempts=3) is due


@pytest.mark.parametrize(("attempts", "backoff", "max_attempts"), [(0, BACKOFF, 3), (1, -1.0, 3), (1, BACKOFF, 0)])
def test_retry_settings_out_of_range(attempts: int, backoff: float, max_attempts: int) -> None:
    with pytest.raises(InvalidRetrySettings):
        retry_due(attempts, FAILED_AT, FAILED_AT, backoff, max_attempts)


def test_due_retries_takes_infra_failures_past_their_backoff() -> None:
    now = datetime(2026, 12, 2, 16, 5, 1, tzinfo=UTC)  # 5 min after 16:00:00.123
    records = [
        record("r1-step10", error=UNAVAILABLE),  # due: attempt 1, 300 s passed
        record("r1-step20", error=UNAVAILABLE, eval_attempts=2),  # attempt 2 waits 600 s
        record("r1-step30", error=UNAVAILABLE, eval_attempts=3),  # no attempts left
        record("r1-step40", error="InvalidManifest: bad"),  # the adapter's fault
        record("r1-step50", status="EVALUATED", error=UNAVAILABLE),  # evaluated since
        record("r1-step60", error=UNAVAILABLE, updated_at="2026-12-02T16:04:00Z"),  # failed a minute ago
        record("r2-step10", error="RayJobNotFound: gone", updated_at="2026-12-02T15:00:00Z", eval_attempts=2),
    ]
    assert [r.adapter_name for r in due_retries(records, now, BACKOFF, 3)] == ["r1-step10", "r2-step10"]
    assert due_retries(records, now, BACKOFF, 1) == []


# --- properties of the backoff -----------------------------------------------------------------

attempts_st = st.integers(1, 30)
backoff_st = st.floats(0, 3600, allow_nan=False)


@given(attempts=attempts_st, backoff=backoff_st)
def test_the_delay_doubles_with_each_attempt(attempts: int, backoff: float) -> None:
    assert retry_delay(attempts, backoff) == timedelta(seconds=backoff * 2 ** (attempts - 1))
    assert retry_delay(attempts + 1, backoff) >= retry_delay(attempts, backoff)


@given(
    attempts=attempts_st,
    backoff=backoff_st,
    max_attempts=st.integers(1, 10),
    waited=st.integers(0, 10**8),
    more=st.integers(0, 10**8),
)
def test_once_due_a_retry_stays_due_and_an_attempt_more_waits_longer(
    attempts: int, backoff: float, max_attempts: int, waited: int, more: int
) -> None:
    now = FAILED_AT + timedelta(seconds=waited)
    due = retry_due(attempts, FAILED_AT, now, backoff, max_attempts)
    if due:
        assert attempts < max_attempts
        assert retry_due(attempts, FAILED_AT, now + timedelta(seconds=more), backoff, max_attempts)
    if retry_due(attempts + 1, FAILED_AT, now, backoff, max_attempts):
        assert due


@given(backoff=backoff_st, max_attempts=st.integers(1, 10), gaps=st.lists(st.integers(0, 10**6), max_size=60))
def test_a_failing_evaluation_runs_at_most_max_attempts_times(
    backoff: float, max_attempts: int, gaps: list[int]
) -> None:
    """An evaluation that fails at once at every attempt, watched at arbitrary times, runs max_attempts times at most,
    each retry at least its backoff after the failure before it."""
    failing = record(error=UNAVAILABLE, updated_at="2026-12-02T16:00:00Z")
    now = FAILED_AT
    runs = 1
    for gap in gaps:
        now += timedelta(seconds=gap)
        if due_retries([failing], now, backoff, max_attempts):
            failed_at = datetime.fromisoformat(failing.updated_at)
            assert now - failed_at >= retry_delay(failing.eval_attempts or 1, backoff)
            runs += 1
            stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
            failing = dataclasses.replace(failing, eval_attempts=runs, updated_at=stamp)
    assert runs <= max_attempts
