"""`curve`: a learning-curve PNG (solve rate per step per run), champion starred, baseline as a line, the evaluations
that made a guard stop a run marked in red; its table."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from mazeops.baseline_rows import BaselineRecord
from mazeops.champion_rows import baseline_leads
from mazeops.names import adapter_name, validate_base_model_id, validate_run_id
from opsctl.commands import add_command
from opsctl.errors import OpsError
from opsctl.labels import solved_text
from opsctl.output import print_table, rate
from opsctl.queries.curves import CurvePoint, curve_data
from opsctl.queries.runs import RunStop, list_runs, run_stops
from opsctl.target import Target

Y_LABEL = "solve rate on the 64 fixed mazes"
STOP_COLOR = "red"  # no run's line colour (matplotlib's C0..C9) is pure red

EPILOG = """examples:
  mazeops-ops curve --local --out curve.png
  mazeops-ops curve --base qwen3-vl-8b-sft --stack maze-rl-ops --out curve.png
  mazeops-ops curve --run maze-grpo-1 --run maze-grpo-2 --local --out compare.png
"""


def _run_ids(target: Target, runs: list[str] | None, base: str | None) -> list[str]:
    if runs:
        return [validate_run_id(run) for run in runs]
    rows = list_runs(target)
    chosen = sorted(row["run_id"] for row in rows if base is None or row.get("base_model_id") == base)
    if not chosen:
        raise OpsError("no runs" + (f" of base model {base!r}" if base else "") + " in the runs table")
    return chosen


@dataclass(frozen=True)
class StopMark:
    """A fixed-set evaluation that made a guard stop its run: drawn as a red cross labelled `stopped: <guard>`."""

    run_id: str
    guard: str
    step: int
    solve_rate: float


def stop_marks(evals: dict[str, list[CurvePoint]], stops: dict[str, RunStop]) -> list[StopMark]:
    """The plotted evaluations at the triggering steps of each stopped run (`stops`), by run and step.

    A stall or spend stop has no triggering evaluation, so it marks nothing.
    """
    return [
        StopMark(run_id, stop.guard, point.step, point.solve_rate)
        for run_id, stop in sorted(stops.items())
        for point in evals.get(run_id, [])
        if point.step in stop.steps
    ]


def draw_curve(
    out: Path | BinaryIO,
    evals: dict[str, list[CurvePoint]],
    trains: dict[str, list[CurvePoint]],
    champion: list[CurvePoint],
    title: str,
    baselines: list[BaselineRecord],
    stops: dict[str, RunStop] | None = None,
) -> None:
    """Write the learning-curve PNG: a solid line per run (fixed-set evals), dashed (in-training evals), stars,
    a horizontal dotted line per baseline (the base model with no adapter), labelled with its X/64, and a red cross
    on each evaluation that made a guard stop its run (`stops`, by run id), labelled `stopped: <guard>`."""
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
    _draw_stops(axes, stop_marks(evals, stops or {}))
    for baseline in baselines:
        solved = solved_text(baseline)
        axes.axhline(
            baseline.solve_rate,
            linestyle=":",
            linewidth=2,
            color="dimgray",
            label=f"baseline {baseline.base_model_id} (no adapter): {solved}",
        )
        axes.annotate(
            f"baseline {solved}",
            xy=(1.0, baseline.solve_rate),
            xycoords=("axes fraction", "data"),
            xytext=(-4, 3),
            textcoords="offset points",
            ha="right",
            va="bottom",
            fontsize="small",
            color="dimgray",
        )
    axes.set_xlabel("global step")
    axes.set_xlim(left=0)  # step 0 is the start of training: the base model, where the baseline line stands
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_ylabel(Y_LABEL)
    axes.set_ylim(0.0, 1.0)
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    axes.legend(loc="best", fontsize="small")
    figure.tight_layout()
    figure.savefig(out, format="png")


def _draw_stops(axes: Any, marks: list[StopMark]) -> None:
    """Red crosses on the marked evaluations, one legend entry per stopped run, a label beside its last mark."""
    for run_id in sorted({mark.run_id for mark in marks}):
        mine = [mark for mark in marks if mark.run_id == run_id]
        axes.scatter(
            [mark.step for mark in mine],
            [mark.solve_rate for mark in mine],
            marker="X",
            s=160,
            color=STOP_COLOR,
            edgecolors="black",
            linewidths=0.5,
            zorder=6,
            label=f"{run_id} stopped: {mine[-1].guard}",
            clip_on=False,
        )
        axes.annotate(
            f"stopped: {mine[-1].guard}",
            xy=(mine[-1].step, mine[-1].solve_rate),
            xytext=(-8, 8),
            textcoords="offset points",
            ha="right",
            fontsize="small",
            color=STOP_COLOR,
        )


def command(args: argparse.Namespace, target: Target) -> int:
    """Collect the points, draw the PNG and print the table of points."""
    base = validate_base_model_id(args.base) if args.base else None
    run_ids = _run_ids(target, args.run, base)
    data = curve_data(target, run_ids, base)
    if not any(data.evals.values()) and not any(data.trains.values()):
        raise OpsError(f"no evaluation results or in-training evals for runs {', '.join(data.evals)}")
    title = "Learning curves: maze solve rate per step" + (f" ({base})" if base else "")
    stops = run_stops(target, run_ids)
    out = Path(args.out)
    try:
        draw_curve(out, data.evals, data.trains, data.starred, title, data.baselines, stops)
    except (OSError, ValueError) as error:  # ValueError: a NUL byte in the path
        raise OpsError(f"cannot write {str(out)[:200]!r}: {getattr(error, 'strerror', None) or error}") from None
    rows = sorted(
        (p for points in [*data.evals.values(), *data.trains.values()] for p in points),
        key=lambda p: (p.run_id, p.step, p.source),
    )
    print_table(
        ("RUN", "STEP", "SOURCE", "SOLVE_RATE", "SOLVED", "CHAMPION"),
        [
            *(
                (
                    b.base_model_id,
                    None,
                    "baseline",
                    rate(b.solve_rate),
                    solved_text(b),
                    _star(baseline_leads(data.champions.get(b.base_model_id))),
                )
                for b in data.baselines
            ),
            *(
                (
                    p.run_id,
                    p.step,
                    p.source,
                    rate(p.solve_rate),
                    f"{p.n_solved}/{p.n_total}" if p.n_total else None,
                    _star(p in data.starred),
                )
                for p in rows
            ),
        ],
    )
    for stop in stops.values():
        steps = ", ".join(str(step) for step in stop.steps)
        print(f"run {stop.run_id} stopped by its {stop.guard} guard" + (f" at steps {steps}" if steps else "") + ":")
        print(f"  {stop.reason}")
    print(f"wrote {out}")
    return 0


def _star(champion: bool) -> str:
    return "*" if champion else ""


def register(commands: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]) -> None:
    """Add the `curve` command."""
    parser = add_command(
        commands,
        "curve",
        command,
        parents,
        "learning-curve PNG of solve rate per step",
        EPILOG,
        description="Plot solve rate per global step per run (fixed-set evaluations solid, in-training evals dashed), "
        "star the champion, draw the baseline (the base model with no adapter) as a dotted line, and print the points.",
    )
    parser.add_argument(
        "--run", action="append", metavar="RUN_ID", help="a run to plot (repeat; default: every run in the runs table)"
    )
    parser.add_argument("--base", metavar="BASE_MODEL_ID", help="only runs and results of this base model")
    parser.add_argument("--out", required=True, metavar="PNG", help="where to write the PNG")
