"""`baseline show | evaluate`: a base model's baseline, its own evaluation with no adapter, and the first champion."""

from __future__ import annotations

import argparse
import dataclasses
import time

from cluster_jobs.maze.eval_set import EVAL_SET_SIZE, EVAL_SETS, NoEvalSet, eval_set_for_size
from mazeops.base_models import UnknownBaseModel, base_model_path
from mazeops.baseline_outcome import settle_baseline, unavailable_reason
from mazeops.champion_rows import baseline_leads
from mazeops.config import ConfigError, parse_runtime_env
from mazeops.jobs import baseline_job, submit_job
from mazeops.names import validate_base_model_id
from mazeops.ray_jobs import TERMINAL_STATUSES
from mazeops.registry import Registry
from opsctl.commands import add_command, add_group
from opsctl.errors import OpsError
from opsctl.labels import solved_text
from opsctl.output import print_json, print_table, rate
from opsctl.target import Target

SHOW_COLUMNS = ("EVAL_SET", "STATUS", "ATTEMPT", "SOLVE_RATE", "SOLVED", "CHAMPION", "JOB", "ERROR")

DESCRIPTION = """A base model's baseline: its own evaluation with no adapter, and the first champion.

The pipeline evaluates a base model's baseline once, on first use, on the evaluation set of the
first challenger; `evaluate` does it on demand (for another maze size, or after a failed attempt:
a FAILED baseline gets its next attempt here, never automatically). It claims the attempt in the
registry, submits the same Ray job the pipeline would (same deterministic submission id), waits
for it and records the outcome; interrupted, it can be run again (it finds the same attempt and
job), and the next evaluation of an adapter of the base model records a finished attempt too.
"""

EPILOG = """examples:
  mazeops-ops baseline show qwen3-vl-8b-sft --local
  mazeops-ops baseline evaluate qwen3-vl-8b-sft --stack maze-rl-ops
  mazeops-ops baseline evaluate tiny-qwen3-vl --maze-size 7 --local --no-wait
"""


def show(args: argparse.Namespace, target: Target) -> int:
    """The baselines of a base model, one per evaluation set, and whether the baseline is the champion."""
    registry = Registry(target.client("dynamodb"), target.registry_table)
    base = validate_base_model_id(args.base_model_id)
    baselines = registry.list_baselines(base)
    if not baselines:
        raise OpsError(f"base model {base!r} has no baseline yet: run `mazeops-ops baseline evaluate {base}`")
    champion = baseline_leads(registry.get_champion(base))
    if args.json:
        print_json([{**dataclasses.asdict(b), "champion": champion and b.status == "READY"} for b in baselines])
        return 0
    print_table(
        SHOW_COLUMNS,
        [
            (
                b.eval_set_name or f"{b.eval_set_sha256[:12]}...",
                b.status,
                b.attempt,
                rate(b.solve_rate),
                solved_text(b),
                "*" if champion and b.status == "READY" else "",
                b.job_id,
                (b.error or "")[:60],
            )
            for b in baselines
        ],
    )
    return 0


def evaluate(args: argparse.Namespace, target: Target) -> int:
    """Evaluate the base model with no adapter on the fixed evaluation set of --maze-size and record it (once)."""
    registry = Registry(target.client("dynamodb"), target.registry_table)
    base = validate_base_model_id(args.base_model_id)
    try:
        eval_set = eval_set_for_size(args.maze_size)
    except NoEvalSet as error:
        raise OpsError(str(error)) from None
    claimed = registry.claim_baseline(base, eval_set.sha256, retry=True)
    where = f"baseline of {base} on {eval_set.name}"
    if claimed.status == "READY":
        print(
            f"{where} is recorded already (it is evaluated once): "
            f"solved {solved_text(claimed)}, Ray job {claimed.job_id}"
        )
        return 0
    job = baseline_job(
        target.bucket,
        _setting(target, "EVAL_BACKEND", "vllm"),
        base,
        _model_path(target, base),
        eval_set.sha256,
        claimed.attempt,
    )
    jobs = target.ray_jobs()
    info = submit_job(jobs, job, _runtime_env(target))
    submitted = "found already submitted" if info.already_submitted else "submitted"
    print(f"{where}: attempt {claimed.attempt}, Ray job {job.job_id} {submitted} ({info.status})", flush=True)
    if args.no_wait:
        print(
            "not waiting: run this command again, or let the next evaluation of an adapter of this base model record it"
        )
        return 0
    started, status = time.monotonic(), info.status
    while status not in TERMINAL_STATUSES:
        if args.timeout is not None and time.monotonic() - started >= args.timeout:
            raise OpsError(
                f"gave up waiting after {args.timeout:.0f} s: Ray job {job.job_id} is {status}; it goes on running"
            )
        time.sleep(args.interval)
        info = jobs.get(job.job_id)
        if info.status != status:
            status = info.status
            print(f"Ray job {job.job_id}: {status}", flush=True)
    tail = jobs.logs_tail(job.job_id) if status != "SUCCEEDED" else ""
    settled = settle_baseline(target.client("s3"), registry, target.bucket, claimed, status, info.message, tail)
    if settled.status != "READY":
        raise OpsError(unavailable_reason(settled, base, eval_set.sha256))
    print(f"{where} recorded: solved {solved_text(settled)} mazes (solve rate {rate(settled.solve_rate)})")
    return 0


def _model_path(target: Target, base: str) -> str:
    base_models = target.base_models
    if base_models is None:
        raise OpsError(f"the BASE_MODELS of stack {target.stack_name!r} cannot be read from its Lambda functions")
    try:
        return base_model_path(base_models, base)
    except UnknownBaseModel as error:
        raise OpsError(str(error)) from None


def _setting(target: Target, name: str, default: str) -> str:
    return target.lambda_settings.get(name) or default


def _runtime_env(target: Target) -> dict | None:
    try:
        return parse_runtime_env(_setting(target, "RAY_RUNTIME_ENV", ""))
    except ConfigError as error:
        raise OpsError(f"the stack's {error}") from None


def register(commands: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]) -> None:
    """Add the `baseline` command group."""
    subcommands = add_group(
        commands,
        "baseline",
        "a base model's own evaluation (no adapter): the first champion",
        DESCRIPTION,
        EPILOG,
        ("show", "evaluate"),
    )
    parser = add_command(subcommands, "show", show, parents, "the baselines of a base model", EPILOG)
    parser.add_argument("base_model_id", metavar="BASE_MODEL_ID")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser = add_command(subcommands, "evaluate", evaluate, parents, "evaluate and record the baseline", EPILOG)
    parser.add_argument("base_model_id", metavar="BASE_MODEL_ID")
    parser.add_argument(
        "--maze-size",
        type=int,
        default=EVAL_SET_SIZE,
        choices=sorted(EVAL_SETS),
        help=f"the evaluation set of this maze size (default {EVAL_SET_SIZE})",
    )
    parser.add_argument("--no-wait", action="store_true", help="submit the job and return")
    parser.add_argument("--interval", type=float, default=10.0, metavar="S", help="seconds between polls (default 10)")
    parser.add_argument(
        "--timeout", type=float, metavar="S", help="stop waiting after S seconds (exit 2; the job goes on)"
    )
