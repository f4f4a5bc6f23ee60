"""The adapter registry: one row per adapter and one champion pointer per base model.

Table key (`base_model_id`, `adapter_name`). The pointer is the row
`adapter_name = "#CHAMPION"` with `champion` (adapter name), `previous` (former champions,
newest last) and `version` (a number that every pointer change increments, conditionally on its
old value, so two promotions can never both win). Promotion and rollback change the pointer and
the adapter rows in one TransactWriteItems.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from mazeops.decision import Decision
from mazeops.dynamo import from_item, is_condition_failure, to_attribute, to_item, utc_now
from mazeops.evalresult import EvalResult
from mazeops.manifest import AdapterManifest
from mazeops.names import CHAMPION_SORT_KEY, parse_adapter_name, validate_base_model_id

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
    """There is no former champion left to roll back to."""


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
class ChampionPointer:
    """The current champion of one base model, the former ones (newest last) and the pointer version."""

    base_model_id: str
    champion: str
    previous: list[str]
    version: int


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
        try:
            self.client.put_item(
                TableName=self.table_name,
                Item=to_item(dataclasses.asdict(record)),
                ConditionExpression="attribute_not_exists(adapter_name)",
            )
        except ClientError as error:
            if is_condition_failure(error):
                return False
            raise
        return True

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
        values: dict[str, Any] = {"decision": {"promote": decision.promote, "reason": decision.reason, **decision.evidence}}
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

        In one transaction: the pointer moves to `adapter` (the old champion is appended to
        `previous`), the adapter becomes CHAMPION and the old champion RETIRED. Promoting the
        current champion again returns the pointer unchanged. Raises ChampionChanged if the
        pointer moved, AdapterNotPromotable if the adapter is missing or not REGISTERED.
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
        previous = [*current.previous, current.champion] if current else []
        new = ChampionPointer(base_model_id, adapter, previous, version + 1)
        now = utc_now()
        items = [
            self._pointer_write(new, expected_version, now),
            self._status_write(base_model_id, adapter, "CHAMPION", now, required_status="REGISTERED"),
        ]
        if current is not None and self._get(base_model_id, current.champion) is not None:
            items.append(self._status_write(base_model_id, current.champion, "RETIRED", now))
        self._transact(items, base_model_id, adapter)
        return new

    def rollback(self, base_model_id: str, reason: str = "") -> ChampionPointer:
        """Move the pointer back to the newest former champion that still has a row.

        In one transaction: that adapter becomes CHAMPION again, the demoted champion
        ROLLED_BACK (with `reason`), and the pointer's `previous` keeps only older entries.
        Raises NoPreviousChampion if there is none, ChampionChanged if the pointer moved meanwhile.
        """
        current = self.get_champion(base_model_id)
        if current is None:
            raise NoPreviousChampion(f"{base_model_id!r} has no champion to roll back")
        for index in range(len(current.previous) - 1, -1, -1):
            if self._get(base_model_id, current.previous[index]) is not None:
                break
        else:
            raise NoPreviousChampion(
                f"{base_model_id!r}: champion {current.champion!r} has no former champion left to roll back to"
            )
        restored = ChampionPointer(base_model_id, current.previous[index], current.previous[:index], current.version + 1)
        now = utc_now()
        items = [
            self._pointer_write(restored, current.version, now),
            self._status_write(base_model_id, restored.champion, "CHAMPION", now),
        ]
        if self._get(base_model_id, current.champion) is not None:
            items.append(self._status_write(base_model_id, current.champion, "ROLLED_BACK", now, error=reason))
        self._transact(items, base_model_id, restored.champion)
        return restored

    def list_adapters(self, base_model_id: str) -> list[AdapterRecord]:
        """All adapter rows of a base model (not the pointer), ordered by adapter name."""
        paginator = self.client.get_paginator("query")
        pages = paginator.paginate(
            TableName=self.table_name,
            KeyConditionExpression="base_model_id = :base",
            ExpressionAttributeValues={":base": to_attribute(validate_base_model_id(base_model_id))},
        )
        rows = [from_item(item) for page in pages for item in page["Items"]]
        return [
            AdapterRecord(**{field.name: row.get(field.name) for field in dataclasses.fields(AdapterRecord)})
            for row in rows
            if row["adapter_name"] != CHAMPION_SORT_KEY
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
        values = {":champion": pointer.champion, ":previous": pointer.previous, ":version": pointer.version, ":now": now}
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
        self, base_model_id: str, adapter: str, status: str, now: str, required_status: str | None = None, error: str | None = None
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

    def _transact(self, items: list[dict[str, Any]], base_model_id: str, adapter: str) -> None:
        """Run the writes; item 0 is the pointer, item 1 the adapter that becomes champion."""
        try:
            self.client.transact_write_items(TransactItems=items)
        except ClientError as error:
            if error.response["Error"]["Code"] != "TransactionCanceledException":
                raise
            codes = [reason.get("Code") for reason in error.response.get("CancellationReasons", [])]
            if codes and codes[0] == "ConditionalCheckFailed":
                raise ChampionChanged(f"champion of {base_model_id!r} changed meanwhile; decide again") from None
            if len(codes) > 1 and codes[1] == "ConditionalCheckFailed":
                raise AdapterNotPromotable(
                    f"{base_model_id}:{adapter} is missing or not in the status required to become champion"
                ) from None
            raise
