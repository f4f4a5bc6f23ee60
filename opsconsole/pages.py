"""What each console page shows, assembled from the shared read-only queries (`opsctl.queries`).

Each function returns the template context of one page, or raises `NotFound` when the page's
subject does not exist. Nothing here writes but `reevaluate`, the console's one action.
"""

from __future__ import annotations

import dataclasses
import io
from datetime import UTC, datetime
from typing import Any

from cluster_jobs.maze.eval_set import EVAL_SET_SIZE, eval_set_for_size
from mazeops.cluster_health import read_health
from mazeops.decision import mcnemar_exact
from mazeops.names import adapter_name, parse_adapter_name, training_job_id, validate_base_model_id, validate_run_id
from mazeops.ray_jobs import TERMINAL_STATUSES
from mazeops.reevaluation import next_attempt, reevaluation_refusal, start_reevaluation
from mazeops.registry import Registry
from mazeops.runs import RunRecord, RunsTable
from opsconsole import mazes
from opsconsole.graph import layout
from opsconsole.history import event_rows, one_line, state_marks
from opsctl.curve import draw_curve
from opsctl.follow import elapsed_text
from opsctl.labels import BASELINE_LABEL, champion_label
from opsctl.play import history_turns, parse_model_id
from opsctl.queries.curves import curve_data
from opsctl.queries.eval_results import adapter_outcomes, baseline_outcomes
from opsctl.queries.executions import (
    STATE_MACHINES,
    describe_execution,
    execution_arn,
    execution_history,
    execution_run,
    list_executions,
    run_executions,
    state_machine_definition,
)
from opsctl.queries.leaderboard import leaderboard_entries
from opsctl.queries.lineage import champion_lineage
from opsctl.queries.ray_jobs import ray_jobs_status
from opsctl.queries.runs import list_runs, run_stops
from opsctl.runs import guard_view
from opsctl.target import Target


class NotFound(LookupError):
    """The page's subject (execution, run, job, base model, adapter, maze) does not exist; the message says which."""


def _registry(target: Target) -> Registry:
    return Registry(target.client("dynamodb"), target.registry_table)


def _duration(start: datetime | None, stop: datetime | None) -> str:
    if start is None:
        return ""
    return elapsed_text(((stop or datetime.now(UTC)) - start).total_seconds())


def executions(target: Target) -> dict[str, Any]:
    """Executions of both state machines, newest first, with duration, run and adapter."""
    rows = []
    for execution in list_executions(target, list(STATE_MACHINES)):
        run_id, step = execution_run(execution["name"])
        rows.append(
            {
                **execution,
                "duration": _duration(execution["start_date"], execution["stop_date"]),
                "run_id": run_id,
                "adapter": adapter_name(run_id, step) if run_id and step else None,
            }
        )
    return {"executions": rows}


def execution(target: Target, machine: str, name: str) -> dict[str, Any]:
    """One execution: its description, its history event by event, its state machine's graph with states marked."""
    if machine not in STATE_MACHINES:
        raise NotFound(f"no state machine {machine!r}: there are {', '.join(STATE_MACHINES)}")
    arn = execution_arn(target.state_machines[machine], name)
    described = describe_execution(target, arn)
    if described is None:
        raise NotFound(f"no {machine} execution {name!r}")
    rows = event_rows(execution_history(target, arn))
    marks = state_marks(rows, described["status"])
    run_id, step = execution_run(name)
    return {
        "machine": machine,
        "execution": described,
        "duration": _duration(described.get("startDate"), described.get("stopDate")),
        "cause": one_line(described.get("cause")),
        "events": rows,
        "graph": layout(state_machine_definition(target, machine), marks),
        "marked": {
            mark: sorted(state for state, value in marks.items() if value == mark) for mark in ("current", "failed")
        },
        "run_id": run_id,
        "adapter": adapter_name(run_id, step) if run_id and step else None,
    }


def runs(target: Target) -> dict[str, Any]:
    """Every run, newest first, with the Ray status of its training job."""
    rows = list_runs(target)
    job_ids = [row.get("job_id") or training_job_id(row["run_id"]) for row in rows]
    jobs, ray_error = ray_jobs_status(target, job_ids, with_logs=False)
    status = {job["job_id"]: job["status"] for job in jobs}
    return {
        "runs": [
            {**row, "job_id": job_id, "job_status": status.get(job_id)}
            for row, job_id in zip(rows, job_ids, strict=True)
        ],
        "ray_error": ray_error,
    }


def _run_job_ids(target: Target, run_id: str) -> tuple[RunRecord | None, list[dict[str, Any]], list[str]]:
    """The run's row (or None), its executions (oldest first) and its Ray job ids.

    Raises NotFound when the run has neither a row nor an execution.
    """
    record = RunsTable(target.client("dynamodb"), target.runs_table).get_run(run_id)
    executions = run_executions(target, run_id)
    if record is None and not executions:
        raise NotFound(f"no run {run_id!r}: no runs table row and no executions")
    return record, executions, [e["name"] for e in executions] or [training_job_id(run_id)]


def run(target: Target, run_id: str) -> dict[str, Any]:
    """One run: its row, its guards (why one stopped it, whether the cluster answers), its executions, its Ray jobs
    with their log tails, and whether it has a learning curve."""
    run_id = validate_run_id(run_id)
    record, executions, job_ids = _run_job_ids(target, run_id)
    health = read_health(target.client("dynamodb"), target.runs_table)
    jobs, ray_error = ray_jobs_status(target, job_ids, with_logs=True)
    data = curve_data(target, [run_id])
    return {
        "run_id": run_id,
        "run": dataclasses.asdict(record) if record else None,
        "guards": guard_view(record, health, datetime.now(UTC)),
        "executions": [{**e, "duration": _duration(e["start_date"], e["stop_date"])} for e in executions],
        "jobs": [{**job, "terminal": job["status"] in TERMINAL_STATUSES} for job in jobs],
        "ray_error": ray_error,
        "has_curve": any(data.evals.values()) or any(data.trains.values()),
    }


def job_log(target: Target, run_id: str, job_id: str) -> dict[str, Any]:
    """The Ray status and log tail of one job of a run (what the run page polls)."""
    run_id = validate_run_id(run_id)
    _, _, job_ids = _run_job_ids(target, run_id)
    if job_id not in job_ids:
        raise NotFound(f"run {run_id!r} has no Ray job {job_id!r}")
    jobs, ray_error = ray_jobs_status(target, [job_id], with_logs=True)
    if ray_error:
        return {"status": "UNKNOWN", "logs": f"(Ray unavailable: {ray_error})", "terminal": False}
    job = jobs[0]
    return {"status": job["status"], "logs": job.get("logs_tail", ""), "terminal": job["status"] in TERMINAL_STATUSES}


def curve_png(target: Target, run_id: str) -> bytes:
    """The learning-curve PNG of one run (the ops CLI's `curve` picture); NotFound when it has no point yet."""
    run_id = validate_run_id(run_id)
    data = curve_data(target, [run_id])
    if not any(data.evals.values()) and not any(data.trains.values()):
        raise NotFound(f"run {run_id!r} has no evaluation result or in-training eval yet")
    buffer = io.BytesIO()
    stops = run_stops(target, [run_id])
    draw_curve(buffer, data.evals, data.trains, data.starred, f"Learning curve of {run_id}", data.baselines, stops)
    return buffer.getvalue()


def registry_index(target: Target) -> dict[str, Any]:
    """The base models in the registry, each with its champion."""
    registry = _registry(target)
    return {
        "bases": [
            {"base_model_id": base, "champion": champion_label(registry.get_champion(base))}
            for base in registry.list_base_models()
        ]
    }


def base_model(target: Target, base_model_id: str) -> dict[str, Any]:
    """One base model: champion, baselines, the leaderboard with each decision and its McNemar evidence, the lineage."""
    base = validate_base_model_id(base_model_id)
    registry = _registry(target)
    entries = leaderboard_entries(registry, base)
    if not entries:
        raise NotFound(f"no adapters or baselines registered for base model {base!r}")
    pointer = registry.get_champion(base)
    return {
        "base_model_id": base,
        "champion": champion_label(pointer),
        "version": pointer.version if pointer else 0,
        "baselines": registry.list_baselines(base),
        "entries": [{**dataclasses.asdict(entry), "decision": entry.document.get("decision")} for entry in entries],
        "lineage": champion_lineage(registry, base),
        "reevaluable": {
            record.adapter_name: next_attempt(record)
            for record in registry.list_adapters(base)
            if reevaluation_refusal(record) is None
        },
    }


def reevaluate(target: Target, base_model_id: str, adapter: str) -> str:
    """Start the adapter's next evaluation attempt (mazeops.reevaluation); return the execution's name."""
    base = validate_base_model_id(base_model_id)
    parse_adapter_name(adapter)
    record = _registry(target).get_adapter(base, adapter)
    if record is None:
        raise NotFound(f"no adapter {adapter!r} of base model {base!r}")
    name, _ = start_reevaluation(
        target.client("stepfunctions"), target.state_machines["evaluation"], target.bucket, record
    )
    return name


def _default_pair(registry: Registry, base: str) -> tuple[str, str]:
    """(challenger, champion) compared by default: the newest evaluated adapter other than the champion against the
    champion; the champion adapter against the baseline when there is no other."""
    pointer = registry.get_champion(base)
    champion = champion_label(pointer)
    evaluated = sorted(
        (r for r in registry.list_adapters(base) if r.outcomes), key=lambda r: r.created_at, reverse=True
    )
    others = [r.adapter_name for r in evaluated if r.adapter_name != champion]
    if others:
        return others[0], champion
    if champion != BASELINE_LABEL:
        return champion, BASELINE_LABEL
    raise NotFound(f"base model {base!r} has no evaluated adapter to compare")


def compare(target: Target, base_model_id: str, challenger: str | None, champion: str | None) -> dict[str, Any]:
    """The 64-maze grid of `challenger` against `champion` (adapter names, or `baseline`; defaults: `_default_pair`)."""
    base = validate_base_model_id(base_model_id)
    registry = _registry(target)
    if not challenger or not champion:
        default_challenger, default_champion = _default_pair(registry, base)
        challenger, champion = challenger or default_challenger, champion or default_champion
    mine = adapter_outcomes(target, registry, base, challenger)
    if mine is None:
        raise NotFound(f"adapter {challenger!r} of {base!r} has no evaluation result")
    if champion == BASELINE_LABEL:
        theirs = baseline_outcomes(target, registry, base, mine.eval_set_sha256)
    else:
        theirs = adapter_outcomes(target, registry, base, champion)
    if theirs is None or theirs.eval_set_sha256 != mine.eval_set_sha256:
        raise NotFound(f"{champion!r} of {base!r} has no evaluation result on the maze set of {challenger!r}")
    if mine.eval_set_sha256 not in mazes.eval_sets():
        raise NotFound(f"maze set {mine.eval_set_sha256[:12]}... is not one of the fixed evaluation sets")
    tiles = mazes.grid(mine.eval_set_sha256, mine.outcomes, theirs.outcomes)
    test = mcnemar_exact(
        "".join("1" if t.challenger.solved else "0" for t in tiles),
        "".join("1" if t.champion.solved else "0" for t in tiles),
    )
    return {
        "base_model_id": base,
        "challenger": mine,
        "champion": theirs,
        "tiles": tiles,
        "kinds": mazes.KINDS,
        "counts": {kind: sum(tile.kind == kind for tile in tiles) for kind in mazes.KINDS},
        "test": test,
        "eval_set": mazes.eval_sets()[mine.eval_set_sha256],
        "choices": [BASELINE_LABEL, *(r.adapter_name for r in registry.list_adapters(base) if r.outcomes)],
        "model_ids": {
            "challenger": f"{base}:{challenger}",
            "champion": base if champion == BASELINE_LABEL else f"{base}:{champion}",
        },
    }


def play(target: Target, model_id: str, seed: int, eval_set_sha256: str | None) -> dict[str, Any]:
    """One maze of a fixed evaluation set played by a served model (`<base>` or `<base>:<adapter>`), and its path."""
    model_id = parse_model_id(model_id)
    sha256 = eval_set_sha256 or eval_set_for_size(EVAL_SET_SIZE).sha256
    if sha256 not in mazes.eval_sets():
        raise NotFound(f"no fixed evaluation set {sha256[:64]!r}")
    eval_set = mazes.eval_sets()[sha256]
    if seed not in eval_set.seeds:
        raise NotFound(f"seed {seed} is not in the evaluation set {eval_set.name}")
    return {
        "model_id": model_id,
        "seed": seed,
        "eval_set": eval_set,
        "played": mazes.play_path(target.serve_url, model_id, sha256, seed, history_turns(target)),
    }
