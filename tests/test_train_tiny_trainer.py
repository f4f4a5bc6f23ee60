"""The tiny GRPO trainer: turn chats, answer masks, the GRPO update on the tiny model, metrics, saving, refusals."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file
from transformers import BatchFeature

from cluster_jobs.maze.eval_set import load_eval_set, training_seeds
from cluster_jobs.models.policy import VisionPolicy
from cluster_jobs.rollout import Episode, run_episodes, turn_chats
from cluster_jobs.train.metrics import TrainMetric, append_metric
from cluster_jobs.train.skyrl_launch import TrainPaths
from local_stack.cluster_standins.tiny_model import build_tiny_qwen3_vl
from local_stack.cluster_standins.tiny_trainer import trainer as trainer_module
from local_stack.cluster_standins.tiny_trainer.batches import encode_answers
from local_stack.cluster_standins.tiny_trainer.checkpoints import LATEST_CKPT_FILE, TRAINER_STATE_FILE, save_export
from local_stack.cluster_standins.tiny_trainer.grpo_loss import ADVANTAGE_EPS, group_advantages
from local_stack.cluster_standins.tiny_trainer.log_probs import token_log_probs, with_rope_positions
from local_stack.cluster_standins.tiny_trainer.train import step_metric, train_tiny_grpo
from local_stack.cluster_standins.tiny_trainer.trainer import (
    DynamicSamplingExhausted,
    TinyBackendError,
    TinyGRPO,
    informative_groups,
)
from local_stack.cluster_standins.tiny_trainer.update import MiniBatchStats, NonFiniteUpdateError
from local_stack.pipeline import BASE_MODEL_DIR
from mazeops.runspec import parse_run_spec

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest: as the backend runs

ANSWERS = ["('move', 0)", "<action>('move', 3)</action>", "nonsense"]
# One answer per sample: two mazes x two samples.
SAMPLED = ["('move', 0)", "<action>('move', 1)</action>", "('move', 2)", "('stop', 'stop')"]


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory) -> Path:
    return build_tiny_qwen3_vl(tmp_path_factory.mktemp("tiny") / "tiny-qwen3-vl")


@pytest.fixture
def lora_policy(tiny_base):
    base = VisionPolicy.load(tiny_base, device="cpu")
    torch.manual_seed(0)
    model = get_peft_model(base.model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    return model, base.processor


def tiny_spec(tiny_base: Path, shared_dir: Path, **fields):
    """Two mazes x two samples, one turn each, two mini-batches of one maze, a high learning rate."""
    document = {
        "base_model_id": "tiny-qwen3-vl",
        "backend": "tiny",
        "shared_dir": str(shared_dir),
        "total_steps": 1,
        "train_batch_size": 2,
        "policy_mini_batch_size": 1,
        "n_samples_per_prompt": 2,
        "max_turns": 1,
        "learning_rate": 1e-2,
        "lora": {"rank": 4, "alpha": 8},
        "maze": {"size": 7, "train_mazes": 4},
        **fields,
    }
    return parse_run_spec(json.dumps(document), "tiny-test", {"tiny-qwen3-vl": str(tiny_base)})


def played(rewards: list[float], answers: list[str] = SAMPLED, group_size: int = 2) -> list[Episode]:
    """One-turn episodes on the first eval mazes (``group_size`` samples each) with scripted answers and rewards."""
    mazes = [maze for maze in load_eval_set().mazes[: len(rewards) // group_size] for _ in range(group_size)]
    episodes = run_episodes(lambda chats: answers[: len(chats)], mazes, max_turns=1)
    return [replace(episode, reward=reward) for episode, reward in zip(episodes, rewards, strict=False)]


def answer_log_prob(trainer: TinyGRPO, episode: Episode) -> float:
    """The log-prob of the episode's (only) answer under the trainer's current policy."""
    [(chat, answer)] = turn_chats(episode, 1)
    with torch.no_grad():
        inputs, mask = encode_answers(trainer.processor, [chat], [answer])
        return token_log_probs(trainer.model, inputs, trainer.spec.temperature)[mask].sum().item()


def test_turn_chats_are_the_chats_generate_received():
    received: list[tuple[list[dict], str]] = []

    def scripted(chats):
        answers = [ANSWERS[(len(received) + i) % len(ANSWERS)] for i in range(len(chats))]
        received.extend(zip(chats, answers, strict=False))
        return answers

    episodes = run_episodes(scripted, load_eval_set().mazes[:2], max_turns=3, history_turns=1)
    rebuilt = [pair for episode in episodes for pair in turn_chats(episode, history_turns=1)]
    assert len(rebuilt) == len(received) == 6
    assert sorted(map(json.dumps, rebuilt)) == sorted(map(json.dumps, received))


def test_answer_mask_covers_the_answer_and_its_end_token(lora_policy):
    _, processor = lora_policy
    chats = [
        [{"role": "system", "content": "Solve it."}, {"role": "user", "content": text}]
        for text in ("a", "longer prompt")
    ]
    answers = ["('move', 0)", "<action>('stop', 'stop')</action>"]
    inputs, mask = encode_answers(processor, chats, answers)
    # The template's own encoding of each answered chat, without the newline it adds after <|im_end|>.
    answered = [[*chat, {"role": "assistant", "content": answer}] for chat, answer in zip(chats, answers, strict=True)]
    texts = [text.removesuffix("\n") for text in processor.apply_chat_template(answered, tokenize=False)]
    full = processor(text=texts, padding=True, padding_side="left", return_tensors="pt")["input_ids"]
    assert torch.equal(inputs["input_ids"], full)
    for row, answer in enumerate(answers):
        assert processor.tokenizer.decode(full[row, 1:][mask[row]]) == answer + "<|im_end|>"


def test_any_answer_bytes_encode_after_their_prompt(lora_policy):
    """A sampled answer is appended to its prompt's tokens as generated: no merge across the boundary."""
    _, processor = lora_policy
    chat = [{"role": "system", "content": "Solve it."}, {"role": "user", "content": "go"}]
    answers = ["\n('move', 0)", " <|im_start|>x", "\ufffd\x05J an</", ""]
    inputs, mask = encode_answers(processor, [chat] * len(answers), answers)
    prompt = processor.tokenizer(processor.apply_chat_template([chat], tokenize=False, add_generation_prompt=True)[0])
    for row, answer in enumerate(answers):
        ids = inputs["input_ids"][row][inputs["attention_mask"][row].bool()].tolist()
        expected = processor.tokenizer(answer, add_special_tokens=False)["input_ids"] + [
            processor.tokenizer.eos_token_id
        ]
        assert ids == prompt["input_ids"] + expected
        assert inputs["input_ids"][row, 1:][mask[row]].tolist() == expected


def test_answer_mask_leaves_out_the_prompt_earlier_turns_and_image_tokens(lora_policy):
    _, processor = lora_policy
    [episode] = run_episodes(lambda chats: ["('move', 0)"], load_eval_set().mazes[:1], max_turns=2, history_turns=1)
    (chat, answer) = turn_chats(episode, 1)[1]  # system prompt, first observation + answer, second observation
    inputs, mask = encode_answers(processor, [chat], [answer])
    targets = inputs["input_ids"][:, 1:]
    image_pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert (targets == image_pad).sum() == 2 * 16  # both observations' images are in the sequence
    assert not (targets[mask] == image_pad).any()
    answer_tokens = processor.tokenizer(answer + "<|im_end|>")["input_ids"]
    assert mask.sum() == len(answer_tokens) and targets[mask].tolist() == answer_tokens


def test_rope_positions_computed_once_score_as_the_model_computes_them(lora_policy):
    model, processor = lora_policy
    # two-turn episodes (two images per chat) with answers of different lengths: left padding
    mazes = load_eval_set().mazes[:3]
    episodes = run_episodes(lambda chats: [SAMPLED[0], SAMPLED[1], "nonsense"][: len(chats)], mazes, max_turns=2)
    turns = [pair for episode in episodes for pair in turn_chats(episode, 1)]
    inputs, mask = encode_answers(processor, [chat for chat, _ in turns], [answer for _, answer in turns])
    assert len(set(inputs["attention_mask"].sum(dim=1).tolist())) > 1 and inputs["image_grid_thw"].shape[0] > len(turns)
    positioned = with_rope_positions(model, inputs)
    assert positioned["position_ids"].shape == (3, *inputs["input_ids"].shape) and "position_ids" not in inputs
    with torch.no_grad():
        assert torch.equal(token_log_probs(model, positioned, 1.0), token_log_probs(model, inputs, 1.0))
        # the positions matter: plain 1-D text positions score the same tokens differently
        text_only = BatchFeature({**inputs, "position_ids": inputs["attention_mask"].cumsum(-1) - 1})
        assert not torch.allclose(
            token_log_probs(model, text_only, 1.0)[mask], token_log_probs(model, inputs, 1.0)[mask]
        )


def test_the_first_mini_batch_has_ratio_one_and_later_ones_see_the_update(tiny_base, tmp_path):
    torch.manual_seed(0)
    trainer = TinyGRPO(tiny_spec(tiny_base, tmp_path))
    first, second = trainer.update(played([1.0, 0.0, 1.0, 0.0]))
    assert first.tokens > 0 and first.ratio_sum == pytest.approx(first.tokens, abs=1e-5)
    assert first.ratio_max == pytest.approx(1.0, abs=1e-6) and first.clipped == 0
    # the second mini-batch was sampled by the weights before the first step: its ratios moved
    assert second.tokens > 0 and abs(second.ratio_max - 1.0) > 1e-2
    assert abs(second.ratio_sum / second.tokens - 1.0) > 1e-3
    assert first.kl is None and second.kl is None


def test_a_non_finite_loss_is_refused_before_the_optimizer_step(tiny_base, tmp_path):
    torch.manual_seed(0)
    trainer = TinyGRPO(tiny_spec(tiny_base, tmp_path))
    poisoned, *others = trainer.trainable
    with torch.no_grad():
        poisoned.fill_(float("nan"))
    before = [p.detach().clone() for p in others]
    with pytest.raises(NonFiniteUpdateError, match="no step taken") as refused:
        trainer.update(played([1.0, 0.0, 1.0, 0.0]))
    assert all(torch.equal(p, q) for p, q in zip(others, before, strict=True))
    # The error says where: the LoRA's NaN is in every answer token's log-prob, under the policy being
    # trained and under the sampling policy (the same LoRA).
    tokens = re.search(
        r"micro-batch 0: non-finite log-probs at (\d+) and (\d+) of (\d+) answer tokens "
        r"\(policy, sampling policy\)",
        str(refused.value),
    )
    assert tokens is not None and tokens[1] == tokens[2] == tokens[3] != "0"


def test_a_non_finite_sampling_log_prob_is_named_in_the_refusal(tiny_base, tmp_path):
    # With the KL term the reference's log-probs are counted too.
    trainer = TinyGRPO(tiny_spec(tiny_base, tmp_path, policy_mini_batch_size=2, use_kl_loss=True, kl_loss_coef=0.05))
    batch = trainer.prepare(played([1.0, 0.0, 1.0, 0.0]), [-1.0, 1.0, -1.0, 1.0])
    first, *rest = batch.micro_batches
    old = first.old_log_probs.clone()
    # one answer token (a -inf would not do: the log-ratio is clamped)
    old[tuple(first.mask.nonzero()[0])] = float("nan")
    where = (
        r"micro-batch 0: non-finite log-probs at 0, 1 and 0 of \d+ answer tokens \(policy, sampling policy, reference\)"
    )
    with pytest.raises(NonFiniteUpdateError, match=where):
        trainer.train_mini_batch(replace(batch, micro_batches=[replace(first, old_log_probs=old), *rest]))


@pytest.mark.parametrize(("fields", "expected_loss"), [({}, math.exp(8.0)), ({"policy_loss_type": "dual_clip"}, 3.0)])
def test_the_spec_picks_the_policy_loss(tiny_base, tmp_path, fields, expected_loss):
    # Every answer token made e^8 times likelier than when it was sampled, with advantage -1: the
    # regular loss is the ratio itself, the dual-clip one SkyRL's default cap clip_ratio_c = 3.
    trainer = TinyGRPO(tiny_spec(tiny_base, tmp_path, policy_mini_batch_size=2, **fields))
    batch = trainer.prepare(played([1.0, 0.0, 1.0, 0.0]), [-1.0] * 4)
    shifted = [replace(micro, old_log_probs=micro.old_log_probs - 8.0) for micro in batch.micro_batches]
    stats = trainer.train_mini_batch(replace(batch, micro_batches=shifted))
    assert stats.loss == pytest.approx(expected_loss, rel=1e-4)


@pytest.mark.parametrize("loss_reduction", ["token_mean", "sequence_mean"])
def test_the_spec_picks_the_loss_reduction(tiny_base, tmp_path, loss_reduction):
    # Every answer token made e^8 times likelier than when it was sampled; advantages -1 and -2 for
    # two one-turn episodes of different lengths: the token mean weighs each by its tokens, the
    # sequence mean each episode alike.
    trainer = TinyGRPO(tiny_spec(tiny_base, tmp_path, policy_mini_batch_size=2, loss_reduction=loss_reduction))
    batch = trainer.prepare(played([1.0, 0.0, 1.0, 0.0])[:2], [-1.0, -2.0])
    [micro] = batch.micro_batches
    first, second = (int(tokens) for tokens in micro.mask.sum(dim=1))
    assert first != second
    shifted = replace(micro, old_log_probs=micro.old_log_probs - 8.0)
    stats = trainer.train_mini_batch(replace(batch, micro_batches=[shifted]))
    token_mean, sequence_mean = (first * 1.0 + second * 2.0) / (first + second), (1.0 + 2.0) / 2
    expected = token_mean if loss_reduction == "token_mean" else sequence_mean
    assert stats.loss == pytest.approx(math.exp(8.0) * expected, rel=1e-4)


NORMALIZED = 0.4 / (math.sqrt(0.32) + ADVANTAGE_EPS)


@pytest.mark.parametrize(
    ("fields", "expected"), [({}, [NORMALIZED, -NORMALIZED]), ({"grpo_norm_by_std": False}, [0.4, -0.4])]
)
def test_the_spec_picks_the_advantage_normalization(tiny_base, tmp_path, monkeypatch, fields, expected):
    # Rewards 0.8 and 0.0 in each group of two: over the group's std (sqrt(0.32)) by default, in reward units
    # with grpo_norm_by_std false (Dr. GRPO).
    trainer = TinyGRPO(tiny_spec(tiny_base, tmp_path, **fields))
    seen: list[float] = []
    prepare = trainer.prepare
    monkeypatch.setattr(
        trainer, "prepare", lambda episodes, advantages: seen.extend(advantages) or prepare(episodes, advantages)
    )
    trainer.update(played([0.8, 0.0, 0.8, 0.0]))
    assert seen == pytest.approx(expected * 2, rel=1e-6)


def test_the_lr_warms_up_from_zero_over_lr_warmup_steps(tiny_base, tmp_path):
    torch.manual_seed(0)
    trainer = TinyGRPO(tiny_spec(tiny_base, tmp_path, lr_warmup_steps=4))
    first, second = trainer.update(played([1.0, 0.0, 1.0, 0.0]))
    # the first optimizer step ran at lr 0: the second mini-batch still meets the sampling policy
    assert second.tokens > 0 and second.ratio_max == pytest.approx(1.0, abs=1e-6)
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(1e-2 * 2 / 4)
    trainer.update(played([1.0, 0.0, 1.0, 0.0]))
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(1e-2)


def _cosine(progress: float) -> float:
    return 0.5 * (1 + math.cos(math.pi * progress))


@pytest.mark.parametrize(
    ("fields", "factors"),
    [
        # Four GRPO steps of two mini-batches: eight optimizer steps; the factor after each GRPO step (2, 4, 6, 8).
        ({}, [1.0, 1.0, 1.0, 1.0]),
        ({"lr_scheduler": "linear"}, [0.75, 0.5, 0.25, 0.0]),
        ({"lr_scheduler": "cosine"}, [_cosine(1 / 4), 0.5, _cosine(3 / 4), 0.0]),
        # the decay starts after the warmup: 2 of the 8 steps
        ({"lr_scheduler": "linear", "lr_warmup_steps": 2}, [1.0, 4 / 6, 2 / 6, 0.0]),
        # two epochs: four optimizer steps per GRPO step, sixteen in all
        ({"lr_scheduler": "linear", "update_epochs_per_batch": 2}, [0.75, 0.5, 0.25, 0.0]),
        # a step trains on train_batch_size groups however many batches it played: the same eight steps
        ({"lr_scheduler": "cosine", "dynamic_sampling": "filter"}, [_cosine(1 / 4), 0.5, _cosine(3 / 4), 0.0]),
    ],
    ids=["constant", "linear", "cosine", "linear-after-warmup", "linear-two-epochs", "cosine-dynamic-sampling"],
)
def test_a_decaying_lr_reaches_0_at_the_runs_last_optimizer_step(tiny_base, tmp_path, fields, factors):
    torch.manual_seed(0)
    trainer = TinyGRPO(tiny_spec(tiny_base, tmp_path, total_steps=4, **fields))
    lrs = []
    for _ in range(4):
        trainer.update(played([1.0, 0.0, 1.0, 0.0]))
        lrs.append(trainer.optimizer.param_groups[0]["lr"])
    assert lrs == pytest.approx([1e-2 * factor for factor in factors], abs=1e-12)


def test_each_epoch_steps_every_mini_batch_against_the_sampling_policy(tiny_base, tmp_path):
    torch.manual_seed(0)
    trainer = TinyGRPO(tiny_spec(tiny_base, tmp_path, update_epochs_per_batch=2))
    stats = trainer.update(played([1.0, 0.0, 1.0, 0.0]))
    assert len(stats) == 4  # 2 epochs x 2 mini-batches
    assert stats[0].ratio_max == pytest.approx(1.0, abs=1e-6)
    # the second epoch's first mini-batch is scored against the log-probs recorded before any step
    assert abs(stats[2].ratio_sum / stats[2].tokens - 1.0) > 1e-3


def test_a_positive_advantage_makes_the_answer_more_likely(tiny_base, tmp_path):
    torch.manual_seed(0)
    trainer = TinyGRPO(tiny_spec(tiny_base, tmp_path))
    episodes = played([1.0, 0.0, 1.0, 0.0])
    before = [answer_log_prob(trainer, episode) for episode in episodes]
    for _ in range(3):
        trainer.update(episodes)
    after = [answer_log_prob(trainer, episode) for episode in episodes]
    assert after[0] > before[0] + 0.1 and after[2] > before[2] + 0.1
    assert after[1] < before[1] - 0.1 and after[3] < before[3] - 0.1


def test_zero_variance_groups_are_skipped_but_their_tokens_count(tiny_base, tmp_path):
    trainer = TinyGRPO(tiny_spec(tiny_base, tmp_path, policy_mini_batch_size=2))
    episodes = played([0.5, 0.5, 1.0, 0.0])
    advantages = group_advantages(torch.tensor([e.reward for e in episodes]), 2).tolist()
    assert advantages[:2] == [0.0, 0.0]
    batch = trainer.prepare(episodes, advantages)
    all_turns = [pair for episode in episodes for pair in turn_chats(episode, 1)]
    _, all_mask = encode_answers(trainer.processor, [chat for chat, _ in all_turns], [a for _, a in all_turns])
    assert (batch.turns, batch.tokens) == (4, int(all_mask.sum()))
    [micro] = batch.micro_batches
    assert micro.advantages.flatten().tolist() == pytest.approx(advantages[2:])  # only the second maze's samples
    assert micro.mask.sum() < batch.tokens and micro.ref_log_probs is None


def test_a_step_of_zero_variance_groups_trains_no_token(tiny_base, tmp_path):
    trainer = TinyGRPO(tiny_spec(tiny_base, tmp_path))
    stats = trainer.update(played([1.0, 1.0, 0.0, 0.0]))
    assert [(stat.tokens, stat.loss, stat.ratio_max) for stat in stats] == [(0, 0.0, None), (0, 0.0, None)]
    metric = step_metric(1, played([1.0, 1.0, 0.0, 0.0]), 2, stats, None)
    assert (metric.zero_variance_fraction, metric.ratio_mean, metric.clip_fraction) == (1.0, None, None)


def test_kl_is_measured_against_the_model_without_its_lora(tiny_base, tmp_path):
    torch.manual_seed(0)
    trainer = TinyGRPO(tiny_spec(tiny_base, tmp_path, use_kl_loss=True, kl_loss_coef=0.1, policy_mini_batch_size=2))
    episodes = played([0.5, 0.5, 1.0, 0.0])
    batch = trainer.prepare(episodes, group_advantages(torch.tensor([e.reward for e in episodes]), 2).tolist())
    [micro] = batch.micro_batches
    # with the KL term every turn trains, zero-variance ones included; a fresh LoRA is the reference
    assert micro.mask.shape[0] == 4 and int(micro.mask.sum()) == batch.tokens
    assert torch.equal(micro.ref_log_probs, micro.old_log_probs)
    [first] = trainer.update(episodes)
    [second] = trainer.update(episodes)
    assert first.kl == 0.0 and second.kl > 0.0
    with torch.no_grad(), trainer.model.disable_adapter():
        reference = token_log_probs(trainer.model, micro.inputs, trainer.spec.temperature)
    assert torch.equal(reference, micro.ref_log_probs)


def scored(seed: int, rewards: list[float]) -> list[Episode]:
    """Episodes of the maze ``seed`` with these rewards (one group); a reward of 1.0 is a solve."""
    return [
        Episode(seed=seed, solved=reward == 1.0, turns=1, error=None, reward=reward, messages=[]) for reward in rewards
    ]


def test_step_metric_aggregates_the_step():
    episodes = scored(0, [1.0, 0.2]) + scored(1, [0.2, 0.2])
    stats = [
        MiniBatchStats(loss=0.5, kl=None, tokens=10, ratio_sum=11.0, ratio_max=1.3, clipped=2),
        MiniBatchStats(loss=-0.1, kl=None, tokens=0, ratio_sum=0.0, ratio_max=None, clipped=0),
    ]
    metric = step_metric(7, episodes, 2, stats, 0.25)
    assert json.loads(metric.to_json()) == {
        "step": 7,
        "reward_mean": pytest.approx(0.4),
        "eval_solve_rate": 0.25,
        "solve_fraction": 0.25,
        "zero_variance_fraction": 0.5,
        "loss": pytest.approx(0.2),
        "ratio_mean": pytest.approx(1.1),
        "ratio_max": 1.3,
        "clip_fraction": 0.2,
    }


@pytest.mark.parametrize(
    ("groups", "kept"),
    [
        ([[1.0, 1.0], [0.2, 1.0]], [1]),
        ([[0.2, 0.2], [0.2, 0.2]], []),
        ([[0.2, 1.0], [1.0, 0.2], [0.5, 0.5]], [0, 1]),
        ([[0.2, 0.2, 0.2], [0.2, 0.2, 0.3]], [1]),  # a format score alone differs: the group has an advantage
    ],
)
def test_informative_groups_keeps_the_groups_whose_rewards_differ_in_order(groups, kept):
    episodes = [episode for seed, rewards in enumerate(groups) for episode in scored(seed, rewards)]
    result = informative_groups(episodes, len(groups[0]))
    assert [episode.seed for episode in result[:: len(groups[0])]] == kept
    assert result == [episode for episode in episodes if episode.seed in kept]


@given(st.lists(st.lists(st.sampled_from([0.2, 0.6, 1.0]), min_size=3, max_size=3), max_size=8))
def test_informative_groups_drops_exactly_the_constant_groups(groups):
    episodes = [episode for seed, rewards in enumerate(groups) for episode in scored(seed, rewards)]
    result = informative_groups(episodes, 3)
    assert [episode.seed for episode in result[::3]] == [
        seed for seed, rewards in enumerate(groups) if len(set(rewards)) > 1
    ]
    assert len(result) % 3 == 0


def scripted_rollout(trainer: TinyGRPO, rewards_by_seed: dict[int, list[float]], played_seeds: list[int]):
    """Stand in for ``trainer.rollout``: each maze's group gets its seed's scripted rewards; the seeds played are
    recorded."""

    def rollout(mazes):
        played_seeds.extend(maze.seed for maze in mazes)
        return [episode for maze in mazes for episode in scored(maze.seed, rewards_by_seed[maze.seed])]

    trainer.rollout = rollout


# Training seeds 0..7 of a scripted run: which ones give a group with an advantage.
MIXED, SAME = [0.2, 1.0], [1.0, 1.0]


def test_without_dynamic_sampling_a_step_trains_on_its_one_batch(tiny_base, tmp_path):
    trainer = TinyGRPO(tiny_spec(tiny_base, tmp_path))
    seeds, played_seeds = list(range(8)), []
    scripted_rollout(trainer, dict.fromkeys(seeds, SAME), played_seeds)
    trained, played = trainer.sample_step(seeds)
    assert trained == played and [episode.seed for episode in trained] == [0, 0, 1, 1]
    assert trainer.sample_step(seeds)[0][0].seed == 2  # the next step takes the next batch
    assert played_seeds == [0, 1, 2, 3] and trainer.batches_drawn == 2


def test_dynamic_sampling_plays_batches_until_it_has_a_batch_of_groups_with_an_advantage(tiny_base, tmp_path):
    trainer = TinyGRPO(tiny_spec(tiny_base, tmp_path, dynamic_sampling="filter", dynamic_sampling_max_batches=3))
    seeds, played_seeds = list(range(8)), []
    scripted_rollout(
        trainer, {0: SAME, 1: MIXED, 2: MIXED, 3: MIXED, 4: SAME, 5: SAME, 6: MIXED, 7: MIXED}, played_seeds
    )
    trained, played = trainer.sample_step(seeds)
    # Batch 1 (mazes 0, 1) keeps maze 1; batch 2 (2, 3) fills the step with maze 2; maze 3 is left out.
    assert [episode.seed for episode in trained] == [1, 1, 2, 2]
    assert [episode.seed for episode in played] == [0, 0, 1, 1, 2, 2, 3, 3]
    # The next step starts after the batches played: 4, 5 (nothing), then 6, 7.
    trained, played = trainer.sample_step(seeds)
    assert [episode.seed for episode in trained] == [6, 6, 7, 7] and len(played) == 8
    assert played_seeds == list(range(8)) and trainer.batches_drawn == 4


def test_dynamic_sampling_stops_the_run_after_its_last_batch_without_enough_groups(tiny_base, tmp_path):
    trainer = TinyGRPO(tiny_spec(tiny_base, tmp_path, dynamic_sampling="filter", dynamic_sampling_max_batches=2))
    played_seeds = []
    scripted_rollout(trainer, {0: SAME, 1: MIXED, 2: SAME, 3: SAME}, played_seeds)
    with pytest.raises(
        DynamicSamplingExhausted, match="2 batches of 2 mazes gave 1 groups whose rewards differ, not 2"
    ):
        trainer.sample_step(list(range(4)))
    assert played_seeds == [0, 1, 2, 3]


def test_train_tiny_grpo_logs_grpo_metrics_and_saves_adapters(tiny_base, tmp_path):
    spec = tiny_spec(tiny_base, tmp_path, train_batch_size=1, use_kl_loss=True)
    paths = TrainPaths.for_run(spec)
    [metric] = train_tiny_grpo(spec, paths)
    [line] = [json.loads(line) for line in paths.metrics_file.read_text().splitlines()]
    assert line == json.loads(metric.to_json())
    expected = {"step", "reward_mean", "solve_fraction", "zero_variance_fraction", "loss", "kl", "lr"}
    assert expected <= set(line)
    assert "eval_solve_rate" not in line  # held-out play every eval_interval (10) steps, not at step 1
    assert (paths.export_dir / "global_step_1" / "policy" / "adapter_model.safetensors").is_file()
    assert (paths.ckpt_dir / LATEST_CKPT_FILE).read_text() == "1\n"
    policy_dir = paths.ckpt_dir / "global_step_1" / "policy"
    assert (policy_dir / "lora_adapter" / "adapter_model.safetensors").is_file()
    assert (policy_dir / TRAINER_STATE_FILE).is_file()


def test_each_metrics_line_records_the_lr_its_step_began_at(tiny_base, tmp_path):
    # Two GRPO steps of one optimizer step each: a linear decay starts the second at half the lr.
    spec = tiny_spec(tiny_base, tmp_path, train_batch_size=1, total_steps=2, lr_scheduler="linear")
    paths = TrainPaths.for_run(spec)
    train_tiny_grpo(spec, paths)
    lines = [json.loads(line) for line in paths.metrics_file.read_text().splitlines()]
    assert [line["lr"] for line in lines] == pytest.approx([spec.learning_rate, spec.learning_rate / 2])


@pytest.mark.parametrize("seed_offset", [None, 1_100_000])
def test_a_run_plays_the_training_mazes_from_the_specs_seed_offset(tiny_base, tmp_path, monkeypatch, seed_offset):
    maze = {"size": 7, "train_mazes": 4} | ({} if seed_offset is None else {"seed_offset": seed_offset})
    spec = tiny_spec(tiny_base, tmp_path, maze=maze)
    drawn: list[list[int]] = []

    class Drawn(Exception):
        """Stops the run at its first batch, before any training."""

    def first_batch_only(trainer, seeds):
        drawn.append(list(seeds))
        raise Drawn

    monkeypatch.setattr(TinyGRPO, "sample_step", first_batch_only)
    with pytest.raises(Drawn):
        train_tiny_grpo(spec, TrainPaths.for_run(spec))
    first = 1_000_000 if seed_offset is None else seed_offset  # the SFT starts' mazes, unless the spec moves past them
    assert drawn == [training_seeds(4, offset=first, size=7)]
    assert drawn[0][0] == first


@pytest.mark.parametrize("turn_cost", [None, 0.25])
def test_a_run_plays_its_training_episodes_with_the_specs_turn_cost(tiny_base, tmp_path, monkeypatch, turn_cost):
    spec = tiny_spec(tiny_base, tmp_path, **({} if turn_cost is None else {"turn_cost": turn_cost}))
    costs: list[float] = []

    class Played(Exception):
        """Stops the run at its first rollout, before any training."""

    def record(*args, turn_cost=0.0, **kwargs):
        costs.append(turn_cost)
        raise Played

    monkeypatch.setattr(trainer_module, "run_episodes", record)
    with pytest.raises(Played):
        train_tiny_grpo(spec, TrainPaths.for_run(spec))
    assert costs == [0.0 if turn_cost is None else turn_cost]


@pytest.mark.parametrize("sampling", [{}, {"dynamic_sampling": "filter", "dynamic_sampling_max_batches": 6}])
def test_a_run_cut_into_jobs_resumes_from_its_checkpoints_and_trains_exactly_as_one(tmp_path, sampling):
    # From the SFT start with the whole turn budget, so that rewards differ within groups and each
    # step's update depends on its samples (the random state) and on AdamW's moments.
    # The lr warmup spans all six optimizer steps: a resumed job that restarted it would train differently.
    # With dynamic sampling a step can play several batches: a resumed job must start after them.
    learning = {
        "max_turns": 17,
        "n_samples_per_prompt": 4,
        "ckpt_interval": 2,
        "learning_rate": 2e-3,
        "lr_warmup_steps": 6,
        **sampling,
    }
    whole = tiny_spec(BASE_MODEL_DIR, tmp_path / "whole", total_steps=3, **learning)
    whole_paths = TrainPaths.for_run(whole)
    whole_metrics = train_tiny_grpo(whole, whole_paths)

    cut = tiny_spec(BASE_MODEL_DIR, tmp_path / "cut", total_steps=3, **learning)
    cut_paths = TrainPaths.for_run(cut)
    # The first job runs out of time after step 1: a checkpoint to resume from, no export (none is due).
    [first] = train_tiny_grpo(cut, cut_paths, stop_after_s=0)
    assert first.step == 1
    assert (cut_paths.ckpt_dir / LATEST_CKPT_FILE).read_text() == "1\n"
    assert not (cut_paths.export_dir / "global_step_1").exists()
    # The second job (a spec ending at step 2) checkpoints step 2, then logs step 3 and dies.
    train_tiny_grpo(tiny_spec(BASE_MODEL_DIR, tmp_path / "cut", total_steps=2, **learning), cut_paths)
    append_metric(cut_paths.metrics_file, TrainMetric(step=3, reward_mean=0.0))
    # The third job starts after step 2's checkpoint.
    [metric] = train_tiny_grpo(cut, cut_paths, stop_after_s=0)

    assert metric.step == 3
    # Steps 2 and 3 had a gradient: AdamW's moments at the checkpoint, and the resumed step's samples, matter.
    assert [m.zero_variance_fraction < 1 for m in whole_metrics[1:]] == [True, True]
    if sampling:
        assert whole_metrics[0].sample_batches > 1  # step 2 starts after more than one batch
    assert cut_paths.metrics_file.read_text() == whole_paths.metrics_file.read_text()
    for step in (2, 3):
        adapter = Path(f"global_step_{step}/policy/lora_adapter/adapter_model.safetensors")
        cut_weights, whole_weights = load_file(cut_paths.ckpt_dir / adapter), load_file(whole_paths.ckpt_dir / adapter)
        assert cut_weights.keys() == whole_weights.keys()
        for name, tensor in whole_weights.items():
            assert torch.equal(cut_weights[name], tensor), (step, name)
    assert sorted(path.name for path in cut_paths.export_dir.glob("global_step_*")) == [
        "global_step_2",
        "global_step_3",
    ]


def test_a_run_restored_from_a_checkpoint_of_another_lr_trains_at_its_own(tiny_base, tmp_path):
    parent = TinyGRPO(tiny_spec(tiny_base, tmp_path / "parent", learning_rate=1e-2, lr_warmup_steps=4))
    for _ in range(2):  # two optimizer steps into the warmup
        parent.optimizer.step()
        parent.scheduler.step()
    parent.save_checkpoint(tmp_path / "ckpts", 1)

    fork = TinyGRPO(tiny_spec(tiny_base, tmp_path / "fork", learning_rate=1e-3, lr_warmup_steps=4))
    fork.restore(tmp_path / "ckpts", 1)

    assert fork.scheduler.last_epoch == 2  # the schedule goes on where the checkpoint's run left it
    [group] = fork.optimizer.param_groups
    assert (group["initial_lr"], group["lr"]) == (1e-3, pytest.approx(1e-3 * 2 / 4))  # at the spec's lr
    fork.optimizer.step()
    fork.scheduler.step()
    assert group["lr"] == pytest.approx(1e-3 * 3 / 4)


def test_a_run_restored_under_a_cosine_schedule_decays_its_own_lr_from_the_checkpoints_position(tiny_base, tmp_path):
    parent = TinyGRPO(tiny_spec(tiny_base, tmp_path / "parent", learning_rate=1e-2))  # constant_with_warmup
    for _ in range(3):
        parent.optimizer.step()
        parent.scheduler.step()
    parent.save_checkpoint(tmp_path / "ckpts", 1)

    # Four GRPO steps of two mini-batches: the cosine spans eight optimizer steps.
    fork = TinyGRPO(tiny_spec(tiny_base, tmp_path / "fork", learning_rate=1e-3, lr_scheduler="cosine", total_steps=4))
    fork.restore(tmp_path / "ckpts", 1)

    assert fork.scheduler.last_epoch == 3
    [group] = fork.optimizer.param_groups
    assert (group["initial_lr"], group["lr"]) == (1e-3, pytest.approx(1e-3 * _cosine(3 / 8)))
    fork.optimizer.step()
    fork.scheduler.step()
    assert group["lr"] == pytest.approx(1e-3 * 0.5)
    for _ in range(4):
        fork.optimizer.step()
        fork.scheduler.step()
    assert group["lr"] == pytest.approx(0.0, abs=1e-12)


def test_saved_adapter_loads_into_the_evaluation_policy(lora_policy, tiny_base, tmp_path):
    model, _ = lora_policy
    (tmp_path / "exports").mkdir()
    adapter_dir = save_export(model, tmp_path / "exports", 2)
    save_export(model, tmp_path / "exports", 2)  # a rerun replaces the export
    assert adapter_dir == tmp_path / "exports" / "global_step_2" / "policy"
    assert sorted(p.name for p in (tmp_path / "exports").iterdir()) == ["global_step_2"]
    assert json.loads((adapter_dir / "adapter_config.json").read_text())["r"] == 4
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


def test_the_tiny_backend_needs_a_checkpoint_at_the_base_model_path(tmp_path):
    spec = tiny_spec(tmp_path / "missing", tmp_path)
    with pytest.raises(TinyBackendError, match="no checkpoint of tiny-qwen3-vl"):
        train_tiny_grpo(spec, TrainPaths.for_run(spec))


def test_the_seed_fixes_the_initial_lora_so_a_run_repeats(tiny_base, tmp_path):
    def lora_weights(seed: int) -> list[torch.Tensor]:
        torch.manual_seed(1000 + seed)  # whatever the caller's RNG holds, the trainer seeds itself
        trainer = TinyGRPO(tiny_spec(tiny_base, tmp_path, seed=seed))
        return [parameter.detach().clone() for parameter in trainer.trainable]

    first, again, other = lora_weights(0), lora_weights(0), lora_weights(1)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(first, other, strict=True))
