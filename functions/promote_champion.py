"""Make the challenger the champion of its base model, if the pointer is still where the decision saw it."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from mazeops.aws_clients import aws_client
from mazeops.config import load
from mazeops.failures import one_line_errors
from mazeops.inputs import adapter_ref, field
from mazeops.registry import Registry
from mazeops.runs import RunsTable, require_promotable

logger = Logger()
tracer = Tracer()
metrics = Metrics(namespace="MazeRlOps")


@logger.inject_lambda_context(correlation_id_path="adapter_name")
@tracer.capture_lambda_handler
@metrics.log_metrics
@one_line_errors(logger)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Move the champion pointer to the challenger; contract in docs/design.md."""
    ref = adapter_ref(event)
    expected_version = field(event, "champion_version", int)
    config = load()
    client = aws_client("dynamodb")
    require_promotable(RunsTable(client, config.required("runs_table")), ref.run_id)
    pointer = Registry(client, config.required("registry_table")).promote(
        ref.base_model_id, ref.adapter_name, expected_version
    )
    metrics.add_metric(name="Promotions", unit=MetricUnit.Count, value=1)
    logger.info("Champion promoted", extra={"champion": pointer.champion, "version": pointer.version})
    return {"champion": pointer.champion, "previous": pointer.previous, "version": pointer.version}
