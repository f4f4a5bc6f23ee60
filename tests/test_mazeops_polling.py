"""The training poll schedule (mazeops.polling): bounds of each wait, and the polls of a 7-day run at every setting."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mazeops.inputs import InvalidInput
from mazeops.polling import (
    EVENTS_PER_POLL,
    FINAL_POLL_MARGIN_SECONDS,
    GROWTH_DIVISOR,
    HISTORY_EVENT_LIMIT,
    MAX_WAIT_SECONDS,
    POLL_EVENT_BUDGET,
    elapsed_between,
    next_poll_seconds,
    poll_schedule,
    polls_within,
)

ROOT = Path(__file__).resolve().parent.parent
SEVEN_DAYS = 7 * 24 * 3600
TRAINING = json.loads((ROOT / "statemachines" / "training.asl.json").read_text())

poll_settings = st.integers(1, MAX_WAIT_SECONDS)
timeouts = st.integers(1, 2 * SEVEN_DAYS)


def test_poll_seconds_parameter_range_is_the_schedules(source: dict[str, Any]) -> None:
    parameter = source["Parameters"]["PollSeconds"]
    assert (parameter["MinValue"], parameter["MaxValue"]) == (1, MAX_WAIT_SECONDS)


def test_the_training_definition_passes_its_own_timeout() -> None:
    poll = TRAINING["States"]["GetJobStatus"]["Parameters"]["Payload"]["poll"]
    assert poll["timeout_seconds"] == TRAINING["TimeoutSeconds"] == SEVEN_DAYS


def test_every_poll_setting_fits_a_seven_day_run_in_the_history() -> None:
    """All 3,600 settings, each as if every poll took no time (the most polls, `polls_within`)."""
    assert POLL_EVENT_BUDGET < HISTORY_EVENT_LIMIT
    polls = {seconds: polls_within(seconds, SEVEN_DAYS) for seconds in range(1, MAX_WAIT_SECONDS + 1)}
    assert max(polls.values()) == polls[1]
    assert polls[1] * EVENTS_PER_POLL <= POLL_EVENT_BUDGET
    # The bound is not loose: a fixed interval of 30 s would make 20,160 polls.
    assert 900 <= polls[1] <= 1100 and polls[MAX_WAIT_SECONDS] < SEVEN_DAYS // MAX_WAIT_SECONDS + 10


@settings(max_examples=300, deadline=None)
@given(poll_seconds=poll_settings, elapsed=st.integers(0, 3 * SEVEN_DAYS), timeout=timeouts)
def test_each_wait_is_bounded(poll_seconds: int, elapsed: int, timeout: int) -> None:
    wait = next_poll_seconds(elapsed, poll_seconds, timeout)
    final_poll_at = timeout - FINAL_POLL_MARGIN_SECONDS
    assert 1 <= wait <= MAX_WAIT_SECONDS
    # A job that ends right after a poll is seen within PollSeconds or 1% of the run's age.
    assert wait <= max(poll_seconds, elapsed // GROWTH_DIVISOR)
    # Never shorter than PollSeconds, except to land the final poll before the timeout, which is never skipped.
    assert wait >= poll_seconds or elapsed + wait == final_poll_at
    if elapsed < final_poll_at:
        assert elapsed + wait <= final_poll_at


@settings(max_examples=300, deadline=None)
@given(
    poll_seconds=poll_settings, first=st.integers(0, 2 * SEVEN_DAYS), later=st.integers(0, SEVEN_DAYS), timeout=timeouts
)
def test_a_later_poll_never_asks_for_an_earlier_next_poll(
    poll_seconds: int, first: int, later: int, timeout: int
) -> None:
    """`polls_within` is the most polls because t + wait(t) never decreases as t grows."""
    second = first + later
    assert first + next_poll_seconds(first, poll_seconds, timeout) <= second + next_poll_seconds(
        second, poll_seconds, timeout
    )


@settings(max_examples=40, deadline=None)
@given(
    poll_seconds=st.sampled_from([1, 2, 30, 60, 300, MAX_WAIT_SECONDS]) | poll_settings,
    start=st.floats(0, 120),
    delays=st.lists(st.floats(0, 600), min_size=1, max_size=50),
)
def test_polls_that_take_time_make_no_more_polls(poll_seconds: int, start: float, delays: list[float]) -> None:
    """Polls at the time each wait ends plus a drawn delay (Lambda time, a slow head) stay within `polls_within`."""
    polls, now = 0, start
    while now < SEVEN_DAYS:
        polls += 1
        now += next_poll_seconds(now, poll_seconds, SEVEN_DAYS) + delays[polls % len(delays)]
    assert polls <= polls_within(poll_seconds, SEVEN_DAYS)


def test_waits_grow_with_the_runs_age() -> None:
    assert [next_poll_seconds(t, 30, SEVEN_DAYS) for t in (0, 2999, 3000, 6000, 100_000, 400_000)] == [
        30,
        30,
        30,
        60,
        1000,
        MAX_WAIT_SECONDS,
    ]
    final_poll_at = SEVEN_DAYS - FINAL_POLL_MARGIN_SECONDS
    assert next_poll_seconds(final_poll_at - 100, 30, SEVEN_DAYS) == 100
    assert next_poll_seconds(final_poll_at, 30, SEVEN_DAYS) == MAX_WAIT_SECONDS
    assert next_poll_seconds(-5, 30, SEVEN_DAYS) == 30  # a clock behind the start counts as the start


@pytest.mark.parametrize("poll_seconds, timeout", [(0, SEVEN_DAYS), (MAX_WAIT_SECONDS + 1, SEVEN_DAYS), (30, 0)])
def test_settings_outside_the_range_are_refused(poll_seconds: int, timeout: int) -> None:
    with pytest.raises(ValueError):
        next_poll_seconds(0, poll_seconds, timeout)


@pytest.mark.parametrize(
    "started_at, polled_at, seconds",
    [
        ("2026-12-01T10:00:00.000Z", "2026-12-01T10:01:30.500Z", 90.5),  # the Context object's format
        ("2026-12-01T10:00:00.123456+00:00", "2026-12-02T10:00:00.123456+00:00", 86400.0),
        ("2026-12-01T10:00:00Z", "2026-12-01T12:00:00+02:00", 0.0),
    ],
)
def test_elapsed_between_context_times(started_at: str, polled_at: str, seconds: float) -> None:
    assert elapsed_between(started_at, polled_at) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["yesterday", "2026-12-01T10:00:00", ""])
def test_elapsed_between_refuses_times_without_a_zone(bad: str) -> None:
    with pytest.raises(InvalidInput):
        elapsed_between(bad, "2026-12-01T10:00:00Z")


def schedule_event(**poll: Any) -> dict[str, Any]:
    fields = {
        "poll_seconds": 30,
        "started_at": "2026-12-01T10:00:00.000Z",
        "polled_at": "2026-12-03T10:00:00.000Z",
        "timeout_seconds": SEVEN_DAYS,
    }
    return {"job_id": "train-r1", "poll": {**fields, **poll}}


def test_poll_schedule_of_an_event() -> None:
    assert poll_schedule({"job_id": "eval-r1-step20"}) is None
    schedule = poll_schedule(schedule_event())
    assert (schedule.poll_seconds, schedule.elapsed_seconds, schedule.timeout_seconds) == (30, 172800.0, SEVEN_DAYS)
    assert schedule.next_wait() == 1728


@pytest.mark.parametrize(
    "poll",
    [
        {"poll_seconds": 0},
        {"poll_seconds": "30"},
        {"poll_seconds": True},
        {"timeout_seconds": 0},
        {"timeout_seconds": None},
        {"started_at": 1700000000},
        {"polled_at": "2026-12-03 10:00"},
    ],
)
def test_poll_schedule_refuses_bad_fields(poll: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput):
        poll_schedule(schedule_event(**poll))
    with pytest.raises(InvalidInput):
        poll_schedule({"job_id": "train-r1", "poll": "every minute"})
