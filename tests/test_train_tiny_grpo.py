"""The tiny GRPO backend's parts: advantages, turn chats, answer log-probs, the loss, saving, refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from peft import LoraConfig, get_peft_model

from mazeops.runspec import parse_run_spec

from cluster_jobs.maze.eval_set import load_eval_set
from cluster_jobs.models.policy import VisionPolicy
from cluster_jobs.models.tiny import build_tiny_qwen3_vl
from cluster_jobs.rollout import run_episodes
from cluster_jobs.train.skyrl_launch import TrainPaths
from cluster_jobs.train.tiny_grpo import (
    LATEST_CKPT_FILE,
    TORCH_THREADS,
    TinyBackendError,
    TurnSample,
    answer_log_probs,
    group_advantages,
    policy_gradient_loss,
    save_checkpoint,
    save_export,
    train_tiny_grpo,
    turn_chats,
)

ANSWERS = ["('move', 0)", "<action>('move', 3)</action>", "nonsense"]


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """As the backend runs (TORCH_THREADS): the toy model is fastest on one thread, above all on a busy host."""
    threads = torch.get_num_threads()
    torch.set_num_threads(TORCH_THREADS)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory) -> Path:
    return build_tiny_qwen3_vl(tmp_path_factory.mktemp("tiny") / "tiny-qwen3-vl")


@pytest.fixture
def lora_policy(tiny_base):
    base = VisionPolicy.load(tiny_base, device="cpu")
    torch.manual_seed(0)
    model = get_peft_model(base.model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    return model, base.processor


def test_group_advantages():
    advantages = group_advantages([1.0, 0.0, 0.5, 0.5], group_size=2)
    assert advantages == pytest.approx([1.0, -1.0, 0.0, 0.0], abs=1e-5)
    with pytest.raises(ValueError, match="groups of 2"):
        group_advantages([1.0, 0.0, 0.5], group_size=2)


def test_turn_chats_are_the_chats_generate_received():
    received: list[tuple[list[dict], str]] = []

    def scripted(chats):
        answers = [ANSWERS[(len(received) + i) % len(ANSWERS)] for i in range(len(chats))]
        received.extend(zip(chats, answers))
        return answers

    episodes = run_episodes(scripted, load_eval_set().mazes[:2], max_turns=3, history_turns=1)
    rebuilt = [pair for episode in episodes for pair in turn_chats(episode, history_turns=1)]
    assert len(rebuilt) == len(received) == 6
    assert sorted(map(json.dumps, rebuilt)) == sorted(map(json.dumps, received))


def test_answer_mask_covers_the_answer_and_its_end_token(lora_policy):
    model, processor = lora_policy
    chats = [
        [{"role": "system", "content": "Solve it."}, {"role": "user", "content": text}] for text in ("a", "longer prompt")
    ]
    answers = ["('move', 0)", "<action>('stop', 'stop')</action>"]
    _, mask = answer_log_probs(model, processor, chats, answers)
    full = processor(text=processor.apply_chat_template(
        [[*chat, {"role": "assistant", "content": answer}] for chat, answer in zip(chats, answers)], tokenize=False
    ), padding=True, padding_side="left", return_tensors="pt")["input_ids"][:, 1:]  # fmt: skip
    for row, answer in enumerate(answers):
        assert processor.tokenizer.decode(full[row][mask[row]]) == answer + "<|im_end|>"


def test_a_positive_advantage_makes_the_answer_more_likely(lora_policy):
    model, processor = lora_policy
    chat = [{"role": "system", "content": "Solve it."}, {"role": "user", "content": "Here is the maze."}]
    samples = [TurnSample(chat, "('move', 0)", 1.0)]

    def answer_log_prob() -> float:
        with torch.no_grad():
            log_probs, mask = answer_log_probs(model, processor, [chat], ["('move', 0)"])
        return (log_probs * mask).sum().item()

    before = answer_log_prob()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(3):
        optimizer.zero_grad()
        policy_gradient_loss(model, processor, samples).backward()
        optimizer.step()
    assert answer_log_prob() > before + 0.1


def test_zero_advantage_gives_no_gradient(lora_policy):
    model, processor = lora_policy
    chat = [{"role": "system", "content": "Solve it."}, {"role": "user", "content": "Here is the maze."}]
    loss = policy_gradient_loss(model, processor, [TurnSample(chat, "('move', 1)", 0.0)])
    loss.backward()
    assert loss.item() == 0.0
    assert all(p.grad is None or not p.grad.any() for p in model.parameters() if p.requires_grad)


def test_saved_adapter_loads_into_the_evaluation_policy(lora_policy, tiny_base, tmp_path):
    model, _ = lora_policy
    (tmp_path / "exports").mkdir()
    adapter_dir = save_export(model, tmp_path / "exports", 2)
    save_export(model, tmp_path / "exports", 2)  # a rerun replaces the export
    save_checkpoint(model, tmp_path / "ckpts", 2)
    assert adapter_dir == tmp_path / "exports" / "global_step_2" / "policy"
    assert sorted(p.name for p in (tmp_path / "exports").iterdir()) == ["global_step_2"]
    assert json.loads((adapter_dir / "adapter_config.json").read_text())["r"] == 4
    assert (tmp_path / "ckpts" / "global_step_2" / "policy" / "lora_adapter" / "adapter_model.safetensors").is_file()
    assert (tmp_path / "ckpts" / LATEST_CKPT_FILE).read_text() == "2\n"
    evaluator = VisionPolicy.load(tiny_base, device="cpu")
    evaluator.add_adapter("step2", adapter_dir)
    assert evaluator.has_adapter("step2")


def test_only_the_tiny_model_trains_on_the_tiny_backend(tmp_path):
    spec = parse_run_spec(
        json.dumps({"base_model_id": "qwen3-vl-8b-sft", "backend": "tiny", "shared_dir": str(tmp_path)}),
        "run-a",
        {"qwen3-vl-8b-sft": str(tmp_path / "qwen")},
    )
    with pytest.raises(TinyBackendError, match="only 'tiny-qwen3-vl'"):
        train_tiny_grpo(spec, TrainPaths.for_run(spec))
    assert not (tmp_path / "qwen").exists()
