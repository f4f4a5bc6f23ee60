"""The GRPO curve benchmark: a rerun resumes the run in ``--out``, and only a run of the same spec."""

from __future__ import annotations

import json
import shutil

import pytest

import benchmarks.grpo_curve as grpo_curve
from benchmarks.grpo_curve import CurveMismatch, main
from cluster_jobs.train.metrics import TrainMetric, append_metric
from cluster_jobs.train.tiny_grpo import DynamicSamplingExhausted
from local_stack.pipeline import BASE_MODEL_DIR

QUICK = ["--base-model", str(BASE_MODEL_DIR), "--steps", "2", "--eval-interval", "2", "--ckpt-interval", "2", "--batch-mazes", "1",
         "--mini-batch-mazes", "1", "--samples", "2", "--train-max-turns", "2"]  # fmt: skip


def test_a_curve_cut_by_its_time_limit_resumes_and_records_each_call(tmp_path, one_torch_thread):
    argv = [*QUICK, "--stop-after", "0", "--out", str(tmp_path)]
    assert main(argv) == 0
    first = json.loads((tmp_path / "curve.json").read_text())
    assert (first["last_step"], first["complete"], first["held_out"]) == (1, False, [])
    assert main(argv) == 0
    second = json.loads((tmp_path / "curve.json").read_text())
    assert (second["last_step"], second["complete"]) == (2, True)
    assert [call["steps"] for call in second["calls"]] == [[1, 1], [2, 2]]
    assert second["start_solved"] == first["start_solved"]  # measured once, by the first call
    [point] = second["held_out"]
    assert point["step"] == 2 and point["solved"] == round(point["solve_rate"] * 64)
    assert [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert (tmp_path / "curve.png").stat().st_size > 0


def test_a_rerun_with_another_spec_is_refused_before_training(tmp_path):
    (tmp_path / "curve.json").write_text(json.dumps({"spec": {"learning_rate": 1.0}, "start_solved": 0, "calls": []}))
    with pytest.raises(CurveMismatch, match="another spec"):
        main([*QUICK, "--out", str(tmp_path)])
    assert sorted(path.name for path in tmp_path.iterdir()) == ["curve.json"]


def test_a_rerun_from_another_base_model_is_refused_before_training(tmp_path, one_torch_thread):
    out = tmp_path / "curve"
    assert main([*QUICK, "--stop-after", "0", "--out", str(out)]) == 0
    recorded = json.loads((out / "curve.json").read_text())
    other = tmp_path / "other-base"
    shutil.copytree(BASE_MODEL_DIR, other)
    with (other / "model.safetensors").open("ab") as weights:
        weights.write(b"\0")
    argv = [*QUICK, "--base-model", str(other), "--out", str(out)]  # a later --base-model wins
    with pytest.raises(CurveMismatch, match="another base model"):
        main(argv)
    assert json.loads((out / "curve.json").read_text()) == recorded
    # The same weights elsewhere are the same start: the run resumes.
    shutil.copyfile(BASE_MODEL_DIR / "model.safetensors", other / "model.safetensors")
    assert main(argv) == 0
    assert json.loads((out / "curve.json").read_text())["last_step"] == 2


def test_later_options_are_part_of_the_spec_only_when_set(tmp_path, one_torch_thread):
    assert main([*QUICK, "--stop-after", "0", "--out", str(tmp_path)]) == 0
    spec = json.loads((tmp_path / "curve.json").read_text())["spec"]
    assert not {"loss_reduction", "dynamic_sampling"} & set(spec)  # curves from before the options resume
    # The spec is parsed (an unknown key would fail there) before it is compared with the curve's.
    for option in (["--loss-reduction", "sequence_mean"], ["--dynamic-sampling", "4"]):
        with pytest.raises(CurveMismatch, match="another spec"):
            main([*QUICK, *option, "--out", str(tmp_path)])


def test_a_curve_sampled_at_an_explicit_temperature_is_another_run_than_the_default(tmp_path, one_torch_thread):
    assert main([*QUICK, "--temperature", "1.0", "--stop-after", "0", "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "curve.json").read_text())["spec"]["temperature"] == 1.0
    with pytest.raises(CurveMismatch, match="another spec"):
        main([*QUICK, "--out", str(tmp_path)])  # the default is the run spec's 0.7: another run


def test_a_call_the_trainer_stops_still_records_and_draws_its_steps_and_exits_1(tmp_path, monkeypatch, capsys):
    def trains_one_step_then_refuses(spec, paths, stop_after_s):
        paths.make_dirs()
        append_metric(paths.metrics_file, TrainMetric(step=1, reward_mean=0.5, solve_fraction=0.25))
        raise DynamicSamplingExhausted("dynamic sampling: 4 batches of 1 mazes gave 0 groups whose rewards differ, not 1")

    monkeypatch.setattr(grpo_curve, "train_tiny_grpo", trains_one_step_then_refuses)
    monkeypatch.setattr(grpo_curve, "start_solved", lambda base_model, maze_size: 30)
    assert main([*QUICK, "--dynamic-sampling", "4", "--out", str(tmp_path)]) == 1
    curve = json.loads((tmp_path / "curve.json").read_text())
    assert (curve["last_step"], curve["complete"], curve["start_solved"]) == (1, False, 30)
    [call] = curve["calls"]
    assert call["steps"] == [1, 1]
    assert call["error"] == "DynamicSamplingExhausted: dynamic sampling: 4 batches of 1 mazes gave 0 groups whose rewards differ, not 1"
    assert [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1]
    assert (tmp_path / "curve.png").stat().st_size > 0
    assert "step 1 of 2: training stopped: DynamicSamplingExhausted" in capsys.readouterr().err
