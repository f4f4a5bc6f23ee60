"""The status and driver-log tails of Ray jobs on a deployment's Ray head."""

from __future__ import annotations

from typing import Any

from mazeops.ray_jobs import InvalidRayAddress, RayJobError, RayJobNotFound, RayUnavailable
from opsctl.errors import OpsError
from opsctl.target import Target


def ray_jobs_status(target: Target, job_ids: list[str], with_logs: bool) -> tuple[list[dict[str, Any]], str | None]:
    """Ray status of each of `job_ids` (with `with_logs`, also the tail of its driver log), or ([], why) when Ray
    cannot be asked.

    A job Ray does not know is listed with status NOT_FOUND.
    """
    try:
        client = target.ray_jobs()
        jobs = []
        for job_id in job_ids:
            try:
                info = client.get(job_id)
            except RayJobNotFound:
                jobs.append({"job_id": job_id, "status": "NOT_FOUND", "message": None})
                continue
            job = {"job_id": job_id, "status": info.status, "message": info.message}
            if with_logs:
                job["logs_tail"] = client.logs_tail(job_id)
            jobs.append(job)
        return jobs, None
    except (OpsError, InvalidRayAddress, RayUnavailable, RayJobError) as error:
        return [], str(error)
