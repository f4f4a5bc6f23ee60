"""Pure helpers turning the benchmark's timestamps into its numbers: state visits, duration summaries, burst checks."""

from __future__ import annotations

import statistics
from typing import Any


class StateNotReached(LookupError):
    """The execution never entered (or never left) the state asked about."""


def state_visits(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each state visit of an execution history, in order: name, entered and exited (epoch seconds, None if open)."""
    visits: list[dict[str, Any]] = []
    for event in sorted(events, key=lambda event: event["id"]):
        at = event["timestamp"].timestamp()
        if event["type"].endswith("StateEntered"):
            visits.append({"name": event["stateEnteredEventDetails"]["name"], "entered": at, "exited": None})
        elif event["type"].endswith("StateExited"):
            name = event["stateExitedEventDetails"]["name"]
            open_visits = [visit for visit in visits if visit["name"] == name and visit["exited"] is None]
            if open_visits:
                open_visits[-1]["exited"] = at
    return visits


def state_totals(visits: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per state, in first-visit order: how many visits and the seconds spent in them."""
    totals: dict[str, dict[str, Any]] = {}
    for visit in visits:
        total = totals.setdefault(visit["name"], {"state": visit["name"], "visits": 0, "seconds": 0.0})
        total["visits"] += 1
        if visit["exited"] is not None:
            total["seconds"] += visit["exited"] - visit["entered"]
    return list(totals.values())


def last_exit(visits: list[dict[str, Any]], name: str) -> float:
    """When the last visit of state `name` ended; raises StateNotReached if it never ended."""
    ends = [visit["exited"] for visit in visits if visit["name"] == name and visit["exited"] is not None]
    if not ends:
        raise StateNotReached(f"the execution never left state {name}")
    return ends[-1]


def first_entry(visits: list[dict[str, Any]], name: str) -> float:
    """When state `name` was first entered; raises StateNotReached if it never was."""
    for visit in visits:
        if visit["name"] == name:
            return visit["entered"]
    raise StateNotReached(f"the execution never entered state {name}")


def seconds_summary(values: list[float]) -> dict[str, float | None]:
    """Median, 95th percentile and maximum of a list of durations (seconds); None for an empty list."""
    ordered = sorted(values)
    if not ordered:
        return {"median": None, "p95": None, "max": None}
    return {
        "median": statistics.median(ordered),
        "p95": ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))],
        "max": ordered[-1],
    }


def burst_checks(burst: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(check, measured, verdict) rows of the burst."""
    n = burst["adapters"]

    def verdict(ok: bool) -> str:
        return "ok" if ok else "NOT MET"

    return [
        (
            "evaluation executions named eval-<run>-step<N>",
            f"{burst['executions_expected_names']} of {burst['executions']}",
            verdict(burst["executions"] == n == burst["executions_expected_names"]),
        ),
        (
            "executions succeeded",
            f"{burst['execution_statuses'].get('SUCCEEDED', 0)} of {burst['executions']}",
            verdict(burst["execution_statuses"].get("SUCCEEDED", 0) == n),
        ),
        (
            "Ray job submissions (unique, expected ids)",
            f"{burst['job_submissions']} ({burst['job_submissions_unique']}, {burst['job_submissions_expected_ids']})",
            verdict(
                burst["job_submissions"]
                == burst["job_submissions_unique"]
                == burst["job_submissions_expected_ids"]
                == n
            ),
        ),
        ("duplicate submissions refused by the cluster", str(burst["duplicate_submissions_refused"]), "info"),
        (
            "max concurrent RUNNING jobs",
            f"{burst['max_running_seen']} (K = {burst['max_running']})",
            verdict(burst["max_running_seen"] <= burst["max_running"]),
        ),
    ]
