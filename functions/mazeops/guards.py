"""The rules that stop a run by itself: collapse, stall and spend (the run spec's `guard`, mazeops.runspec.GuardSpec).

Plain functions of figures the callers read (evaluations, the last adapter's arrival, the time RUNNING): each answers
a GuardVerdict (which guard, why, with the figures) or None. Who acts on a verdict: mazeops.run_stop.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import ValidationError

from mazeops.errors import describe_validation_error
from mazeops.runspec import CollapseGuard, GuardSpec

GuardName = Literal["collapse", "stall", "spend"]


class InvalidGuardSettings(ValueError):
    """A run row's `guard` attribute is not a guard spec."""


@dataclass(frozen=True)
class EvalPoint:
    """One evaluation on the fixed maze set: an adapter's at `step`, or the baseline's (step 0)."""

    step: int
    n_solved: int
    n_total: int

    def __post_init__(self) -> None:
        if not 0 <= self.n_solved <= self.n_total or self.n_total < 1 or self.step < 0:
            raise ValueError(f"not an evaluation: step {self.step}, {self.n_solved} of {self.n_total} solved")

    @property
    def rate(self) -> float:
        """Fraction of the mazes solved."""
        return self.n_solved / self.n_total

    @property
    def text(self) -> str:
        """`12/64`."""
        return f"{self.n_solved}/{self.n_total}"


@dataclass(frozen=True)
class GuardVerdict:
    """A guard's decision to stop a run: its name, a one-line reason with the figures, and the triggering steps."""

    guard: GuardName
    reason: str
    steps: tuple[int, ...] = ()
    figures: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_record(self) -> dict[str, Any]:
        """The verdict as the run row's `stopped_by` stores it (without the time, which the writer adds)."""
        return {"guard": self.guard, "reason": self.reason, "steps": list(self.steps), "figures": dict(self.figures)}


def guard_settings(raw: dict[str, Any] | None) -> GuardSpec | None:
    """The guard spec stored in a run row (as `mazeops.dynamo.from_item` reads it); None: no guards recorded (a run
    accepted before guards existed is never stopped by one)."""
    if raw is None:
        return None
    try:
        return GuardSpec.model_validate(raw)
    except ValidationError as error:
        raise InvalidGuardSettings(
            f"the run's guard settings are invalid: {describe_validation_error(error)}"
        ) from None


def collapse_verdict(
    points: Sequence[EvalPoint], baseline: EvalPoint | None, collapse: CollapseGuard | None
) -> GuardVerdict | None:
    """Stop when each of the run's `consecutive_evals` latest evaluations (highest steps) has collapsed.

    An evaluation has collapsed when its solve rate is more than `below_baseline_points` percentage points below the
    baseline's (an arm that needs `baseline`), or below `below_best_fraction` of the best solve rate of the run's
    evaluations up to and including it. Evaluations may arrive in any order: they are taken by step.
    """
    if collapse is None or len(points) < collapse.consecutive_evals:
        return None
    ordered = sorted(points, key=lambda point: point.step)
    window = ordered[-collapse.consecutive_evals :]
    best = max(ordered, key=lambda point: (point.rate, -point.step))
    why = [_collapsed(point, ordered, baseline, collapse) for point in window]
    if not all(why):
        return None
    latest = " and ".join(f"{point.text} (step {point.step})" for point in window)
    reason = f"collapse: {latest} after best {best.text} (step {best.step})"
    if baseline is not None:
        reason += f", baseline {baseline.text}"
    reason += f"; {'; '.join(dict.fromkeys(str(text) for text in why))}"
    figures: dict[str, Any] = {
        "solved": [point.n_solved for point in window],
        "n_total": window[-1].n_total,
        "best_step": best.step,
        "best_solved": best.n_solved,
        "baseline_solved": baseline.n_solved if baseline is not None else None,
        "below_baseline_points": collapse.below_baseline_points,
        "below_best_fraction": collapse.below_best_fraction,
        "consecutive_evals": collapse.consecutive_evals,
    }
    return GuardVerdict("collapse", reason, tuple(point.step for point in window), figures)


def _collapsed(
    point: EvalPoint, ordered: Sequence[EvalPoint], baseline: EvalPoint | None, collapse: CollapseGuard
) -> str | None:
    """Why `point` counts as collapsed (the rule it breaks), or None."""
    if collapse.below_baseline_points is not None and baseline is not None:
        floor = baseline.rate - collapse.below_baseline_points / 100
        if point.rate < floor:
            return f"more than {collapse.below_baseline_points:g} points below the baseline"
    if collapse.below_best_fraction is not None:
        best = max(other.rate for other in ordered if other.step <= point.step)
        if point.rate < collapse.below_best_fraction * best:
            return f"below {collapse.below_best_fraction:.0%} of the run's best"
    return None


def stall_verdict(
    now: datetime,
    running_at: datetime,
    last_adapter_at: datetime | None,
    last_step: int | None,
    stall_minutes: int | None,
) -> GuardVerdict | None:
    """Stop when no adapter arrived for `stall_minutes` (since the last one, or since the run became RUNNING).

    Times are timezone-aware (UTC).
    """
    if stall_minutes is None:
        return None
    since = max(running_at, last_adapter_at) if last_adapter_at is not None else running_at
    quiet_minutes = (now - since).total_seconds() / 60
    if quiet_minutes <= stall_minutes:
        return None
    last = (
        f"the last, step {last_step}, at {_iso(since)}"
        if last_step is not None
        else f"none since RUNNING at {_iso(since)}"
    )
    reason = f"stall: no new adapter for {quiet_minutes:.0f} min ({last}); the limit is {stall_minutes} min"
    figures = {"quiet_minutes": round(quiet_minutes, 1), "stall_minutes": stall_minutes, "last_step": last_step}
    return GuardVerdict("stall", reason, (), figures)


def spend_verdict(now: datetime, running_at: datetime, num_gpus: int, gpu_hours: float | None) -> GuardVerdict | None:
    """Stop when `num_gpus` x the hours since the run became RUNNING exceed the `gpu_hours` budget."""
    if gpu_hours is None:
        return None
    hours = max(0.0, (now - running_at).total_seconds() / 3600)
    spent = num_gpus * hours
    if spent <= gpu_hours:
        return None
    reason = (
        f"spend: {num_gpus} GPUs x {hours:.1f} h = {spent:.0f} GPU-hours since {_iso(running_at)}; "
        f"the budget is {gpu_hours:g}"
    )
    figures = {"gpu_hours": round(spent, 2), "budget": gpu_hours, "num_gpus": num_gpus, "hours": round(hours, 2)}
    return GuardVerdict("spend", reason, (), figures)


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
