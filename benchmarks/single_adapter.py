"""One real adapter through the local stack (real Ray head and Ray Serve app), from manifest upload to champion.

Returns the control plane's time before and after the adapter's evaluation job next to the job's own duration.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForImageTextToText

from benchmarks.baseline import evaluate_baseline
from benchmarks.summaries import first_entry, last_exit, state_totals, state_visits
from cluster_jobs.maze.eval_set import eval_set_for_size
from cluster_jobs.sync.checkpoint_sync import CheckpointSync
from local_stack.cluster_standins.sft_start import REPORT_FILE
from local_stack.cluster_standins.tiny_model import LANGUAGE_MODEL_LORA_TARGETS
from local_stack.pipeline import (
    BASE_MODEL_ID,
    MAZE_SIZE,
    PipelineFailed,
    deploy_serve_app,
    follow_evaluations,
    prepare_base_model,
    stack_parameters,
    tiny_run_spec,
)
from local_stack.stack import LocalStack, LocalStackConfig
from mazeops import names
from mazeops.layout import normalized_spec_key
from mazeops.ray_jobs import JobInfo
from mazeops.registry import Registry
from mazeops.runs import RunsTable
from mazeops.runspec import parse_run_spec
from opsctl.queries.executions import execution_arn
from opsctl.target import Target, local_target

STEP = 2
LORA_RANK = 32
LORA_SEED = 0


def build_base_and_repairing_adapter(start_dir: Path, base_dir: Path, adapter_dir: Path) -> None:
    """Save a base model that only a LoRA adapter makes good again, and that adapter.

    A random rank-``LORA_RANK`` LoRA change D of the language model's linear layers is drawn for the
    model in ``start_dir`` (the SFT start). ``base_dir`` gets the start with D subtracted (its
    weights merged; processor files copied) and ``adapter_dir`` the PEFT adapter adding D back,
    recorded as trained on ``base_dir``. Base plus adapter is the start again, so the adapter solves
    what the start solves and the base far fewer: it is promoted by McNemar without a training run.
    """
    shutil.rmtree(base_dir, ignore_errors=True)
    shutil.copytree(start_dir, base_dir, ignore=shutil.ignore_patterns("*.safetensors", REPORT_FILE))
    model = AutoModelForImageTextToText.from_pretrained(start_dir, dtype=torch.float32)
    config = LoraConfig(
        r=LORA_RANK,
        lora_alpha=2 * LORA_RANK,
        target_modules=LANGUAGE_MODEL_LORA_TARGETS,
        init_lora_weights=False,
    )
    with torch.random.fork_rng():
        torch.manual_seed(LORA_SEED)
        adapted = get_peft_model(model, config).eval()
    adapted.peft_config["default"].base_model_name_or_path = str(base_dir)
    adapted.save_pretrained(adapter_dir)
    with torch.no_grad():
        for name, parameter in adapted.named_parameters():
            if "lora_B" in name:
                parameter.neg_()
    adapted.merge_and_unload().save_pretrained(base_dir)


def baseline_job(target: Target) -> JobInfo:
    """The Ray job that evaluated the base model's recorded baseline."""
    registry = Registry(target.client("dynamodb"), target.registry_table)
    baseline = registry.get_baseline(BASE_MODEL_ID, eval_set_for_size(MAZE_SIZE).sha256)
    if baseline is None:
        raise PipelineFailed(f"no baseline of {BASE_MODEL_ID} recorded")
    return target.ray_jobs().get(baseline.job_id)


def start_training_run(target: Target, run_id: str, base_model_path: Path, shared_dir: Path) -> None:
    """Record run ``run_id`` as its training would: `make local`'s run spec, normalized, and a RUNNING row.

    The evaluation job reads the maze size from that spec; only adapters of RUNNING runs are promoted.
    """
    run_spec = json.dumps(tiny_run_spec(STEP, STEP, shared_dir))
    spec = parse_run_spec(run_spec, run_id, {BASE_MODEL_ID: str(base_model_path)})
    body = json.dumps(spec.model_dump(mode="json"), sort_keys=True, indent=1).encode()
    target.client("s3").put_object(Bucket=target.bucket, Key=normalized_spec_key(run_id), Body=body)
    runs = RunsTable(target.client("dynamodb"), target.runs_table)
    runs.create_run(
        run_id, normalized_spec_key(run_id), hashlib.sha256(body).hexdigest(), BASE_MODEL_ID, f"train-{run_id}"
    )
    runs.set_status(run_id, "RUNNING")


def run_single_adapter(state_dir: Path, poll_seconds: int, timeout_s: float) -> dict[str, Any]:
    """Measure one adapter (module docstring) and return its timings.

    The baseline is evaluated first, as an operator does before a base model's first adapter, so
    that the adapter's execution compares with a recorded baseline as every later one does.
    """
    run_id = f"bench-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    adapter = names.adapter_name(run_id, STEP)
    base_model_path = state_dir / "models" / BASE_MODEL_ID
    export_dir = state_dir / "export" / run_id
    build_base_and_repairing_adapter(
        prepare_base_model(state_dir), base_model_path, export_dir / f"global_step_{STEP}" / "policy"
    )
    config = LocalStackConfig(
        state_dir=state_dir, parameters=stack_parameters(base_model_path, poll_seconds), with_ray=True, serve_port=0
    )
    with LocalStack(config) as stack:
        print(
            f"  single adapter: stack up in {stack.timings['start_s']:.1f} s; deploying the Ray Serve app", flush=True
        )
        deploy_serve_app(stack, base_model_path)
        state_file = state_dir / "stack.json"
        target = local_target(state_file)
        evaluate_baseline(state_file, interval_s=1)
        baseline = baseline_job(target)
        start_training_run(target, run_id, base_model_path, state_dir / "shared")
        upload_started = time.time()
        uploaded = CheckpointSync(export_dir, target.bucket, run_id, BASE_MODEL_ID, target.client("s3")).sync_once(
            writer_done=True
        )
        manifest_put = time.time()
        if uploaded != [STEP]:
            raise PipelineFailed(f"the checkpoint sync uploaded steps {uploaded}, not [{STEP}]")
        status = follow_evaluations(target, run_id, [STEP], timeout_s)[STEP]
        registry = Registry(target.client("dynamodb"), target.registry_table)
        record = registry.get_adapter(BASE_MODEL_ID, adapter)
        champion = registry.get_champion(BASE_MODEL_ID)
        name = names.eval_job_id(run_id, STEP)
        sfn = target.client("stepfunctions")
        arn = execution_arn(target.state_machines["evaluation"], name)
        execution = sfn.describe_execution(executionArn=arn)
        visits = state_visits(sfn.get_execution_history(executionArn=arn, maxResults=1000)["events"])
        job = stack.ray_jobs().get(name)
    if status != "SUCCEEDED" or champion is None or champion.champion != adapter:
        reason = (record.decision or {}).get("reason", record.error) if record else "no registry row"
        raise PipelineFailed(f"evaluation of {adapter} ended {status}, not promoted: {reason}")
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
        "adapter": adapter,
        "lora_rank": LORA_RANK,
        "poll_seconds": poll_seconds,
        "baseline": {
            "ray_job": baseline.submission_id,
            "job_s": (baseline.end_time - baseline.start_time) / 1000,
        },
        "decision": record.decision if record else None,
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
