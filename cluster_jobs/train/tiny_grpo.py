"""A tiny CPU GRPO backend for the local pipeline: the same artifacts as SkyRL, from a toy model.

It trains a PEFT LoRA (the spec's rank, alpha and target modules) on the tiny Qwen3-VL
(:func:`cluster_jobs.models.tiny.build_tiny_qwen3_vl` in ``spec.base_model_path``) for
``spec.total_steps`` steps. Each step:

1. takes ``train_batch_size`` training mazes (:func:`~cluster_jobs.maze.eval_set.training_seeds`,
   cycled) and plays each ``n_samples_per_prompt`` times with
   :func:`~cluster_jobs.rollout.run_episodes`, sampling at ``spec.temperature`` for at most
   ``spec.max_turns`` turns;
2. gives every episode the GRPO advantage ``(reward - group mean) / (group std + eps)`` over the
   samples of its maze;
3. for each ``policy_mini_batch_size`` mazes, takes one AdamW step on the policy-gradient loss
   ``-sum(advantage * log p(answer token)) / answer tokens`` over every turn of their episodes,
   each answer scored in the exact chat it was sampled from (token log-probs of the answer text
   re-encoded with :func:`~cluster_jobs.models.loading.encode_conversations`).

Every ``eval_interval`` steps (and at the last) it logs the greedy solve rate on the first
``EVAL_MAZES`` mazes of the fixed eval set; every ``ckpt_interval`` steps (and at the last) it
saves the adapter with PEFT ``save_pretrained`` in SkyRL's layouts:
``exports/global_step_<N>/policy/`` (written aside, then renamed into place, like SkyRL's export)
and ``ckpts/global_step_<N>/policy/lora_adapter/`` + ``ckpts/latest_ckpt_global_step.txt``.

It only exercises the plumbing: a small honest loop (one policy-gradient step per mini-batch,
no importance ratio or clipping, no KL) that learns nothing useful on a random toy model. TRL's
``GRPOTrainer`` was not used because it trains single-turn prompt -> completion samples scored by
reward functions; these episodes are multi-turn, image-in-every-turn environment interactions.
"""

from __future__ import annotations

import logging
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import ProcessorMixin

from mazeops.runspec import NormalizedRunSpec

from cluster_jobs.maze.eval_set import load_eval_set, training_seeds
from cluster_jobs.maze.generator import Maze, generate_maze
from cluster_jobs.models.loading import encode_conversations
from cluster_jobs.models.policy import VisionPolicy
from cluster_jobs.models.tiny import TINY_BASE_MODEL_ID, build_tiny_qwen3_vl
from cluster_jobs.rollout import Episode, run_episodes
from cluster_jobs.train.metrics import TrainMetric, append_metric
from cluster_jobs.train.skyrl_launch import TrainPaths

logger = logging.getLogger(__name__)

SEED = 0
EVAL_MAZES = 4
HISTORY_TURNS = 1
ADVANTAGE_EPS = 1e-6
LATEST_CKPT_FILE = "latest_ckpt_global_step.txt"
# The toy matrices gain nothing from more threads, and on a busy 2-core host OpenMP threads spend
# most of their time waiting on each other (measured: ~10x slower generation with 2 threads).
TORCH_THREADS = 1


class TinyBackendError(ValueError):
    """The spec cannot run on the tiny backend."""


@dataclass(frozen=True)
class TurnSample:
    """One sampled answer, the chat it answered, and its episode's advantage."""

    chat: list[dict]
    answer: str
    advantage: float


def group_advantages(rewards: Sequence[float], group_size: int, eps: float = ADVANTAGE_EPS) -> list[float]:
    """GRPO advantages: ``(reward - group mean) / (group std + eps)`` within consecutive groups of ``group_size``.

    Raises:
        ValueError: if ``rewards`` is not a whole number of groups of at least 2.
    """
    if group_size < 2 or len(rewards) % group_size:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {group_size} (>= 2)")
    advantages = []
    for start in range(0, len(rewards), group_size):
        group = rewards[start : start + group_size]
        mean, std = statistics.fmean(group), statistics.pstdev(group)
        advantages.extend((reward - mean) / (std + eps) for reward in group)
    return advantages


def turn_chats(episode: Episode, history_turns: int = HISTORY_TURNS) -> list[tuple[list[dict], str]]:
    """``(chat, answer)`` for every turn of ``episode``, each chat as ``run_episodes`` sent it.

    ``episode.messages`` is the system prompt, then observation/answer pairs; the chat of a turn is
    the system prompt, the ``history_turns`` most recent earlier pairs, then the turn's observation.
    """
    system, pairs = episode.messages[0], episode.messages[1:]
    turns = []
    for index in range(0, len(pairs), 2):
        earlier = pairs[max(0, index - 2 * history_turns) : index]
        turns.append(([system, *earlier, pairs[index]], pairs[index + 1]["content"]))
    return turns


def answer_log_probs(
    model: torch.nn.Module, processor: ProcessorMixin, chats: list[list[dict]], answers: list[str]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probabilities of each answer (and its end-of-turn token) after its chat.

    Returns:
        ``(log_probs, mask)``, both ``[batch, length - 1]``: ``log_probs[i, j]`` is the log-prob of
        token ``j + 1`` of the left-padded chat-plus-answer sequence ``i``; ``mask`` marks the answer's tokens.

    Raises:
        RuntimeError: if a chat's tokens are not a prefix of its chat-plus-answer tokens.
    """
    prompts = encode_conversations(processor, chats, add_generation_prompt=True)
    full_chats = [[*chat, {"role": "assistant", "content": answer}] for chat, answer in zip(chats, answers)]
    inputs = encode_conversations(processor, full_chats, add_generation_prompt=False).to(model.device)
    prompt_lengths = prompts["attention_mask"].sum(dim=1)
    full_lengths = inputs["attention_mask"].sum(dim=1).cpu()
    width = inputs["input_ids"].shape[1]
    mask = torch.zeros_like(inputs["input_ids"], dtype=torch.bool)
    for row, (prompt_length, full_length) in enumerate(zip(prompt_lengths.tolist(), full_lengths.tolist())):
        start = width - full_length
        prefix = inputs["input_ids"][row, start : start + prompt_length].cpu()
        if not torch.equal(prefix, prompts["input_ids"][row, -prompt_length:]):
            raise RuntimeError(f"chat {row}: its tokens are not a prefix of the chat with its answer")
        # The answer's tokens and the end-of-turn token; the template's final newline is not sampled.
        mask[row, start + prompt_length : width - 1] = True
    logits = model(**inputs).logits[:, :-1].float()
    targets = inputs["input_ids"][:, 1:]
    log_probs = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return log_probs, mask[:, 1:]


def policy_gradient_loss(
    model: torch.nn.Module, processor: ProcessorMixin, samples: Sequence[TurnSample]
) -> torch.Tensor:
    """``-sum(advantage * answer token log-prob) / answer tokens`` over ``samples``."""
    log_probs, mask = answer_log_probs(model, processor, [s.chat for s in samples], [s.answer for s in samples])
    advantages = torch.tensor([s.advantage for s in samples], dtype=log_probs.dtype, device=log_probs.device)
    return -(advantages[:, None] * log_probs * mask).sum() / mask.sum().clamp(min=1)


def save_export(model: PeftModel, export_dir: Path, step: int) -> Path:
    """Save the adapter to ``export_dir/global_step_<step>/policy/``: written aside, then renamed into place."""
    final = export_dir / f"global_step_{step}"
    staging = Path(tempfile.mkdtemp(prefix=f".tmp-global_step_{step}-", dir=export_dir))
    model.save_pretrained(staging / "policy")
    if final.exists():
        shutil.rmtree(final)
    staging.rename(final)
    return final / "policy"


def save_checkpoint(model: PeftModel, ckpt_dir: Path, step: int) -> None:
    """Save the adapter as SkyRL's checkpoint layout does, then record it as the latest checkpoint."""
    model.save_pretrained(ckpt_dir / f"global_step_{step}" / "policy" / "lora_adapter")
    (ckpt_dir / LATEST_CKPT_FILE).write_text(f"{step}\n")


def _lora_config(spec: NormalizedRunSpec) -> LoraConfig:
    modules = spec.lora.target_modules
    return LoraConfig(
        r=spec.lora.rank,
        lora_alpha=spec.lora.alpha,
        target_modules=modules if modules == "all-linear" else modules.split(","),
    )


def _due(step: int, interval: int, total: int) -> bool:
    return step % interval == 0 or step == total


class TinyGRPO:
    """The tiny Qwen3-VL with a trainable LoRA, its optimizer, and one method per phase of a step."""

    def __init__(self, spec: NormalizedRunSpec) -> None:
        self.spec = spec
        base = VisionPolicy.load(build_tiny_qwen3_vl(Path(spec.base_model_path)), device="cpu")
        self.processor = base.processor
        self.model = get_peft_model(base.model, _lora_config(spec))
        self.policy = VisionPolicy(self.model, self.processor)  # generates with the LoRA being trained
        trainable = [parameter for parameter in self.model.parameters() if parameter.requires_grad]
        self.optimizer = torch.optim.AdamW(trainable, lr=spec.learning_rate)

    def rollout(self, mazes: Sequence[Maze]) -> list[Episode]:
        """``n_samples_per_prompt`` sampled episodes per maze, grouped by maze."""
        self.model.eval()
        return run_episodes(
            lambda chats: self.policy.generate(chats, temperature=self.spec.temperature),
            [maze for maze in mazes for _ in range(self.spec.n_samples_per_prompt)],
            max_turns=self.spec.max_turns,
            history_turns=HISTORY_TURNS,
        )

    def update(self, episodes: Sequence[Episode]) -> list[float]:
        """One AdamW step per mini-batch of ``policy_mini_batch_size`` mazes; returns the losses."""
        group = self.spec.n_samples_per_prompt
        advantages = group_advantages([episode.reward for episode in episodes], group)
        per_batch = self.spec.policy_mini_batch_size * group
        self.model.train()
        losses = []
        for start in range(0, len(episodes), per_batch):
            samples = [
                TurnSample(chat, answer, advantage)
                for episode, advantage in zip(episodes[start : start + per_batch], advantages[start : start + per_batch])
                for chat, answer in turn_chats(episode)
            ]
            loss = policy_gradient_loss(self.model, self.processor, samples)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            losses.append(loss.item())
        return losses

    def solve_rate(self, mazes: Sequence[Maze]) -> float:
        """Greedy solve rate on ``mazes``."""
        self.model.eval()
        episodes = run_episodes(self.policy.generate, mazes, max_turns=self.spec.max_turns, history_turns=HISTORY_TURNS)
        return sum(episode.solved for episode in episodes) / len(episodes)


def train_tiny_grpo(spec: NormalizedRunSpec, paths: TrainPaths) -> list[TrainMetric]:
    """Run the tiny GRPO loop for ``spec`` in ``paths`` (see the module docstring); returns the logged metrics.

    Raises:
        TinyBackendError: if the spec's base model is not the tiny Qwen3-VL.
    """
    if spec.base_model_id != TINY_BASE_MODEL_ID:
        raise TinyBackendError(f"the tiny backend trains only {TINY_BASE_MODEL_ID!r}, not {spec.base_model_id!r}")
    threads = torch.get_num_threads()
    torch.set_num_threads(TORCH_THREADS)
    try:
        return _train(spec, paths)
    finally:
        torch.set_num_threads(threads)


def _train(spec: NormalizedRunSpec, paths: TrainPaths) -> list[TrainMetric]:
    paths.make_dirs()
    torch.manual_seed(SEED)
    trainer = TinyGRPO(spec)
    seeds = training_seeds(spec.maze.train_mazes, size=spec.maze.size)
    eval_mazes = load_eval_set().mazes[:EVAL_MAZES]
    logger.info(
        "tiny GRPO: %d steps of %d mazes x %d samples, LoRA r=%d alpha=%d",
        spec.total_steps, spec.train_batch_size, spec.n_samples_per_prompt, spec.lora.rank, spec.lora.alpha,
    )  # fmt: skip
    metrics = []
    for step in range(1, spec.total_steps + 1):
        started = time.monotonic()
        first = (step - 1) * spec.train_batch_size
        mazes = [generate_maze(spec.maze.size, seeds[(first + i) % len(seeds)]) for i in range(spec.train_batch_size)]
        episodes = trainer.rollout(mazes)
        losses = trainer.update(episodes)
        solve_rate = trainer.solve_rate(eval_mazes) if _due(step, spec.eval_interval, spec.total_steps) else None
        metric = TrainMetric(step, statistics.fmean(episode.reward for episode in episodes), solve_rate)
        append_metric(paths.metrics_file, metric)
        metrics.append(metric)
        logger.info(
            "step %d/%d: reward_mean %.3f, loss %.4f%s, %.1f s",
            step, spec.total_steps, metric.reward_mean, statistics.fmean(losses),
            "" if solve_rate is None else f", eval solve rate {solve_rate:.3f}", time.monotonic() - started,
        )  # fmt: skip
        if _due(step, spec.ckpt_interval, spec.total_steps):
            save_checkpoint(trainer.model, paths.ckpt_dir, step)
            logger.info("step %d: adapter exported to %s", step, save_export(trainer.model, paths.export_dir, step))
    return metrics
