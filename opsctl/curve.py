"""`curve`: a learning-curve PNG (solve rate per global step per run), champion starred, baseline as a line, plus its table."""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from botocore.exceptions import ClientError

from mazeops.evalresult import MAX_RESULT_BYTES, parse_eval_result
from mazeops.layout import run_prefix, train_metrics_key
from mazeops.names import adapter_name, validate_base_model_id, validate_run_id
from mazeops.registry import BaselineRecord, ChampionPointer, Registry, baseline_leads
from opsctl.baseline import solved_text
from mazeops.s3_objects import read_limited
from opsctl.errors import OpsError
from opsctl.output import print_table, rate
from opsctl.runs import list_runs
from opsctl.target import Target

Y_LABEL = "solve rate on the 64 fixed mazes"
_RESULT_KEY = re.compile(r"evals/global_step_(?P<step>[1-9][0-9]*)/result\.json$")

EPILOG = """examples:
  mazeops-ops curve --local --out curve.png
  mazeops-ops curve --base qwen3-vl-8b-sft --stack maze-rl-ops --out curve.png
  mazeops-ops curve --run maze-grpo-1 --run maze-grpo-2 --local --out compare.png
"""


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


def _run_ids(target: Target, runs: list[str] | None, base: str | None) -> list[str]:
    if runs:
        return [validate_run_id(run) for run in runs]
    rows = list_runs(target)
    chosen = sorted(row["run_id"] for row in rows if base is None or row.get("base_model_id") == base)
    if not chosen:
        raise OpsError("no runs" + (f" of base model {base!r}" if base else "") + " in the runs table")
    return chosen


def _champions(registry: Registry, points: list[CurvePoint]) -> dict[str, ChampionPointer | None]:
    """The champion pointer (None: the baseline is the champion) per base model of the plotted evaluation points."""
    return {base: registry.get_champion(base) for base in sorted({point.base_model_id for point in points if point.base_model_id})}


def _baselines(registry: Registry, points: list[CurvePoint]) -> list[BaselineRecord]:
    """The READY baselines of the plotted evaluation points' base models, on the evaluation sets those points were played on."""
    plotted = {(point.base_model_id, point.eval_set_sha256) for point in points if point.base_model_id}
    return [
        baseline
        for base in sorted({base for base, _ in plotted})
        for baseline in registry.list_baselines(base)
        if baseline.status == "READY" and (base, baseline.eval_set_sha256) in plotted
    ]


def draw_curve(
    out: Path,
    evals: dict[str, list[CurvePoint]],
    trains: dict[str, list[CurvePoint]],
    champion: list[CurvePoint],
    title: str,
    baselines: list[BaselineRecord],
) -> None:
    """Write the learning-curve PNG: a solid line per run (fixed-set evals), dashed (in-training evals), stars,
    and a horizontal dotted line per baseline (the base model with no adapter), labelled with its X/64."""
    # Imported here: only this command draws, and matplotlib doubles every other command's start-up time.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=(9, 5.5), dpi=120)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for index, run_id in enumerate(sorted(set(evals) | set(trains))):
        color = f"C{index % 10}"
        if evals.get(run_id):
            axes.plot(
                [p.step for p in evals[run_id]],
                [p.solve_rate for p in evals[run_id]],
                "-o",
                color=color,
                label=f"{run_id} (fixed-set eval)",
            )
        if trains.get(run_id):
            axes.plot(
                [p.step for p in trains[run_id]],
                [p.solve_rate for p in trains[run_id]],
                "--",
                color=color,
                alpha=0.8,
                label=f"{run_id} (in-training eval)",
            )
    for point in champion:
        axes.scatter(
            [point.step],
            [point.solve_rate],
            marker="*",
            s=400,
            color="gold",
            edgecolors="black",
            zorder=5,
            label=f"champion {point.base_model_id}:{adapter_name(point.run_id, point.step)}",
            clip_on=False,
        )
    for baseline in baselines:
        solved = solved_text(baseline)
        axes.axhline(
            baseline.solve_rate, linestyle=":", linewidth=2, color="dimgray",
            label=f"baseline {baseline.base_model_id} (no adapter): {solved}",
        )  # fmt: skip
        axes.annotate(
            f"baseline {solved}", xy=(1.0, baseline.solve_rate), xycoords=("axes fraction", "data"),
            xytext=(-4, 3), textcoords="offset points", ha="right", va="bottom", fontsize="small", color="dimgray",
        )  # fmt: skip
    axes.set_xlabel("global step")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_ylabel(Y_LABEL)
    axes.set_ylim(0.0, 1.0)
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    axes.legend(loc="best", fontsize="small")
    figure.tight_layout()
    figure.savefig(out, format="png")


def command(args: argparse.Namespace, target: Target) -> int:
    """Collect the points, draw the PNG and print the table of points."""
    base = validate_base_model_id(args.base) if args.base else None
    run_ids = _run_ids(target, args.run, base)
    evals = {run: [p for p in eval_points(target, run) if base is None or p.base_model_id == base] for run in run_ids}
    trains = {run: train_points(target, run) for run in run_ids}
    all_evals = [point for points in evals.values() for point in points]
    if not all_evals and not any(trains.values()):
        raise OpsError(f"no evaluation results or in-training evals for runs {', '.join(run_ids)}")
    registry = Registry(target.client("dynamodb"), target.registry_table)
    champions = _champions(registry, all_evals)
    champion_names = {base: pointer.champion for base, pointer in champions.items() if pointer}
    starred = [p for p in all_evals if champion_names.get(p.base_model_id or "") == adapter_name(p.run_id, p.step)]
    baselines = _baselines(registry, all_evals)
    title = "Learning curves: maze solve rate per step" + (f" ({base})" if base else "")
    out = Path(args.out)
    try:
        draw_curve(out, evals, trains, starred, title, baselines)
    except OSError as error:
        raise OpsError(f"cannot write {out}: {error.strerror or error}") from None
    rows = sorted(
        (p for points in [*evals.values(), *trains.values()] for p in points),
        key=lambda p: (p.run_id, p.step, p.source),
    )
    print_table(
        ("RUN", "STEP", "SOURCE", "SOLVE_RATE", "SOLVED", "CHAMPION"),
        [
            *(
                (b.base_model_id, None, "baseline", rate(b.solve_rate), solved_text(b), _star(baseline_leads(champions.get(b.base_model_id))))
                for b in baselines
            ),
            *(
                (
                    p.run_id,
                    p.step,
                    p.source,
                    rate(p.solve_rate),
                    f"{p.n_solved}/{p.n_total}" if p.n_total else None,
                    _star(p in starred),
                )
                for p in rows
            ),
        ],
    )
    print(f"wrote {out}")
    return 0


def _star(champion: bool) -> str:
    return "*" if champion else ""


def register(commands: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]) -> None:
    """Add the `curve` command."""
    parser = commands.add_parser(
        "curve",
        parents=parents,
        help="learning-curve PNG of solve rate per step",
        description="Plot solve rate per global step per run (fixed-set evaluations solid, in-training evals dashed), "
        "star the champion, draw the baseline (the base model with no adapter) as a dotted line, and print the points.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--run", action="append", metavar="RUN_ID", help="a run to plot (repeat; default: every run in the runs table)"
    )
    parser.add_argument("--base", metavar="BASE_MODEL_ID", help="only runs and results of this base model")
    parser.add_argument("--out", required=True, metavar="PNG", help="where to write the PNG")
    parser.set_defaults(func=command)
