"""`run start | list | show`: start a training run from a spec, list runs, show one run in detail."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from botocore.exceptions import ClientError

from mazeops.layout import run_spec_request_key
from mazeops.names import training_job_id, validate_run_id
from mazeops.runs import RunsTable
from mazeops.runspec import parse_run_spec
from opsctl.commands import add_command, add_group
from opsctl.errors import OpsError
from opsctl.executions import COLUMNS as EXECUTION_COLUMNS
from opsctl.executions import execution_rows
from opsctl.follow import follow_execution
from opsctl.output import error_line, print_json, print_table
from opsctl.queries.executions import run_executions
from opsctl.queries.ray_jobs import ray_jobs_status
from opsctl.queries.runs import list_runs
from opsctl.target import Target

RUN_COLUMNS = ("RUN_ID", "STATUS", "BASE_MODEL", "CREATED", "UPDATED", "ERROR")
RUN_FIELDS = (
    "status",
    "base_model_id",
    "created_at",
    "updated_at",
    "execution_arn",
    "job_id",
    "spec_key",
    "spec_sha256",
    "error",
)

EPILOG = """examples:
  mazeops-ops run start spec.json --run-id maze-grpo-1 --local --wait
  mazeops-ops run list --stack maze-rl-ops
  mazeops-ops run show maze-grpo-1 --local --logs
"""
START_EPILOG = """The spec is validated here first (schema, run_name, and the base model when the stack's
BASE_MODELS can be read), then uploaded to requests/<run_id>.json; the upload starts training.
An existing request is never overwritten. The run id is --run-id, else the spec's run_name.

examples:
  mazeops-ops run start spec.json --run-id maze-grpo-1 --local
  mazeops-ops run start spec.json --stack maze-rl-ops --wait
"""
SHOW_EPILOG = """examples:
  mazeops-ops run show maze-grpo-1 --local
  mazeops-ops run show maze-grpo-1 --stack maze-rl-ops --logs
  mazeops-ops run show maze-grpo-1 --local --json
"""


def _spec_run_id(raw: bytes, path: Path) -> str:
    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        document = None
    run_name = document.get("run_name") if isinstance(document, dict) else None
    if not run_name:
        raise OpsError(f"{path} has no run_name: pass --run-id")
    return validate_run_id(run_name)


def _validate_spec(raw: bytes, run_id: str, base_models: dict[str, str] | None) -> None:
    if base_models is None:
        print("note: the stack's BASE_MODELS could not be read; the base model is not checked here")
        try:
            document = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError):
            document = None
        named = document.get("base_model_id") if isinstance(document, dict) else None
        # Accept whatever base model the spec names; every other check still runs.
        base_models = {named: "(unchecked)"} if isinstance(named, str) else {}
    parse_run_spec(raw, run_id, base_models)


def _upload_request(target: Target, run_id: str, raw: bytes) -> str:
    key = run_spec_request_key(run_id)
    try:
        target.client("s3").put_object(
            Bucket=target.bucket, Key=key, Body=raw, ContentType="application/json", IfNoneMatch="*"
        )
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in ("PreconditionFailed", "ConditionalRequestConflict"):
            raise OpsError(
                f"s3://{target.bucket}/{key} already exists: run ids are never reused; choose another"
            ) from None
        raise
    return key


def start(args: argparse.Namespace, target: Target) -> int:
    """Validate and upload a run spec; with --wait, follow the training execution."""
    path = Path(args.spec)
    try:
        raw = path.read_bytes()
    except (OSError, ValueError) as error:  # ValueError: a NUL byte in the path
        raise OpsError(f"cannot read {str(path)[:200]!r}: {getattr(error, 'strerror', None) or error}") from None
    run_id = validate_run_id(args.run_id) if args.run_id else _spec_run_id(raw, path)
    _validate_spec(raw, run_id, target.base_models)
    key = _upload_request(target, run_id, raw)
    name = training_job_id(run_id)
    print(f"uploaded s3://{target.bucket}/{key}: run {run_id} starts training execution {name}")
    if not args.wait:
        return 0
    status = follow_execution(target, "training", name, name, args.interval, args.progress, args.timeout)
    return 0 if status == "SUCCEEDED" else 1


def list_command(args: argparse.Namespace, target: Target) -> int:
    """Print the runs table."""
    runs = list_runs(target)
    if args.json:
        print_json(runs)
        return 0
    print_table(
        RUN_COLUMNS,
        [
            (
                r["run_id"],
                r.get("status"),
                r.get("base_model_id"),
                r.get("created_at"),
                r.get("updated_at"),
                (r.get("error") or "")[:60],
            )
            for r in runs
        ],
    )
    return 0


def show(args: argparse.Namespace, target: Target) -> int:
    """Print one run: its row, its executions, its Ray jobs (and their log tails with --logs)."""
    run_id = validate_run_id(args.run_id)
    record = RunsTable(target.client("dynamodb"), target.runs_table).get_run(run_id)
    row = dataclasses.asdict(record) if record else None
    executions = run_executions(target, run_id)
    if row is None and not executions:
        raise OpsError(f"no run {run_id!r}: no runs table row and no executions")
    job_ids = [e["name"] for e in executions] or [training_job_id(run_id)]
    jobs, ray_error = ray_jobs_status(target, job_ids, args.logs)
    if args.json:
        print_json({"run": row, "executions": executions, "jobs": jobs, "ray_error": ray_error})
        return 0
    print(f"run {run_id}")
    for name in RUN_FIELDS:
        value = (row or {}).get(name)
        print(f"  {name:<14}{(error_line(value) if name == 'error' else value) if value else '-'}")
    print("\nexecutions")
    print_table(EXECUTION_COLUMNS, execution_rows(executions))
    print("\nray jobs")
    if ray_error:
        print(f"(unavailable: {ray_error})")
    else:
        print_table(
            ("JOB_ID", "STATUS", "MESSAGE"), [(j["job_id"], j["status"], (j["message"] or "")[:80]) for j in jobs]
        )
    for job in jobs:
        if "logs_tail" in job:
            print(f"\nlogs of {job['job_id']} (tail)\n{job['logs_tail'].rstrip() or '(empty)'}")
    return 0


def register(commands: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]) -> None:
    """Add the `run` command group."""
    subcommands = add_group(
        commands,
        "run",
        "start, list and inspect training runs",
        "Start, list and inspect training runs.",
        EPILOG,
        ("start", "list", "show"),
    )
    parser = add_command(subcommands, "start", start, parents, "validate and upload a run spec", START_EPILOG)
    parser.add_argument("spec", metavar="SPEC.json", help="the run spec (see docs/design.md, 'Run spec')")
    parser.add_argument("--run-id", help="run id (default: the spec's run_name)")
    parser.add_argument(
        "--wait", action="store_true", help="follow the training execution; exit 0 if it succeeds, 1 if not"
    )
    parser.add_argument(
        "--interval", type=float, default=5.0, metavar="S", help="seconds between polls with --wait (default 5)"
    )
    parser.add_argument(
        "--progress", type=float, default=60.0, metavar="S", help="print progress after S quiet seconds (default 60)"
    )
    parser.add_argument(
        "--timeout", type=float, metavar="S", help="stop waiting after S seconds (exit 2; the run goes on)"
    )

    parser = add_command(
        subcommands,
        "list",
        list_command,
        parents,
        "list runs",
        EPILOG,
        description="List the runs table, newest first.",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")

    parser = add_command(subcommands, "show", show, parents, "show one run", SHOW_EPILOG)
    parser.add_argument("run_id", metavar="RUN_ID")
    parser.add_argument("--logs", action="store_true", help="add the tail of each Ray job's driver log")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
