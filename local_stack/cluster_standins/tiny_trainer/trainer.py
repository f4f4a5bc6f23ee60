"""The tiny Qwen3-VL with a trainable LoRA, its optimizer and lr schedule, and one method per phase of a GRPO step."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model
from transformers import get_scheduler

from cluster_jobs.maze.eval_set import EvalSet
from cluster_jobs.maze.generator import Maze, generate_maze
from cluster_jobs.models.loading import default_device
from cluster_jobs.models.policy import VisionPolicy
from cluster_jobs.rollout import Episode, run_episodes
from local_stack.cluster_standins.tiny_trainer.batches import (
    HISTORY_TURNS,
    MICRO_BATCH_TURNS,
    MiniBatch,
    prepare_mini_batch,
)
from local_stack.cluster_standins.tiny_trainer.checkpoints import restore_checkpoint, save_checkpoint
from local_stack.cluster_standins.tiny_trainer.grpo_loss import group_advantages, zero_variance_groups
from local_stack.cluster_standins.tiny_trainer.update import MiniBatchStats, optimizer_step
from mazeops.runspec import LoraSpec, NormalizedRunSpec


class TinyBackendError(ValueError):
    """The spec cannot run on the tiny backend."""


class DynamicSamplingExhausted(RuntimeError):
    """``dynamic_sampling: filter`` played ``dynamic_sampling_max_batches`` batches without finding
    ``train_batch_size`` groups whose rewards differ (as SkyRL, the run stops rather than train on less)."""


def lora_config(lora: LoraSpec) -> LoraConfig:
    """The PEFT config of the run spec's adapter: its rank, alpha and target modules (a list, or all-linear).

    The tower is not excluded here: the local evaluation and Serve stand-ins run adapters with transformers + PEFT,
    which apply LoRA wherever the adapter has it, so the tiny policy is the same in training, evaluation and serving.
    """
    modules = lora.target_modules
    return LoraConfig(
        r=lora.rank, lora_alpha=lora.alpha, target_modules=modules if isinstance(modules, str) else list(modules)
    )


def optimizer_steps(spec: NormalizedRunSpec) -> int:
    """The run's optimizer steps, over which ``cosine`` and ``linear`` decay the lr to 0: ``total_steps`` x
    ``train_batch_size / policy_mini_batch_size`` mini-batches x ``update_epochs_per_batch``, as SkyRL counts them.

    Dynamic sampling does not change the count: a step trains on exactly ``train_batch_size`` groups
    however many batches it played (:meth:`TinyGRPO.sample_step`).
    """
    return spec.total_steps * (spec.train_batch_size // spec.policy_mini_batch_size) * spec.update_epochs_per_batch


def episode_rewards(episodes: Sequence[Episode]) -> torch.Tensor:
    """The episodes' final rewards, in order, as the 1-D float64 tensor GRPO's group math takes."""
    return torch.tensor([episode.reward for episode in episodes], dtype=torch.float64)


def informative_groups(episodes: Sequence[Episode], group_size: int) -> list[Episode]:
    """The episodes of the groups (``group_size`` consecutive episodes of one maze) whose rewards are
    not all equal, in order: DAPO's dynamic-sampling filter, as SkyRL's ``filter`` type."""
    constant = zero_variance_groups(episode_rewards(episodes), group_size).tolist()
    return [episode for index, episode in enumerate(episodes) if not constant[index // group_size]]


class TinyGRPO:
    """The tiny Qwen3-VL with a trainable LoRA, its optimizer, and one method per phase of a step."""

    def __init__(self, spec: NormalizedRunSpec, dtype: torch.dtype | None = None) -> None:
        """Seed torch with the spec's seed, then load the base model (in ``dtype``; default: see
        :func:`~cluster_jobs.models.loading.load_base_model`) and wrap it in the spec's LoRA: the
        LoRA's initial A matrices and every later sample come from that seed, so a run repeats.

        Raises:
            TinyBackendError: no checkpoint (``config.json``) at the spec's ``base_model_path``.
        """
        torch.manual_seed(spec.seed)
        self.spec = spec
        if not (Path(spec.base_model_path) / "config.json").is_file():
            raise TinyBackendError(
                f"no checkpoint of {spec.base_model_id} at {spec.base_model_path!r} (no config.json)"
            )
        base = VisionPolicy.load(spec.base_model_path, device=default_device(), dtype=dtype)
        self.processor = base.processor
        self.model = get_peft_model(base.model, lora_config(spec.lora))
        self.policy = VisionPolicy(self.model, self.processor)  # generates with the LoRA being trained
        self.trainable = [parameter for parameter in self.model.parameters() if parameter.requires_grad]
        for parameter in self.trainable:
            # Allocated now, so that every optimizer step, before any backward pass too (the first
            # steps of a run, or of a resumed one), updates every LoRA weight (see optimizer_step).
            parameter.grad = torch.zeros_like(parameter)
        self.optimizer = torch.optim.AdamW(self.trainable, lr=spec.learning_rate)
        # SkyRL's scheduler: the lr rises linearly from 0 over `lr_warmup_steps` optimizer steps, then holds
        # (`constant_with_warmup`) or decays to 0 at the run's last optimizer step (`cosine`, `linear`).
        self.scheduler = get_scheduler(
            spec.lr_scheduler,
            self.optimizer,
            num_warmup_steps=spec.lr_warmup_steps,
            num_training_steps=optimizer_steps(spec),
        )
        self.micro_batch_turns = MICRO_BATCH_TURNS[self.model.device.type]
        self.batches_drawn = 0  # batches of training mazes played so far: where the next batch starts

    def sample_step(self, seeds: Sequence[int]) -> tuple[list[Episode], list[Episode]]:
        """One step's rollouts: the episodes to train on, and every episode the step played.

        Plays the next ``train_batch_size`` training mazes (``seeds`` cycled, from ``batches_drawn``
        batches in). Without dynamic sampling those are the episodes to train on. With
        ``dynamic_sampling: filter`` only the groups whose rewards differ are kept
        (:func:`informative_groups`), and further batches are played until ``train_batch_size`` groups
        are kept; the first ones played are trained on.

        Raises:
            DynamicSamplingExhausted: after ``dynamic_sampling_max_batches`` batches with fewer.
        """
        spec = self.spec
        wanted = spec.train_batch_size * spec.n_samples_per_prompt
        kept: list[Episode] = []
        played: list[Episode] = []
        for _ in range(spec.dynamic_sampling_max_batches if spec.dynamic_sampling else 1):
            first = self.batches_drawn * spec.train_batch_size
            self.batches_drawn += 1
            mazes = [
                generate_maze(spec.maze.size, seeds[(first + i) % len(seeds)]) for i in range(spec.train_batch_size)
            ]
            episodes = self.rollout(mazes)
            played += episodes
            if not spec.dynamic_sampling:
                return episodes, played
            kept += informative_groups(episodes, spec.n_samples_per_prompt)
            if len(kept) >= wanted:
                return kept[:wanted], played
        raise DynamicSamplingExhausted(
            f"dynamic sampling: {spec.dynamic_sampling_max_batches} batches of {spec.train_batch_size} mazes gave "
            f"{len(kept) // spec.n_samples_per_prompt} groups whose rewards differ, not {spec.train_batch_size}; "
            "nothing was trained on them and the latest checkpoint is the last good state (raise "
            "dynamic_sampling_max_batches, or sample at a higher temperature)"
        )

    def rollout(self, mazes: Sequence[Maze]) -> list[Episode]:
        """``n_samples_per_prompt`` sampled episodes per maze, grouped by maze."""
        self.model.eval()
        return run_episodes(
            lambda chats: self.policy.generate(chats, temperature=self.spec.temperature),
            [maze for maze in mazes for _ in range(self.spec.n_samples_per_prompt)],
            max_turns=self.spec.max_turns,
            history_turns=HISTORY_TURNS,
            turn_cost=self.spec.turn_cost,
        )

    def update(self, episodes: Sequence[Episode]) -> list[MiniBatchStats]:
        """GRPO on ``episodes`` (grouped by maze, as :meth:`rollout` returns them); one stats entry per
        mini-batch and epoch.

        First every mini-batch records the sampling policy's log-probs (:meth:`prepare`), then, for
        each of ``update_epochs_per_batch`` passes, each takes its optimizer step
        (:meth:`train_mini_batch`), in order.
        """
        advantages = group_advantages(
            episode_rewards(episodes), self.spec.n_samples_per_prompt, norm_by_std=self.spec.grpo_norm_by_std
        ).tolist()
        size = self.spec.policy_mini_batch_size * self.spec.n_samples_per_prompt
        self.model.eval()
        mini_batches = [
            self.prepare(episodes[start : start + size], advantages[start : start + size])
            for start in range(0, len(episodes), size)
        ]
        self.model.train()
        return [
            self.train_mini_batch(batch) for _ in range(self.spec.update_epochs_per_batch) for batch in mini_batches
        ]

    def prepare(self, episodes: Sequence[Episode], advantages: Sequence[float]) -> MiniBatch:
        """The mini-batch of ``episodes`` with these advantages, scored by the current weights
        (:func:`~local_stack.cluster_standins.tiny_trainer.batches.prepare_mini_batch`)."""
        return prepare_mini_batch(self.model, self.processor, self.spec, episodes, advantages, self.micro_batch_turns)

    def train_mini_batch(self, batch: MiniBatch) -> MiniBatchStats:
        """One AdamW step on ``batch`` (:func:`~local_stack.cluster_standins.tiny_trainer.update.optimizer_step`)."""
        return optimizer_step(self.model, self.optimizer, self.scheduler, self.spec, batch)

    def save_checkpoint(self, ckpt_dir: Path, step: int) -> None:
        """Checkpoint the trainer as step ``step`` in ``ckpt_dir``, its latest."""
        save_checkpoint(ckpt_dir, step, self.model, self.optimizer, self.scheduler, self.batches_drawn)

    def restore(self, ckpt_dir: Path, step: int) -> None:
        """Go on from step ``step``'s checkpoint in ``ckpt_dir``, at the spec's lr and lr schedule."""
        self.batches_drawn = restore_checkpoint(
            ckpt_dir, step, self.model, self.optimizer, self.scheduler, self.spec.learning_rate
        )

    def solve_rate(self, eval_set: EvalSet) -> float:
        """Greedy solve rate on the fixed ``eval_set`` under its own turn budget."""
        self.model.eval()
        episodes = run_episodes(
            self.policy.generate, eval_set.mazes, max_turns=eval_set.max_turns, history_turns=HISTORY_TURNS
        )
        return sum(episode.solved for episode in episodes) / len(episodes)
