"""A base model's leaderboard: its adapters and baselines ranked by solve rate, the champion marked."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from mazeops.baseline import BASELINE
from mazeops.registry import Registry
from opsctl.labels import BASELINE_LABEL


@dataclass(frozen=True)
class LeaderboardEntry:
    """One leaderboard row: an adapter, or the baseline on one evaluation set (`name` is then `baseline`)."""

    name: str
    run_id: str | None
    step: int | None
    status: str
    solve_rate: float | None
    n_solved: int | None
    n_total: int | None
    champion: bool
    document: dict[str, Any]  # the registry row (the CLI's --json, besides `champion`)


def leaderboard_entries(registry: Registry, base_model_id: str) -> list[LeaderboardEntry]:
    """Adapters and baselines of a base model sorted by solve rate (unevaluated last), champion marked; [] when it
    has none."""
    adapters = registry.list_adapters(base_model_id)
    baselines = registry.list_baselines(base_model_id)
    pointer = registry.get_champion(base_model_id)
    champion = pointer.champion if pointer else BASELINE
    entries = [
        LeaderboardEntry(
            r.adapter_name,
            r.run_id,
            r.step,
            r.status,
            r.solve_rate,
            r.n_solved,
            r.n_total,
            r.adapter_name == champion,
            dataclasses.asdict(r),
        )
        for r in adapters
    ] + [
        LeaderboardEntry(
            BASELINE_LABEL,
            None,
            None,
            b.status,
            b.solve_rate,
            b.n_solved,
            b.n_total,
            champion == BASELINE and b.status == "READY",
            {**dataclasses.asdict(b), "adapter_name": BASELINE},
        )
        for b in baselines
    ]
    entries.sort(key=lambda e: (e.solve_rate is None, -(e.solve_rate or 0.0), e.run_id or "", e.step or 0))
    return entries
