"""The turns of sampled episodes as GRPO trains on them: turn samples, encoded micro-batches, mini-batches."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch
from peft import PeftModel
from transformers import BatchFeature, ProcessorMixin

from cluster_jobs.models.loading import answer_token_ids, encode_answered_chats
from cluster_jobs.rollout import HISTORY_TURNS_BY_ENGINE, Episode, turn_chats
from local_stack.cluster_standins.tiny_trainer.grpo_loss import episode_mean_weights
from local_stack.cluster_standins.tiny_trainer.log_probs import token_log_probs, with_rope_positions
from mazeops.runspec import NormalizedRunSpec

# Earlier turns each chat shows besides its own observation, when played and when trained on: the transformers
# engine's, with which the local stand-ins evaluate and serve the tiny trainer's adapters.
HISTORY_TURNS = HISTORY_TURNS_BY_ENGINE["transformers"]
# Turns per forward pass, by device; a mini-batch's gradient is accumulated over its micro-batches.
# On a GPU the tiny model's forward pass is a chain of small kernel launches whatever the batch, so
# larger micro-batches cut the launches; on a CPU the work grows with the batch and 16 keeps memory low.
MICRO_BATCH_TURNS = {"cpu": 16, "cuda": 256}

_T = TypeVar("_T")


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
            (:func:`~local_stack.cluster_standins.tiny_trainer.grpo_loss.episode_mean_weights`); None under
            ``token_mean``.
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


def encode_answers(
    processor: ProcessorMixin, chats: list[list[dict]], answers: list[str]
) -> tuple[BatchFeature, torch.Tensor]:
    """:func:`~cluster_jobs.models.loading.encode_answered_chats` with its mask shifted to align with
    :func:`~local_stack.cluster_standins.tiny_trainer.log_probs.token_log_probs`: ``mask[i, j]`` is True where
    token ``j + 1`` of sequence ``i`` is one of its answer's tokens or the end-of-turn token after them."""
    inputs, mask = encode_answered_chats(processor, chats, answers)
    return inputs, mask[:, 1:]


@torch.no_grad()
def prepare_mini_batch(
    model: PeftModel,
    processor: ProcessorMixin,
    spec: NormalizedRunSpec,
    episodes: Sequence[Episode],
    advantages: Sequence[float],
    micro_batch_turns: int,
) -> MiniBatch:
    """Encode the turns of ``episodes`` (each with its episode's advantage) in micro-batches of
    ``micro_batch_turns``, with the log-probs of those that train under ``model``'s current weights and (with the
    spec's KL term) under the reference, the model with its LoRA disabled.

    Without the KL term a turn of advantage 0 has loss and gradient exactly 0: it is left out of the
    micro-batches, but its tokens and its turn still count in the mini-batch's denominators.
    """
    turns = [turn_chats(episode, HISTORY_TURNS) for episode in episodes]
    # Answer and end-of-turn tokens per episode: the loss mask's, counted without encoding the chats.
    episode_tokens = [sum(len(answer_token_ids(processor.tokenizer, answer)) for _, answer in pairs) for pairs in turns]
    weights = episode_mean_weights(episode_tokens) if spec.loss_reduction == "sequence_mean" else [None] * len(episodes)
    samples = [
        TurnSample(chat, answer, advantage, weight)
        for pairs, advantage, weight in zip(turns, advantages, weights, strict=True)
        for chat, answer in pairs
    ]
    trained = [sample for sample in samples if sample.advantage != 0 or spec.use_kl_loss]
    micro_batches = [_micro_batch(model, processor, spec, chunk) for chunk in _chunks(trained, micro_batch_turns)]
    return MiniBatch(micro_batches, tokens=sum(episode_tokens), turns=len(samples))


def _micro_batch(
    model: PeftModel, processor: ProcessorMixin, spec: NormalizedRunSpec, samples: Sequence[TurnSample]
) -> MicroBatch:
    inputs, mask = encode_answers(processor, [s.chat for s in samples], [s.answer for s in samples])
    inputs = with_rope_positions(model, inputs)
    old_log_probs = token_log_probs(model, inputs, spec.temperature)
    ref_log_probs = None
    if spec.use_kl_loss:
        with model.disable_adapter():
            ref_log_probs = token_log_probs(model, inputs, spec.temperature)
    device = old_log_probs.device  # the model's: the GPU when there is one
    advantages = torch.tensor([s.advantage for s in samples], dtype=old_log_probs.dtype, device=device)[:, None]
    weights = None
    if spec.loss_reduction == "sequence_mean":
        weights = torch.tensor([s.weight for s in samples], dtype=old_log_probs.dtype, device=device)[:, None]
    return MicroBatch(inputs, mask.to(device), advantages, old_log_probs, ref_log_probs, weights)


def _chunks(items: Sequence[_T], size: int) -> list[Sequence[_T]]:
    return [items[start : start + size] for start in range(0, len(items), size)]
