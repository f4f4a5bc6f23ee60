"""GRPO's loss math: advantages, clipped surrogate, k3 KL, masked reductions (tables, then properties)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from local_stack.cluster_standins.tiny_trainer.grpo_loss import (
    ADVANTAGE_EPS,
    KL_LIMIT,
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

EPS = ADVANTAGE_EPS
HALF_SQRT2 = math.sqrt(0.5)


@pytest.mark.parametrize(
    ("rewards", "group_size", "expected"),
    [
        # unbiased std of (1, 0) is sqrt(1/2)
        ([1.0, 0.0], 2, [0.5 / (HALF_SQRT2 + EPS), -0.5 / (HALF_SQRT2 + EPS)]),
        # mean 0.25, unbiased std 0.5
        ([1.0, 0.0, 0.0, 0.0], 4, [0.75 / (0.5 + EPS)] + [-0.25 / (0.5 + EPS)] * 3),
        # the middle reward is the mean: advantage 0 inside a group that is not constant
        ([0.0, 1.0, 2.0], 3, [-1 / (1 + EPS), 0.0, 1 / (1 + EPS)]),
        # zero-variance groups get exactly 0, even where the float mean is not exactly the reward
        ([1.0, 0.0, 0.5, 0.5], 2, [0.5 / (HALF_SQRT2 + EPS), -0.5 / (HALF_SQRT2 + EPS), 0.0, 0.0]),
        ([0.3, 0.3, 0.3], 3, [0.0, 0.0, 0.0]),
        ([0.1, 0.1, 0.1, 0.7, 0.7, 0.7], 3, [0.0] * 6),
    ],
)
def test_group_advantages(rewards, group_size, expected):
    advantages = group_advantages(torch.tensor(rewards, dtype=torch.float64), group_size)
    assert advantages.tolist() == pytest.approx(expected, rel=1e-12, abs=0)


@pytest.mark.parametrize(
    ("rewards", "group_size", "expected"),
    [
        ([1.0, 0.0], 2, [0.5, -0.5]),
        ([0.8, 0.0, 0.0, 0.0], 4, [0.6, -0.2, -0.2, -0.2]),
        ([1.0, 0.0, 0.5, 0.5], 2, [0.5, -0.5, 0.0, 0.0]),
        ([0.1, 0.1, 0.1, 0.7, 0.7, 0.7], 3, [0.0] * 6),
    ],
)
def test_group_advantages_without_the_std(rewards, group_size, expected):
    advantages = group_advantages(torch.tensor(rewards, dtype=torch.float64), group_size, norm_by_std=False)
    assert advantages.tolist() == pytest.approx(expected, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize(
    ("rewards", "group_size", "expected"),
    [
        ([1.0, 0.0, 0.5, 0.5], 2, [False, True]),
        ([0.3, 0.3, 0.3], 3, [True]),
        ([0.0, 0.0, 0.0, 1e-9], 4, [False]),
        ([0.2] * 4, 2, [True, True]),
    ],
)
def test_zero_variance_groups(rewards, group_size, expected):
    assert zero_variance_groups(torch.tensor(rewards, dtype=torch.float64), group_size).tolist() == expected


@pytest.mark.parametrize(
    ("rewards", "group_size"),
    [([1.0, 0.0, 0.5], 2), ([1.0, 0.0], 1), ([1.0, 0.0], 3), ([[1.0, 0.0]], 2), ([], 0)],
)
def test_rewards_that_do_not_form_groups_are_refused(rewards, group_size):
    for function in (group_advantages, zero_variance_groups):
        with pytest.raises(ValueError, match=f"groups of {group_size}"):
            function(torch.tensor(rewards), group_size)


@pytest.mark.parametrize(
    ("ratio", "advantage", "eps_low", "eps_high", "loss", "clipped"),
    [
        (1.0, 1.0, 0.2, 0.2, -1.0, False),
        (1.1, 2.0, 0.2, 0.2, -2.2, False),
        # positive advantage: clipped above 1 + eps_high, not below 1 - eps_low
        (1.5, 1.0, 0.2, 0.2, -1.2, True),
        (0.5, 1.0, 0.2, 0.2, -0.5, False),
        # negative advantage: clipped below 1 - eps_low, not above 1 + eps_high
        (0.5, -1.0, 0.2, 0.2, 0.8, True),
        (1.5, -1.0, 0.2, 0.2, 1.5, False),
        # asymmetric range (clip-higher)
        (1.25, 1.0, 0.1, 0.3, -1.25, False),
        (1.35, 1.0, 0.1, 0.3, -1.3, True),
        (0.85, -1.0, 0.1, 0.3, 0.9, True),
        (0.95, -1.0, 0.1, 0.3, 0.95, False),
        (3.0, 0.0, 0.2, 0.2, 0.0, False),
    ],
)
def test_clipped_surrogate(ratio, advantage, eps_low, eps_high, loss, clipped):
    ratio_t, advantage_t = torch.tensor([ratio], dtype=torch.float64), torch.tensor([advantage], dtype=torch.float64)
    assert clipped_surrogate(ratio_t, advantage_t, eps_low, eps_high).item() == pytest.approx(loss, abs=1e-12)
    assert clip_active(ratio_t, advantage_t, eps_low, eps_high).item() is clipped


@pytest.mark.parametrize(
    ("ratio", "advantage", "clip_ratio_c", "loss"),
    [
        # a negative advantage's loss stops growing at clip_ratio_c x |A| ...
        (1000.0, -1.0, 3.0, 3.0),
        (5.0, -0.5, 3.0, 1.5),
        (3.0, -2.0, 3.0, 6.0),
        # ... and is the regular loss below that
        (2.0, -1.0, 3.0, 2.0),
        (0.5, -1.0, 3.0, 0.8),
        (1.5, -1.0, 1.2, 1.2),
        # a positive (or zero) advantage's loss is the regular one
        (1000.0, 1.0, 3.0, -1.2),
        (0.5, 1.0, 3.0, -0.5),
        (1000.0, 0.0, 3.0, 0.0),
    ],
)
def test_dual_clip_surrogate(ratio, advantage, clip_ratio_c, loss):
    ratio_t, advantage_t = torch.tensor([ratio], dtype=torch.float64), torch.tensor([advantage], dtype=torch.float64)
    assert clipped_surrogate(ratio_t, advantage_t, 0.2, 0.2, clip_ratio_c).item() == pytest.approx(loss, abs=1e-12)


def test_dual_clip_gives_no_gradient_past_clip_ratio_c_for_a_negative_advantage():
    # A token whose probability rose e^8-fold since sampling (ratio_max 3.78e3 in the 9x9 run that
    # collapsed right after): the regular loss's gradient is ratio x |A|, the dual-clip one's is 0.
    log_probs = torch.tensor([8.0, 8.0, 0.5], dtype=torch.float64, requires_grad=True)
    advantage = torch.tensor([-1.0, 1.0, -1.0], dtype=torch.float64)
    old_log_probs = torch.zeros(3, dtype=torch.float64)

    def gradient(clip_ratio_c: float | None) -> torch.Tensor:
        ratio = importance_ratio(log_probs, old_log_probs)
        return torch.autograd.grad(clipped_surrogate(ratio, advantage, 0.2, 0.2, clip_ratio_c).sum(), log_probs)[0]

    regular, dual = gradient(None), gradient(3.0)
    assert regular[0].item() == pytest.approx(math.exp(8.0))
    assert dual.tolist() == [0.0, 0.0, pytest.approx(math.exp(0.5))]


@pytest.mark.parametrize("advantages", [[1.0, -1.0], [0.5, 2.0], [-0.3, 0.0]])
def test_ratio_one_gives_the_plain_policy_gradient(advantages):
    torch.manual_seed(0)
    log_probs = torch.randn(2, 5, dtype=torch.float64).log_softmax(dim=-1).requires_grad_()
    mask = torch.tensor([[False, True, True, True, False], [False, False, True, True, True]])
    advantage = torch.tensor(advantages, dtype=torch.float64)[:, None]

    ratio = importance_ratio(log_probs, log_probs.detach())
    masked_token_mean(clipped_surrogate(ratio, advantage, 0.2, 0.2), mask).backward()
    grpo_gradient = log_probs.grad.clone()
    log_probs.grad = None
    masked_token_mean(-advantage * log_probs, mask).backward()

    assert ratio.tolist() == [[1.0] * 5] * 2
    assert torch.allclose(grpo_gradient, log_probs.grad, rtol=0, atol=1e-15)
    assert not grpo_gradient[~mask].any()


@pytest.mark.parametrize(
    ("values", "mask", "total_tokens", "expected"),
    [
        ([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], [[0, 1, 1], [0, 0, 1]], None, 11 / 3),
        ([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], [[0, 1, 1], [0, 0, 1]], 6, 11 / 6),
        # masked-out positions (prompt, image tokens, padding) never count, even when not finite
        ([[math.nan, 2.0], [math.inf, -math.inf]], [[0, 1], [0, 0]], None, 2.0),
        ([[1.0, 2.0]], [[0, 0]], None, 0.0),
    ],
)
def test_masked_token_mean(values, mask, total_tokens, expected):
    result = masked_token_mean(torch.tensor(values), torch.tensor(mask, dtype=torch.bool), total_tokens)
    assert result.item() == pytest.approx(expected)


@pytest.mark.parametrize(
    ("values", "mask", "total_sequences", "expected"),
    [
        ([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], [[0, 1, 1], [0, 0, 1]], None, (2.5 + 6.0) / 2),
        ([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], [[0, 1, 1], [0, 0, 1]], 4, (2.5 + 6.0) / 4),
        ([[math.nan, 2.0], [7.0, 1.0]], [[0, 1], [0, 0]], None, 1.0),
    ],
)
def test_masked_sequence_mean(values, mask, total_sequences, expected):
    result = masked_sequence_mean(torch.tensor(values), torch.tensor(mask, dtype=torch.bool), total_sequences)
    assert result.item() == pytest.approx(expected)


@pytest.mark.parametrize(
    ("episode_tokens", "expected"),
    [
        ([10, 10], [1 / 20, 1 / 20]),  # equal lengths: the token mean's weights
        ([10, 40], [1 / 20, 1 / 80]),  # each episode's tokens weigh 1/2 together
        ([3, 0, 5], [1 / 9, 0.0, 1 / 15]),  # an episode without tokens still counts as one of three
        ([], []),
    ],
)
def test_episode_mean_weights(episode_tokens, expected):
    assert episode_mean_weights(episode_tokens) == pytest.approx(expected)


def test_masked_weighted_sum():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, math.nan, 6.0]])
    mask = torch.tensor([[0, 1, 1], [1, 0, 1]], dtype=torch.bool)
    assert masked_weighted_sum(values, mask, torch.tensor([[0.5], [0.25]])).item() == pytest.approx(2.5 + 2.5)


@pytest.mark.parametrize(
    ("log_prob", "ref_log_prob", "expected"),
    [
        (-1.3, -1.3, 0.0),
        (0.0, math.log(0.5), 0.5 + math.log(2) - 1),
        (math.log(0.5), 0.0, 2 - math.log(2) - 1),
        (-60.0, 0.0, KL_LIMIT),  # clamped, as SkyRL's estimator
    ],
)
def test_k3_kl(log_prob, ref_log_prob, expected):
    kl = k3_kl(torch.tensor([log_prob], dtype=torch.float64), torch.tensor([ref_log_prob], dtype=torch.float64))
    assert kl.item() == pytest.approx(expected, abs=1e-12)


def test_kl_is_zero_with_zero_gradient_when_policies_match():
    log_probs = torch.randn(3, 4, dtype=torch.float64).log_softmax(dim=-1).requires_grad_()
    kl = masked_sequence_mean(k3_kl(log_probs, log_probs.detach()), torch.ones(3, 4, dtype=torch.bool))
    kl.backward()
    assert kl.item() == 0.0
    assert not log_probs.grad.any()


# --- properties ---

REWARD = st.floats(0.0, 1.0, allow_nan=False)
RATIO = st.floats(0.01, 20.0, allow_nan=False)
ADVANTAGE = st.floats(-5.0, 5.0, allow_nan=False)
EPSILON = st.floats(0.01, 0.9, allow_nan=False)


@st.composite
def grouped_rewards(draw):
    group_size = draw(st.integers(2, 8))
    groups = draw(st.lists(st.lists(REWARD, min_size=group_size, max_size=group_size), min_size=1, max_size=4))
    return torch.tensor([reward for group in groups for reward in group], dtype=torch.float64), group_size


@settings(deadline=None)
@given(grouped_rewards())
def test_advantages_center_each_group_and_vanish_on_constant_ones(case):
    rewards, group_size = case
    advantages = group_advantages(rewards, group_size).reshape(-1, group_size)
    constants = zero_variance_groups(rewards, group_size)
    for group, advantage, constant in zip(rewards.reshape(-1, group_size), advantages, constants, strict=False):
        if constant:
            assert advantage.tolist() == [0.0] * group_size
        else:
            assert abs(advantage.sum().item()) < 1e-9
            assert advantage.std().item() <= 1.0 + 1e-12
            # a higher reward never gets a lower advantage
            assert (advantage[group.argsort()].diff() >= 0).all()


@settings(deadline=None)
@given(grouped_rewards())
def test_without_the_std_the_advantages_are_the_normalized_ones_times_the_groups_std(case):
    rewards, group_size = case
    plain = group_advantages(rewards, group_size, norm_by_std=False).reshape(-1, group_size)
    normalized = group_advantages(rewards, group_size).reshape(-1, group_size)
    for group, centered, scaled in zip(rewards.reshape(-1, group_size), plain, normalized, strict=False):
        assert centered.tolist() == pytest.approx((scaled * (group.std() + EPS)).tolist(), rel=1e-9, abs=1e-12)


@settings(deadline=None)
@given(st.lists(st.tuples(RATIO, ADVANTAGE), min_size=1, max_size=16), EPSILON, EPSILON)
def test_clipped_loss_is_a_pessimistic_bound(pairs, eps_low, eps_high):
    ratio = torch.tensor([r for r, _ in pairs], dtype=torch.float64)
    advantage = torch.tensor([a for _, a in pairs], dtype=torch.float64)
    loss = clipped_surrogate(ratio, advantage, eps_low, eps_high)
    # never better than the unclipped objective, never rewarded beyond the clip range
    assert (loss >= -ratio * advantage - 1e-12).all()
    positive, negative = advantage > 0, advantage < 0
    assert (loss[positive] >= -(1 + eps_high) * advantage[positive] - 1e-12).all()
    assert (loss[negative] >= (1 - eps_low) * -advantage[negative] - 1e-12).all()


@settings(deadline=None)
@given(st.lists(st.tuples(st.floats(-3.0, 3.0), ADVANTAGE), min_size=1, max_size=16), EPSILON, EPSILON)
def test_gradient_is_zero_exactly_where_the_ratio_is_clipped(pairs, eps_low, eps_high):
    log_ratio = torch.tensor([d for d, _ in pairs], dtype=torch.float64)
    advantage = torch.tensor([a for _, a in pairs], dtype=torch.float64)
    old_log_probs = torch.full_like(log_ratio, -2.0)
    log_probs = (old_log_probs + log_ratio).requires_grad_()
    ratio = importance_ratio(log_probs, old_log_probs)
    clipped_surrogate(ratio, advantage, eps_low, eps_high).sum().backward()
    clipped = clip_active(ratio.detach(), advantage, eps_low, eps_high)
    expected = torch.where(clipped, torch.zeros_like(advantage), -advantage * ratio.detach())
    assert torch.allclose(log_probs.grad, expected, rtol=1e-12, atol=1e-12)


@settings(deadline=None)
@given(st.integers(1, 6), st.integers(1, 8), st.data())
def test_micro_batch_terms_add_up_to_the_mini_batch_mean(rows, width, data):
    cells = st.lists(st.floats(-10, 10), min_size=rows * width, max_size=rows * width)
    values = torch.tensor(data.draw(cells), dtype=torch.float64)
    values = values.reshape(rows, width)
    mask = torch.tensor(data.draw(st.lists(st.booleans(), min_size=rows * width, max_size=rows * width)))
    mask = mask.reshape(rows, width)
    split = data.draw(st.integers(0, rows))
    tokens = int(mask.sum())
    parts = [(values[:split], mask[:split]), (values[split:], mask[split:])]
    token_mean = sum(masked_token_mean(v, m, tokens) for v, m in parts)
    sequence_mean = sum(masked_sequence_mean(v, m, rows) for v, m in parts)
    assert token_mean.item() == pytest.approx(masked_token_mean(values, mask).item(), abs=1e-5)
    assert sequence_mean.item() == pytest.approx(masked_sequence_mean(values, mask).item(), abs=1e-5)


@settings(deadline=None)
@given(
    st.lists(
        st.lists(st.lists(st.floats(-10, 10), min_size=1, max_size=4), min_size=1, max_size=4), min_size=1, max_size=5
    )
)
def test_episode_weights_make_the_mean_of_each_episodes_token_mean(episodes):
    # episodes -> turns -> each turn's token values; a turn is one row, its tokens left of the padding
    rows = [(index, turn) for index, turns in enumerate(episodes) for turn in turns]
    width = max(len(turn) for _, turn in rows)
    values = torch.tensor([turn + [0.0] * (width - len(turn)) for _, turn in rows], dtype=torch.float64)
    mask = torch.tensor([[j < len(turn) for j in range(width)] for _, turn in rows])
    weights = episode_mean_weights([sum(len(turn) for turn in turns) for turns in episodes])
    row_weights = torch.tensor([[weights[index]] for index, _ in rows], dtype=torch.float64)
    expected = sum(sum(sum(turn) for turn in turns) / sum(len(turn) for turn in turns) for turns in episodes) / len(
        episodes
    )
    assert masked_weighted_sum(values, mask, row_weights).item() == pytest.approx(expected, abs=1e-9)
    assert sum(
        weight * sum(len(turn) for turn in turns) for weight, turns in zip(weights, episodes, strict=False)
    ) == pytest.approx(1.0)


@settings(deadline=None)
@given(st.lists(st.tuples(st.floats(-30.0, 0.0), st.floats(-30.0, 0.0)), min_size=1, max_size=16))
@example([(-4.287304513560273e-15, 0.0)])  # exp(d) - d - 1 rounds to -1.1e-16 here (found by hypothesis)
def test_k3_kl_is_non_negative_and_bounded(pairs):
    log_probs, ref_log_probs = (torch.tensor(column, dtype=torch.float64) for column in zip(*pairs, strict=False))
    kl = k3_kl(log_probs, ref_log_probs)
    assert ((kl >= 0) & (kl <= KL_LIMIT)).all()


@settings(deadline=None)
@given(st.lists(st.tuples(RATIO, ADVANTAGE), min_size=1, max_size=16), EPSILON, EPSILON, st.floats(1.01, 10.0))
def test_dual_clip_only_ever_lowers_a_negative_advantages_loss(pairs, eps_low, eps_high, clip_ratio_c):
    ratio = torch.tensor([r for r, _ in pairs], dtype=torch.float64)
    advantage = torch.tensor([a for _, a in pairs], dtype=torch.float64)
    regular = clipped_surrogate(ratio, advantage, eps_low, eps_high)
    dual = clipped_surrogate(ratio, advantage, eps_low, eps_high, clip_ratio_c)
    negative = advantage < 0
    assert torch.equal(dual[~negative], regular[~negative])
    assert (dual[negative] <= regular[negative]).all()
    assert (dual[negative] <= -clip_ratio_c * advantage[negative] + 1e-12).all()
