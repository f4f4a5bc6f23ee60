"""Adapter rows of the registry table: one per adapter, from candidate to champion or rejection."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from mazeops.decision import Decision
from mazeops.dynamo import is_condition_failure, put_if_absent, to_item, update_expression, utc_now
from mazeops.evalresult import EvalResult
from mazeops.manifest import AdapterManifest
from mazeops.names import parse_adapter_name, validate_eval_attempt
from mazeops.registry_table import RegistryTable

ADAPTER_STATUSES = frozenset(
    {"EVALUATING", "EVALUATED", "EVAL_FAILED", "REJECTED", "REGISTERED", "CHAMPION", "RETIRED", "ROLLED_BACK"}
)
# The statuses from which an adapter's evaluation may run again (attempt 2 on): not while it is being evaluated
# (EVALUATING), registered for serving (REGISTERED) or serving as the champion (CHAMPION).
REEVALUABLE_STATUSES = ("EVAL_FAILED", "EVALUATED", "REJECTED", "RETIRED", "ROLLED_BACK")


class AdapterNotFound(LookupError):
    """No registry row for this adapter."""


class AdapterNotReevaluable(RuntimeError):
    """The adapter's status does not allow another evaluation (it is the champion, registered, or being evaluated)."""


@dataclass(frozen=True)
class AdapterRecord:
    """One adapter's registry row."""

    base_model_id: str
    adapter_name: str
    run_id: str
    step: int
    status: str
    manifest_key: str
    lora_rank: int
    created_at: str
    updated_at: str
    solve_rate: float | None = None
    n_solved: int | None = None
    n_total: int | None = None
    outcomes: str | None = None
    eval_set_sha256: str | None = None
    decision: dict[str, Any] | None = None
    error: str | None = None
    eval_attempts: int | None = None


class AdapterRows(RegistryTable):
    """The adapter rows of the registry table."""

    def put_candidate(self, manifest: AdapterManifest, manifest_key: str) -> bool:
        """Add the adapter in status EVALUATING; False if it is already registered (a duplicate)."""
        now = utc_now()
        record = AdapterRecord(
            base_model_id=manifest.base_model_id,
            adapter_name=manifest.adapter_name,
            run_id=manifest.run_id,
            step=manifest.step,
            status="EVALUATING",
            manifest_key=manifest_key,
            lora_rank=manifest.lora_rank,
            created_at=now,
            updated_at=now,
        )
        return put_if_absent(self.client, self.table_name, to_item(dataclasses.asdict(record)), "adapter_name")

    def reopen(self, base_model_id: str, adapter: str, attempt: int) -> bool:
        """Claim the adapter's row for evaluation attempt `attempt` (2 on): status EVALUATING, `eval_attempts`.

        Only from a status of REEVALUABLE_STATUSES and an earlier attempt; the error text is removed. Returns
        False when the row is at this attempt or a later one already (a duplicate); raises AdapterNotFound
        without a row, AdapterNotReevaluable when its status refuses (CHAMPION, REGISTERED, EVALUATING).
        """
        parse_adapter_name(adapter)
        if validate_eval_attempt(attempt) < 2:
            raise ValueError(f"attempt {attempt} is a first evaluation: put_candidate claims it, not reopen")
        statuses = {f":s{index}": status for index, status in enumerate(REEVALUABLE_STATUSES)}
        condition = f"#status IN ({', '.join(statuses)}) AND (attribute_not_exists(#attempts) OR #attempts < :attempt)"
        try:
            self.client.update_item(
                TableName=self.table_name,
                Key=self._key(base_model_id, adapter),
                UpdateExpression="SET #status = :evaluating, #attempts = :attempt, updated_at = :now REMOVE #error",
                ConditionExpression=condition,
                ExpressionAttributeNames={"#status": "status", "#attempts": "eval_attempts", "#error": "error"},
                ExpressionAttributeValues=to_item(
                    {**statuses, ":evaluating": "EVALUATING", ":attempt": attempt, ":now": utc_now()}
                ),
            )
        except ClientError as error:
            if not is_condition_failure(error):
                raise
        else:
            return True
        record = self.get_adapter(base_model_id, adapter)
        if record is None:
            raise AdapterNotFound(f"no registry row for {base_model_id}:{adapter}")
        if (record.eval_attempts or 1) >= attempt:
            return False
        raise AdapterNotReevaluable(
            f"{base_model_id}:{adapter} is {record.status}; only an adapter in "
            f"{', '.join(REEVALUABLE_STATUSES)} is evaluated again (attempt {attempt} refused)"
        )

    def record_eval(self, result: EvalResult) -> None:
        """Store the adapter's evaluation (solve rate, per-seed outcomes, eval set hash); status EVALUATED."""
        self._update(
            result.base_model_id,
            result.adapter_name,
            {
                "status": "EVALUATED",
                "solve_rate": result.solve_rate,
                "n_solved": result.n_solved,
                "n_total": result.n_total,
                "outcomes": result.outcome_bits,
                "eval_set_sha256": result.eval_set_sha256,
            },
        )

    def record_decision(self, base_model_id: str, adapter: str, decision: Decision) -> None:
        """Store the promotion decision's evidence; a challenger that is not promoted becomes REJECTED."""
        values: dict[str, Any] = {
            "decision": {"promote": decision.promote, "reason": decision.reason, **decision.evidence}
        }
        if not decision.promote:
            values["status"] = "REJECTED"
        self._update(base_model_id, adapter, values)

    def set_status(self, base_model_id: str, adapter: str, status: str, error: str | None = None) -> None:
        """Set an adapter's status (and optionally an error text); raise AdapterNotFound if absent."""
        if status not in ADAPTER_STATUSES:
            raise ValueError(f"unknown adapter status {status!r}; expected one of {sorted(ADAPTER_STATUSES)}")
        values: dict[str, Any] = {"status": status}
        if error is not None:
            values["error"] = error[:2000]
        self._update(base_model_id, adapter, values)

    def get_adapter(self, base_model_id: str, adapter: str) -> AdapterRecord | None:
        """The adapter's row, or None."""
        parse_adapter_name(adapter)
        item = self._get(base_model_id, adapter)
        return _adapter_record(item) if item is not None else None

    def list_adapters(self, base_model_id: str) -> list[AdapterRecord]:
        """All adapter rows of a base model (not the pointer nor the baselines), ordered by adapter name."""
        return [_adapter_record(row) for row in self._query(base_model_id) if not row["adapter_name"].startswith("#")]

    def _update(self, base_model_id: str, adapter: str, values: dict[str, Any]) -> None:
        """Apply `values` to the adapter's row (and `updated_at`); raise AdapterNotFound if it is absent."""
        parse_adapter_name(adapter)
        expression, names, placeholders = update_expression({**values, "updated_at": utc_now()})
        try:
            self.client.update_item(
                TableName=self.table_name,
                Key=self._key(base_model_id, adapter),
                UpdateExpression=expression,
                ConditionExpression="attribute_exists(adapter_name)",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=to_item(placeholders),
            )
        except ClientError as error:
            if is_condition_failure(error):
                raise AdapterNotFound(f"no registry row for {base_model_id}:{adapter}") from None
            raise


def status_write(
    table_name: str,
    key: dict[str, Any],
    status: str,
    now: str,
    required_status: str | None = None,
    error: str | None = None,
) -> dict[str, Any]:
    """A TransactWriteItems Update that sets the status of the adapter row at `key`.

    The row must exist, and be in `required_status` if given; `error` (cut to 2000 characters)
    is stored along when given.
    """
    values = {":status": status, ":now": now}
    condition = "attribute_exists(adapter_name)"
    if required_status:
        values[":required"] = required_status
        condition += " AND #status = :required"
    assignments = "SET #status = :status, updated_at = :now"
    names = {"#status": "status"}
    if error:
        values[":error"] = error[:2000]
        names["#error"] = "error"
        assignments += ", #error = :error"
    return {
        "Update": {
            "TableName": table_name,
            "Key": key,
            "UpdateExpression": assignments,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": to_item(values),
        }
    }


def _adapter_record(row: dict[str, Any]) -> AdapterRecord:
    return AdapterRecord(**{field.name: row.get(field.name) for field in dataclasses.fields(AdapterRecord)})
