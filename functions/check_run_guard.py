"""Stop a training run whose held-out solve rate has collapsed (the collapse guard of its run spec).

Runs after an adapter's evaluation is recorded and the baseline is ready, before the promotion
decision: the run's evaluated adapters on the challenger's maze set, and the baseline on that set,
go through `mazeops.guards.collapse_verdict`; a verdict stops the run (`mazeops.run_stop.stop_run`),
and the promotion decision then refuses every adapter of the STOPPED run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from mazeops.adapter_rows import AdapterNotFound
from mazeops.aws_clients import aws_client
from mazeops.config import load
from mazeops.evalresult import InvalidEvalResult
from mazeops.failures import one_line_errors
from mazeops.guards import EvalPoint, GuardVerdict, collapse_verdict, guard_settings
from mazeops.inputs import adapter_ref
from mazeops.names import parse_adapter_name
from mazeops.registry import Registry
from mazeops.run_stop import stop_run
from mazeops.runs import RunsTable

logger = Logger()
tracer = Tracer()
metrics = Metrics(namespace="MazeRlOps")

# The baseline is the run's starting point: step 0 of its learning curve.
BASELINE_STEP = 0


@dataclass(frozen=True)
class GuardCheck:
    """What the collapse guard found: `verdict` when the rule fired, `stopped` when this check stopped the run
    (False when it was stopped meanwhile), and `reason` in words either way."""

    stopped: bool
    verdict: GuardVerdict | None
    reason: str


@logger.inject_lambda_context(correlation_id_path="adapter_name")
@tracer.capture_lambda_handler
@metrics.log_metrics
@one_line_errors(logger)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Apply the collapse guard to the challenger's run; contract in docs/design.md."""
    ref = adapter_ref(event)
    config = load()
    client = aws_client("dynamodb")
    check = check_collapse(
        Registry(client, config.required("registry_table")),
        RunsTable(client, config.required("runs_table")),
        aws_client("stepfunctions"),
        ref.base_model_id,
        ref.adapter_name,
    )
    guard = check.verdict.guard if check.verdict else None
    if check.stopped:
        metrics.add_dimension(name="guard", value=guard)
        metrics.add_metric(name="RunsStoppedByGuard", unit=MetricUnit.Count, value=1)
    return {"stopped": check.stopped, "guard": guard, "reason": check.reason}


def check_collapse(registry: Registry, runs: RunsTable, sfn: Any, base_model_id: str, adapter_name: str) -> GuardCheck:
    """Apply the collapse guard of the run of `adapter_name` (just evaluated) and stop the run if it fires.

    Only a RUNNING run whose spec keeps a collapse guard is looked at. Its points are its adapters
    with recorded outcomes on the challenger's maze set (an evaluation that failed has none); the
    baseline, when READY on that set, is step 0. Raises AdapterNotFound or InvalidEvalResult when
    the challenger has no row or no recorded evaluation.
    """
    run_id, _ = parse_adapter_name(adapter_name)
    run = runs.get_run(run_id)
    if run is None or run.status != "RUNNING":
        reason = f"run {run_id!r} is {run.status if run else 'not in the runs table'}; guards watch RUNNING runs"
        return _unchanged(run_id, reason)
    settings = guard_settings(run.guard)
    if settings is None or settings.collapse is None:
        return _unchanged(run_id, f"run {run_id!r} has no collapse guard")
    challenger = registry.get_adapter(base_model_id, adapter_name)
    if challenger is None:
        raise AdapterNotFound(f"no registry row for {base_model_id}:{adapter_name}")
    if not challenger.outcomes or not challenger.eval_set_sha256:
        raise InvalidEvalResult(f"{base_model_id}:{adapter_name} has no recorded evaluation")
    eval_set = challenger.eval_set_sha256
    points = [
        EvalPoint(record.step, record.n_solved, record.n_total)
        for record in registry.list_adapters(base_model_id)
        if record.run_id == run_id and record.outcomes and record.eval_set_sha256 == eval_set
    ]
    baseline_row = registry.get_baseline(base_model_id, eval_set)
    baseline = (
        EvalPoint(BASELINE_STEP, baseline_row.n_solved, baseline_row.n_total)
        if baseline_row is not None and baseline_row.status == "READY"
        else None
    )
    verdict = collapse_verdict(points, baseline, settings.collapse)
    figures = {
        "run_id": run_id,
        "points": {point.step: point.text for point in sorted(points, key=lambda point: point.step)},
        "baseline": baseline.text if baseline else None,
    }
    if verdict is None:
        logger.info("Collapse guard: no collapse", extra=figures)
        return GuardCheck(False, None, f"run {run_id!r}: no collapse over {len(points)} evaluation(s)")
    stopped = stop_run(runs, sfn, run_id, verdict)
    if stopped:
        logger.warning("Collapse guard stopped the run", extra={**figures, "reason": verdict.reason})
    else:
        logger.info(
            "Collapse guard fired on a run that is no longer RUNNING", extra={**figures, "reason": verdict.reason}
        )
    return GuardCheck(stopped, verdict, verdict.reason)


def _unchanged(run_id: str, reason: str) -> GuardCheck:
    logger.info("Collapse guard not applied", extra={"run_id": run_id, "reason": reason})
    return GuardCheck(False, None, reason)
