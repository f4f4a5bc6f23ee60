"""Stop a run's Ray job when its execution ends badly (EventBridge: execution status change)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from mazeops.aws_clients import aws_client
from mazeops.config import load
from mazeops.events import parse_execution_status_change
from mazeops.failures import one_line_errors
from mazeops.names import InvalidName, parse_job_id
from mazeops.ray_jobs import RayJobNotFound
from mazeops.ray_token import ray_jobs_client
from mazeops.runs import FINISHED_STATUSES, RunNotFound, RunsTable

STOPPING_STATUSES = ("ABORTED", "TIMED_OUT", "FAILED")

logger = Logger()
tracer = Tracer()


@logger.inject_lambda_context(correlation_id_path="detail.name")
@tracer.capture_lambda_handler
@one_line_errors(logger)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Stop the Ray job of the execution in `event`; contract in docs/design.md."""
    change = parse_execution_status_change(event)
    if change.status not in STOPPING_STATUSES:
        logger.info("Execution did not end badly; nothing to stop", extra={"status": change.status})
        return {"job_id": None, "stopped": False}
    try:
        run_id, step = parse_job_id(change.name)
    except InvalidName:
        logger.info("Execution has no Ray job (invalid input)", extra={"execution_name": change.name[:100]})
        return {"job_id": None, "stopped": False}
    config = load()
    try:
        stopped = ray_jobs_client(config.required("ray_address")).stop(change.name)
    except RayJobNotFound:
        stopped = False
    logger.info("Ray job stop requested", extra={"job_id": change.name, "stopped": stopped})
    if step is None:
        _record_run_end(config.required("runs_table"), run_id, change.status, change.stop_date)
    return {"job_id": change.name, "stopped": stopped}


def _record_run_end(table_name: str, run_id: str, status: str, stop_date: int | None) -> None:
    """Record how the execution ended, unless the state machine already recorded a finished status."""
    when = datetime.fromtimestamp(stop_date / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if stop_date else "unknown time"
    runs = RunsTable(aws_client("dynamodb"), table_name)
    run = runs.get_run(run_id)
    if run is None:
        logger.warning("Run has no row (its spec was never accepted)", extra={"run_id": run_id})
        return
    if run.status in FINISHED_STATUSES:
        logger.info("Run already finished; keeping its recorded status", extra={"run_id": run_id, "status": run.status})
        return
    try:
        runs.set_status(run_id, status, error=f"execution {status} at {when}")
    except RunNotFound:
        logger.warning("Run row vanished while recording its end", extra={"run_id": run_id})
