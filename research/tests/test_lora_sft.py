"""research.lora_sft trains what it says (GRPO's adapter, or the language model) on the start's own data."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import AutoModelForImageTextToText

from cluster_jobs.models.loading import load_processor
from local_stack.cluster_standins.tiny_model import build_tiny_qwen3_vl
from mazeops.runspec import LoraSpec
from research.lora_sft import LM_TARGETS, RESULT_FILE, main, start_data_config, train, trainable_model
from research.sft import answer_loss, collate, encode_samples, expert_samples

REPO = Path(__file__).resolve().parents[2]
START = REPO / "local_stack/cluster_standins/models/tiny-qwen3-vl-maze7"
GRPO_LORA = LoraSpec(target_modules=LM_TARGETS)  # the run spec's rank and alpha on the language model


def _model() -> torch.nn.Module:
    return AutoModelForImageTextToText.from_pretrained(START, dtype=torch.float32)


def test_the_data_is_the_starts_own_sft_data():
    stored = json.loads((START / "sft_report.json").read_text())["config"]
    assert "wall_bumps" not in stored  # saved before the field existed: it ran without them
    config = start_data_config(START)
    assert (config.maze_size, config.train_mazes, config.detour_prob, config.wall_bumps, config.seed) == (
        stored["maze_size"],
        stored["train_mazes"],
        stored["detour_prob"],
        False,
        stored["seed"],
    )
    assert start_data_config(START, train_mazes=3).train_mazes == 3
    wall_bumps_start = REPO / "research/results/sft-m9-d4-body-r920-cpu/checkpoint"
    assert start_data_config(wall_bumps_start).wall_bumps is True


def test_the_lora_trains_only_its_own_weights_and_the_full_mode_only_the_language_model():
    lora = trainable_model(_model(), GRPO_LORA)
    trained = {name for name, parameter in lora.named_parameters() if parameter.requires_grad}
    assert trained and all(".lora_" in name for name in trained)
    assert not any("visual" in name for name in trained)

    with_head = trainable_model(_model(), GRPO_LORA, also_train="lm_head,language_model.norm")
    trained = {name for name, parameter in with_head.named_parameters() if parameter.requires_grad}
    assert {name for name in trained if ".lora_" not in name} == {
        "base_model.model.lm_head.modules_to_save.default.weight",
        "base_model.model.model.language_model.norm.modules_to_save.default.weight",
    }

    full = trainable_model(_model(), None)
    trained = {name for name, parameter in full.named_parameters() if parameter.requires_grad}
    assert any("language_model" in name for name in trained)
    assert not any("visual" in name for name in trained)


def test_training_the_lora_lowers_the_answer_loss_and_leaves_the_base_weights_alone(tmp_path):
    untrained = build_tiny_qwen3_vl(
        tmp_path / "m", maze_size=7
    )  # random weights: far from the expert, so room to learn
    processor = load_processor(untrained)
    encoded = encode_samples(processor, expert_samples(start_data_config(START, train_mazes=2)), 0)[:8]
    model = trainable_model(AutoModelForImageTextToText.from_pretrained(untrained, dtype=torch.float32), GRPO_LORA)
    base_before = {name: p.detach().clone() for name, p in model.named_parameters() if not p.requires_grad}
    batch = collate(encoded, processor.tokenizer.pad_token_id)
    with torch.no_grad():
        before = answer_loss(model, batch)[0].item()
    evaluated = []
    train(
        model,
        encoded,
        processor.tokenizer.pad_token_id,
        steps=6,
        batch_size=8,
        lr=1e-2,
        seed=0,
        evaluate=evaluated.append,
        eval_every=3,
        log=lambda line: None,
    )
    with torch.no_grad():
        after = answer_loss(model, batch)[0].item()
    assert after < before
    assert evaluated == [3, 6]
    assert all(torch.equal(p, base_before[name]) for name, p in model.named_parameters() if not p.requires_grad)


def test_the_temperature_reaches_the_loss_it_trains_on():
    processor = load_processor(START)
    encoded = encode_samples(processor, expert_samples(start_data_config(START, train_mazes=1)), 0)[:4]
    trained = []
    for temperature in (1.0, 0.5):
        torch.manual_seed(0)  # the same initial LoRA
        model = trainable_model(_model(), GRPO_LORA)
        train(
            model,
            encoded,
            processor.tokenizer.pad_token_id,
            steps=1,
            batch_size=4,
            lr=1e-2,
            seed=0,
            evaluate=lambda step: None,
            eval_every=0,
            temperature=temperature,
        )
        trained.append({name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad})
    assert any(not torch.equal(trained[0][name], trained[1][name]) for name in trained[0])


def test_the_command_writes_the_curve_from_the_starts_own_score(tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        main(
            [
                "--base-model",
                str(START),
                "--steps",
                "2",
                "--eval-every",
                "2",
                "--train-mazes",
                "2",
                "--batch-size",
                "4",
                "--temperature",
                "0.5",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    result = json.loads((out / RESULT_FILE).read_text())
    assert result["temperature"] == 0.5
    assert [point["step"] for point in result["curve"]] == [0, 2]
    assert all(0 <= point["solved"] <= 64 for point in result["curve"])
    assert result["trains"].startswith("LoRA r 32") and result["command"].startswith("python -m research.lora_sft")
    printed = capsys.readouterr().out
    assert f"step 0: {result['curve'][0]['solved']}/64 held-out" in printed
