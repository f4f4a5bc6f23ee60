"""One GRPO optimizer step on a mini-batch: the clipped policy loss (+ KL term), accumulated over micro-batches."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from local_stack.cluster_standins.tiny_trainer.batches import MicroBatch, MiniBatch
from local_stack.cluster_standins.tiny_trainer.grpo_loss import (
    clip_active,
    clipped_surrogate,
    importance_ratio,
    k3_kl,
    masked_sequence_mean,
    masked_token_mean,
    masked_weighted_sum,
)
from local_stack.cluster_standins.tiny_trainer.log_probs import token_log_probs
from mazeops.runspec import NormalizedRunSpec

# SkyRL's default `trainer.policy.optimizer_config.max_grad_norm`.
MAX_GRAD_NORM = 1.0


class NonFiniteUpdateError(RuntimeError):
    """A mini-batch's loss or gradient is NaN or infinite: the update is refused before it reaches the weights."""


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


def optimizer_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    spec: NormalizedRunSpec,
    batch: MiniBatch,
) -> MiniBatchStats:
    """One step of ``optimizer`` (then ``scheduler``) on ``batch``'s clipped policy loss (+ the spec's KL term),
    its gradient accumulated over the micro-batches and its norm clipped to MAX_GRAD_NORM.

    The loss is the spec's ``policy_loss_type`` (``dual_clip`` caps a negative advantage's term at
    ``clip_ratio_c``) reduced by its ``loss_reduction`` over the whole mini-batch; ``model`` must be in train mode.

    Raises:
        NonFiniteUpdateError: the loss or the gradient norm is NaN or infinite; nothing is stepped.
    """
    # Gradients are zeroed, not dropped: a mini-batch with nothing to train still takes its
    # AdamW step (momentum, weight decay), as SkyRL's does.
    optimizer.zero_grad(set_to_none=False)
    loss_total, kl_total = 0.0, 0.0
    ratios, clipped = [], []
    dual_clip_c = spec.clip_ratio_c if spec.policy_loss_type == "dual_clip" else None
    where = ""  # where a non-finite loss first came from, for the error
    for index, micro in enumerate(batch.micro_batches):
        log_probs = token_log_probs(model, micro.inputs, spec.temperature)
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
    parameters = [parameter for group in optimizer.param_groups for parameter in group["params"]]
    grad_norm = float(torch.nn.utils.clip_grad_norm_(parameters, MAX_GRAD_NORM))
    if not (math.isfinite(loss_total) and math.isfinite(grad_norm)):
        # Stepping would write NaN into the LoRA weights (the next rollout then dies inside
        # generate); stop here, so the latest checkpoint stays the last good state.
        raise NonFiniteUpdateError(
            f"non-finite GRPO update (loss {loss_total}, gradient norm {grad_norm}{where}): "
            "no step taken and no checkpoint written; lower the lr or the sampling temperature and resume from the "
            "latest checkpoint"
        )
    optimizer.step()
    scheduler.step()
    trained_ratios = torch.cat(ratios) if ratios else torch.zeros(0)
    return MiniBatchStats(
        loss=loss_total,
        kl=kl_total if spec.use_kl_loss else None,
        tokens=trained_ratios.numel(),
        ratio_sum=trained_ratios.sum().item(),
        ratio_max=trained_ratios.max().item() if trained_ratios.numel() else None,
        clipped=int(torch.cat(clipped).sum()) if clipped else 0,
    )


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
    answer_tokens = int(micro.mask.sum())
    return f"micro-batch {index}: non-finite log-probs at {at} of {answer_tokens} answer tokens ({', '.join(counts)})"
