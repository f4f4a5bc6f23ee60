"""The read-only queries of one deployment, shared by the ops CLI (`opsctl`) and the web console (`opsconsole`).

Everything here reads the deployment's AWS APIs (Step Functions, DynamoDB, S3) and its Ray Jobs
API through a `Target`, and returns plain data; the CLI prints it and the console renders it.
Nothing here writes.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from mazeops.baseline import BASELINE, parse_baseline_result
from mazeops.dynamo import from_item
from mazeops.evalresult import MAX_RESULT_BYTES, EvalResult, MazeOutcome, parse_eval_result
from mazeops.layout import eval_result_key, run_prefix, train_metrics_key
from mazeops.names import InvalidName, adapter_name, parse_job_id
from mazeops.ray_jobs import InvalidRayAddress, RayJobError, RayJobNotFound, RayUnavailable
from mazeops.registry import AdapterRecord, BaselineRecord, ChampionPointer, Registry, baseline_leads
from mazeops.s3_objects import ObjectMissing, read_limited
from opsctl.errors import OpsError
from opsctl.target import Target

STATE_MACHINES = ("training", "evaluation")
BASELINE_LABEL = "baseline"
_RESULT_KEY = re.compile(r"evals/global_step_(?P<step>[1-9][0-9]*)/result\.json$")


# --- Step Functions ------------------------------------------------------------------------------


def execution_arn(state_machine_arn: str, name: str) -> str:
    """The ARN of execution `name` of a standard state machine."""
    prefix, _, machine = state_machine_arn.rpartition(":stateMachine:")
    return f"{prefix}:execution:{machine}:{name}"


def list_executions(target: Target, machines: list[str], status: str | None = None) -> list[dict[str, Any]]:
    """Executions of the named state machines (`training`, `evaluation`), newest first."""
    client = target.client("stepfunctions")
    rows: list[dict[str, Any]] = []
    for machine in machines:
        arguments: dict[str, Any] = {"stateMachineArn": target.state_machines[machine]}
        if status:
            arguments["statusFilter"] = status
        for page in client.get_paginator("list_executions").paginate(**arguments):
            rows += [
                {
                    "name": execution["name"],
                    "state_machine": machine,
                    "status": execution["status"],
                    "start_date": execution.get("startDate"),
                    "stop_date": execution.get("stopDate"),
                    "execution_arn": execution["executionArn"],
                }
                for execution in page["executions"]
            ]
    rows.sort(key=lambda row: row["start_date"], reverse=True)
    return rows


def describe_execution(target: Target, arn: str) -> dict[str, Any] | None:
    """`describe_execution` of `arn`, or None when there is no such execution."""
    client = target.client("stepfunctions")
    try:
        return client.describe_execution(executionArn=arn)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ExecutionDoesNotExist":
            return None
        raise


def state_machine_definition(target: Target, machine: str) -> dict[str, Any]:
    """The ASL definition (parsed) of state machine `machine` (`training` or `evaluation`), as deployed."""
    described = target.client("stepfunctions").describe_state_machine(stateMachineArn=target.state_machines[machine])
    return json.loads(described["definition"])


def execution_history(target: Target, arn: str) -> list[dict[str, Any]]:
    """Every history event of execution `arn`, oldest first (`get_execution_history`, all pages)."""
    pages = target.client("stepfunctions").get_paginator("get_execution_history").paginate(executionArn=arn)
    return [event for page in pages for event in page["events"]]


def execution_run(name: str) -> tuple[str | None, int | None]:
    """(run id, step) named by an execution name `train-<run>` or `eval-<run>-step<N>`; (None, None) for others."""
    try:
        return parse_job_id(name)
    except InvalidName:
        return None, None


def run_executions(target: Target, run_id: str) -> list[dict[str, Any]]:
    """The training and evaluation executions of one run, oldest first."""
    executions = [e for e in list_executions(target, list(STATE_MACHINES)) if execution_run(e["name"])[0] == run_id]
    executions.reverse()
    return executions


# --- runs and their Ray jobs ---------------------------------------------------------------------


def list_runs(target: Target) -> list[dict[str, Any]]:
    """Every row of the runs table, newest first."""
    client = target.client("dynamodb")
    rows = [
        from_item(item)
        for page in client.get_paginator("scan").paginate(TableName=target.runs_table)
        for item in page["Items"]
    ]
    return sorted(rows, key=lambda row: row.get("created_at") or "", reverse=True)


def ray_jobs_status(target: Target, job_ids: list[str], with_logs: bool) -> tuple[list[dict[str, Any]], str | None]:
    """Ray status (and, `with_logs`, the tail of the driver log) of each of `job_ids`, or ([], why) when Ray cannot be asked.

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


# --- evaluation results and learning curves --------------------------------------------------------


@dataclass(frozen=True)
class CurvePoint:
    """One solve rate of one run at one step: from the fixed-set evaluation (`eval`) or the training log (`train`)."""

    run_id: str
    step: int
    source: str
    solve_rate: float
    base_model_id: str | None = None
    n_solved: int | None = None
    n_total: int | None = None
    eval_set_sha256: str | None = None


def read_eval_result(target: Target, run_id: str, step: int) -> EvalResult | None:
    """The evaluation result of the adapter of `run_id` at `step` (`runs/<run>/evals/global_step_<N>/result.json`), or None."""
    try:
        raw = read_limited(target.client("s3"), target.bucket, eval_result_key(run_id, step), MAX_RESULT_BYTES)
    except ObjectMissing:
        return None
    return parse_eval_result(raw)


def eval_points(target: Target, run_id: str) -> list[CurvePoint]:
    """The run's fixed-set evaluation results (`runs/<run>/evals/global_step_<N>/result.json`), by step."""
    s3 = target.client("s3")
    prefix = f"{run_prefix(run_id)}evals/"
    points = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=target.bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            if not _RESULT_KEY.search(item["Key"]):
                continue
            result = parse_eval_result(read_limited(s3, target.bucket, item["Key"], MAX_RESULT_BYTES))
            points.append(
                CurvePoint(
                    run_id,
                    result.step,
                    "eval",
                    result.solve_rate,
                    result.base_model_id,
                    result.n_solved,
                    result.n_total,
                    result.eval_set_sha256,
                )
            )
    return sorted(points, key=lambda point: point.step)


def train_points(target: Target, run_id: str) -> list[CurvePoint]:
    """In-training eval solve rates from `runs/<run>/metrics/train.jsonl` (lines with `eval_solve_rate`)."""
    key = train_metrics_key(run_id)
    try:
        body = target.client("s3").get_object(Bucket=target.bucket, Key=key)["Body"].read().decode("utf-8", "replace")
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
            return []
        raise
    points = []
    for number, line in enumerate(body.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if record.get("eval_solve_rate") is not None:
                points.append(CurvePoint(run_id, int(record["step"]), "train", float(record["eval_solve_rate"])))
        except (json.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError):
            print(f"note: skipped malformed line {number} of s3://{target.bucket}/{key}", file=sys.stderr)
    return sorted(points, key=lambda point: point.step)


@dataclass(frozen=True)
class CurveData:
    """What a learning curve shows: per run its fixed-set and in-training points, the champion's points (starred),
    the champion pointer per base model (None: the baseline leads) and the READY baselines on the plotted sets."""

    evals: dict[str, list[CurvePoint]]
    trains: dict[str, list[CurvePoint]]
    starred: list[CurvePoint]
    champions: dict[str, ChampionPointer | None]
    baselines: list[BaselineRecord]


def curve_data(target: Target, run_ids: list[str], base_model_id: str | None = None) -> CurveData:
    """The learning-curve data of `run_ids` (only results of `base_model_id` when given)."""
    evals = {
        run: [p for p in eval_points(target, run) if base_model_id is None or p.base_model_id == base_model_id]
        for run in run_ids
    }
    trains = {run: train_points(target, run) for run in run_ids}
    plotted = [point for points in evals.values() for point in points]
    registry = Registry(target.client("dynamodb"), target.registry_table)
    bases = sorted({point.base_model_id for point in plotted if point.base_model_id})
    champions = {base: registry.get_champion(base) for base in bases}
    names = {base: pointer.champion for base, pointer in champions.items() if pointer}
    starred = [p for p in plotted if names.get(p.base_model_id or "") == adapter_name(p.run_id, p.step)]
    sets = {(point.base_model_id, point.eval_set_sha256) for point in plotted if point.base_model_id}
    baselines = [
        baseline
        for base in bases
        for baseline in registry.list_baselines(base)
        if baseline.status == "READY" and (base, baseline.eval_set_sha256) in sets
    ]
    return CurveData(evals, trains, starred, champions, baselines)


@dataclass(frozen=True)
class Outcomes:
    """One model's per-maze outcomes on one evaluation set: an adapter's evaluation result, or a baseline's (`name` `baseline`)."""

    name: str
    eval_set_sha256: str
    outcomes: list[MazeOutcome]

    @property
    def n_solved(self) -> int:
        """How many mazes it solved."""
        return sum(outcome.solved for outcome in self.outcomes)


def adapter_outcomes(target: Target, registry: Registry, base_model_id: str, adapter: str) -> Outcomes | None:
    """The per-maze outcomes of a registered adapter, from its evaluation result in S3; None when it has none."""
    record = registry.get_adapter(base_model_id, adapter)
    result = read_eval_result(target, record.run_id, record.step) if record is not None else None
    return Outcomes(adapter, result.eval_set_sha256, result.outcomes) if result is not None else None


def baseline_outcomes(target: Target, registry: Registry, base_model_id: str, eval_set_sha256: str) -> Outcomes | None:
    """The per-maze outcomes of the READY baseline of `base_model_id` on `eval_set_sha256`, from its result in S3, or None."""
    record = registry.get_baseline(base_model_id, eval_set_sha256)
    if record is None or record.status != "READY":
        return None
    try:
        raw = read_limited(target.client("s3"), target.bucket, record.result_key, MAX_RESULT_BYTES)
    except ObjectMissing:
        return None
    return Outcomes(BASELINE_LABEL, eval_set_sha256, parse_baseline_result(raw).outcomes)


# --- the registry ------------------------------------------------------------------------------


@dataclass(frozen=True)
class LeaderboardEntry:
    """One leaderboard row: an adapter, or the baseline on one evaluation set (`name` is then `baseline`)."""

    name: str
    run_id: str | None
    step: int | None
    status: str
    solve_rate: float | None
    n_solved: int | None
    n_total: int | None
    champion: bool
    document: dict[str, Any]  # the registry row (the CLI's --json, besides `champion`)


def leaderboard(registry: Registry, base_model_id: str) -> list[LeaderboardEntry]:
    """Adapters and baselines of a base model sorted by solve rate (unevaluated last), champion marked; [] when it has none."""
    adapters = registry.list_adapters(base_model_id)
    baselines = registry.list_baselines(base_model_id)
    pointer = registry.get_champion(base_model_id)
    champion = pointer.champion if pointer else BASELINE
    entries = [
        LeaderboardEntry(r.adapter_name, r.run_id, r.step, r.status, r.solve_rate, r.n_solved, r.n_total,
                         r.adapter_name == champion, dataclasses.asdict(r))
        for r in adapters
    ] + [
        LeaderboardEntry(BASELINE_LABEL, None, None, b.status, b.solve_rate, b.n_solved, b.n_total,
                         champion == BASELINE and b.status == "READY", {**dataclasses.asdict(b), "adapter_name": BASELINE})
        for b in baselines
    ]  # fmt: skip
    entries.sort(key=lambda e: (e.solve_rate is None, -(e.solve_rate or 0.0), e.run_id or "", e.step or 0))
    return entries


@dataclass(frozen=True)
class Lineage:
    """The champion history of a base model, oldest first: its baseline at the root, then each adapter champion.

    `roles[i]` is `champion` or `former` for `names[i]`; `records[i]` is that adapter's row (None if it vanished).
    """

    base_model_id: str
    pointer: ChampionPointer | None
    baseline: BaselineRecord | None
    baseline_role: str
    names: list[str]
    roles: list[str]
    records: list[AdapterRecord | None]


def lineage(registry: Registry, base_model_id: str) -> Lineage | None:
    """The champion history of `base_model_id` from its baseline; None when it has no champion and no baseline yet."""
    pointer = registry.get_champion(base_model_id)
    baselines = registry.list_baselines(base_model_id)
    if pointer is None and not baselines:
        return None
    leads = baseline_leads(pointer)
    names = [*pointer.previous, *([] if leads else [pointer.champion])] if pointer else []
    records = [registry.get_adapter(base_model_id, name) for name in names]
    roles = ["former"] * len(names) if leads else ["former"] * (len(names) - 1) + ["champion"]
    baseline = _lineage_baseline(baselines, records)
    return Lineage(base_model_id, pointer, baseline, "champion" if leads else "former", names, roles, records)


def _lineage_baseline(baselines: list[BaselineRecord], adapters: list[AdapterRecord | None]) -> BaselineRecord | None:
    """The baseline shown at the root of the lineage: the one on the maze set of its first adapter, else the first READY one."""
    first = next((record for record in adapters if record is not None and record.eval_set_sha256), None)
    if first is not None:
        return next((b for b in baselines if b.eval_set_sha256 == first.eval_set_sha256), None)
    return next((b for b in baselines if b.status == "READY"), baselines[0] if baselines else None)
