"""The GRPO sweep's report: held-out points from each run's own metrics file, the start from its log."""

from __future__ import annotations

import json

from cluster_jobs.train.metrics import METRICS_FILE_NAME
from research.grpo_sweep import held_out_points, start_point


def test_held_out_points_are_the_evaluated_steps_of_the_metrics_file(tmp_path):
    metrics = tmp_path / "shared" / "maze-rl" / "grpo-curve" / "exports" / METRICS_FILE_NAME
    metrics.parent.mkdir(parents=True)
    rows = [{"step": 1, "eval_solve_rate": None}, {"step": 2, "eval_solve_rate": 0.546875}, {"step": 3}]
    metrics.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert held_out_points(tmp_path) == [(2, 35)]


def test_a_run_stopped_before_its_first_step_has_no_points_and_an_unknown_start(tmp_path):
    assert held_out_points(tmp_path) == []
    assert start_point(tmp_path / "run.log") == "?"
    (tmp_path / "run.log").write_text("loading\nSFT start: 35/64 held-out\nstep 1\n")
    assert start_point(tmp_path / "run.log") == "35/64"
