"""Part 1 of the control-plane benchmark: one real adapter, from its manifest upload to being served.

On the local stack as `make local` starts it (moto server, SAM template, state machines,
in-process Lambdas, a real Ray head and the local Ray Serve app), it saves a random LoRA adapter
(rank 32) for the tiny Qwen3-VL, uploads it like the checkpoint sync (files, then the manifest)
and follows the Evaluation execution it starts: check -> submit the real eval Ray job (64 mazes)
-> poll -> record -> decide -> register -> smoke test on Ray Serve -> promote. It returns the
control plane's time before and after the Ray job, next to the job's own duration, from the
execution history and Ray's job record.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.summaries import first_entry, last_exit, state_totals, state_visits
from local_stack.cluster_standins.tiny_model import build_tiny_qwen3_vl
from local_stack.pipeline import (
    BASE_MODEL_ID,
    PipelineFailed,
    ask_champion,
    deploy_serve_app,
    follow_evaluations,
    stack_parameters,
)
from local_stack.stack import LocalStack, LocalStackConfig
from mazeops import names
from mazeops.ray_jobs import RayJobsClient
from mazeops.runs import RunsTable
from opsctl.queries import execution_arn
from opsctl.target import local_target
from tests.fixtures_models import make_tiny_adapter, upload_adapter

STEP = 2
LORA_RANK = 32


def run_single_adapter(state_dir: Path, poll_seconds: int, timeout_s: float) -> dict[str, Any]:
    """Run part 1 (module docstring) and return its timings."""
    run_id = f"bench-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    base_model_path = build_tiny_qwen3_vl(state_dir / "models" / BASE_MODEL_ID)
    adapter_dir = state_dir / "adapters" / names.adapter_name(run_id, STEP)
    make_tiny_adapter(base_model_path, adapter_dir, rank=LORA_RANK, seed=0)
    config = LocalStackConfig(
        state_dir=state_dir, parameters=stack_parameters(base_model_path, poll_seconds), with_ray=True, serve_port=0
    )
    with LocalStack(config) as stack:
        print(
            f"  single adapter: stack up in {stack.timings['start_s']:.1f} s; deploying the Ray Serve app", flush=True
        )
        deploy_serve_app(stack, base_model_path)
        target = local_target(state_dir / "stack.json")
        runs = RunsTable(target.client("dynamodb"), target.runs_table)  # only adapters of RUNNING runs promote
        runs.create_run(run_id, f"runs/{run_id}/spec.json", "0" * 64, BASE_MODEL_ID, f"train-{run_id}")
        runs.set_status(run_id, "RUNNING")
        upload_started = time.time()
        upload_adapter(target.client("s3"), target.bucket, run_id, STEP, adapter_dir, base_model_id=BASE_MODEL_ID)
        manifest_put = time.time()
        status = follow_evaluations(target, run_id, [STEP], timeout_s)[STEP]
        if status != "SUCCEEDED":
            raise PipelineFailed(f"evaluation of {names.adapter_name(run_id, STEP)} ended {status}")
        champion = ask_champion(target)
        name = names.eval_job_id(run_id, STEP)
        sfn = target.client("stepfunctions")
        arn = execution_arn(target.state_machines["evaluation"], name)
        execution = sfn.describe_execution(executionArn=arn)
        visits = state_visits(sfn.get_execution_history(executionArn=arn, maxResults=1000)["events"])
        job = RayJobsClient(stack.ray_address or "").get(name)
    if champion != names.adapter_name(run_id, STEP):
        raise PipelineFailed(f"the champion is {champion}, not the benchmarked adapter")
    job_start, job_end = job.start_time / 1000, job.end_time / 1000
    job_s = job_end - job_start
    phases = {
        "manifest_put_to_execution_start": execution["startDate"].timestamp() - manifest_put,
        "manifest_put_to_ray_job_submitted": job_start - manifest_put,
        "manifest_put_to_submit_state_exit": last_exit(visits, "SubmitEvalJob") - manifest_put,
        "eval_job": job_s,
        "job_end_to_eval_recorded": first_entry(visits, "RecordEval") - job_end,
        "job_end_to_champion_promoted": last_exit(visits, "PromoteChampion") - job_end,
        "manifest_put_to_execution_end": execution["stopDate"].timestamp() - manifest_put,
    }
    overhead = phases["manifest_put_to_ray_job_submitted"] + phases["job_end_to_champion_promoted"]
    return {
        "run_id": run_id,
        "adapter": champion,
        "lora_rank": LORA_RANK,
        "poll_seconds": poll_seconds,
        "adapter_upload_s": manifest_put - upload_started,
        "execution_status": status,
        "ray_job": {
            "submission_id": name,
            "status": job.status,
            "start_time_ms": job.start_time,
            "end_time_ms": job.end_time,
        },
        "phases_s": phases,
        "ratios_to_eval_job": {phase: seconds / job_s for phase, seconds in phases.items()},
        "control_plane_overhead_s": overhead,
        "control_plane_overhead_ratio": overhead / job_s,
        "states": state_totals(visits),
    }
