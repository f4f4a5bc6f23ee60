"""The rows of a deployment's runs table, and the guard stops of runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mazeops.dynamo import from_item
from mazeops.runs import RunRecord, RunsTable
from opsctl.target import Target


@dataclass(frozen=True)
class RunStop:
    """Why a guard stopped a run (its row's `stopped_by`): the guard, the reason, the triggering steps, when."""

    run_id: str
    guard: str
    reason: str
    steps: tuple[int, ...]
    at: str | None


def list_runs(target: Target) -> list[dict[str, Any]]:
    """Every run of the runs table, newest first; rows whose id starts with '#' (the cluster's health) are not runs."""
    client = target.client("dynamodb")
    rows = [
        from_item(item)
        for page in client.get_paginator("scan").paginate(TableName=target.runs_table)
        for item in page["Items"]
        if not item["run_id"]["S"].startswith("#")
    ]
    return sorted(rows, key=lambda row: row.get("created_at") or "", reverse=True)


def run_stop(record: RunRecord | None) -> RunStop | None:
    """The guard stop of a STOPPED run's row; None for any other status, no row, or no `stopped_by`."""
    if record is None or record.status != "STOPPED" or not record.stopped_by:
        return None
    stopped_by = record.stopped_by
    return RunStop(
        record.run_id,
        str(stopped_by.get("guard") or "guard"),
        str(stopped_by.get("reason") or ""),
        tuple(sorted(int(step) for step in stopped_by.get("steps") or ())),
        stopped_by.get("at"),
    )


def run_stops(target: Target, run_ids: list[str]) -> dict[str, RunStop]:
    """The guard stops of those of `run_ids` that a guard stopped, by run id."""
    runs = RunsTable(target.client("dynamodb"), target.runs_table)
    stops = {run_id: run_stop(runs.get_run(run_id)) for run_id in run_ids}
    return {run_id: stop for run_id, stop in stops.items() if stop is not None}
