"""`run start | list | show`: start a training run from a spec, list runs, show one run in detail (with its guards,
why a guard stopped it, and whether the cluster answers)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from botocore.exceptions import ClientError

from mazeops.cluster_health import ClusterHealth, read_health
from mazeops.failures import one_line
from mazeops.guards import InvalidGuardSettings, guard_settings
from mazeops.layout import run_spec_request_key
from mazeops.names import training_job_id, validate_run_id
from mazeops.runs import ACTIVE_STATUSES, RunRecord, RunsTable
from mazeops.runspec import CollapseGuard, parse_run_spec
from opsctl.commands import add_command, add_group
from opsctl.errors import OpsError
from opsctl.executions import COLUMNS as EXECUTION_COLUMNS
from opsctl.executions import execution_rows
from opsctl.follow import add_wait_options, follow_execution
from opsctl.output import error_line, plain, print_json, print_table
from opsctl.queries.executions import run_executions
from opsctl.queries.ray_jobs import ray_jobs_status
from opsctl.queries.runs import RunStop, list_runs, run_stop
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


@dataclass(frozen=True)
class GuardView:
    """What `run show` and the console's run page say about a run's guards and its cluster, as (label, text) rows.

    `settings`: one row per guard (collapse, stall, spend), or one row when the run has no guard settings;
    `stopped`: why and when a guard stopped the run (empty unless STOPPED); `marked_steps`: the steps of the
    evaluations that triggered the stop (marked on the learning curve); `cluster`: the unreachable line (None unless
    the run is active and the Ray head does not answer).
    """

    settings: list[tuple[str, str]]
    stopped: list[tuple[str, str]]
    marked_steps: tuple[int, ...]
    cluster: str | None


def collapse_text(collapse: CollapseGuard | None) -> str:
    """The collapse guard in words, e.g. `2 evaluations in a row more than 10 points below the baseline or ...`."""
    if collapse is None:
        return "off"
    arms = []
    if collapse.below_baseline_points is not None:
        arms.append(f"more than {collapse.below_baseline_points:g} points below the baseline")
    if collapse.below_best_fraction is not None:
        arms.append(f"below {collapse.below_best_fraction:.0%} of the run's best")
    count = collapse.consecutive_evals
    evaluations = "1 evaluation" if count == 1 else f"{count} evaluations in a row"
    return f"{evaluations} {' or '.join(arms)}"


def _minutes_since(moment: str, now: datetime) -> int | None:
    """Whole minutes from the ISO time `moment` to `now`; None if `moment` is not a time."""
    try:
        then = datetime.fromisoformat(moment)
    except (TypeError, ValueError):
        return None
    if then.tzinfo is None:
        then = then.replace(tzinfo=UTC)
    return max(0, int((now - then).total_seconds() // 60))


def _settings_rows(record: RunRecord | None, now: datetime) -> list[tuple[str, str]]:
    if record is None:
        return [("guards", "none recorded (no runs table row)")]
    try:
        settings = guard_settings(record.guard)
    except InvalidGuardSettings as error:
        return [("guards", str(error))]
    if settings is None:
        return [("guards", "none recorded (the run was accepted before guards existed)")]
    stall = settings.stall_minutes
    spend = "off"
    if settings.gpu_hours is not None:
        spend = f"{settings.gpu_hours:g} GPU-hours"
        details = [f"{record.num_gpus} GPUs"] if record.num_gpus else []
        minutes = _minutes_since(record.running_at or "", now)
        if record.status == "RUNNING" and record.num_gpus and minutes is not None:
            details.append(f"{record.num_gpus * minutes / 60:.0f} spent so far")
        spend += f" ({'; '.join(details)})" if details else ""
    return [
        ("collapse", collapse_text(settings.collapse)),
        ("stall", "off" if stall is None else f"no new adapter for {stall} min while the Ray job runs"),
        ("spend", spend),
    ]


def _stopped_rows(stop: RunStop | None) -> list[tuple[str, str]]:
    if stop is None:
        return []
    rows = [("stopped by", stop.reason or stop.guard), ("stopped at", stop.at or "-")]
    if stop.steps:
        rows.append(("steps", ", ".join(str(step) for step in stop.steps) + " (marked on the learning curve)"))
    return rows


def cluster_text(record: RunRecord | None, health: ClusterHealth | None, now: datetime) -> str | None:
    """`unreachable since <time> (<N> min)` while the run is active and the cluster watch finds the Ray head
    unreachable; None otherwise."""
    if record is None or record.status not in ACTIVE_STATUSES or health is None or health.reachable:
        return None
    since = health.unreachable_since or health.checked_at
    minutes = _minutes_since(since, now)
    text = f"unreachable since {since}" + (f" ({minutes} min)" if minutes is not None else "")
    return text + (f": {one_line(health.error)}" if health.error else "")


def guard_view(record: RunRecord | None, health: ClusterHealth | None, now: datetime) -> GuardView:
    """The guard rows of run `record` (None: no row) with the cluster's `health` at `now`."""
    stop = run_stop(record)
    return GuardView(
        _settings_rows(record, now),
        _stopped_rows(stop),
        stop.steps if stop else (),
        cluster_text(record, health, now),
    )


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
    """Print one run: its row, its guards (why one stopped it), the cluster's health while it is active, its
    executions, its Ray jobs (and their log tails with --logs)."""
    run_id = validate_run_id(args.run_id)
    record = RunsTable(target.client("dynamodb"), target.runs_table).get_run(run_id)
    health = read_health(target.client("dynamodb"), target.runs_table)
    row = dataclasses.asdict(record) if record else None
    executions = run_executions(target, run_id)
    if row is None and not executions:
        raise OpsError(f"no run {run_id!r}: no runs table row and no executions")
    job_ids = [e["name"] for e in executions] or [training_job_id(run_id)]
    jobs, ray_error = ray_jobs_status(target, job_ids, args.logs)
    if args.json:
        cluster = plain(dataclasses.asdict(health)) if health else None
        print_json({"run": row, "cluster": cluster, "executions": executions, "jobs": jobs, "ray_error": ray_error})
        return 0
    view = guard_view(record, health, datetime.now(UTC))
    print(f"run {run_id}")
    for name in RUN_FIELDS:
        value = (row or {}).get(name)
        print(f"  {name:<14}{(error_line(value) if name == 'error' else value) if value else '-'}")
    for label, text in [*view.stopped, *([("cluster", view.cluster)] if view.cluster else [])]:
        print(f"  {label:<14}{text}")
    print("\nguards")
    for label, text in view.settings:
        print(f"  {label:<14}{text}")
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
    add_wait_options(parser, "training", "the run")

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
