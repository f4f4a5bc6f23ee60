"""research.grpo_curve: a rerun resumes the run in ``--out``, and only a run of the same spec; forks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from peft import LoraConfig, get_peft_model

import research.grpo_curve as grpo_curve
from cluster_jobs.models.policy import VisionPolicy
from cluster_jobs.train.metrics import TrainMetric, append_metric
from local_stack.cluster_standins.sft_start import file_sha256
from local_stack.cluster_standins.tiny_trainer.checkpoints import LATEST_CKPT_FILE, TRAINER_STATE_FILE
from local_stack.cluster_standins.tiny_trainer.trainer import DynamicSamplingExhausted, TinyGRPO
from local_stack.pipeline import BASE_MODEL_DIR
from research.curve_plot import load_run
from research.grpo_curve import CurveMismatch, ForkError, main

QUICK = [
    "--base-model",
    str(BASE_MODEL_DIR),
    "--steps",
    "2",
    "--eval-interval",
    "2",
    "--ckpt-interval",
    "2",
    "--batch-mazes",
    "1",
    "--mini-batch-mazes",
    "1",
    "--samples",
    "2",
    "--train-max-turns",
    "2",
]


def test_a_curve_cut_by_its_time_limit_resumes_and_records_each_invocation(tmp_path, one_torch_thread):
    argv = [*QUICK, "--stop-after", "0", "--out", str(tmp_path)]
    assert main(argv) == 0
    first = json.loads((tmp_path / "curve.json").read_text())
    assert (first["last_step"], first["complete"], first["held_out"]) == (1, False, [])
    assert main(argv) == 0
    second = json.loads((tmp_path / "curve.json").read_text())
    assert (second["last_step"], second["complete"]) == (2, True)
    assert [run["steps"] for run in second["invocations"]] == [[1, 1], [2, 2]]
    assert second["start_solved"] == first["start_solved"]  # measured once, by the first invocation
    [point] = second["held_out"]
    assert point["step"] == 2 and point["solved"] == round(point["solve_rate"] * 64)
    assert [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert (tmp_path / "curve.png").stat().st_size > 0


def test_a_rerun_with_another_spec_is_refused_before_training(tmp_path):
    other_spec = {"spec": {"learning_rate": 1.0}, "start_solved": 0, "invocations": []}
    (tmp_path / "curve.json").write_text(json.dumps(other_spec))
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
    assert not {"loss_reduction", "dynamic_sampling", "turn_cost", "grpo_norm_by_std", "lr_scheduler"} & set(
        spec
    )  # curves from before the options resume
    assert "seed_offset" not in spec["maze"]
    # The spec is parsed (an unknown key would fail there) before it is compared with the curve's.
    for option in (
        ["--loss-reduction", "sequence_mean"],
        ["--dynamic-sampling", "4"],
        ["--train-seed-offset", "1100000"],
        ["--turn-cost", "0.02"],
        ["--no-std-norm"],
        ["--lr-scheduler", "cosine"],
    ):
        with pytest.raises(CurveMismatch, match="another spec"):
            main([*QUICK, *option, "--out", str(tmp_path)])


def test_a_curve_sampled_at_an_explicit_temperature_is_another_run_than_the_default(tmp_path, one_torch_thread):
    assert main([*QUICK, "--temperature", "1.0", "--stop-after", "0", "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "curve.json").read_text())["spec"]["temperature"] == 1.0
    with pytest.raises(CurveMismatch, match="another spec"):
        main([*QUICK, "--out", str(tmp_path)])  # the default is the run spec's 0.7: another run


def test_a_curve_under_a_decaying_lr_records_its_scheduler_and_resumes_only_under_it(
    tmp_path, monkeypatch, one_torch_thread
):
    schedulers = []
    init = TinyGRPO.__init__

    def recording_init(self, spec, dtype=None):
        schedulers.append(spec.lr_scheduler)
        init(self, spec, dtype)

    monkeypatch.setattr(TinyGRPO, "__init__", recording_init)
    assert main([*QUICK, "--lr-scheduler", "linear", "--stop-after", "0", "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "curve.json").read_text())["spec"]["lr_scheduler"] == "linear"
    for other in ([], ["--lr-scheduler", "constant_with_warmup"], ["--lr-scheduler", "cosine"]):
        with pytest.raises(CurveMismatch, match="another spec"):
            main([*QUICK, *other, "--out", str(tmp_path)])
    assert main([*QUICK, "--lr-scheduler", "linear", "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "curve.json").read_text())["last_step"] == 2
    assert schedulers == ["linear", "linear"]  # the trainer of each invocation ran the spec's schedule


def test_a_float32_curve_records_it_and_resumes_only_as_one(tmp_path, monkeypatch, one_torch_thread):
    loaded = []
    load = VisionPolicy.load
    monkeypatch.setattr(
        VisionPolicy, "load", classmethod(lambda cls, *a, **k: loaded.append(k.get("dtype")) or load(*a, **k))
    )
    out = tmp_path / "curve"
    assert main([*QUICK, "--float32", "--stop-after", "0", "--out", str(out)]) == 0
    assert json.loads((out / "curve.json").read_text())["float32"] is True
    assert loaded == [torch.float32, torch.float32]  # the start's play, then the trainer
    with pytest.raises(CurveMismatch, match="with --float32"):
        main([*QUICK, "--out", str(out)])
    assert main([*QUICK, "--float32", "--out", str(out)]) == 0
    without = tmp_path / "default"
    assert main([*QUICK, "--stop-after", "0", "--out", str(without)]) == 0
    assert "float32" not in json.loads((without / "curve.json").read_text())
    with pytest.raises(CurveMismatch, match="without --float32"):
        main([*QUICK, "--float32", "--out", str(without)])


def test_an_invocation_the_trainer_stops_still_records_and_draws_its_steps_and_exits_1(tmp_path, monkeypatch, capsys):
    def trains_one_step_then_refuses(spec, paths, stop_after_s, dtype):
        paths.make_dirs()
        append_metric(paths.metrics_file, TrainMetric(step=1, reward_mean=0.5, solve_fraction=0.25))
        raise DynamicSamplingExhausted(
            "dynamic sampling: 4 batches of 1 mazes gave 0 groups whose rewards differ, not 1"
        )

    monkeypatch.setattr(grpo_curve, "train_tiny_grpo", trains_one_step_then_refuses)
    monkeypatch.setattr(grpo_curve, "start_solved", lambda base_model, maze_size, dtype: 30)
    assert main([*QUICK, "--dynamic-sampling", "4", "--out", str(tmp_path)]) == 1
    curve = json.loads((tmp_path / "curve.json").read_text())
    assert (curve["last_step"], curve["complete"], curve["start_solved"]) == (1, False, 30)
    [invocation] = curve["invocations"]
    assert invocation["steps"] == [1, 1]
    assert invocation["device"] == "cpu"  # the test machines have no GPU
    assert (
        invocation["error"]
        == "DynamicSamplingExhausted: dynamic sampling: 4 batches of 1 mazes gave 0 groups whose rewards differ, not 1"
    )
    assert [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1]
    assert (tmp_path / "curve.png").stat().st_size > 0
    assert "step 1 of 2: training stopped: DynamicSamplingExhausted" in capsys.readouterr().err


def _checkpoint(run: Path, step: int) -> Path:
    return run / "shared" / "maze-rl" / "grpo-curve" / "ckpts" / f"global_step_{step}"


def test_a_fork_goes_on_from_another_curves_checkpoint_exactly_as_that_curve_did(
    tmp_path, monkeypatch, one_torch_thread
):
    parent = tmp_path / "parent"
    assert main([*QUICK, "--stop-after", "0", "--out", str(parent)]) == 0  # a checkpoint at step 1
    assert main([*QUICK, "--out", str(parent)]) == 0  # step 2 from it
    measured = []
    real_start_solved = grpo_curve.start_solved

    def recording_start_solved(base_model, maze_size, adapter=None, dtype=None):
        measured.append(adapter)
        return real_start_solved(base_model, maze_size, adapter, dtype)

    monkeypatch.setattr(grpo_curve, "start_solved", recording_start_solved)
    fork = tmp_path / "fork"
    argv = [*QUICK, "--fork-from", str(_checkpoint(parent, 1)), "--out", str(fork)]
    assert main(argv) == 0

    curve = json.loads((fork / "curve.json").read_text())
    copied = _checkpoint(fork, 1) / "policy" / "lora_adapter"
    assert measured == [None, copied]  # the SFT start, then the forked adapter
    adapter_file = _checkpoint(parent, 1) / "policy" / "lora_adapter" / "adapter_model.safetensors"
    assert curve["fork"] == {
        "checkpoint": str(_checkpoint(parent, 1)),
        "step": 1,
        "adapter_sha256": file_sha256(adapter_file),
        "solved": curve["fork"]["solved"],
    }
    assert [run["steps"] for run in curve["invocations"]] == [[2, 2]]
    # The same spec from the same checkpoint: the fork's step 2 is the parent's, to the last digit.
    assert (fork / "metrics.jsonl").read_text() == (parent / "metrics.jsonl").read_text().splitlines(keepends=True)[1]
    assert load_run(fork).held_out[0] == (1, curve["fork"]["solved"] / 64)  # the curve starts at the fork
    # Rerunning the fork's command resumes it; the same folder without --fork-from is another curve.
    assert main(argv) == 0
    with pytest.raises(CurveMismatch, match="forked from"):
        main([*QUICK, "--out", str(fork)])


def test_the_forked_adapter_is_what_the_forks_first_point_measures(tmp_path, one_torch_thread):
    # An adapter whose LoRA B matrices are large wrecks greedy play: the measurement must use it.
    model = get_peft_model(
        VisionPolicy.load(BASE_MODEL_DIR, device="cpu").model,
        LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"),
    )
    torch.manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=1.0)
    model.save_pretrained(tmp_path / "wrecked")
    # The shipped 7x7 start alone solves 35 (research/RESULTS.md; every curve from it prints "SFT start: 35/64").
    assert grpo_curve.start_solved(BASE_MODEL_DIR, 7, adapter=tmp_path / "wrecked") == 0


@pytest.mark.parametrize("layout", ["not-a-step", "no-trainer-state"])
def test_a_fork_from_a_folder_that_is_not_a_checkpoint_is_refused(tmp_path, layout):
    folder = tmp_path / ("global_step_3" if layout == "no-trainer-state" else "checkpoint")
    (folder / "policy" / "lora_adapter").mkdir(parents=True)
    (folder / "policy" / "lora_adapter" / "adapter_model.safetensors").write_bytes(b"")
    with pytest.raises(ForkError, match="not a checkpoint folder"):
        main([*QUICK, "--fork-from", str(folder), "--out", str(tmp_path / "fork")])
    assert not (tmp_path / "fork" / "curve.json").exists()


def _fake_checkpoint(run: Path, step: int) -> Path:
    checkpoint = _checkpoint(run, step)
    (checkpoint / "policy" / "lora_adapter").mkdir(parents=True)
    (checkpoint / "policy" / "lora_adapter" / "adapter_model.safetensors").write_bytes(b"lora")
    (checkpoint / "policy" / TRAINER_STATE_FILE).write_bytes(b"state")
    return checkpoint


def test_a_fork_from_a_curve_of_another_base_model_is_refused(tmp_path):
    checkpoint = _fake_checkpoint(tmp_path / "parent", 3)
    (tmp_path / "parent" / "curve.json").write_text(json.dumps({"base_model_sha256": "0" * 64}))
    with pytest.raises(ForkError, match="another base model"):
        main([*QUICK, "--fork-from", str(checkpoint), "--out", str(tmp_path / "fork")])


def test_a_fork_into_a_folder_that_holds_checkpoints_is_refused(tmp_path, monkeypatch):
    checkpoint = _fake_checkpoint(tmp_path / "parent", 3)
    _fake_checkpoint(tmp_path / "fork", 2).parent.joinpath(LATEST_CKPT_FILE).write_text(
        "2\n"
    )  # a run's checkpoints, no curve
    monkeypatch.setattr(grpo_curve, "start_solved", lambda base_model, maze_size, adapter=None, dtype=None: 30)
    with pytest.raises(ForkError, match="already holds checkpoints"):
        main([*QUICK, "--fork-from", str(checkpoint), "--out", str(tmp_path / "fork")])
    assert not (_checkpoint(tmp_path / "fork", 3)).exists()
