"""GRPO's loss math as pure tensor functions, following SkyRL's defaults (``skyrl.train`` 0.4.0).

Per-token tensors are ``[batch, length]`` with a boolean ``mask`` of the tokens that count; advantages may be
``[batch, 1]`` and broadcast.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

ADVANTAGE_EPS = 1e-6
# exp() of a log-prob difference is computed on the difference clamped to this range (as SkyRL does).
LOG_RATIO_LIMIT = 20.0
# SkyRL clamps the k3 estimate to at most this value.
KL_LIMIT = 10.0


def group_advantages(rewards: torch.Tensor, group_size: int, norm_by_std: bool = True) -> torch.Tensor:
    """GRPO advantages of ``rewards`` (1-D), in consecutive groups of ``group_size`` samples of one prompt.

    ``(reward - group mean) / (group std + ADVANTAGE_EPS)`` with the unbiased std, as SkyRL's
    ``compute_grpo_outcome_advantage``; with ``norm_by_std`` False (SkyRL's ``grpo_norm_by_std: false``,
    Dr. GRPO) ``reward - group mean``, so a group weighs by how far apart its rewards are. A zero-variance
    group (all rewards equal) gets exactly 0 either way.

    Raises:
        ValueError: if ``rewards`` is not 1-D or not a whole number of groups of at least 2.
    """
    groups = _groups(rewards, group_size)
    mean = groups.mean(dim=1, keepdim=True)
    std = groups.std(dim=1, keepdim=True)
    advantages = (groups - mean) / (std + ADVANTAGE_EPS) if norm_by_std else groups - mean
    constant = zero_variance_groups(rewards, group_size)[:, None]
    return torch.where(constant, torch.zeros_like(advantages), advantages).reshape(-1)


def zero_variance_groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """One boolean per group of ``group_size`` consecutive rewards: True where all its rewards are equal.

    Raises:
        ValueError: as :func:`group_advantages`.
    """
    groups = _groups(rewards, group_size)
    return groups.amax(dim=1) == groups.amin(dim=1)


def _groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    if rewards.dim() != 1 or group_size < 2 or rewards.numel() % group_size:
        raise ValueError(f"{tuple(rewards.shape)} rewards do not split into groups of {group_size} (>= 2)")
    return rewards.reshape(-1, group_size)


def importance_ratio(log_probs: torch.Tensor, old_log_probs: torch.Tensor) -> torch.Tensor:
    """``exp(log_probs - old_log_probs)`` per token, the difference clamped to +-LOG_RATIO_LIMIT."""
    return torch.exp((log_probs - old_log_probs).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT))


def clipped_surrogate(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    eps_low: float,
    eps_high: float,
    clip_ratio_c: float | None = None,
) -> torch.Tensor:
    """PPO's clipped loss per token: ``-min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A)``.

    For a negative advantage that loss grows with the ratio without bound, so one token whose
    probability an update raised a thousandfold can take the whole gradient. With ``clip_ratio_c``
    (SkyRL's ``policy_loss_type: dual_clip``, Ye et al. 2019, https://arxiv.org/abs/1912.09729) a negative
    advantage's loss is capped at ``-clip_ratio_c * A``, so past ``ratio = clip_ratio_c`` it gives no gradient.
    """
    unclipped = ratio * advantages
    clipped = ratio.clamp(1 - eps_low, 1 + eps_high) * advantages
    loss = -torch.minimum(unclipped, clipped)
    if clip_ratio_c is None:
        return loss
    return torch.where(advantages < 0, torch.minimum(loss, -clip_ratio_c * advantages), loss)


def clip_active(ratio: torch.Tensor, advantages: torch.Tensor, eps_low: float, eps_high: float) -> torch.Tensor:
    """True per token where the clipped term is the smaller one (so the token gives no gradient).

    That is ``ratio > 1 + eps_high`` for a positive advantage, ``ratio < 1 - eps_low`` for a
    negative one; SkyRL's ``ppo_clip_ratio`` is the masked mean of this.
    """
    unclipped = ratio * advantages
    clipped = ratio.clamp(1 - eps_low, 1 + eps_high) * advantages
    return clipped < unclipped


def k3_kl(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    """The k3 estimate of KL(policy || reference) per token: ``exp(d) - d - 1`` with ``d = ref - policy``.

    Non-negative, 0 where the two log-probs agree; ``d`` clamped to +-LOG_RATIO_LIMIT and the
    result to at most KL_LIMIT, as SkyRL's ``compute_approx_kl(kl_estimator_type="k3")``. The result is
    also clamped at 0: for ``|d|`` near 1e-15 the subtraction can round to a few 1e-16 below it.
    """
    delta = (ref_log_probs - log_probs).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    return (torch.exp(delta) - delta - 1).clamp(min=0.0, max=KL_LIMIT)


def masked_token_mean(values: torch.Tensor, mask: torch.Tensor, total_tokens: int | None = None) -> torch.Tensor:
    """``sum(values[mask]) / total_tokens``: the token mean over a mini-batch of ``total_tokens`` masked tokens.

    ``total_tokens`` defaults to ``mask.sum()`` (this batch is the whole mini-batch); a denominator of
    0 counts as 1.
    """
    count = int(mask.sum()) if total_tokens is None else total_tokens
    return torch.where(mask, values, torch.zeros_like(values)).sum() / max(count, 1)


def episode_mean_weights(episode_tokens: Sequence[int]) -> list[float]:
    """Per episode of a mini-batch, the weight of each of its loss tokens under ``sequence_mean``:
    ``1 / (episodes x the episode's tokens)``, so each episode's tokens weigh 1/episodes together.

    An episode without tokens gets weight 0 (it has nothing to weigh) but still counts as an episode.
    """
    count = len(episode_tokens)
    return [1.0 / (count * tokens) if tokens else 0.0 for tokens in episode_tokens]


def masked_weighted_sum(values: torch.Tensor, mask: torch.Tensor, row_weights: torch.Tensor) -> torch.Tensor:
    """``sum(values[mask] x weight of the row)``, with ``row_weights`` ``[batch, 1]``: a mean of given weights."""
    return torch.where(mask, values * row_weights, torch.zeros_like(values)).sum()


def masked_sequence_mean(values: torch.Tensor, mask: torch.Tensor, total_sequences: int | None = None) -> torch.Tensor:
    """Each row's mean over its masked tokens, summed over rows, over ``total_sequences`` (default: rows)."""
    per_row = torch.where(mask, values, torch.zeros_like(values)).sum(dim=1) / mask.sum(dim=1).clamp(min=1)
    count = values.shape[0] if total_sequences is None else total_sequences
    return per_row.sum() / max(count, 1)
