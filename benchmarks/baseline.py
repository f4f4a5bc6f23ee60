"""The base model's baseline, evaluated with the ops CLI before a benchmark uploads its adapters."""

from __future__ import annotations

from pathlib import Path

from local_stack.pipeline import BASE_MODEL_ID, MAZE_SIZE, PipelineFailed
from opsctl import cli


def evaluate_baseline(state_file: Path, interval_s: float) -> None:
    """Run `mazeops-ops baseline evaluate` for the local stack of ``state_file`` and wait for it.

    Done once per base model, as an operator does before its first adapter, so that every adapter's
    execution compares with a recorded baseline. Raises PipelineFailed when the command fails.
    """
    exit_code = cli.main(
        [
            "baseline",
            "evaluate",
            BASE_MODEL_ID,
            "--maze-size",
            str(MAZE_SIZE),
            "--interval",
            str(interval_s),
            "--local",
            "--local-state",
            str(state_file),
        ]
    )
    if exit_code != 0:
        raise PipelineFailed(f"`mazeops-ops baseline evaluate {BASE_MODEL_ID}` exited with {exit_code}")
