"""The benchmark's pure timing helpers: execution-history state visits, duration summaries, burst verdicts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from benchmarks.summaries import (
    StateNotReached,
    burst_checks,
    first_entry,
    last_exit,
    seconds_summary,
    state_totals,
    state_visits,
)

T0 = datetime(2026, 12, 2, 17, 0, tzinfo=UTC)


def _event(event_id: int, seconds: float, kind: str, name: str) -> dict:
    details = "stateEnteredEventDetails" if kind.endswith("Entered") else "stateExitedEventDetails"
    return {"id": event_id, "timestamp": T0 + timedelta(seconds=seconds), "type": kind, details: {"name": name}}


HISTORY = [
    _event(2, 0.0, "TaskStateEntered", "SubmitEvalJob"),
    _event(5, 0.5, "TaskStateExited", "SubmitEvalJob"),
    _event(6, 0.5, "WaitStateEntered", "WaitForEvalJob"),
    _event(7, 2.5, "WaitStateExited", "WaitForEvalJob"),
    _event(8, 2.5, "WaitStateEntered", "WaitForEvalJob"),
    _event(9, 4.5, "WaitStateExited", "WaitForEvalJob"),
    _event(1, -1.0, "ExecutionStarted", "-"),
    _event(10, 4.5, "TaskStateEntered", "RecordEval"),
]


def test_state_visits_pair_entries_with_exits_in_event_order() -> None:
    visits = state_visits(HISTORY)
    assert [visit["name"] for visit in visits] == ["SubmitEvalJob", "WaitForEvalJob", "WaitForEvalJob", "RecordEval"]
    assert visits[-1]["exited"] is None
    assert state_totals(visits) == [
        {"state": "SubmitEvalJob", "visits": 1, "seconds": 0.5},
        {"state": "WaitForEvalJob", "visits": 2, "seconds": 4.0},
        {"state": "RecordEval", "visits": 1, "seconds": 0.0},
    ]
    assert last_exit(visits, "WaitForEvalJob") == (T0 + timedelta(seconds=4.5)).timestamp()
    assert first_entry(visits, "WaitForEvalJob") == (T0 + timedelta(seconds=0.5)).timestamp()


@pytest.mark.parametrize(("lookup", "state"), [(last_exit, "RecordEval"), (first_entry, "PromoteChampion")])
def test_a_state_never_reached_is_a_clear_error(lookup, state: str) -> None:
    with pytest.raises(StateNotReached, match=state):
        lookup(state_visits(HISTORY), state)


def test_seconds_summary() -> None:
    assert seconds_summary([float(value) for value in range(1, 101)]) == {"median": 50.5, "p95": 95.0, "max": 100.0}
    assert seconds_summary([]) == {"median": None, "p95": None, "max": None}


def _burst(**changes) -> dict:
    burst = {
        "adapters": 100,
        "executions": 100,
        "executions_expected_names": 100,
        "execution_statuses": {"SUCCEEDED": 100},
        "job_submissions": 100,
        "job_submissions_unique": 100,
        "job_submissions_expected_ids": 100,
        "duplicate_submissions_refused": 0,
        "max_running_seen": 4,
        "max_running": 4,
    }
    return burst | changes


@pytest.mark.parametrize(
    ("changes", "failed_check"),
    [
        ({"executions": 101}, "evaluation executions"),
        ({"execution_statuses": {"SUCCEEDED": 99, "FAILED": 1}}, "executions succeeded"),
        ({"job_submissions": 101, "job_submissions_unique": 100}, "Ray job submissions"),
        ({"max_running_seen": 5}, "max concurrent"),
    ],
)
def test_burst_checks_flag_each_unmet_condition(changes: dict, failed_check: str) -> None:
    assert all(verdict in ("ok", "info") for _, _, verdict in burst_checks(_burst()))
    verdicts = {check: verdict for check, _, verdict in burst_checks(_burst(**changes))}
    assert [check for check, verdict in verdicts.items() if verdict == "NOT MET"] == [
        check for check in verdicts if check.startswith(failed_check)
    ]
