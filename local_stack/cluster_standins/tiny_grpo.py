"""A tiny GRPO backend for the local pipeline: SkyRL's GRPO update and artifacts, on a toy model.

It trains a PEFT LoRA (the spec's rank, alpha and target modules) on the tiny Qwen3-VL checkpoint in
``spec.base_model_path`` (the project's SFT start, :mod:`research.sft`, or any
:func:`local_stack.cluster_standins.tiny_model.build_tiny_qwen3_vl` build), on the GPU when one is visible, for
``spec.total_steps`` steps, with the loss math of :mod:`local_stack.cluster_standins.grpo_loss`. Each step:

1. rollout: takes the next ``train_batch_size`` training mazes (:func:`~cluster_jobs.maze.eval_set.training_seeds`,
   cycled) and plays each ``n_samples_per_prompt`` times with :func:`~cluster_jobs.rollout.run_episodes`,
   sampling at ``spec.temperature`` for at most ``spec.max_turns`` turns. With ``dynamic_sampling:
   filter`` (DAPO, as SkyRL's), only the groups whose rewards differ are kept, and further batches of
   mazes are played until ``train_batch_size`` groups are kept (:meth:`TinyGRPO.sample_step`);
2. advantages: every episode gets the GRPO advantage of its reward within the group of its maze
   (divided by the group's std unless ``grpo_norm_by_std`` is off, as SkyRL's); a group whose rewards
   are all equal gets exactly 0;
3. old log-probs: right after the rollout, before any update, a no-grad forward with the weights
   that sampled records the log-prob of every answer token (and, with ``use_kl_loss``, the
   reference policy's: the same model with the LoRA disabled). Each answer is scored in the exact
   chat it was sampled from (its text re-encoded with
   :func:`~cluster_jobs.models.loading.encode_answered_chats`, logits at the sampling temperature);
   only the answer's tokens and its end-of-turn token count, never the system prompt, earlier
   turns, the observation or its image tokens;
4. update: ``update_epochs_per_batch`` passes; in each, for each ``policy_mini_batch_size`` mazes
   (all their samples), one AdamW step (gradient
   norm clipped to MAX_GRAD_NORM, as SkyRL; the lr warmed up over ``lr_warmup_steps``, then held or decayed to 0 at the
   run's last optimizer step as ``lr_scheduler`` says, see :func:`optimizer_steps`) on PPO's clipped surrogate
   ``-min(r * A, clip(r, 1 - eps_clip_low, 1 + eps_clip_high) * A)``, ``r = pi / pi_old`` (with
   ``policy_loss_type: dual_clip``, a negative advantage's term capped at ``-clip_ratio_c * A``), as a
   token mean over the mini-batch (``loss_reduction: token_mean``) or the mean over its episodes of
   each episode's token mean (``sequence_mean``), plus ``kl_loss_coef`` x the k3 KL to the reference when
   ``use_kl_loss`` is on. Optimizer steps after the first see the earlier steps' changes through
   ``r``. Without the KL term a turn with advantage 0 (every turn of a zero-variance group) has
   loss and gradient exactly 0, so it is not run through the model; its tokens still count in the
   token mean's denominator, as in SkyRL.

Each step appends a :class:`~cluster_jobs.train.metrics.TrainMetric`: reward mean, solve fraction
of the sampled episodes, fraction of zero-variance groups (all three over every episode the step
played), loss, mean and max ratio, clip fraction, (with the KL term) KL and (with dynamic sampling)
the number of batches played. Every ``eval_interval`` steps it logs the greedy solve
rate on the fixed 64-maze eval set of ``spec.maze.size`` under that set's turn budget; every ``ckpt_interval`` steps (and at
the last) it saves the adapter with PEFT ``save_pretrained`` in SkyRL's layouts:
``exports/global_step_<N>/policy/`` (written aside, then renamed into place, like SkyRL's export)
and ``ckpts/global_step_<N>/policy/lora_adapter/`` + ``ckpts/latest_ckpt_global_step.txt``; the
checkpoint also holds ``policy/trainer_state.pt`` (the optimizer's and lr schedule's state, torch's random state
and how many batches of training mazes have been played).
A run whose ``ckpts/`` already names a latest checkpoint resumes after it, as SkyRL's default
``trainer.resume_mode=latest`` does: the LoRA, optimizer, lr-schedule and random state are restored, metrics
of later steps (written after that checkpoint) are dropped, and training goes on from the next
step, so a run cut into several jobs trains exactly as one.

Where it differs from SkyRL: the trained tokens are the answer text re-encoded, not the token ids
the sampler drew (SkyRL keeps vLLM's ids), so an answer cut at the token limit still ends with an
end-of-turn token; rollouts and updates take turns in one process. TRL's ``GRPOTrainer`` was
not used because it trains single-turn prompt -> completion samples scored by reward functions;
these episodes are multi-turn, image-in-every-turn environment interactions.
"""

from __future__ import annotations

import logging
import math
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch
from peft import LoraConfig, PeftModel, get_peft_model, set_peft_model_state_dict
from safetensors.torch import load_file
from transformers import BatchFeature, ProcessorMixin, get_scheduler

from cluster_jobs.maze.eval_set import EvalSet, eval_set_for_size, training_seeds
from cluster_jobs.maze.generator import Maze, generate_maze
from cluster_jobs.models.loading import answer_token_ids, default_device, encode_answered_chats
from cluster_jobs.models.policy import ADAPTER_WEIGHTS_FILE, VisionPolicy
from cluster_jobs.rollout import Episode, run_episodes, turn_chats
from cluster_jobs.train.metrics import TrainMetric, append_metric, keep_metrics_through
from cluster_jobs.train.skyrl_launch import TrainPaths
from local_stack.cluster_standins.grpo_loss import (
    clip_active,
    clipped_surrogate,
    episode_mean_weights,
    group_advantages,
    importance_ratio,
    k3_kl,
    masked_sequence_mean,
    masked_token_mean,
    masked_weighted_sum,
    zero_variance_groups,
)
from local_stack.cluster_standins.tiny_model import TINY_BASE_MODEL_ID
from mazeops.runspec import LoraSpec, NormalizedRunSpec

logger = logging.getLogger(__name__)

HISTORY_TURNS = 1
LATEST_CKPT_FILE = "latest_ckpt_global_step.txt"
TRAINER_STATE_FILE = "trainer_state.pt"
LORA_ADAPTER_DIR = "lora_adapter"  # the adapter inside a checkpoint's policy/ folder
# Turns per forward pass, by device; a mini-batch's gradient is accumulated over its micro-batches.
# On a GPU the tiny model's forward pass is a chain of small kernel launches whatever the batch, so
# larger micro-batches cut the launches; on a CPU the work grows with the batch and 16 keeps memory low.
MICRO_BATCH_TURNS = {"cpu": 16, "cuda": 256}
# SkyRL's default `trainer.policy.optimizer_config.max_grad_norm`.
MAX_GRAD_NORM = 1.0
# The toy matrices gain nothing from more threads, and on a busy 2-core host OpenMP threads spend
# most of their time waiting on each other (measured: ~10x slower generation with 2 threads).
TORCH_THREADS = 1

_T = TypeVar("_T")


class TinyBackendError(ValueError):
    """The spec cannot run on the tiny backend."""


class NonFiniteUpdateError(RuntimeError):
    """A mini-batch's loss or gradient is NaN or infinite: the update is refused before it reaches the weights."""


class DynamicSamplingExhausted(RuntimeError):
    """``dynamic_sampling: filter`` played ``dynamic_sampling_max_batches`` batches without finding
    ``train_batch_size`` groups whose rewards differ (as SkyRL, the run stops rather than train on less)."""


@dataclass(frozen=True)
class TurnSample:
    """One sampled answer, the chat it answered, its episode's advantage, and (``sequence_mean``) the
    weight of each of its tokens in the loss; None under ``token_mean``."""

    chat: list[dict]
    answer: str
    advantage: float
    weight: float | None = None


@dataclass(frozen=True)
class MicroBatch:
    """Turns encoded for one forward pass, with what the update needs of them.

    Attributes:
        inputs: the chat-plus-answer sequences (see :func:`encode_answers`).
        mask: ``[batch, length - 1]``, True on the answer tokens.
        advantages: ``[batch, 1]``, each turn's episode advantage.
        old_log_probs: ``[batch, length - 1]`` token log-probs under the policy that sampled.
        ref_log_probs: the same under the reference policy (LoRA disabled); None without the KL term.
        weights: ``[batch, 1]``, each turn's token weight in the policy loss under ``sequence_mean``
            (:func:`~local_stack.cluster_standins.grpo_loss.episode_mean_weights`); None under ``token_mean``.
    """

    inputs: BatchFeature
    mask: torch.Tensor
    advantages: torch.Tensor
    old_log_probs: torch.Tensor
    ref_log_probs: torch.Tensor | None
    weights: torch.Tensor | None = None


@dataclass(frozen=True)
class MiniBatch:
    """The turns of one optimizer step: those that train, in micro-batches, and the loss denominators.

    Attributes:
        micro_batches: the turns run through the model.
        tokens: answer tokens of all the mini-batch's turns, skipped ones included (token mean).
        turns: all the mini-batch's turns, skipped ones included (sequence mean of the KL term).
    """

    micro_batches: list[MicroBatch]
    tokens: int
    turns: int


@dataclass(frozen=True)
class MiniBatchStats:
    """What one optimizer step saw.

    Attributes:
        loss: the loss it minimized (clipped policy loss + KL coefficient x KL).
        kl: the KL term; None without it.
        tokens: answer tokens run through the update (not those of skipped turns).
        ratio_sum: sum of their importance ratios.
        ratio_max: the largest of them; None if there were none.
        clipped: how many of them had their ratio clipped.
    """

    loss: float
    kl: float | None
    tokens: int
    ratio_sum: float
    ratio_max: float | None
    clipped: int


def encode_answers(
    processor: ProcessorMixin, chats: list[list[dict]], answers: list[str]
) -> tuple[BatchFeature, torch.Tensor]:
    """:func:`~cluster_jobs.models.loading.encode_answered_chats` with its mask shifted to align with
    :func:`token_log_probs`: ``mask[i, j]`` is True where token ``j + 1`` of sequence ``i`` is one of
    its answer's tokens or the end-of-turn token after them."""
    inputs, mask = encode_answered_chats(processor, chats, answers)
    return inputs, mask[:, 1:]


def with_rope_positions(model: PeftModel, inputs: BatchFeature) -> BatchFeature:
    """``inputs`` with Qwen3-VL's multimodal rotary positions (``position_ids``) added, computed once.

    Without them every forward pass recomputes them, in Python, sequence by sequence (the model's
    ``get_rope_index``); a micro-batch runs through the model up to four times (sampling policy,
    reference, two update passes), so it is computed here once for all of them.
    """
    positions, _ = model.get_base_model().model.get_rope_index(
        inputs["input_ids"],
        mm_token_type_ids=inputs["mm_token_type_ids"],
        image_grid_thw=inputs.get("image_grid_thw"),
        attention_mask=inputs["attention_mask"],
    )
    return BatchFeature({**inputs, "position_ids": positions})


def token_log_probs(model: torch.nn.Module, inputs: BatchFeature, temperature: float) -> torch.Tensor:
    """``[batch, length - 1]``: the log-prob of token ``j + 1`` of each sequence under ``model`` at ``temperature``.

    The logits are divided by ``temperature`` first: the distribution the sampler drew from (and
    the one SkyRL's loss scores).
    """
    logits = model(**inputs.to(model.device)).logits[:, :-1].float() / temperature
    targets = inputs["input_ids"][:, 1:]
    return torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def non_finite_log_probs(index: int, micro: MicroBatch, log_probs: torch.Tensor) -> str:
    """Where micro-batch ``index``'s answer tokens have non-finite log-probs: under the policy being trained
    (``log_probs``), the sampling policy and the reference, e.g. ``micro-batch 0: non-finite log-probs at 12, 0
    and 0 of 340 answer tokens (policy, sampling policy, reference)``."""
    sources = {"policy": log_probs, "sampling policy": micro.old_log_probs, "reference": micro.ref_log_probs}
    counts = {
        name: int((~torch.isfinite(values[micro.mask])).sum()) for name, values in sources.items() if values is not None
    }
    *first, last = counts.values()
    at = f"{', '.join(map(str, first))} and {last}"
    return f"micro-batch {index}: non-finite log-probs at {at} of {int(micro.mask.sum())} answer tokens ({', '.join(counts)})"


def episode_rewards(episodes: Sequence[Episode]) -> torch.Tensor:
    """The episodes' final rewards, in order, as the 1-D float64 tensor GRPO's group math takes."""
    return torch.tensor([episode.reward for episode in episodes], dtype=torch.float64)


def informative_groups(episodes: Sequence[Episode], group_size: int) -> list[Episode]:
    """The episodes of the groups (``group_size`` consecutive episodes of one maze) whose rewards are
    not all equal, in order: DAPO's dynamic-sampling filter, as SkyRL's ``filter`` type."""
    rewards = episode_rewards(episodes)
    constant = zero_variance_groups(rewards, group_size).tolist()
    return [episode for index, episode in enumerate(episodes) if not constant[index // group_size]]


def step_metric(
    step: int,
    episodes: Sequence[Episode],
    group_size: int,
    stats: Sequence[MiniBatchStats],
    eval_solve_rate: float | None,
    sample_batches: int | None = None,
    lr: float | None = None,
) -> TrainMetric:
    """The :class:`TrainMetric` of one step from the episodes it played (groups of ``group_size``), its
    mini-batch stats, (with dynamic sampling) how many batches it played, and the lr it started at."""
    rewards = episode_rewards(episodes)
    tokens = sum(stat.tokens for stat in stats)
    kls = [stat.kl for stat in stats if stat.kl is not None]
    return TrainMetric(
        step=step,
        reward_mean=statistics.fmean(episode.reward for episode in episodes),
        eval_solve_rate=eval_solve_rate,
        solve_fraction=statistics.fmean(episode.solved for episode in episodes),
        zero_variance_fraction=zero_variance_groups(rewards, group_size).double().mean().item(),
        loss=statistics.fmean(stat.loss for stat in stats),
        ratio_mean=sum(stat.ratio_sum for stat in stats) / tokens if tokens else None,
        ratio_max=max((stat.ratio_max for stat in stats if stat.ratio_max is not None), default=None),
        clip_fraction=sum(stat.clipped for stat in stats) / tokens if tokens else None,
        kl=statistics.fmean(kls) if kls else None,
        sample_batches=sample_batches,
        lr=lr,
    )


def save_export(model: PeftModel, export_dir: Path, step: int) -> Path:
    """Save the adapter to ``export_dir/global_step_<step>/policy/``: written aside, then renamed into place."""
    final = export_dir / f"global_step_{step}"
    staging = Path(tempfile.mkdtemp(prefix=f".tmp-global_step_{step}-", dir=export_dir))
    model.save_pretrained(staging / "policy")
    if final.exists():
        shutil.rmtree(final)
    staging.rename(final)
    return final / "policy"


def checkpoint_policy_dir(ckpt_dir: Path, step: int) -> Path:
    """The ``policy/`` folder of step ``step``'s checkpoint in ``ckpt_dir``: the adapter in ``LORA_ADAPTER_DIR``,
    the rest of the trainer's state in ``TRAINER_STATE_FILE``."""
    return ckpt_dir / f"global_step_{step}" / "policy"


def latest_checkpoint(ckpt_dir: Path) -> int | None:
    """The step ``ckpt_dir``'s ``latest_ckpt_global_step.txt`` names, None when there is none."""
    latest = ckpt_dir / LATEST_CKPT_FILE
    return int(latest.read_text()) if latest.is_file() else None


def lora_config(lora: LoraSpec) -> LoraConfig:
    """The PEFT config of the run spec's adapter: its rank, alpha and target modules (a comma list, or all-linear)."""
    modules = lora.target_modules
    return LoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        target_modules=modules if modules == "all-linear" else modules.split(","),
    )


def optimizer_steps(spec: NormalizedRunSpec) -> int:
    """The run's optimizer steps, over which ``cosine`` and ``linear`` decay the lr to 0: ``total_steps`` x
    ``train_batch_size / policy_mini_batch_size`` mini-batches x ``update_epochs_per_batch``.

    SkyRL counts them the same way. Its trainer (``skyrl/train/trainer.py`` in NovaSky-AI/SkyRL, checked at
    a9564572 and at tag skyrl-v0.3.0) gives the policy worker ``num_training_steps`` = its training steps
    (``len(train_dataloader) x trainer.epochs``, capped at ``trainer.max_training_steps``) x
    ``train_batch_size // policy_mini_batch_size x update_epochs_per_batch``, and the FSDP strategy
    (``skyrl/backends/skyrl_train/distributed/fsdp_strategy.py``) passes that and ``num_warmup_steps`` to
    ``transformers.get_scheduler``; the scheduler steps once per optimizer step. Our launch's epochs cover
    ``total_steps`` and cap them with ``max_training_steps``, so its training steps are ``total_steps``.
    Dynamic sampling does not change the count: a step trains on exactly ``train_batch_size`` groups
    however many batches it played, here (:meth:`TinyGRPO.sample_step`) as in SkyRL.
    """
    return spec.total_steps * (spec.train_batch_size // spec.policy_mini_batch_size) * spec.update_epochs_per_batch


def _due(step: int, interval: int, total: int) -> bool:
    return step % interval == 0 or step == total


def _chunks(items: Sequence[_T], size: int) -> list[Sequence[_T]]:
    return [items[start : start + size] for start in range(0, len(items), size)]


class TinyGRPO:
    """The tiny Qwen3-VL with a trainable LoRA, its optimizer, and one method per phase of a step."""

    def __init__(self, spec: NormalizedRunSpec, dtype: torch.dtype | None = None) -> None:
        """Seed torch with the spec's seed, then load the base model (in ``dtype``; default: see
        :func:`~cluster_jobs.models.loading.load_base_model`) and wrap it in the spec's LoRA: the
        LoRA's initial A matrices and every later sample come from that seed, so a run repeats."""
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
            # steps of a run, or of a resumed one), updates every LoRA weight (see train_mini_batch).
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
        rewards = episode_rewards(episodes)
        advantages = group_advantages(
            rewards, self.spec.n_samples_per_prompt, norm_by_std=self.spec.grpo_norm_by_std
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

    @torch.no_grad()
    def prepare(self, episodes: Sequence[Episode], advantages: Sequence[float]) -> MiniBatch:
        """Encode the turns of ``episodes``; record the log-probs of those that train (current weights, reference)."""
        turns = [turn_chats(episode, HISTORY_TURNS) for episode in episodes]
        # Answer and end-of-turn tokens per episode: the loss mask's, counted without encoding the chats.
        episode_tokens = [
            sum(len(answer_token_ids(self.processor.tokenizer, answer)) for _, answer in pairs) for pairs in turns
        ]
        weights = (
            episode_mean_weights(episode_tokens)
            if self.spec.loss_reduction == "sequence_mean"
            else [None] * len(episodes)
        )
        samples = [
            TurnSample(chat, answer, advantage, weight)
            for pairs, advantage, weight in zip(turns, advantages, weights, strict=False)
            for chat, answer in pairs
        ]
        trained = [sample for sample in samples if self._trains(sample)]
        micro_batches = [self._micro_batch(chunk) for chunk in _chunks(trained, self.micro_batch_turns)]
        return MiniBatch(micro_batches, tokens=sum(episode_tokens), turns=len(samples))

    def _trains(self, sample: TurnSample) -> bool:
        # Without the KL term, a zero advantage makes the turn's loss and gradient exactly 0.
        return sample.advantage != 0 or self.spec.use_kl_loss

    def _micro_batch(self, samples: Sequence[TurnSample]) -> MicroBatch:
        inputs, mask = encode_answers(self.processor, [s.chat for s in samples], [s.answer for s in samples])
        inputs = with_rope_positions(self.model, inputs)
        old_log_probs = token_log_probs(self.model, inputs, self.spec.temperature)
        ref_log_probs = None
        if self.spec.use_kl_loss:
            with self.model.disable_adapter():
                ref_log_probs = token_log_probs(self.model, inputs, self.spec.temperature)
        device = old_log_probs.device  # the model's: the GPU when there is one
        advantages = torch.tensor([s.advantage for s in samples], dtype=old_log_probs.dtype, device=device)[:, None]
        weights = None
        if self.spec.loss_reduction == "sequence_mean":
            weights = torch.tensor([s.weight for s in samples], dtype=old_log_probs.dtype, device=device)[:, None]
        return MicroBatch(inputs, mask.to(device), advantages, old_log_probs, ref_log_probs, weights)

    def train_mini_batch(self, batch: MiniBatch) -> MiniBatchStats:
        """One AdamW step on ``batch``'s clipped policy loss (+ KL term), accumulated over its micro-batches."""
        spec = self.spec
        # Gradients are zeroed, not dropped: a mini-batch with nothing to train still takes its
        # AdamW step (momentum, weight decay), as SkyRL's does.
        self.optimizer.zero_grad(set_to_none=False)
        loss_total, kl_total = 0.0, 0.0
        ratios, clipped = [], []
        dual_clip_c = spec.clip_ratio_c if spec.policy_loss_type == "dual_clip" else None
        where = ""  # where a non-finite loss first came from, for the error
        for index, micro in enumerate(batch.micro_batches):
            log_probs = token_log_probs(self.model, micro.inputs, spec.temperature)
            ratio = importance_ratio(log_probs, micro.old_log_probs)
            surrogate = clipped_surrogate(ratio, micro.advantages, spec.eps_clip_low, spec.eps_clip_high, dual_clip_c)
            if micro.weights is None:
                loss = masked_token_mean(surrogate, micro.mask, batch.tokens)
            else:
                loss = masked_weighted_sum(surrogate, micro.mask, micro.weights)
            if micro.ref_log_probs is not None:
                kl = masked_sequence_mean(k3_kl(log_probs, micro.ref_log_probs), micro.mask, batch.turns)
                loss = loss + spec.kl_loss_coef * kl
                kl_total += kl.item()
            loss.backward()
            loss_total += loss.item()
            if not math.isfinite(loss_total) and not where:
                where = f"; {non_finite_log_probs(index, micro, log_probs.detach())}"
            ratio = ratio.detach()
            ratios.append(ratio[micro.mask])
            clipped.append(clip_active(ratio, micro.advantages, spec.eps_clip_low, spec.eps_clip_high)[micro.mask])
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.trainable, MAX_GRAD_NORM))
        if not (math.isfinite(loss_total) and math.isfinite(grad_norm)):
            # Stepping would write NaN into the LoRA weights (the next rollout then dies inside
            # generate); stop here, so the latest checkpoint stays the last good state.
            raise NonFiniteUpdateError(
                f"non-finite GRPO update (loss {loss_total}, gradient norm {grad_norm}{where}): "
                "no step taken and no checkpoint written; lower the lr or the sampling temperature and resume from the "
                "latest checkpoint"
            )
        self.optimizer.step()
        self.scheduler.step()
        trained_ratios = torch.cat(ratios) if ratios else torch.zeros(0)
        return MiniBatchStats(
            loss=loss_total,
            kl=kl_total if spec.use_kl_loss else None,
            tokens=trained_ratios.numel(),
            ratio_sum=trained_ratios.sum().item(),
            ratio_max=trained_ratios.max().item() if trained_ratios.numel() else None,
            clipped=int(torch.cat(clipped).sum()) if clipped else 0,
        )

    def save_checkpoint(self, ckpt_dir: Path, step: int) -> None:
        """Save the adapter as SkyRL's checkpoint layout does, and beside it what :meth:`restore` needs
        (the optimizer's and the lr schedule's state, torch's random state, the batch count); then record it as the
        latest checkpoint."""
        policy_dir = checkpoint_policy_dir(ckpt_dir, step)
        self.model.save_pretrained(policy_dir / LORA_ADAPTER_DIR)
        state = {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "rng": torch.get_rng_state(),
            "batches_drawn": self.batches_drawn,
        }
        torch.save(state, policy_dir / TRAINER_STATE_FILE)
        (ckpt_dir / LATEST_CKPT_FILE).write_text(f"{step}\n")

    def restore(self, ckpt_dir: Path, step: int) -> None:
        """Load the LoRA weights, optimizer, lr-schedule and random state and the batch count that
        :meth:`save_checkpoint` saved at ``step`` (checkpoints from before the schedule was saved ran at a
        constant lr: their schedule starts over; those from before the count played one batch a step).
        The lr and its schedule are the spec's, whatever the checkpoint's run had, at the checkpoint's position."""
        policy_dir = checkpoint_policy_dir(ckpt_dir, step)
        weights = load_file(policy_dir / LORA_ADAPTER_DIR / ADAPTER_WEIGHTS_FILE, device=str(self.model.device))
        set_peft_model_state_dict(self.model, weights)
        # map_location: a checkpoint saved on a GPU resumes on the CPU too (the optimizer moves its state to the
        # parameters' device when loading it)
        state = torch.load(policy_dir / TRAINER_STATE_FILE, map_location="cpu", weights_only=True)
        self.optimizer.load_state_dict(state["optimizer"])
        if "scheduler" in state:
            self.scheduler.load_state_dict(state["scheduler"])
        # Both state dicts carry the lr they were saved with; the spec's wins, so that a run started from another
        # run's checkpoint under a new lr trains at its own (the schedule's position stays the checkpoint's). The
        # schedule's shape stays the spec's too: transformers' schedules are LambdaLRs whose lambdas are partials, and
        # LambdaLR saves only a lambda's `__dict__` (a partial's is empty), so `lr_lambdas` are this spec's (its
        # scheduler, warmup and optimizer steps), read at the checkpoint's position.
        self.scheduler.base_lrs = [self.spec.learning_rate] * len(self.optimizer.param_groups)
        for group, factor in zip(self.optimizer.param_groups, self.scheduler.lr_lambdas, strict=True):
            group["initial_lr"], group["lr"] = (
                self.spec.learning_rate,
                self.spec.learning_rate * factor(self.scheduler.last_epoch),
            )
        torch.set_rng_state(state["rng"])
        self.batches_drawn = state.get("batches_drawn", step)

    def solve_rate(self, eval_set: EvalSet) -> float:
        """Greedy solve rate on the fixed ``eval_set`` under its own turn budget."""
        self.model.eval()
        episodes = run_episodes(
            self.policy.generate, eval_set.mazes, max_turns=eval_set.max_turns, history_turns=HISTORY_TURNS
        )
        return sum(episode.solved for episode in episodes) / len(episodes)


def train_tiny_grpo(
    spec: NormalizedRunSpec, paths: TrainPaths, stop_after_s: float | None = None, dtype: torch.dtype | None = None
) -> list[TrainMetric]:
    """Run the tiny GRPO loop for ``spec`` in ``paths`` (see the module docstring), after the latest
    checkpoint there if there is one; returns the metrics this call logged. ``dtype`` is the base
    model's (default: bfloat16 on a GPU, float32 on a CPU).

    With ``stop_after_s``, the call ends after the first step that finishes more than that many
    seconds after it began, with a checkpoint of that step (no export unless one is due), so that a
    later call resumes there: one long run in several time-limited jobs.

    Raises:
        TinyBackendError: if the spec's base model is not the tiny Qwen3-VL.
        NonFiniteUpdateError: if an update's loss or gradient is NaN or infinite (nothing is stepped
            or checkpointed; the latest checkpoint is the last good state).
        DynamicSamplingExhausted: see :meth:`TinyGRPO.sample_step` (nothing is trained on that step).
    """
    if spec.base_model_id != TINY_BASE_MODEL_ID:
        raise TinyBackendError(f"the tiny backend trains only {TINY_BASE_MODEL_ID!r}, not {spec.base_model_id!r}")
    threads = torch.get_num_threads()
    torch.set_num_threads(TORCH_THREADS)
    try:
        return _train(spec, paths, stop_after_s, dtype)
    finally:
        torch.set_num_threads(threads)


def _train(
    spec: NormalizedRunSpec, paths: TrainPaths, stop_after_s: float | None, dtype: torch.dtype | None
) -> list[TrainMetric]:
    began = time.monotonic()
    paths.make_dirs()
    trainer = TinyGRPO(spec, dtype)
    seeds = training_seeds(spec.maze.train_mazes, offset=spec.maze.seed_offset, size=spec.maze.size)
    eval_set = eval_set_for_size(spec.maze.size)
    logger.info(
        "tiny GRPO: %d steps of %d mazes x %d samples, LoRA r=%d alpha=%d, clip %.2f/%.2f%s, KL %s, %s, advantages %s",
        spec.total_steps, spec.train_batch_size, spec.n_samples_per_prompt, spec.lora.rank, spec.lora.alpha,
        spec.eps_clip_low, spec.eps_clip_high,
        f" (dual clip {spec.clip_ratio_c})" if spec.policy_loss_type == "dual_clip" else "",
        f"x {spec.kl_loss_coef}" if spec.use_kl_loss else "off", spec.loss_reduction,
        "over the group's std" if spec.grpo_norm_by_std else "in reward units (no std)",
    )  # fmt: skip
    resumed = latest_checkpoint(paths.ckpt_dir)
    if resumed is not None:
        trainer.restore(paths.ckpt_dir, resumed)
        keep_metrics_through(paths.metrics_file, resumed)
        logger.info("resumed after the checkpoint of step %d", resumed)
    metrics = []
    for step in range((resumed or 0) + 1, spec.total_steps + 1):
        started = time.monotonic()
        trained, played = trainer.sample_step(seeds)
        lr = trainer.optimizer.param_groups[0]["lr"]  # where the schedule stands as the step's update begins
        stats = trainer.update(trained)
        solve_rate = trainer.solve_rate(eval_set) if step % spec.eval_interval == 0 else None
        batches = len(played) // (spec.train_batch_size * spec.n_samples_per_prompt) if spec.dynamic_sampling else None
        metric = step_metric(step, played, spec.n_samples_per_prompt, stats, solve_rate, batches, lr)
        append_metric(paths.metrics_file, metric)
        metrics.append(metric)
        logger.info("step %d/%d (%.1f s): %s", step, spec.total_steps, time.monotonic() - started, metric.to_json())
        out_of_time = stop_after_s is not None and time.monotonic() - began > stop_after_s
        export_due = _due(step, spec.ckpt_interval, spec.total_steps)
        if export_due or out_of_time:
            trainer.save_checkpoint(paths.ckpt_dir, step)
        if export_due:
            logger.info("step %d: adapter exported to %s", step, save_export(trainer.model, paths.export_dir, step))
        if out_of_time and step < spec.total_steps:
            logger.info(
                "stopping after step %d (%.0f s, the limit is %.0f s); a later call resumes",
                step,
                time.monotonic() - began,
                stop_after_s,
            )
            break
    return metrics
