"""Evaluation results in S3: an adapter's result, and the per-maze outcomes of an adapter or a baseline."""

from __future__ import annotations

from dataclasses import dataclass

from mazeops.baseline import parse_baseline_result
from mazeops.evalresult import MAX_RESULT_BYTES, EvalResult, MazeOutcome, parse_eval_result
from mazeops.layout import eval_result_key
from mazeops.registry import Registry
from mazeops.s3_objects import ObjectMissing, read_limited
from opsctl.labels import BASELINE_LABEL
from opsctl.target import Target


@dataclass(frozen=True)
class Outcomes:
    """One model's per-maze outcomes on one evaluation set: an adapter's evaluation result, or a baseline's
    (`name` `baseline`)."""

    name: str
    eval_set_sha256: str
    outcomes: list[MazeOutcome]

    @property
    def n_solved(self) -> int:
        """How many mazes it solved."""
        return sum(outcome.solved for outcome in self.outcomes)


def read_eval_result(target: Target, run_id: str, step: int) -> EvalResult | None:
    """The evaluation result of the adapter of `run_id` at `step` (`runs/<run>/evals/global_step_<N>/result.json`),
    or None when there is none."""
    try:
        raw = read_limited(target.client("s3"), target.bucket, eval_result_key(run_id, step), MAX_RESULT_BYTES)
    except ObjectMissing:
        return None
    return parse_eval_result(raw)


def adapter_outcomes(target: Target, registry: Registry, base_model_id: str, adapter: str) -> Outcomes | None:
    """The per-maze outcomes of a registered adapter, from its evaluation result in S3; None when it has none."""
    record = registry.get_adapter(base_model_id, adapter)
    result = read_eval_result(target, record.run_id, record.step) if record is not None else None
    return Outcomes(adapter, result.eval_set_sha256, result.outcomes) if result is not None else None


def baseline_outcomes(target: Target, registry: Registry, base_model_id: str, eval_set_sha256: str) -> Outcomes | None:
    """The per-maze outcomes of the READY baseline of `base_model_id` on `eval_set_sha256`, from its result in S3;
    None when it has none."""
    record = registry.get_baseline(base_model_id, eval_set_sha256)
    if record is None or record.status != "READY":
        return None
    try:
        raw = read_limited(target.client("s3"), target.bucket, record.result_key, MAX_RESULT_BYTES)
    except ObjectMissing:
        return None
    return Outcomes(BASELINE_LABEL, eval_set_sha256, parse_baseline_result(raw).outcomes)
