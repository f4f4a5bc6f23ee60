"""Record an adapter's evaluation result in the registry, once it is checked against the adapter and maze set."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from mazeops.aws_clients import aws_client
from mazeops.config import load
from mazeops.evalresult import EVAL_SET_SEEDS, MAX_RESULT_BYTES, InvalidEvalResult, parse_eval_result
from mazeops.failures import one_line_errors
from mazeops.inputs import field
from mazeops.layout import eval_result_key
from mazeops.names import InvalidName, adapter_name, validate_base_model_id, validate_run_id, validate_step
from mazeops.registry import Registry
from mazeops.s3_objects import ObjectMissing, ObjectTooLarge, read_limited

logger = Logger()
tracer = Tracer()
metrics = Metrics(namespace="MazeRlOps")


@logger.inject_lambda_context(correlation_id_path="adapter_name")
@tracer.capture_lambda_handler
@metrics.log_metrics
@one_line_errors(logger)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Read, check and record the evaluation of one adapter; contract in docs/design.md."""
    run_id = validate_run_id(field(event, "run_id", str))
    step = validate_step(field(event, "step", int))
    base_model_id = validate_base_model_id(field(event, "base_model_id", str))
    adapter = field(event, "adapter_name", str)
    if adapter != adapter_name(run_id, step):
        raise InvalidName(f"adapter name {adapter[:80]!r} is not {adapter_name(run_id, step)!r}")
    config = load()
    bucket = config.required("artifacts_bucket")
    result_key = eval_result_key(run_id, step)
    try:
        result = parse_eval_result(read_limited(aws_client("s3"), bucket, result_key, MAX_RESULT_BYTES))
    except (ObjectMissing, ObjectTooLarge) as error:
        raise InvalidEvalResult(f"evaluation result: {error}") from None
    described = (result.run_id, result.step, result.adapter_name, result.base_model_id)
    if described != (run_id, step, adapter, base_model_id):
        raise InvalidEvalResult(f"{result_key} describes {described}, not {(run_id, step, adapter, base_model_id)}")
    if tuple(result.seeds) != EVAL_SET_SEEDS:
        raise InvalidEvalResult(
            f"{result_key} covers {result.n_total} mazes (seeds {result.seeds[:3]}...), "
            f"not the {len(EVAL_SET_SEEDS)} mazes of the fixed evaluation set"
        )
    if config.eval_set_sha256 and result.eval_set_sha256 != config.eval_set_sha256:
        raise InvalidEvalResult(
            f"{result_key} was evaluated on maze set {result.eval_set_sha256[:12]}..., "
            f"not the configured {config.eval_set_sha256[:12]}..."
        )
    Registry(aws_client("dynamodb"), config.required("registry_table")).record_eval(result)
    metrics.add_dimension(name="base_model_id", value=base_model_id)
    metrics.add_metric(name="SolveRate", unit=MetricUnit.NoUnit, value=result.solve_rate)
    logger.info("Evaluation recorded", extra={"solve_rate": result.solve_rate, "n_solved": result.n_solved})
    return {
        "solve_rate": result.solve_rate,
        "n_solved": result.n_solved,
        "n_total": result.n_total,
        "result_key": result_key,
    }
