"""Ask the serving endpoint one question with the registered adapter before it is promoted."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from mazeops import serve_client
from mazeops.config import load
from mazeops.failures import one_line_errors
from mazeops.inputs import field
from mazeops.names import served_model_id

logger = Logger()
tracer = Tracer()
metrics = Metrics(namespace="MazeRlOps")


@logger.inject_lambda_context(correlation_id_path="adapter_name")
@tracer.capture_lambda_handler
@metrics.log_metrics
@one_line_errors(logger)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Send the packaged maze picture to `<base_model_id>:<adapter_name>`; contract in docs/design.md."""
    model_id = served_model_id(field(event, "base_model_id", str), field(event, "adapter_name", str))
    serve_url = load().required("serve_url")
    result = serve_client.smoke_test(serve_url, model_id, serve_client.load_smoke_image())
    metrics.add_metric(name="SmokeTestLatency", unit=MetricUnit.Milliseconds, value=result.latency_ms)
    logger.info("Smoke test passed", extra={"latency_ms": result.latency_ms, "answer": result.answer[:200]})
    return {"served_model_id": result.served_model_id, "latency_ms": result.latency_ms, "answer": result.answer}
