"""mazeops.cluster_health: the health row of the runs table and the notices of an outage."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mazeops_testing import RUNS_TABLE, Aws, put_run

from mazeops.cluster_health import (
    CLUSTER_HEALTH_KEY,
    ClusterHealth,
    InvalidTime,
    format_time,
    next_health,
    outage_minutes,
    parse_time,
    read_health,
    write_health,
)
from mazeops.runs import RunsTable

START = datetime(2026, 12, 2, 16, 0, tzinfo=UTC)
THRESHOLD = 15.0


def minutes(n: float) -> datetime:
    return START + timedelta(minutes=n)


def run_checks(
    checks: list[tuple[float, bool]], threshold: float = THRESHOLD
) -> list[tuple[ClusterHealth, str | None]]:
    """(health, notice) after each check (minute, reachable), from no health row."""
    health: ClusterHealth | None = None
    answers = []
    for at, reachable in checks:
        health, notice = next_health(health, reachable, None if reachable else "refused", minutes(at), threshold)
        answers.append((health, notice))
    return answers


def test_an_outage_is_notified_once_after_the_threshold_then_its_end() -> None:
    answers = run_checks([(0, True), (5, False), (10, False), (20, False), (25, False), (30, True), (35, True)])
    assert [notice for _health, notice in answers] == [None, None, None, "unreachable", None, "recovered", None]
    first_failure = format_time(minutes(5))
    assert [health.unreachable_since for health, _notice in answers] == [
        None,
        first_failure,
        first_failure,
        first_failure,
        first_failure,
        None,
        None,
    ]
    assert answers[3][0].notified_at == answers[4][0].notified_at == format_time(minutes(20))
    assert answers[4][0] == ClusterHealth(
        False, format_time(minutes(25)), first_failure, format_time(minutes(20)), "refused"
    )
    assert answers[5][0] == ClusterHealth(True, format_time(minutes(30)))


@pytest.mark.parametrize(
    ("checks", "notices"),
    [
        # a short outage: no notice, and no "recovered" after it
        ([(0, False), (5, False), (10, True)], [None, None, None]),
        # exactly the threshold after the first failure
        ([(0, False), (15, False)], [None, "unreachable"]),
        # the first check of the watch already fails: the outage starts there
        ([(0, False), (14.9, False), (15, False), (60, False)], [None, None, "unreachable", None]),
        # two outages: each notified once, each end notified
        (
            [(0, False), (20, False), (25, True), (30, False), (50, False), (55, True)],
            [None, "unreachable", "recovered", None, "unreachable", "recovered"],
        ),
        # the second outage is short: only the first is notified
        (
            [(0, False), (20, False), (25, True), (30, False), (35, True)],
            [None, "unreachable", "recovered", None, None],
        ),
    ],
)
def test_notices(checks: list[tuple[float, bool]], notices: list[str | None]) -> None:
    assert [notice for _health, notice in run_checks(checks)] == notices


def test_a_zero_threshold_notifies_at_the_first_failure() -> None:
    assert [notice for _health, notice in run_checks([(0, False), (5, False), (6, True)], 0)] == [
        "unreachable",
        None,
        "recovered",
    ]


def test_the_error_is_kept_in_one_bounded_field() -> None:
    health, _notice = next_health(None, False, "x" * 5000, START, THRESHOLD)
    assert health.error is not None and len(health.error) == 1000
    assert next_health(None, False, None, START, THRESHOLD)[0].error is None


def test_outage_minutes() -> None:
    health, _notice = next_health(None, False, "refused", START, THRESHOLD)
    assert outage_minutes(health, minutes(17.5)) == 17
    assert outage_minutes(ClusterHealth(True, format_time(START)), minutes(5)) == 0


@pytest.mark.parametrize(
    ("text", "moment"),
    [
        ("2026-12-02T16:00:00Z", START),
        ("2026-12-02T16:00:00.250Z", START + timedelta(milliseconds=250)),  # Step Functions' $$.State.EnteredTime
        ("2026-12-02T17:00:00+01:00", START),
    ],
)
def test_parse_time(text: str, moment: datetime) -> None:
    assert parse_time(text) == moment


@pytest.mark.parametrize("text", ["2026-12-02T16:00:00", "yesterday", ""])
def test_parse_time_refuses_a_time_without_zone_or_no_time(text: str) -> None:
    with pytest.raises(InvalidTime):
        parse_time(text)


def test_format_time_refuses_a_naive_time() -> None:
    with pytest.raises(InvalidTime, match="no time zone"):
        format_time(datetime(2026, 12, 2, 16, 0))


def test_the_health_row_round_trips_and_is_no_run(aws: Aws) -> None:
    assert read_health(aws.dynamodb, RUNS_TABLE) is None
    put_run(aws.dynamodb, "r1")
    health = ClusterHealth(False, "2026-12-02T16:20:00Z", "2026-12-02T16:05:00Z", "2026-12-02T16:20:00Z", "refused")
    write_health(aws.dynamodb, RUNS_TABLE, health)
    assert read_health(aws.dynamodb, RUNS_TABLE) == health
    write_health(aws.dynamodb, RUNS_TABLE, ClusterHealth(True, "2026-12-02T16:25:00Z"))
    assert read_health(aws.dynamodb, RUNS_TABLE) == ClusterHealth(True, "2026-12-02T16:25:00Z")
    item = aws.dynamodb.get_item(TableName=RUNS_TABLE, Key={"run_id": {"S": CLUSTER_HEALTH_KEY}})["Item"]
    assert set(item) == {"run_id", "reachable", "checked_at"}  # the outage's fields are gone with it
    assert RunsTable(aws.dynamodb, RUNS_TABLE).active_run_ids() == ["r1"]


# --- properties over sequences of checks -------------------------------------------------------

checks_strategy = st.lists(st.tuples(st.integers(1, 3600), st.booleans()), min_size=1, max_size=40)


@given(checks=checks_strategy, threshold=st.integers(0, 120))
def test_outages_are_notified_once_at_the_first_check_past_the_threshold(
    checks: list[tuple[int, bool]], threshold: int
) -> None:
    """Each outage (a maximal stretch of failed checks) starts at its first failed check, is notified once, at its
    first check at least the threshold after that start (never if none is), and its end is notified only then."""
    health: ClusterHealth | None = None
    now = START
    outage_start: datetime | None = None
    notified_in_outage = False
    for gap_seconds, reachable in checks:
        now += timedelta(seconds=gap_seconds)
        health, notice = next_health(health, reachable, None if reachable else "refused", now, threshold)
        if reachable:
            assert notice == ("recovered" if notified_in_outage else None)
            assert (health.unreachable_since, health.notified_at) == (None, None)
            outage_start, notified_in_outage = None, False
            continue
        outage_start = outage_start or now
        assert health.unreachable_since == format_time(outage_start)
        due = now - outage_start >= timedelta(minutes=threshold)
        assert notice == ("unreachable" if due and not notified_in_outage else None)
        notified_in_outage = notified_in_outage or notice == "unreachable"
        assert (health.notified_at is not None) == notified_in_outage


@given(checks=checks_strategy, threshold=st.integers(0, 120))
def test_notices_alternate(checks: list[tuple[int, bool]], threshold: int) -> None:
    """Over any sequence: at most one "unreachable" per outage, and each "recovered" follows an "unreachable"."""
    health: ClusterHealth | None = None
    now = START
    notices = []
    for gap_seconds, reachable in checks:
        now += timedelta(seconds=gap_seconds)
        health, notice = next_health(health, reachable, None, now, threshold)
        if notice is not None:
            notices.append(notice)
    assert all(a != b for a, b in zip(notices, notices[1:], strict=False))
    assert notices[:1] in ([], ["unreachable"])
