"""Follow one Step Functions execution: print state transitions and its Ray job's status as they change."""

from __future__ import annotations

import argparse
import time
from typing import Any

from mazeops.ray_jobs import InvalidRayAddress, RayJobError, RayJobNotFound, RayJobsClient, RayUnavailable
from opsctl.errors import OpsError
from opsctl.queries.executions import describe_execution, execution_arn
from opsctl.target import Target

TERMINAL_STATUSES = frozenset({"SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"})


def add_wait_options(parser: argparse.ArgumentParser, execution: str, goes_on: str) -> None:
    """`--wait` (follow the `execution` execution) and its polling options; `goes_on` names what runs on after
    `--timeout`."""
    parser.add_argument(
        "--wait", action="store_true", help=f"follow the {execution} execution; exit 0 if it succeeds, 1 if not"
    )
    parser.add_argument(
        "--interval", type=float, default=5.0, metavar="S", help="seconds between polls with --wait (default 5)"
    )
    parser.add_argument(
        "--progress", type=float, default=60.0, metavar="S", help="print progress after S quiet seconds (default 60)"
    )
    parser.add_argument(
        "--timeout", type=float, metavar="S", help=f"stop waiting after S seconds (exit 2; {goes_on} goes on)"
    )


def elapsed_text(seconds: float) -> str:
    """A duration as `4m05s`, or `1h02m03s` from an hour on."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def _new_events(client: Any, arn: str, last_id: int) -> list[dict[str, Any]]:
    """History events with id > last_id, oldest first (reads newest-first pages until it meets old ones)."""
    events: list[dict[str, Any]] = []
    for page in client.get_paginator("get_execution_history").paginate(executionArn=arn, reverseOrder=True):
        events += [event for event in page["events"] if event["id"] > last_id]
        if any(event["id"] <= last_id for event in page["events"]):
            break
    return sorted(events, key=lambda event: event["id"])


def _job_status(jobs: RayJobsClient | None, job_id: str) -> str:
    if jobs is None:
        return "unknown"
    try:
        return jobs.get(job_id).status
    except RayJobNotFound:
        return "not submitted"
    except (RayUnavailable, RayJobError) as error:
        return f"unavailable ({error})"


def _jobs_client(target: Target) -> RayJobsClient | None:
    try:
        return target.ray_jobs()
    except (OpsError, InvalidRayAddress) as error:
        print(f"note: Ray job status will not be shown: {error}", flush=True)
        return None


def follow_execution(
    target: Target,
    machine: str,
    name: str,
    job_id: str,
    interval_s: float = 5.0,
    progress_s: float = 60.0,
    timeout_s: float | None = None,
) -> str:
    """Follow execution `name` of state machine `machine` until it ends; return its final status.

    Prints each state the first time it is entered, each change of the Ray job `job_id`'s status and, when nothing
    happened for `progress_s`, the elapsed time and current state. Waits for the execution to
    appear (it starts on an S3 event). Raises OpsError after `timeout_s` (the execution goes on).
    """
    client = target.client("stepfunctions")
    arn = execution_arn(target.state_machines[machine], name)
    jobs = _jobs_client(target)
    started = last_said = time.monotonic()
    last_event_id, state, job_status, status = 0, "-", None, "NOT STARTED"
    seen_states: set[str] = set()

    def say(message: str) -> None:
        nonlocal last_said
        last_said = time.monotonic()
        print(f"[{elapsed_text(last_said - started):>9}] {message}", flush=True)

    say(f"following {machine} execution {name}")
    while True:
        execution = describe_execution(target, arn)
        if execution is not None:
            for event in _new_events(client, arn, last_event_id):
                last_event_id = event["id"]
                if event["type"].endswith("StateEntered"):
                    state = event["stateEnteredEventDetails"]["name"]
                    if state not in seen_states:  # poll loops re-enter their states; say each once
                        seen_states.add(state)
                        say(f"entered {state}")
            current_job = _job_status(jobs, job_id)
            if current_job != job_status:
                job_status = current_job
                say(f"job {job_id}: {job_status}")
            status = execution["status"]
            if status in TERMINAL_STATUSES:
                detail = " ".join(filter(None, (execution.get("error"), execution.get("cause"))))
                say(f"execution {name} {status}" + (f": {detail[:500]}" if detail else ""))
                return status
        now = time.monotonic()
        if now - last_said >= progress_s:
            say(f"still {status}, state {state}, job {job_status or 'unknown'}")
        if timeout_s is not None and now - started >= timeout_s:
            raise OpsError(f"gave up after {elapsed_text(now - started)}: {name} is {status}; it goes on running")
        time.sleep(interval_s)
