"""Learning-curve PNGs of one or several :mod:`research.grpo_curve` folders.

Each run's held-out greedy points from its SFT start (step 0), and each step's sampled solve fraction on training
mazes beside them, fainter. Example::

    python -m research.curve_plot --out compare.png --title "by seed" \\
        out/grpo-9x9-lin30/seed-0 out/grpo-9x9-lin30/seed-1
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from cluster_jobs.maze.eval_set import EVAL_SET_SEEDS

HELD_OUT_MAZES = len(EVAL_SET_SEEDS)  # the fixed held-out set's mazes


@dataclass(frozen=True)
class CurveRun:
    """One run's points: ``(step, rate)`` pairs, the held-out ones starting with the start at step 0."""

    label: str
    start_rate: float
    held_out: list[tuple[int, float]]
    sampled: list[tuple[int, float]]


def load_run(directory: Path, label: str | None = None) -> CurveRun:
    """The curve of the run in ``directory`` (its ``curve.json`` and ``metrics.jsonl``), named ``label`` or the
    folder's name."""
    curve = json.loads((directory / "curve.json").read_text())
    start_rate = curve["start_solved"] / HELD_OUT_MAZES
    fork = curve.get("fork")  # a curve forked from another's checkpoint starts there, with that adapter's result
    first = (0, start_rate) if fork is None else (fork["step"], fork["solved"] / HELD_OUT_MAZES)
    held_out = [first] + [(point["step"], point["solve_rate"]) for point in curve["held_out"]]
    metrics_file = directory / "metrics.jsonl"
    lines = metrics_file.read_text().splitlines() if metrics_file.is_file() else []
    sampled = [
        (metric["step"], metric["solve_fraction"])
        for metric in map(json.loads, lines)
        if metric.get("solve_fraction") is not None
    ]
    return CurveRun(label or directory.name, start_rate, held_out, sampled)


def draw(runs: list[CurveRun], title: str, out: Path) -> None:
    """Every run's held-out line (markers) and sampled fraction (faint) in its own colour, each distinct start as a
    dotted line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4))
    for index, run in enumerate(runs):
        color = f"C{index}"
        name = "" if len(runs) == 1 else f"{run.label}: "
        axes.plot(*zip(*run.held_out, strict=False), marker="o", color=color, label=f"{name}held-out, greedy")
        if run.sampled:
            axes.plot(
                *zip(*run.sampled, strict=False),
                color=color,
                alpha=0.35,
                linewidth=1,
                label=f"{name}sampled, training mazes",
            )
    for start_rate in sorted({run.start_rate for run in runs}):
        axes.axhline(start_rate, linestyle=":", color="dimgray", label=f"SFT start: {start_rate:.1%}")
    axes.set(xlabel="GRPO step", ylabel="solve rate", ylim=(0, 1.02), title=title)
    axes.set_xlim(left=0)
    axes.grid(alpha=0.3)
    axes.legend(loc="best", fontsize="small", ncol=1 if len(runs) == 1 else 2)
    figure.tight_layout()
    figure.savefig(out, dpi=120)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    """CLI entry (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", type=Path, nargs="+", help="grpo_curve output folders")
    parser.add_argument("--out", type=Path, required=True, help="the PNG to write")
    parser.add_argument("--title", default="GRPO from the SFT start")
    args = parser.parse_args(argv)
    runs = [load_run(directory) for directory in args.runs]
    draw(runs, args.title, args.out)
    for run in runs:
        points = ", ".join(f"step {step}: {round(rate * HELD_OUT_MAZES)}" for step, rate in run.held_out)
        print(f"{run.label}: {points} (of {HELD_OUT_MAZES} held-out)")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
