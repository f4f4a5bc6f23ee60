"""Make sure the baseline the challenger is compared with exists: claim it on first use of the base model.

Input `{"base_model_id", "adapter_name"}` (an evaluated challenger); output `{"status",
"eval_set_sha256", "attempt", "job_id", "error"}` for the baseline of the base model on the
challenger's evaluation set. `status` is READY (recorded), EVALUATING (this attempt's Ray job
`job_id` is to be submitted, idempotently, and waited for) or FAILED (its evaluation failed:
nothing can be promoted until an operator runs `mazeops-ops baseline evaluate`). The first call
for a base model and evaluation set claims attempt 1 with a conditional put, so concurrent first
evaluations agree on one attempt and one Ray job. Errors: AdapterNotFound, InvalidEvalResult (the
challenger has no recorded evaluation).
"""

from __future__ import annotations

from typing import Any

import boto3
from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from mazeops.config import load
from mazeops.evalresult import InvalidEvalResult
from mazeops.failures import one_line_errors
from mazeops.inputs import adapter_ref
from mazeops.registry import AdapterNotFound, Registry

logger = Logger()
tracer = Tracer()


@logger.inject_lambda_context(correlation_id_path="adapter_name")
@tracer.capture_lambda_handler
@one_line_errors(logger)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Read or claim the baseline of the challenger's evaluation set; see the module docstring."""
    ref = adapter_ref(event)
    base_model_id, adapter = ref.base_model_id, ref.adapter_name
    registry = Registry(boto3.client("dynamodb"), load().required("registry_table"))
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
