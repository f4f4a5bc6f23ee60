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
from mazeops.polling import poll_schedule
from mazeops.ray_jobs import JobInfo, RayJobNotFound, RayJobsClient, RayUnavailable
from mazeops.ray_token import ray_jobs_client

MAX_MESSAGE_CHARS = 2000
LOGS_TAIL_CHARS = 4000
# The status answered for an unreachable Ray head when the caller polls on a schedule (not one of Ray's).
UNREACHABLE = "UNREACHABLE"

logger = Logger()
tracer = Tracer()


class RayJobLost(LookupError):
    """A job that was submitted is no longer known to the Ray head: the head restarted (a head keeps its job table in
    memory unless its GCS is fault tolerant) or the job was deleted. Its run or evaluation cannot go on."""


@logger.inject_lambda_context(correlation_id_path="job_id")
@tracer.capture_lambda_handler
@one_line_errors(logger)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Report the state of the Ray job `job_id`; contract in docs/design.md.

    With a `poll` schedule in the event, the answer adds `next_poll_seconds` (mazeops.polling), and an unreachable
    Ray head is answered as the non-terminal status UNREACHABLE: the next poll is the retry, so an outage costs the
    execution's history no more events than a poll does.
    """
    job_id = field(event, "job_id", str)
    if not is_baseline_job_id(job_id):
        parse_job_id(job_id)
    schedule = poll_schedule(event)
    config = load()
    address = config.required("ray_address")
    try:
        client = ray_jobs_client(address)  # the token's read may fail as RayUnavailable (throttled) too
        info = _get_submitted(client, job_id)
        logs_tail = client.logs_tail(job_id, max_chars=LOGS_TAIL_CHARS) if info.terminal else ""
        answer: dict[str, Any] = {
            "job_id": job_id,
            "status": info.status,
            "terminal": info.terminal,
            "message": (info.message or "")[:MAX_MESSAGE_CHARS],
            "logs_tail": logs_tail,
        }
    except RayUnavailable as error:
        if schedule is None:
            raise
        logger.warning("Ray head unreachable; the next poll retries", extra={"error": str(error)[:500]})
        answer = {
            "job_id": job_id,
            "status": UNREACHABLE,
            "terminal": False,
            "message": str(error)[:MAX_MESSAGE_CHARS],
            "logs_tail": "",
        }
    if schedule is not None:
        answer["next_poll_seconds"] = schedule.next_wait()
    logger.info(
        "Ray job polled",
        extra={
            "status": answer["status"],
            "terminal": answer["terminal"],
            "next_poll_seconds": answer.get("next_poll_seconds"),
        },
    )
    return answer


def _get_submitted(client: RayJobsClient, job_id: str) -> JobInfo:
    """The job's info; a job the head no longer knows is lost (it was submitted before this poll)."""
    try:
        return client.get(job_id)
    except RayJobNotFound:
        raise RayJobLost(
            f"Ray job {job_id} no longer exists on the cluster: the Ray head restarted (it keeps its jobs only in "
            "memory unless its GCS is fault tolerant) or the job was deleted; whatever the job wrote to S3 is kept"
        ) from None
