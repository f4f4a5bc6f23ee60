"""The runs table (key `run_id`): one row per training run, created by validate_run_spec."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from mazeops.dynamo import (
    from_item,
    is_condition_failure,
    put_if_absent,
    to_attribute,
    to_item,
    update_expression,
    utc_now,
)
from mazeops.guards import GuardVerdict
from mazeops.names import validate_run_id

# STOPPED: stopped by one of its guards (mazeops.guards); ABORTED: its execution was stopped otherwise (an operator).
RUN_STATUSES = frozenset({"SUBMITTED", "RUNNING", "SUCCEEDED", "FAILED", "ABORTED", "TIMED_OUT", "STOPPED"})
FINISHED_STATUSES = frozenset({"SUCCEEDED", "FAILED", "ABORTED", "TIMED_OUT", "STOPPED"})
# A run in one of these may still hold (or be about to take) the cluster's GPUs: it counts toward MaxActiveRuns.
ACTIVE_STATUSES = RUN_STATUSES - FINISHED_STATUSES
# An adapter is promoted only while its training run is healthy: still running, or finished well.
# A stopped, failed or timed-out run (or one with no row) may have written a damaged or
# half-trained adapter; it is evaluated if its manifest arrives, never promoted.
PROMOTABLE_RUN_STATUSES = frozenset({"RUNNING", "SUCCEEDED"})


class RunAlreadyExists(RuntimeError):
    """A run with this id exists with a different spec."""


class RunNotFound(LookupError):
    """No run with this id."""


class RunNotPromotable(RuntimeError):
    """The adapter's training run is not RUNNING or SUCCEEDED, so the adapter cannot be promoted."""


@dataclass(frozen=True)
class RunRecord:
    """One row of the runs table."""

    run_id: str
    status: str
    spec_key: str
    spec_sha256: str
    base_model_id: str
    execution_arn: str
    created_at: str
    updated_at: str
    job_id: str | None = None
    error: str | None = None
    # The run spec's guard settings (mazeops.runspec.GuardSpec as a dict) and GPUs, recorded when the run is accepted.
    guard: dict[str, Any] | None = None
    num_gpus: int | None = None
    # When the run first became RUNNING (the training state machine's RecordRunRunning).
    running_at: str | None = None
    # For a STOPPED run: the guard's verdict (mazeops.guards.GuardVerdict.to_record) and when (`at`).
    stopped_by: dict[str, Any] | None = None


class RunsTable:
    """Access to the runs table through a DynamoDB client."""

    def __init__(self, client: Any, table_name: str) -> None:
        self.client = client
        self.table_name = table_name

    def create_run(
        self,
        run_id: str,
        spec_key: str,
        spec_sha256: str,
        base_model_id: str,
        execution_arn: str,
        guard: dict[str, Any] | None = None,
        num_gpus: int | None = None,
    ) -> RunRecord:
        """Create the run in status SUBMITTED (with its guard settings and GPUs); an existing run with the same spec is
        returned unchanged.

        Raises RunAlreadyExists if the run exists with a different spec sha256.
        """
        now = utc_now()
        record = RunRecord(
            run_id=validate_run_id(run_id),
            status="SUBMITTED",
            spec_key=spec_key,
            spec_sha256=spec_sha256,
            base_model_id=base_model_id,
            execution_arn=execution_arn,
            created_at=now,
            updated_at=now,
            guard=guard,
            num_gpus=num_gpus,
        )
        if put_if_absent(self.client, self.table_name, to_item(dataclasses.asdict(record)), "run_id"):
            return record
        existing = self.get_run(run_id)
        if existing is None or existing.spec_sha256 != spec_sha256:
            raise RunAlreadyExists(f"run {run_id!r} already exists with a different spec; choose a new run id")
        return existing

    def set_status(self, run_id: str, status: str, error: str | None = None, job_id: str | None = None) -> None:
        """Set the run's status (and optionally its error text and job id); raise RunNotFound if absent."""
        if status not in RUN_STATUSES:
            raise ValueError(f"unknown run status {status!r}; expected one of {sorted(RUN_STATUSES)}")
        values: dict[str, Any] = {"status": status, "updated_at": utc_now()}
        if error is not None:
            values["error"] = error[:2000]
        if job_id is not None:
            values["job_id"] = job_id
        expression, names, placeholders = update_expression(values)
        try:
            self.client.update_item(
                TableName=self.table_name,
                Key={"run_id": to_attribute(validate_run_id(run_id))},
                UpdateExpression=expression,
                ConditionExpression="attribute_exists(run_id)",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=to_item(placeholders),
            )
        except ClientError as failure:
            if is_condition_failure(failure):
                raise RunNotFound(f"no run {run_id!r}") from None
            raise

    def mark_stopped(self, run_id: str, verdict: GuardVerdict) -> bool:
        """Record that guard `verdict` stops the run: status STOPPED, `stopped_by` (with the time) and the reason as its
        error. Only a RUNNING run is stopped; False (nothing written) for any other status or no row."""
        now = utc_now()
        values = {"status": "STOPPED", "stopped_by": {**verdict.to_record(), "at": now}, "error": verdict.reason[:2000]}
        expression, names, placeholders = update_expression({**values, "updated_at": now})
        names["#status_now"] = "status"
        try:
            self.client.update_item(
                TableName=self.table_name,
                Key={"run_id": to_attribute(validate_run_id(run_id))},
                UpdateExpression=expression,
                ConditionExpression="#status_now = :running",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=to_item({**placeholders, ":running": "RUNNING"}),
            )
        except ClientError as failure:
            if is_condition_failure(failure):
                return False
            raise
        return True

    def active_run_ids(self) -> list[str]:
        """The ids of the runs whose status is not final (ACTIVE_STATUSES), read consistently, sorted.

        A filtered Scan: the table holds one small row per training run, so it stays a few pages at most.
        """
        statuses = sorted(ACTIVE_STATUSES)
        placeholders = {f":s{index}": status for index, status in enumerate(statuses)}
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "ConsistentRead": True,
            "ProjectionExpression": "run_id",
            "FilterExpression": f"#status IN ({', '.join(placeholders)})",
            "ExpressionAttributeNames": {"#status": "status"},
            "ExpressionAttributeValues": to_item(placeholders),
        }
        run_ids: list[str] = []
        while True:
            answer = self.client.scan(**request)
            run_ids += [from_item(item)["run_id"] for item in answer.get("Items", [])]
            if "LastEvaluatedKey" not in answer:
                return sorted(run_ids)
            request["ExclusiveStartKey"] = answer["LastEvaluatedKey"]

    def get_run(self, run_id: str) -> RunRecord | None:
        """The run's row, or None if there is no such run."""
        answer = self.client.get_item(
            TableName=self.table_name, Key={"run_id": to_attribute(validate_run_id(run_id))}, ConsistentRead=True
        )
        if "Item" not in answer:
            return None
        item = from_item(answer["Item"])
        return RunRecord(**{field.name: item.get(field.name) for field in dataclasses.fields(RunRecord)})


def promotion_block(run_id: str, run: RunRecord | None) -> str | None:
    """Why an adapter of run `run_id` (its row `run`, or None) must not be promoted; None if it may be."""
    if run is None:
        return (
            f"training run {run_id!r} has no row in the runs table; "
            "only adapters of RUNNING or SUCCEEDED runs are promoted"
        )
    if run.status not in PROMOTABLE_RUN_STATUSES:
        return f"training run {run_id!r} is {run.status}; only adapters of RUNNING or SUCCEEDED runs are promoted"
    return None


def require_promotable(runs: RunsTable, run_id: str) -> None:
    """Raise RunNotPromotable unless run `run_id` is RUNNING or SUCCEEDED (read consistently, now)."""
    reason = promotion_block(run_id, runs.get_run(run_id))
    if reason is not None:
        raise RunNotPromotable(reason)
