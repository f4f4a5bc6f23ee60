"""A base model's champion history: its baseline at the root, then each adapter that was champion."""

from __future__ import annotations

from dataclasses import dataclass

from mazeops.adapter_rows import AdapterRecord
from mazeops.baseline_rows import BaselineRecord
from mazeops.champion_rows import ChampionPointer, baseline_leads
from mazeops.registry import Registry


@dataclass(frozen=True)
class Lineage:
    """The champion history of a base model, oldest first: its baseline at the root, then each adapter champion.

    `roles[i]` is `champion` or `former` for `names[i]`; `records[i]` is that adapter's row (None if it vanished).
    """

    base_model_id: str
    pointer: ChampionPointer | None
    baseline: BaselineRecord | None
    baseline_role: str
    names: list[str]
    roles: list[str]
    records: list[AdapterRecord | None]


def champion_lineage(registry: Registry, base_model_id: str) -> Lineage | None:
    """The champion history of `base_model_id` from its baseline; None when it has no champion and no baseline yet."""
    pointer = registry.get_champion(base_model_id)
    baselines = registry.list_baselines(base_model_id)
    if pointer is None and not baselines:
        return None
    leads = baseline_leads(pointer)
    names = [*pointer.previous, *([] if leads else [pointer.champion])] if pointer else []
    records = [registry.get_adapter(base_model_id, name) for name in names]
    roles = ["former"] * len(names) if leads else ["former"] * (len(names) - 1) + ["champion"]
    baseline = _root_baseline(baselines, records)
    return Lineage(base_model_id, pointer, baseline, "champion" if leads else "former", names, roles, records)


def _root_baseline(baselines: list[BaselineRecord], adapters: list[AdapterRecord | None]) -> BaselineRecord | None:
    """The baseline at the root of the lineage: the one on the maze set of its first adapter, else the first READY
    one (else the first)."""
    first = next((record for record in adapters if record is not None and record.eval_set_sha256), None)
    if first is not None:
        return next((b for b in baselines if b.eval_set_sha256 == first.eval_set_sha256), None)
    return next((b for b in baselines if b.status == "READY"), baselines[0] if baselines else None)
