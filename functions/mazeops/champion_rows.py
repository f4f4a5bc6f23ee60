"""Champion pointers of the registry table: one per base model; promotion and rollback move it.

A pointer change and the adapter rows it concerns are written in one TransactWriteItems,
conditional on the pointer's version, so two promotions can never both win.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from mazeops.adapter_rows import status_write
from mazeops.baseline import BASELINE
from mazeops.dynamo import to_item, utc_now
from mazeops.names import CHAMPION_SORT_KEY, parse_adapter_name, served_model_id, validate_base_model_id
from mazeops.registry_table import RegistryTable


class AdapterNotPromotable(RuntimeError):
    """The adapter is not in status REGISTERED, so it cannot become champion."""


class ChampionChanged(RuntimeError):
    """The champion pointer moved since it was read (someone else promoted or rolled back)."""


class NoPreviousChampion(LookupError):
    """The baseline is the champion already: there is nothing left to roll back to."""


@dataclass(frozen=True)
class ChampionPointer:
    """The champion of one base model (`BASELINE`: the base model itself), the former ones and the version."""

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
    """The model id that serves the champion.

    `<base>` for the baseline (also before any promotion), else `<base>:<adapter>`.
    """
    if baseline_leads(pointer):
        return validate_base_model_id(base_model_id)
    return served_model_id(base_model_id, pointer.champion)


class ChampionRows(RegistryTable):
    """The champion pointer rows of the registry table, and the transactions that move them."""

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
            status_write(
                self.table_name, self._key(base_model_id, adapter), "CHAMPION", now, required_status="REGISTERED"
            ),
        ]
        if retired and self._get(base_model_id, retired) is not None:
            items.append(status_write(self.table_name, self._key(base_model_id, retired), "RETIRED", now))
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
            items.append(status_write(self.table_name, self._key(base_model_id, restored.champion), "CHAMPION", now))
        if self._get(base_model_id, current.champion) is not None:
            demoted = self._key(base_model_id, current.champion)
            items.append(status_write(self.table_name, demoted, "ROLLED_BACK", now, error=reason))
        self._transact(items, base_model_id, None if restored.is_baseline else restored.champion)
        return restored

    def _pointer_write(self, pointer: ChampionPointer, expected_version: int, now: str) -> dict[str, Any]:
        """The TransactWriteItems Update that moves the pointer, conditional on `expected_version` (0: no pointer)."""
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
                "UpdateExpression": (
                    "SET champion = :champion, previous = :previous, version = :version, updated_at = :now"
                ),
                "ConditionExpression": condition,
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
