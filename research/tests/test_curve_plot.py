"""Learning-curve PNGs from grpo_curve folders: the start as step 0, the sampled fraction beside the held-out points."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image

from research.curve_plot import CurveRun, draw, load_run, main

C0 = np.array([0.122, 0.467, 0.706])  # matplotlib's first colour
C1 = np.array([1.0, 0.498, 0.055])  # its second
FAINT_C0 = 0.35 * C0 + 0.65  # C0 at alpha 0.35 over white


def _write_run(directory: Path, start_solved: int, held_out: dict[int, int], sampled: list[float | None]) -> Path:
    directory.mkdir(parents=True)
    points = [{"step": step, "solved": solved, "solve_rate": solved / 64} for step, solved in held_out.items()]
    (directory / "curve.json").write_text(json.dumps({"start_solved": start_solved, "held_out": points}))
    lines = [{"step": step, "solve_fraction": fraction} for step, fraction in enumerate(sampled, start=1)]
    (directory / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return directory


def _pixels_near(png: Path, color: np.ndarray) -> int:
    picture = image.imread(png)
    return int((np.abs(picture[..., :3] - color).max(axis=-1) < 0.04).sum())


def test_a_run_loads_with_its_start_as_step_0_and_skips_steps_without_a_sampled_fraction(tmp_path):
    run = load_run(_write_run(tmp_path / "lr2.5e-4", 30, {10: 36, 20: 40}, [0.5, None, 0.75]))
    assert run == CurveRun("lr2.5e-4", 30 / 64, [(0, 30 / 64), (10, 36 / 64), (20, 40 / 64)], [(1, 0.5), (3, 0.75)])


def test_a_run_without_metrics_has_no_sampled_points(tmp_path):
    directory = _write_run(tmp_path / "run", 30, {}, [])
    (directory / "metrics.jsonl").unlink()
    assert load_run(directory, "named") == CurveRun("named", 30 / 64, [(0, 30 / 64)], [])


@pytest.mark.parametrize("sampled, faint_expected", [([0.2, 0.9, 0.2, 0.9], True), ([], False)])
def test_the_sampled_fraction_is_drawn_faint_in_the_runs_colour(tmp_path, sampled, faint_expected):
    run = load_run(_write_run(tmp_path / "run", 16, {4: 48}, sampled))
    out = tmp_path / "curve.png"
    draw([run], "t", out)
    assert _pixels_near(out, C0) > 100  # the held-out line
    # The held-out line's anti-aliased edge has about 130 such pixels; the faint zigzag adds about 860.
    assert (_pixels_near(out, FAINT_C0) > 500) is faint_expected


def test_the_cli_draws_every_run_in_its_own_colour_and_prints_their_points(tmp_path, capsys):
    first = _write_run(tmp_path / "a", 30, {10: 34}, [0.5, 0.6])
    second = _write_run(tmp_path / "b", 30, {10: 36}, [0.5, 0.7])
    out = tmp_path / "compare.png"
    assert main([str(first), str(second), "--out", str(out)]) == 0
    assert _pixels_near(out, C0) > 100 and _pixels_near(out, C1) > 100
    printed = capsys.readouterr().out
    assert "a: step 0: 30, step 10: 34 (of 64 held-out)" in printed
    assert "b: step 0: 30, step 10: 36 (of 64 held-out)" in printed
