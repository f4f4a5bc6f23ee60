"""How the CLI and the console name the baseline and the champion for people."""

from __future__ import annotations

from mazeops.baseline_rows import BaselineRecord
from mazeops.champion_rows import ChampionPointer, baseline_leads

BASELINE_LABEL = "baseline"


def champion_label(pointer: ChampionPointer | None) -> str:
    """The champion's name: the adapter, or `baseline` (the base model itself) before any promotion or after a
    rollback to it."""
    return BASELINE_LABEL if baseline_leads(pointer) else pointer.champion


def solved_text(record: BaselineRecord | None) -> str | None:
    """`X/64` for a READY baseline, else None."""
    return f"{record.n_solved}/{record.n_total}" if record is not None and record.status == "READY" else None
