"""Baseline rows of the registry table: a base model's own evaluation on one evaluation set, one attempt at a time.

A row is claimed once with a conditional put, and settled (READY or FAILED) by writes
conditional on its attempt still being EVALUATING, so concurrent callers submit and record it once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from mazeops.baseline import (
    BASELINE,
    BaselineResult,
    baseline_job_id,
    baseline_result_key,
    baseline_sort_key,
    validate_attempt,
)
from mazeops.dynamo import from_item, is_condition_failure, put_if_absent, to_item, update_expression, utc_now
from mazeops.registry_table import RegistryTable


@dataclass(frozen=True)
class BaselineRecord:
    """One baseline row: the base model's own evaluation on one evaluation set, and the attempt behind it."""

    base_model_id: str
    eval_set_sha256: str
    status: str
    attempt: int
    job_id: str
    result_key: str
    created_at: str
    updated_at: str
    eval_set_name: str | None = None
    solve_rate: float | None = None
    n_solved: int | None = None
    n_total: int | None = None
    outcomes: str | None = None
    backend: str | None = None
    error: str | None = None


class BaselineRows(RegistryTable):
    """The baseline rows of the registry table."""

    def claim_baseline(self, base_model_id: str, eval_set_sha256: str, retry: bool = False) -> BaselineRecord:
        """The baseline row of `base_model_id` on the evaluation set `eval_set_sha256`, claimed if there was none.

        A new row is attempt 1, EVALUATING (a conditional put: of concurrent claimers one creates
        it, the others read it). With `retry`, a FAILED baseline gets its next attempt (conditional
        on the failed attempt, so concurrent retries agree on one). READY and EVALUATING rows are
        returned as they are.
        """
        current = self.get_baseline(base_model_id, eval_set_sha256)
        if current is None:
            now = utc_now()
            record = BaselineRecord(
                base_model_id=base_model_id,
                eval_set_sha256=eval_set_sha256,
                status="EVALUATING",
                attempt=1,
                job_id=baseline_job_id(base_model_id, eval_set_sha256, 1),
                result_key=baseline_result_key(base_model_id, eval_set_sha256, 1),
                created_at=now,
                updated_at=now,
            )
            item = {
                **self._key(base_model_id, baseline_sort_key(eval_set_sha256)),
                **to_item(dataclasses.asdict(record)),
            }
            if put_if_absent(self.client, self.table_name, item, "adapter_name"):
                return record
            return self._existing_baseline(base_model_id, eval_set_sha256)
        if retry and current.status == "FAILED":
            attempt = current.attempt + 1
            values = {
                "status": "EVALUATING",
                "attempt": attempt,
                "job_id": baseline_job_id(base_model_id, eval_set_sha256, attempt),
                "result_key": baseline_result_key(base_model_id, eval_set_sha256, attempt),
            }
            return self._update_baseline(
                base_model_id, eval_set_sha256, current.attempt, "FAILED", values, remove=("error",)
            )
        return current

    def record_baseline(self, result: BaselineResult, attempt: int) -> BaselineRecord:
        """Store the baseline's outcomes (status READY) if `attempt` is still the EVALUATING one; return the row.

        A row already settled (by a concurrent recorder, or another attempt) is returned unchanged.
        """
        values = {
            "status": "READY",
            "eval_set_name": result.eval_set_name,
            "solve_rate": result.solve_rate,
            "n_solved": result.n_solved,
            "n_total": result.n_total,
            "outcomes": result.outcome_bits,
            "backend": result.backend,
        }
        return self._update_baseline(result.base_model_id, result.eval_set_sha256, attempt, "EVALUATING", values)

    def fail_baseline(self, base_model_id: str, eval_set_sha256: str, attempt: int, error: str) -> BaselineRecord:
        """Mark the baseline FAILED with `error` if `attempt` is still the EVALUATING one; return the row."""
        values = {"status": "FAILED", "error": error[:2000]}
        return self._update_baseline(base_model_id, eval_set_sha256, attempt, "EVALUATING", values)

    def get_baseline(self, base_model_id: str, eval_set_sha256: str) -> BaselineRecord | None:
        """The baseline row of `base_model_id` on the evaluation set `eval_set_sha256`, or None."""
        item = self._get(base_model_id, baseline_sort_key(eval_set_sha256))
        return _baseline_record(item) if item is not None else None

    def list_baselines(self, base_model_id: str) -> list[BaselineRecord]:
        """Every baseline row of a base model (one per evaluation set), oldest first."""
        rows = self._query(base_model_id, begins_with=f"{BASELINE}#")
        return sorted((_baseline_record(row) for row in rows), key=lambda record: record.created_at)

    def _existing_baseline(self, base_model_id: str, eval_set_sha256: str) -> BaselineRecord:
        record = self.get_baseline(base_model_id, eval_set_sha256)
        if record is None:
            raise RuntimeError(f"the baseline row of {base_model_id} on {eval_set_sha256[:12]}... vanished")
        return record

    def _update_baseline(
        self,
        base_model_id: str,
        eval_set_sha256: str,
        attempt: int,
        required_status: str,
        values: dict[str, Any],
        remove: tuple[str, ...] = (),
    ) -> BaselineRecord:
        """Apply `values` if the row is at `attempt` in `required_status`; return the row as it is then."""
        expression, names, placeholders = update_expression({**values, "updated_at": utc_now()}, remove)
        try:
            answer = self.client.update_item(
                TableName=self.table_name,
                Key=self._key(base_model_id, baseline_sort_key(eval_set_sha256)),
                UpdateExpression=expression,
                ConditionExpression="#attempt = :attempt AND #status = :required",
                ExpressionAttributeNames={**names, "#attempt": "attempt", "#status": "status"},
                ExpressionAttributeValues=to_item(
                    {**placeholders, ":attempt": validate_attempt(attempt), ":required": required_status}
                ),
                ReturnValues="ALL_NEW",
            )
        except ClientError as error:
            if is_condition_failure(error):
                return self._existing_baseline(base_model_id, eval_set_sha256)
            raise
        return _baseline_record(from_item(answer["Attributes"]))


def _baseline_record(row: dict[str, Any]) -> BaselineRecord:
    return BaselineRecord(**{field.name: row.get(field.name) for field in dataclasses.fields(BaselineRecord)})
