"""Several :mod:`research.grpo_curve` runs at once, one CPU core each, and a table of their held-out points.

Each run is stopped after ``--seconds``; its points come from its own ``metrics.jsonl``. Example::

    python -m research.grpo_sweep --base-model local_stack/cluster_standins/models/tiny-qwen3-vl-maze7 \\
        --out out/sweep --seconds 500 --run 'control=--lr 6e-4' --run 'lm2e-3=--lr 2e-3 --lora-targets q_proj,v_proj'
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from cluster_jobs.train.metrics import METRICS_FILE_NAME


def held_out_points(run_dir: Path) -> list[tuple[int, int]]:
    """``(step, solved of 64)`` for every held-out evaluation in the run's ``metrics.jsonl`` (none if absent)."""
    found = sorted(run_dir.glob(f"shared/**/{METRICS_FILE_NAME}"))
    if not found:
        return []
    points = []
    for line in found[0].read_text().splitlines():
        metric = json.loads(line)
        if metric.get("eval_solve_rate") is not None:
            points.append((metric["step"], round(metric["eval_solve_rate"] * 64)))
    return points


def start_point(log: Path) -> str:
    """The run's "SFT start: X/64" figure, from its log ("?" if it never printed one)."""
    if log.is_file():
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("SFT start:"):
                return line.split(":", 1)[1].split("held-out")[0].strip()
    return "?"


def main(argv: list[str] | None = None) -> int:
    """CLI entry (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-model", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seconds", type=int, default=500, help="each run is stopped after this many seconds")
    parser.add_argument("--run", action="append", required=True, help="NAME=grpo_curve flags (repeatable)")
    args = parser.parse_args(argv)
    environment = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    runs = {}
    for item in args.run:
        name, _, flags = item.partition("=")
        run_dir = args.out / name
        run_dir.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable,
            "-m",
            "research.grpo_curve",
            "--base-model",
            str(args.base_model),
            "--out",
            str(run_dir),
            *shlex.split(flags),
        ]
        with (run_dir / "run.log").open("w") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment)
        runs[name] = (flags, process)
    deadline = time.monotonic() + args.seconds
    for _, process in runs.values():
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for name, (flags, _) in runs.items():
        points = " ".join(f"{step}:{solved}" for step, solved in held_out_points(args.out / name))
        print(f"{name:12s} start {start_point(args.out / name / 'run.log'):>5s}  held-out {points or '-'}  [{flags}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
