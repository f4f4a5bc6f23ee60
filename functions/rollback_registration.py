"""Undo a registration that failed at register, smoke test or promote (the state machine's Catch)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from mazeops.adapter_rows import AdapterNotFound
from mazeops.aws_clients import aws_client
from mazeops.baseline import BASELINE
from mazeops.config import load
from mazeops.failures import one_line_errors
from mazeops.inputs import adapter_ref, field
from mazeops.layout import ADAPTER_FILES, serving_adapter_prefix
from mazeops.registry import Registry

logger = Logger()
tracer = Tracer()
metrics = Metrics(namespace="MazeRlOps")


@logger.inject_lambda_context(correlation_id_path="adapter_name")
@tracer.capture_lambda_handler
@metrics.log_metrics
@one_line_errors(logger)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Roll back the challenger's registration; contract in docs/design.md."""
    ref = adapter_ref(event)
    base_model_id, adapter = ref.base_model_id, ref.adapter_name
    error = field(event, "error", dict, optional=True) or {}
    cause = f"{error.get('Error', 'unknown error')}: {error.get('Cause', '')}"
    config = load()
    registry = Registry(aws_client("dynamodb"), config.required("registry_table"))
    pointer = registry.get_champion(base_model_id)
    if pointer is not None and pointer.champion == adapter:
        pointer = registry.rollback(base_model_id, reason=cause)
    else:
        try:
            registry.set_status(base_model_id, adapter, "ROLLED_BACK", error=cause)
        except AdapterNotFound:
            logger.warning("Challenger has no registry row", extra={"adapter_name": adapter})
    prefix = serving_adapter_prefix(base_model_id, ref.run_id, ref.step)
    deleted = aws_client("s3").delete_objects(
        Bucket=config.required("artifacts_bucket"),
        Delete={"Objects": [{"Key": prefix + name} for name in ADAPTER_FILES], "Quiet": True},
    )
    if deleted.get("Errors"):
        logger.error("Serving copy not fully deleted", extra={"errors": deleted["Errors"]})
    metrics.add_metric(name="Rollbacks", unit=MetricUnit.Count, value=1)
    champion = pointer.champion if pointer else BASELINE
    logger.info("Registration rolled back", extra={"champion": champion, "cause": cause[:500]})
    return {"champion": champion, "rolled_back": adapter}
