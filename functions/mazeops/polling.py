"""When the training state machine polls its Ray job next: a wait that grows with the run's age.

A Standard Step Functions execution holds at most 25,000 history events ("Maximum execution history size", AWS Step
Functions service quotas: https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html; it then fails,
https://docs.aws.amazon.com/step-functions/latest/dg/bp-history-limit.html). Each poll of the training loop adds 9
(Task 5, Choice 2, Wait 2), so polling every PollSeconds for the 7-day execution timeout would exhaust it at the short
settings (30 s: 181,440 events) and the failed execution would stop a healthy job. Polling at a fixed floor instead
would slow every short run. So the wait grows with the time since the execution started: PollSeconds at first, then
1/GROWTH_DIVISOR of the elapsed time, never more than MAX_WAIT_SECONDS, and one poll lands FINAL_POLL_MARGIN_SECONDS
before the execution's timeout. A job that ends is seen within max(PollSeconds, 1% of the run's age, 1 hour); a
7-day run makes at most `polls_within(1, 604800)` polls (about 1,000), whatever PollSeconds is.

Why not the alternatives: continuing as a new execution would change the execution a run is known by (the console
and the CLI follow `train-<run_id>`, and the stop rule acts on its end), and a task-token callback needs the cluster
to reach Step Functions and still a poll for a driver that dies without calling back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mazeops.inputs import InvalidInput, field

# A Standard execution fails when its history reaches this many events (service quotas page above).
HISTORY_EVENT_LIMIT = 25_000
# What the polls of a run as long as the timeout may use of it, leaving room for the states around the loop and for
# retried Lambda invocations (3 events each).
POLL_EVENT_BUDGET = 20_000
# History events of one poll: GetJobStatus (TaskStateEntered, TaskScheduled, TaskStarted, TaskSucceeded,
# TaskStateExited), JobFinished? (entered, exited), WaitForJob (entered, exited); counted in an execution's history
# by tests/test_statemachine_execution.py.
EVENTS_PER_POLL = 9
# The wait is at least 1/100 of the time since the execution started: a finished job is seen at most 1% late.
GROWTH_DIVISOR = 100
# The longest wait: the PollSeconds template parameter's MaxValue, so a finished job is never seen over an hour late.
MAX_WAIT_SECONDS = 3600
# One poll lands this long before the execution's TimeoutSeconds, leaving time to record and notify the result.
FINAL_POLL_MARGIN_SECONDS = 600


@dataclass(frozen=True)
class PollSchedule:
    """The inputs of the wait after one poll: the configured interval, the execution's age and its timeout."""

    poll_seconds: int
    elapsed_seconds: float
    timeout_seconds: int

    def next_wait(self) -> int:
        """Seconds to wait before the next poll (`next_poll_seconds` of these inputs)."""
        return next_poll_seconds(self.elapsed_seconds, self.poll_seconds, self.timeout_seconds)


def next_poll_seconds(elapsed_seconds: float, poll_seconds: int, timeout_seconds: int) -> int:
    """Whole seconds to wait after a poll made `elapsed_seconds` into an execution of `timeout_seconds`.

    The wait is max(poll_seconds, elapsed // GROWTH_DIVISOR) capped at MAX_WAIT_SECONDS, cut short so that a poll
    lands at `timeout_seconds - FINAL_POLL_MARGIN_SECONDS`. For `t` = whole elapsed seconds, `t + wait` never
    decreases as `t` grows, so polls that take time make no more polls than instant ones (`polls_within`).

    Raises:
        ValueError: if `poll_seconds` is outside 1..MAX_WAIT_SECONDS or `timeout_seconds` is not positive.
    """
    if not 1 <= poll_seconds <= MAX_WAIT_SECONDS:
        raise ValueError(f"poll_seconds must be within 1..{MAX_WAIT_SECONDS}, got {poll_seconds}")
    if timeout_seconds < 1:
        raise ValueError(f"timeout_seconds must be positive, got {timeout_seconds}")
    elapsed = max(0, int(elapsed_seconds))
    wait = min(max(poll_seconds, elapsed // GROWTH_DIVISOR), MAX_WAIT_SECONDS)
    final_poll_at = timeout_seconds - FINAL_POLL_MARGIN_SECONDS
    if elapsed < final_poll_at:
        wait = min(wait, final_poll_at - elapsed)
    return wait


def polls_within(poll_seconds: int, timeout_seconds: int) -> int:
    """The most polls an execution of `timeout_seconds` makes: the first at its start, each taking no time."""
    polls, elapsed = 0, 0
    while elapsed < timeout_seconds:
        polls += 1
        elapsed += next_poll_seconds(elapsed, poll_seconds, timeout_seconds)
    return polls


def elapsed_between(started_at: str, polled_at: str) -> float:
    """Seconds from `started_at` to `polled_at`, ISO 8601 times as in the Context object (`Z` or an offset).

    Raises:
        InvalidInput: if either is not an ISO 8601 time with a zone.
    """
    times = []
    for name, text in (("started_at", started_at), ("polled_at", polled_at)):
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise InvalidInput(f"poll field {name!r} is not an ISO 8601 time: {text[:40]!r}") from None
        if moment.tzinfo is None:
            raise InvalidInput(f"poll field {name!r} has no time zone: {text[:40]!r}")
        times.append(moment)
    return (times[1] - times[0]).total_seconds()


def poll_schedule(event: dict[str, Any]) -> PollSchedule | None:
    """The schedule in `event["poll"]` (`poll_seconds`, `started_at`, `polled_at`, `timeout_seconds`), or None.

    Raises:
        InvalidInput: if `poll` is present but a field is missing, mistyped or out of range.
    """
    poll = field(event, "poll", dict, optional=True)
    if poll is None:
        return None
    poll_seconds = field(poll, "poll_seconds", int)
    timeout_seconds = field(poll, "timeout_seconds", int)
    if not 1 <= poll_seconds <= MAX_WAIT_SECONDS:
        raise InvalidInput(f"poll field 'poll_seconds' must be within 1..{MAX_WAIT_SECONDS}, got {poll_seconds}")
    if timeout_seconds < 1:
        raise InvalidInput(f"poll field 'timeout_seconds' must be positive, got {timeout_seconds}")
    elapsed = elapsed_between(field(poll, "started_at", str), field(poll, "polled_at", str))
    return PollSchedule(poll_seconds, elapsed, timeout_seconds)
