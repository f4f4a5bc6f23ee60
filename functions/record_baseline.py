"""Record how one attempt at evaluating a baseline ended, once its Ray job is terminal: READY or FAILED."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from mazeops.aws_clients import aws_client
from mazeops.baseline import validate_attempt, validate_eval_set_sha256
from mazeops.baseline_outcome import settle_baseline, unavailable_reason
from mazeops.config import load
from mazeops.failures import one_line_errors
from mazeops.inputs import field
from mazeops.names import validate_base_model_id
from mazeops.registry import Registry

logger = Logger()
tracer = Tracer()


@logger.inject_lambda_context(correlation_id_path="base_model_id")
@tracer.capture_lambda_handler
@one_line_errors(logger)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Settle the baseline attempt in `event`; contract in docs/design.md."""
    base_model_id = validate_base_model_id(field(event, "base_model_id", str))
    eval_set_sha256 = validate_eval_set_sha256(field(event, "eval_set_sha256", str))
    attempt = validate_attempt(field(event, "attempt", int))
    job = field(event, "job", dict)
    job_status = field(job, "status", str)
    config = load()
    registry = Registry(aws_client("dynamodb"), config.required("registry_table"))
    claimed = registry.get_baseline(base_model_id, eval_set_sha256)
    if claimed is not None and claimed.attempt == attempt:
        baseline = settle_baseline(
            aws_client("s3"),
            registry,
            config.required("artifacts_bucket"),
            claimed,
            job_status,
            field(job, "message", str, optional=True),
            field(job, "logs_tail", str, optional=True),
        )
    else:  # another attempt was claimed meanwhile (an operator's retry): report that one
        baseline = claimed
    ready = baseline is not None and baseline.status == "READY"
    reason = "baseline recorded" if ready else unavailable_reason(baseline, base_model_id, eval_set_sha256)
    logger.info("Baseline settled", extra={"ready": ready, "reason": reason[:500]})
    return {
        "ready": ready,
        "reason": reason,
        "solve_rate": baseline.solve_rate if ready else None,
        "n_solved": baseline.n_solved if ready else None,
        "n_total": baseline.n_total if ready else None,
    }
