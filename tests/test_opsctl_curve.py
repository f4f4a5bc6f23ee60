"""`curve`: the learning-curve PNG and its table of points, from moto S3 results and the registry."""

from __future__ import annotations

import json

import boto3
import numpy as np
import pytest
from matplotlib import image
from opsctl_testing import BASE, Deployment, cli, make_champion, seed_adapter, seed_baseline

from mazeops.guards import EvalPoint, GuardVerdict, collapse_verdict
from mazeops.layout import train_metrics_key
from mazeops.runs import RunsTable
from mazeops.runspec import CollapseGuard
from opsctl.adapters import fixed_eval_set_sha256
from opsctl.curve import StopMark, stop_marks
from opsctl.queries.curves import CurvePoint
from opsctl.queries.runs import RunStop

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
GOLD = np.array([1.0, 0.843, 0.0])  # the champion star's face colour
BLUE = np.array([0.122, 0.467, 0.706])  # matplotlib C0, the first run's line
DIMGRAY = np.array([0.412, 0.412, 0.412])  # the baseline's dotted line and its label


@pytest.fixture
def history(deployment: Deployment) -> Deployment:
    """r1 evaluated at steps 10/20/30 (champion: step 20) with in-training evals; r2 at steps 10/20."""
    runs = RunsTable(boto3.client("dynamodb"), deployment.runs_table)
    for run_id in ("r1", "r2"):
        runs.create_run(run_id, f"runs/{run_id}/spec.json", "a" * 64, BASE, f"{deployment.training_arn}:train-{run_id}")
    for step, solved in ((10, 16), (20, 40), (30, 36)):
        seed_adapter(deployment, "r1", step, solved=solved)
    for step, solved in ((10, 8), (20, 24)):
        seed_adapter(deployment, "r2", step, solved=solved)
    make_champion(deployment, "r1-step20", "first adapter")
    lines = [
        {"step": 5, "reward_mean": 0.1, "eval_solve_rate": 0.125},
        {"step": 6, "reward_mean": 0.2},
        {"step": 10, "reward_mean": 0.3, "eval_solve_rate": 0.3},
        {"step": 20, "reward_mean": 0.5, "eval_solve_rate": 0.6},
    ]
    body = "\n".join(json.dumps(line) for line in lines) + "\n"
    deployment.s3.put_object(Bucket=deployment.bucket, Key=train_metrics_key("r1"), Body=body.encode())
    return deployment


def _pixels_near(picture: np.ndarray, color: np.ndarray) -> int:
    return int((np.abs(picture[..., :3] - color).max(axis=-1) < 0.06).sum())


def test_curve_writes_a_png_with_lines_and_the_champion_star(history, tmp_path, capsys):
    out = tmp_path / "curve.png"
    status, text, err = cli(capsys, "curve", "--out", str(out))
    assert (status, err) == (0, "")
    raw = out.read_bytes()
    assert raw.startswith(PNG_SIGNATURE) and len(raw) > 10_000
    picture = image.imread(out)
    height, width = picture.shape[:2]
    plot_area = picture[int(height * 0.12) : int(height * 0.88), int(width * 0.1) : int(width * 0.95), :3]
    assert (plot_area < 0.9).any(axis=-1).sum() > 2_000
    assert _pixels_near(plot_area, BLUE) > 200
    assert _pixels_near(plot_area, GOLD) > 50


def test_curve_prints_every_point_with_the_champion_marked(history, tmp_path, capsys):
    status, text, _ = cli(capsys, "curve", "--base", BASE, "--out", str(tmp_path / "curve.png"))
    assert status == 0
    lines = text.splitlines()
    assert lines[0].split() == ["RUN", "STEP", "SOURCE", "SOLVE_RATE", "SOLVED", "CHAMPION"]
    assert [line.split() for line in lines[1:-1]] == [
        ["r1", "5", "train", "0.125", "-", "-"],
        ["r1", "10", "eval", "0.250", "16/64", "-"],
        ["r1", "10", "train", "0.300", "-", "-"],
        ["r1", "20", "eval", "0.625", "40/64", "*"],
        ["r1", "20", "train", "0.600", "-", "-"],
        ["r1", "30", "eval", "0.562", "36/64", "-"],
        ["r2", "10", "eval", "0.125", "8/64", "-"],
        ["r2", "20", "eval", "0.375", "24/64", "-"],
    ]
    assert lines[-1] == f"wrote {tmp_path / 'curve.png'}"


def test_curve_of_chosen_runs_without_a_champion_among_them(history, tmp_path, capsys):
    out = tmp_path / "r2.png"
    status, text, _ = cli(capsys, "curve", "--run", "r2", "--out", str(out))
    assert status == 0
    assert [line.split()[:3] for line in text.splitlines()[1:-1]] == [["r2", "10", "eval"], ["r2", "20", "eval"]]
    assert "*" not in text
    assert _pixels_near(image.imread(out), GOLD) == 0


def test_curve_skips_malformed_metric_lines_with_a_note(history, tmp_path, capsys):
    history.s3.put_object(
        Bucket=history.bucket, Key=train_metrics_key("r2"), Body=b'{"step": 4, "eval_solve_rate": 0.5}\nnot json\n'
    )
    status, text, err = cli(capsys, "curve", "--run", "r2", "--out", str(tmp_path / "c.png"))
    assert status == 0
    assert f"skipped malformed line 2 of s3://{history.bucket}/runs/r2/metrics/train.jsonl" in err
    assert ["r2", "4", "train", "0.500"] in [line.split()[:4] for line in text.splitlines()]


def test_curve_refusals(history, tmp_path, capsys):
    status, _, err = cli(capsys, "curve", "--run", "r9", "--out", str(tmp_path / "c.png"))
    assert status == 2 and "no evaluation results or in-training evals for runs r9" in err
    status, _, err = cli(capsys, "curve", "--base", "llama-7b", "--out", str(tmp_path / "c.png"))
    assert status == 2 and "no runs of base model 'llama-7b'" in err
    status, _, err = cli(capsys, "curve", "--out", str(tmp_path / "missing" / "c.png"))
    assert status == 2 and "cannot write" in err
    assert not (tmp_path / "c.png").exists()


def _longest_row_near(picture: np.ndarray, color: np.ndarray) -> int:
    """How many pixels of `color` the image row with the most of them has (a horizontal line makes it long)."""
    return int((np.abs(picture[..., :3] - color).max(axis=-1) < 0.06).sum(axis=1).max())


def test_curve_draws_the_baseline_as_a_horizontal_line_labelled_with_its_solved_mazes(history, tmp_path, capsys):
    seed_baseline(history, solved=8)  # 0.125, below every evaluated point
    seed_baseline(history, solved=60, eval_set_sha256="e" * 64)  # another maze set: not plotted
    with_baseline, without = tmp_path / "with.png", tmp_path / "without.png"
    status, text, _ = cli(capsys, "curve", "--base", BASE, "--out", str(with_baseline))
    assert status == 0
    assert text.splitlines()[1].split() == [BASE, "-", "baseline", "0.125", "8/64", "-"]
    assert [line.split()[2] for line in text.splitlines()[1:-1]].count("baseline") == 1
    history.registry.client.delete_item(
        TableName=history.registry_table,
        Key={"base_model_id": {"S": BASE}, "adapter_name": {"S": f"#BASELINE#{fixed_eval_set_sha256()}"}},
    )
    cli(capsys, "curve", "--base", BASE, "--out", str(without))
    width = image.imread(with_baseline).shape[1]
    assert _longest_row_near(image.imread(with_baseline), DIMGRAY) > width * 0.2  # dotted: about a third of the row
    assert _longest_row_near(image.imread(without), DIMGRAY) < width * 0.1


def test_the_baseline_is_starred_while_it_is_the_champion(deployment, tmp_path, capsys):
    runs = RunsTable(boto3.client("dynamodb"), deployment.runs_table)
    runs.create_run("r1", "runs/r1/spec.json", "a" * 64, BASE, f"{deployment.training_arn}:train-r1")
    seed_adapter(deployment, "r1", 10, status="REJECTED", solved=10)
    seed_baseline(deployment, solved=9)
    status, text, _ = cli(capsys, "curve", "--out", str(tmp_path / "c.png"))
    assert status == 0
    assert [line.split() for line in text.splitlines()[1:-1]] == [
        [BASE, "-", "baseline", "0.141", "9/64", "*"],
        ["r1", "10", "eval", "0.156", "10/64", "-"],
    ]


# --- the evaluations that made a guard stop a run --------------------------------------------------

RED = np.array([1.0, 0.0, 0.0])  # the stop marks' colour


def _stopped_run(deployment: Deployment, run_id: str = "r3") -> GuardVerdict:
    """`run_id` evaluated at steps 20 (45/64), 40 (12/64) and 60 (10/64), then stopped by its collapse guard."""
    runs = RunsTable(boto3.client("dynamodb"), deployment.runs_table)
    runs.create_run(run_id, f"runs/{run_id}/spec.json", "a" * 64, BASE, f"{deployment.training_arn}:train-{run_id}")
    runs.set_status(run_id, "RUNNING")
    for step, solved in ((20, 45), (40, 12), (60, 10)):
        seed_adapter(deployment, run_id, step, solved=solved)
    points = [EvalPoint(20, 45, 64), EvalPoint(40, 12, 64), EvalPoint(60, 10, 64)]
    verdict = collapse_verdict(points, None, CollapseGuard())
    assert verdict is not None and verdict.steps == (40, 60)
    assert runs.mark_stopped(run_id, verdict)
    return verdict


def _point(run_id: str, step: int, solved: int) -> CurvePoint:
    return CurvePoint(run_id, step, "eval", solved / 64, BASE, solved, 64)


@pytest.mark.parametrize(
    ("stops", "expected"),
    [
        ({}, []),
        (
            {"r3": RunStop("r3", "collapse", "collapse: ...", (40, 60), None)},
            [StopMark("r3", "collapse", 40, 12 / 64), StopMark("r3", "collapse", 60, 10 / 64)],
        ),
        ({"r3": RunStop("r3", "collapse", "collapse: ...", (60, 80), None)}, [StopMark("r3", "collapse", 60, 10 / 64)]),
        ({"r3": RunStop("r3", "stall", "stall: ...", (), None)}, []),
        ({"r9": RunStop("r9", "collapse", "collapse: ...", (40,), None)}, []),
    ],
)
def test_stop_marks_are_the_plotted_evaluations_at_the_triggering_steps(stops, expected):
    evals = {
        "r1": [_point("r1", 20, 30), _point("r1", 40, 12)],
        "r3": [_point("r3", 20, 45), _point("r3", 40, 12), _point("r3", 60, 10)],
    }
    assert stop_marks(evals, stops) == expected


def test_curve_marks_the_evaluations_that_stopped_a_run_in_red(history, tmp_path, capsys):
    verdict = _stopped_run(history)
    stopped, other = tmp_path / "r3.png", tmp_path / "r2.png"
    status, text, _ = cli(capsys, "curve", "--run", "r3", "--out", str(stopped))
    assert status == 0
    assert text.splitlines()[-3:] == [
        "run r3 stopped by its collapse guard at steps 40, 60:",
        f"  {verdict.reason}",
        f"wrote {stopped}",
    ]
    assert _pixels_near(image.imread(stopped), RED) > 150
    status, text, _ = cli(capsys, "curve", "--run", "r2", "--out", str(other))
    assert status == 0 and "stopped" not in text
    assert _pixels_near(image.imread(other), RED) == 0


def test_a_run_stopped_by_another_guard_has_no_mark(history, tmp_path, capsys):
    runs = RunsTable(boto3.client("dynamodb"), history.runs_table)
    runs.set_status("r2", "RUNNING")
    assert runs.mark_stopped("r2", GuardVerdict("spend", "spend: 6 GPUs x 90.0 h = 540 GPU-hours", ()))
    status, text, _ = cli(capsys, "curve", "--run", "r2", "--out", str(tmp_path / "r2.png"))
    assert status == 0
    assert text.splitlines()[-3:-1] == [
        "run r2 stopped by its spend guard:",
        "  spend: 6 GPUs x 90.0 h = 540 GPU-hours",
    ]
    assert _pixels_near(image.imread(tmp_path / "r2.png"), RED) == 0
