"""Make sure the baseline the challenger is compared with exists: claim it on first use of the base model."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from mazeops.adapter_rows import AdapterNotFound
from mazeops.aws_clients import aws_client
from mazeops.config import load
from mazeops.evalresult import InvalidEvalResult
from mazeops.failures import one_line_errors
from mazeops.inputs import adapter_ref
from mazeops.registry import Registry

logger = Logger()
tracer = Tracer()


@logger.inject_lambda_context(correlation_id_path="adapter_name")
@tracer.capture_lambda_handler
@one_line_errors(logger)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Read or claim the baseline of the challenger's evaluation set; contract in docs/design.md."""
    ref = adapter_ref(event)
    base_model_id, adapter = ref.base_model_id, ref.adapter_name
    registry = Registry(aws_client("dynamodb"), load().required("registry_table"))
    challenger = registry.get_adapter(base_model_id, adapter)
    if challenger is None:
        raise AdapterNotFound(f"no registry row for {base_model_id}:{adapter}")
    if not challenger.eval_set_sha256:
        raise InvalidEvalResult(f"{base_model_id}:{adapter} has no recorded evaluation")
    baseline = registry.claim_baseline(base_model_id, challenger.eval_set_sha256)
    logger.info("Baseline", extra={"status": baseline.status, "job_id": baseline.job_id, "attempt": baseline.attempt})
    return {
        "status": baseline.status,
        "eval_set_sha256": baseline.eval_set_sha256,
        "attempt": baseline.attempt,
        "job_id": baseline.job_id,
        "error": baseline.error,
    }
