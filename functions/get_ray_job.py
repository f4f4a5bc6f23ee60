"""Poll one Ray job (training, evaluation or baseline evaluation): its status, and its log tail once it has ended."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from mazeops.baseline import is_baseline_job_id
from mazeops.config import load
from mazeops.failures import one_line_errors
from mazeops.inputs import field
from mazeops.names import parse_job_id
from mazeops.ray_jobs import authenticated_client

MAX_MESSAGE_CHARS = 2000
LOGS_TAIL_CHARS = 4000

logger = Logger()
tracer = Tracer()


@logger.inject_lambda_context(correlation_id_path="job_id")
@tracer.capture_lambda_handler
@one_line_errors(logger)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Report the state of the Ray job `job_id`; contract in docs/design.md."""
    job_id = field(event, "job_id", str)
    if not is_baseline_job_id(job_id):
        parse_job_id(job_id)
    config = load()
    client = authenticated_client(config.required("ray_address"), config.ray_auth_token)
    info = client.get(job_id)
    logs_tail = client.logs_tail(job_id, max_chars=LOGS_TAIL_CHARS) if info.terminal else ""
    logger.info("Ray job polled", extra={"status": info.status, "terminal": info.terminal})
    return {
        "job_id": job_id,
        "status": info.status,
        "terminal": info.terminal,
        "message": (info.message or "")[:MAX_MESSAGE_CHARS],
        "logs_tail": logs_tail,
    }
