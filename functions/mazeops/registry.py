"""The adapter registry: one row per adapter, the baselines and one champion pointer per base model.

Table key (`base_model_id`, `adapter_name`). The pointer is the row
`adapter_name = "#CHAMPION"` with `champion` (adapter name, or `BASELINE` when the base model
itself is the champion), `previous` (former adapter champions, newest last) and `version` (a
number that every pointer change increments, conditionally on its old value, so two promotions
can never both win). Promotion and rollback change the pointer and the adapter rows in one
TransactWriteItems. No pointer row means the baseline is the champion: the baseline is the root
of every lineage, so it is never listed in `previous`, and rolling back the first promoted adapter
returns to it.

A baseline row (`adapter_name = "#BASELINE#<eval_set_sha256>"`, see `mazeops.baseline`) holds the
base model's own evaluation on one evaluation set: claimed once (status EVALUATING, `attempt`,
`job_id`, `result_key`) with a conditional put, then READY with its outcomes or FAILED with an
error, each by a write conditional on the attempt still being EVALUATING, so concurrent callers
submit and record it once. Only a FAILED baseline gets another attempt, and only when asked.
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
from mazeops.decision import Decision
from mazeops.dynamo import from_item, is_condition_failure, put_if_absent, to_item, utc_now
from mazeops.evalresult import EvalResult
from mazeops.manifest import AdapterManifest
from mazeops.names import CHAMPION_SORT_KEY, parse_adapter_name, served_model_id, validate_base_model_id

ADAPTER_STATUSES = frozenset(
    {"EVALUATING", "EVALUATED", "EVAL_FAILED", "REJECTED", "REGISTERED", "CHAMPION", "RETIRED", "ROLLED_BACK"}
)


class UnknownBaseModel(LookupError):
    """The base model id is not configured in BASE_MODELS."""


class AdapterNotFound(LookupError):
    """No registry row for this adapter."""


class AdapterNotPromotable(RuntimeError):
    """The adapter is not in status REGISTERED, so it cannot become champion."""


class ChampionChanged(RuntimeError):
    """The champion pointer moved since it was read (someone else promoted or rolled back)."""


class NoPreviousChampion(LookupError):
    """The baseline is the champion already: there is nothing left to roll back to."""


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


@dataclass(frozen=True)
class ChampionPointer:
    """The current champion of one base model (`BASELINE` for the base model itself), the former ones and the version."""

    base_model_id: str
    champion: str
    previous: list[str]
    version: int

    @property
    def is_baseline(self) -> bool:
        """True when the champion is the base model itself, with no adapter."""
        return self.champion == BASELINE


def baseline_leads(pointer: ChampionPointer | None) -> bool:
    """True when the baseline is the champion: before any promotion (no pointer) or after a rollback to it."""
    return pointer is None or pointer.is_baseline


def champion_model_id(base_model_id: str, pointer: ChampionPointer | None) -> str:
    """The model id that serves the champion: `<base>` for the baseline (also before any promotion), else `<base>:<adapter>`."""
    if baseline_leads(pointer):
        return validate_base_model_id(base_model_id)
    return served_model_id(base_model_id, pointer.champion)


def base_model_path(base_models: dict[str, str], base_model_id: str) -> str:
    """The model path configured for `base_model_id`; raise UnknownBaseModel if it is not configured."""
    validate_base_model_id(base_model_id)
    if base_model_id not in base_models:
        known = ", ".join(sorted(base_models)) or "none configured"
        raise UnknownBaseModel(f"unknown base model {base_model_id!r}; known: {known}")
    return base_models[base_model_id]


class Registry:
    """Access to the registry table through a DynamoDB client."""

    def __init__(self, client: Any, table_name: str) -> None:
        self.client = client
        self.table_name = table_name

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
        if item is None:
            return None
        return AdapterRecord(**{field.name: item.get(field.name) for field in dataclasses.fields(AdapterRecord)})

    def get_champion(self, base_model_id: str) -> ChampionPointer | None:
        """The champion pointer of `base_model_id`, or None before the first promotion."""
        item = self._get(base_model_id, CHAMPION_SORT_KEY)
        if item is None:
            return None
        return ChampionPointer(base_model_id, item["champion"], list(item.get("previous", [])), int(item["version"]))

    def promote(self, base_model_id: str, adapter: str, expected_version: int) -> ChampionPointer:
        """Make `adapter` (status REGISTERED) the champion if the pointer is still at `expected_version`.

        In one transaction: the pointer moves to `adapter` (an old adapter champion is appended to
        `previous`; the baseline never is), the adapter becomes CHAMPION and an old adapter champion
        RETIRED. Promoting the current champion again returns the pointer unchanged. Raises
        ChampionChanged if the pointer moved, AdapterNotPromotable if the adapter is missing or not
        REGISTERED.
        """
        parse_adapter_name(adapter)
        current = self.get_champion(base_model_id)
        if current is not None and current.champion == adapter:
            return current
        version = current.version if current else 0
        if version != expected_version:
            raise ChampionChanged(
                f"champion of {base_model_id!r} is at version {version}, expected {expected_version}; decide again"
            )
        retired = None if baseline_leads(current) else current.champion
        previous = [*current.previous, *([retired] if retired else [])] if current else []
        new = ChampionPointer(base_model_id, adapter, previous, version + 1)
        now = utc_now()
        items = [
            self._pointer_write(new, expected_version, now),
            self._status_write(base_model_id, adapter, "CHAMPION", now, required_status="REGISTERED"),
        ]
        if retired and self._get(base_model_id, retired) is not None:
            items.append(self._status_write(base_model_id, retired, "RETIRED", now))
        self._transact(items, base_model_id, adapter)
        return new

    def rollback(self, base_model_id: str, reason: str = "") -> ChampionPointer:
        """Move the pointer back to the newest former champion that still has a row, else to the baseline.

        In one transaction: that adapter becomes CHAMPION again (the baseline has no status), the
        demoted champion ROLLED_BACK (with `reason`), and the pointer's `previous` keeps only older
        entries. Raises NoPreviousChampion if the baseline is the champion already, ChampionChanged
        if the pointer moved meanwhile.
        """
        current = self.get_champion(base_model_id)
        if baseline_leads(current):
            raise NoPreviousChampion(
                f"the baseline of {base_model_id!r} is the champion; there is nothing to roll back"
            )
        index = next(
            (
                i
                for i in range(len(current.previous) - 1, -1, -1)
                if self._get(base_model_id, current.previous[i]) is not None
            ),
            None,
        )
        if index is None:
            restored = ChampionPointer(base_model_id, BASELINE, [], current.version + 1)
        else:
            restored = ChampionPointer(
                base_model_id, current.previous[index], current.previous[:index], current.version + 1
            )
        now = utc_now()
        items = [self._pointer_write(restored, current.version, now)]
        if not restored.is_baseline:
            items.append(self._status_write(base_model_id, restored.champion, "CHAMPION", now))
        if self._get(base_model_id, current.champion) is not None:
            items.append(self._status_write(base_model_id, current.champion, "ROLLED_BACK", now, error=reason))
        self._transact(items, base_model_id, None if restored.is_baseline else restored.champion)
        return restored

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

    def list_adapters(self, base_model_id: str) -> list[AdapterRecord]:
        """All adapter rows of a base model (not the pointer nor the baselines), ordered by adapter name."""
        return [
            AdapterRecord(**{field.name: row.get(field.name) for field in dataclasses.fields(AdapterRecord)})
            for row in self._query(base_model_id)
            if not row["adapter_name"].startswith("#")
        ]

    def list_base_models(self) -> list[str]:
        """Base model ids that have at least one registry row, sorted."""
        paginator = self.client.get_paginator("scan")
        pages = paginator.paginate(TableName=self.table_name, ProjectionExpression="base_model_id")
        return sorted({from_item(item)["base_model_id"] for page in pages for item in page["Items"]})

    def _key(self, base_model_id: str, sort_key: str) -> dict[str, Any]:
        return to_item({"base_model_id": validate_base_model_id(base_model_id), "adapter_name": sort_key})

    def _get(self, base_model_id: str, sort_key: str) -> dict[str, Any] | None:
        answer = self.client.get_item(
            TableName=self.table_name, Key=self._key(base_model_id, sort_key), ConsistentRead=True
        )
        return from_item(answer["Item"]) if "Item" in answer else None

    def _query(self, base_model_id: str, begins_with: str | None = None) -> list[dict[str, Any]]:
        """Every row of a base model (whose sort key starts with `begins_with`, if given)."""
        condition = "base_model_id = :base"
        values = {":base": validate_base_model_id(base_model_id)}
        if begins_with is not None:
            condition += " AND begins_with(adapter_name, :prefix)"
            values[":prefix"] = begins_with
        pages = self.client.get_paginator("query").paginate(
            TableName=self.table_name, KeyConditionExpression=condition, ExpressionAttributeValues=to_item(values)
        )
        return [from_item(item) for page in pages for item in page["Items"]]

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
        """Apply `values` to the baseline row if it is at `attempt` in `required_status`; return the row as it is then."""
        values = {**values, "updated_at": utc_now()}
        names = {f"#f{index}": name for index, name in enumerate([*values, *remove])}
        update = "SET " + ", ".join(f"#f{index} = :v{index}" for index in range(len(values)))
        if remove:
            update += " REMOVE " + ", ".join(f"#f{len(values) + index}" for index in range(len(remove)))
        try:
            answer = self.client.update_item(
                TableName=self.table_name,
                Key=self._key(base_model_id, baseline_sort_key(eval_set_sha256)),
                UpdateExpression=update,
                ConditionExpression="#attempt = :attempt AND #status = :required",
                ExpressionAttributeNames={**names, "#attempt": "attempt", "#status": "status"},
                ExpressionAttributeValues=to_item(
                    {
                        **{f":v{index}": value for index, value in enumerate(values.values())},
                        ":attempt": validate_attempt(attempt),
                        ":required": required_status,
                    }
                ),
                ReturnValues="ALL_NEW",
            )
        except ClientError as error:
            if is_condition_failure(error):
                return self._existing_baseline(base_model_id, eval_set_sha256)
            raise
        return _baseline_record(from_item(answer["Attributes"]))

    def _update(self, base_model_id: str, adapter: str, values: dict[str, Any]) -> None:
        parse_adapter_name(adapter)
        values = {**values, "updated_at": utc_now()}
        names = {f"#f{index}": name for index, name in enumerate(values)}
        try:
            self.client.update_item(
                TableName=self.table_name,
                Key=self._key(base_model_id, adapter),
                UpdateExpression="SET " + ", ".join(f"#f{index} = :v{index}" for index in range(len(values))),
                ConditionExpression="attribute_exists(adapter_name)",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=to_item({f":v{index}": value for index, value in enumerate(values.values())}),
            )
        except ClientError as error:
            if is_condition_failure(error):
                raise AdapterNotFound(f"no registry row for {base_model_id}:{adapter}") from None
            raise

    def _pointer_write(self, pointer: ChampionPointer, expected_version: int, now: str) -> dict[str, Any]:
        condition = "attribute_not_exists(adapter_name)" if expected_version == 0 else "version = :expected"
        values = {
            ":champion": pointer.champion,
            ":previous": pointer.previous,
            ":version": pointer.version,
            ":now": now,
        }
        if expected_version:
            values[":expected"] = expected_version
        return {
            "Update": {
                "TableName": self.table_name,
                "Key": self._key(pointer.base_model_id, CHAMPION_SORT_KEY),
                "UpdateExpression": "SET champion = :champion, previous = :previous, version = :version, updated_at = :now",
                "ConditionExpression": condition,
                "ExpressionAttributeValues": to_item(values),
            }
        }

    def _status_write(
        self,
        base_model_id: str,
        adapter: str,
        status: str,
        now: str,
        required_status: str | None = None,
        error: str | None = None,
    ) -> dict[str, Any]:
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
                "TableName": self.table_name,
                "Key": self._key(base_model_id, adapter),
                "UpdateExpression": assignments,
                "ConditionExpression": condition,
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": to_item(values),
            }
        }

    def _transact(self, items: list[dict[str, Any]], base_model_id: str, adapter: str | None) -> None:
        """Run the writes; item 0 is the pointer, item 1 the adapter that becomes champion (None: none does)."""
        try:
            self.client.transact_write_items(TransactItems=items)
        except ClientError as error:
            if error.response["Error"]["Code"] != "TransactionCanceledException":
                raise
            codes = [reason.get("Code") for reason in error.response.get("CancellationReasons", [])]
            if codes and codes[0] == "ConditionalCheckFailed":
                raise ChampionChanged(f"champion of {base_model_id!r} changed meanwhile; decide again") from None
            if adapter is not None and len(codes) > 1 and codes[1] == "ConditionalCheckFailed":
                raise AdapterNotPromotable(
                    f"{base_model_id}:{adapter} is missing or not in the status required to become champion"
                ) from None
            raise


def _baseline_record(row: dict[str, Any]) -> BaselineRecord:
    return BaselineRecord(**{field.name: row.get(field.name) for field in dataclasses.fields(BaselineRecord)})
