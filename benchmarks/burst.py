"""A burst of adapter manifests, evaluated by the local stack against a stub Ray cluster (control plane only).

`python -m benchmarks.burst --out burst.json` starts its own local stack (one per process), records
the baseline, uploads the manifests as fast as one client can, waits for every Evaluation execution
and writes what it measured as JSON.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import logging
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.baseline import evaluate_baseline
from benchmarks.stub_ray_cluster import StubCluster, StubJob, StubRayJobsServer, write_eval_result
from benchmarks.summaries import seconds_summary
from cluster_jobs.maze.eval_set import eval_set_for_size
from local_stack.pipeline import BASE_MODEL_ID, MAZE_SIZE, PipelineFailed, stack_parameters
from local_stack.stack import LocalStack, LocalStackConfig
from mazeops import layout, names
from mazeops.manifest import AdapterManifest, FileDigest

PLACEHOLDER_CONFIG = json.dumps({"r": 32, "lora_alpha": 64, "peft_type": "LORA"}).encode()
RUNNING = "RUNNING"


class BurstFailed(RuntimeError):
    """The burst did not finish within its timeout."""


def placeholder_weights(run_id: str, step: int) -> bytes:
    """Distinct stand-in bytes for an adapter's weights file (the stub cluster never loads them)."""
    return hashlib.sha256(f"{run_id}-step{step}".encode()).digest() * 32


def upload_adapter_files(s3: Any, bucket: str, run_id: str, step: int) -> bytes:
    """Upload one placeholder adapter's files; return its manifest document (not uploaded)."""
    files = {layout.ADAPTER_FILES[0]: PLACEHOLDER_CONFIG, layout.ADAPTER_FILES[1]: placeholder_weights(run_id, step)}
    for name, body in files.items():
        s3.put_object(Bucket=bucket, Key=layout.adapter_prefix(run_id, step) + name, Body=body)
    manifest = AdapterManifest(
        run_id=run_id,
        step=step,
        adapter_name=names.adapter_name(run_id, step),
        base_model_id=BASE_MODEL_ID,
        lora_rank=32,
        lora_alpha=64,
        files={
            name: FileDigest(sha256=hashlib.sha256(body).hexdigest(), size=len(body)) for name, body in files.items()
        },
        created_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    return manifest.to_json().encode()


def list_evaluations(sfn: Any, state_machine_arn: str) -> list[dict[str, Any]]:
    """Every execution of the Evaluation state machine."""
    executions: list[dict[str, Any]] = []
    for page in sfn.get_paginator("list_executions").paginate(stateMachineArn=state_machine_arn):
        executions += page["executions"]
    return executions


def wait_for_evaluations(sfn: Any, state_machine_arn: str, expected: int, timeout_s: float) -> list[dict[str, Any]]:
    """Poll until `expected` executions exist and none is RUNNING; return them. Raises BurstFailed on timeout."""
    deadline = time.monotonic() + timeout_s
    last_report = 0.0
    while True:
        executions = list_evaluations(sfn, state_machine_arn)
        running = sum(execution["status"] == RUNNING for execution in executions)
        if len(executions) >= expected and running == 0:
            return executions
        if time.monotonic() - last_report >= 15:
            last_report = time.monotonic()
            print(f"  burst: {len(executions)} evaluation executions, {running} running", flush=True)
        if time.monotonic() > deadline:
            raise BurstFailed(f"after {timeout_s:.0f} s: {len(executions)} of {expected} executions, {running} running")
        time.sleep(2)


def failure_details(sfn: Any, executions: list[dict[str, Any]], limit: int = 10) -> list[dict[str, str]]:
    """For up to `limit` executions that did not succeed: the first failed task's state, error and cause."""
    details = []
    for execution in [execution for execution in executions if execution["status"] != "SUCCEEDED"][:limit]:
        events = sfn.get_execution_history(executionArn=execution["executionArn"], maxResults=1000)["events"]
        state, error, cause = "-", "-", ""
        for event in events:
            if event["type"].endswith("StateEntered"):
                state = event["stateEnteredEventDetails"]["name"]
            failed = event.get("taskFailedEventDetails") or event.get("lambdaFunctionFailedEventDetails")
            if failed:
                error, cause = failed.get("error", "-"), failed.get("cause", "")
                break
        details.append(
            {
                "name": execution["name"],
                "status": execution["status"],
                "state": state,
                "error": error,
                "cause": cause[:300],
            }
        )
    return details


def summarize(
    run_id: str,
    adapters: int,
    put_times: dict[int, float],
    executions: list[dict[str, Any]],
    cluster: StubCluster,
    failures: list[dict[str, str]],
) -> dict[str, Any]:
    """The burst's checks and timings (see the module docstring)."""
    expected_names = {names.eval_job_id(run_id, step) for step in range(1, adapters + 1)}
    by_name = {execution["name"]: execution for execution in executions}
    jobs: dict[str, StubJob] = {job.submission_id: job for job in cluster.jobs() if job.metadata.get("kind") == "eval"}
    submission_ids = [submission_id for submission_id in cluster.stats.submission_ids if submission_id in jobs]
    statuses: dict[str, int] = {}
    for execution in executions:
        statuses[execution["status"]] = statuses.get(execution["status"], 0) + 1
    first_put = min(put_times.values())
    last_stop = max(execution["stopDate"].timestamp() for execution in executions)
    wall_s = last_stop - first_put
    step_of = {names.eval_job_id(run_id, step): step for step in range(1, adapters + 1)}
    finished_jobs = [job for job in jobs.values() if job.end_time is not None and job.running_since is not None]
    return {
        "adapters": adapters,
        "run_id": run_id,
        "executions": len(executions),
        "executions_expected_names": len(expected_names & set(by_name)),
        "executions_other_names": sorted(set(by_name) - expected_names)[:10],
        "execution_statuses": statuses,
        "failures": failures,
        "job_submissions": len(submission_ids),
        "job_submissions_unique": len(set(submission_ids)),
        "job_submissions_expected_ids": len(expected_names & set(submission_ids)),
        "baseline_jobs": cluster.stats.submitted - len(submission_ids),
        "duplicate_submissions_refused": cluster.stats.refused_duplicates,
        "jobs_succeeded": sum(job.status == "SUCCEEDED" for job in jobs.values()),
        "max_running": cluster.max_running,
        "max_running_seen": cluster.stats.max_running_seen,
        "job_seconds": cluster.job_seconds,
        "manifest_upload_s": max(put_times.values()) - first_put,
        "wall_s": wall_s,
        "executions_per_minute": len(executions) / wall_s * 60 if wall_s > 0 else None,
        "put_to_execution_start_s": seconds_summary(
            [
                by_name[name]["startDate"].timestamp() - put_times[step]
                for name, step in step_of.items()
                if name in by_name
            ]
        ),
        "put_to_job_submitted_s": seconds_summary(
            [jobs[name].start_time / 1000 - put_times[step] for name, step in step_of.items() if name in jobs]
        ),
        "job_pending_s": seconds_summary([job.running_since - job.start_time / 1000 for job in finished_jobs]),
        "job_end_to_execution_end_s": seconds_summary(
            [
                by_name[job.submission_id]["stopDate"].timestamp() - job.end_time / 1000
                for job in finished_jobs
                if job.submission_id in by_name
            ]
        ),
        "execution_duration_s": seconds_summary(
            [execution["stopDate"].timestamp() - execution["startDate"].timestamp() for execution in executions]
        ),
    }


def run_burst(state_dir: Path, adapters: int, max_running: int, job_seconds: float, timeout_s: float) -> dict[str, Any]:
    """Start the stack on the stub cluster, upload the burst, wait for it, and return the summary."""
    logging.getLogger("moto").setLevel(logging.CRITICAL)
    eval_set = eval_set_for_size(MAZE_SIZE)
    run_id = f"burst-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    parameters = stack_parameters(Path("/models/not-loaded-by-the-stub"), poll_seconds=1) | {"MinSolveRate": "1"}
    cluster = StubCluster(max_running, job_seconds, finish=lambda job: None)
    with StubRayJobsServer(cluster) as server:
        config = LocalStackConfig(state_dir=state_dir, parameters=parameters | {"RayAddress": server.address})
        with LocalStack(config) as stack:
            s3 = stack.session.client("s3")
            # The S3 client exists only now; no job can arrive before the first manifest below.
            cluster.finish = functools.partial(write_eval_result, s3, eval_set)
            bucket = stack.outputs["ArtifactsBucketName"]
            print(
                f"  burst: stack up in {stack.timings['start_s']:.1f} s; stub Ray Jobs API at {server.address}",
                flush=True,
            )
            evaluate_baseline(state_dir / "stack.json", interval_s=0.5)
            manifests = {step: upload_adapter_files(s3, bucket, run_id, step) for step in range(1, adapters + 1)}
            put_times: dict[int, float] = {}
            for step, manifest in manifests.items():
                put_times[step] = time.time()
                s3.put_object(Bucket=bucket, Key=layout.adapter_manifest_key(run_id, step), Body=manifest)
            print(f"  burst: {adapters} manifests uploaded in {time.time() - put_times[1]:.1f} s", flush=True)
            sfn = stack.session.client("stepfunctions")
            executions = wait_for_evaluations(sfn, stack.outputs["EvaluationStateMachineArn"], adapters, timeout_s)
            cluster.wait_until_idle(timeout_s=30)
            return summarize(run_id, adapters, put_times, executions, cluster, failure_details(sfn, executions))


def main(argv: list[str] | None = None) -> int:
    """Run the burst and write its summary to --out."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.burst", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write the summary to")
    parser.add_argument("--state-dir", type=Path, default=Path(".local-stack/bench-burst"), help="the stack's files")
    parser.add_argument("--adapters", type=int, default=100, help="manifests in the burst (default 100)")
    parser.add_argument("--max-running", type=int, default=4, help="stub cluster slots, like GPUs (default 4)")
    parser.add_argument("--job-seconds", type=float, default=1.0, help="each stub job's run time (default 1)")
    parser.add_argument("--timeout", type=float, default=480, help="seconds to wait for the executions (default 480)")
    args = parser.parse_args(argv)
    try:
        summary = run_burst(args.state_dir.resolve(), args.adapters, args.max_running, args.job_seconds, args.timeout)
    except (BurstFailed, PipelineFailed) as error:
        print(f"burst failed: {error}", file=sys.stderr)
        return 1
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
