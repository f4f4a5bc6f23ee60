"""Champion/challenger decision on paired per-maze outcomes (an exact one-sided McNemar test)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from mazeops.baseline import BASELINE

_BITS = re.compile(r"^[01]+$")


class InvalidOutcomes(ValueError):
    """Outcome strings that are empty, not made of '0'/'1', or of different lengths."""


@dataclass(frozen=True)
class McNemarResult:
    """Discordant pair counts and the one-sided exact p-value that the challenger is better."""

    b: int
    c: int
    p_value: float


@dataclass(frozen=True)
class Decision:
    """Whether to promote the challenger, why, and the numbers behind it."""

    promote: bool
    reason: str
    evidence: dict[str, Any]


def solve_rate(bits: str) -> float:
    """Fraction of '1' in an outcome string."""
    _check_bits("outcomes", bits)
    return bits.count("1") / len(bits)


def mcnemar_exact(challenger_bits: str, champion_bits: str) -> McNemarResult:
    """One-sided exact McNemar test on paired outcome strings ('1' = solved, ordered by seed)."""
    _check_bits("challenger outcomes", challenger_bits)
    _check_bits("champion outcomes", champion_bits)
    if len(challenger_bits) != len(champion_bits):
        raise InvalidOutcomes(
            f"outcomes are not paired: challenger has {len(challenger_bits)}, champion {len(champion_bits)}"
        )
    b = sum(1 for mine, theirs in zip(challenger_bits, champion_bits, strict=False) if mine == "1" and theirs == "0")
    c = sum(1 for mine, theirs in zip(challenger_bits, champion_bits, strict=False) if mine == "0" and theirs == "1")
    n = b + c
    p_value = sum(math.comb(n, k) for k in range(b, n + 1)) / 2**n
    return McNemarResult(b=b, c=c, p_value=p_value)


def decide(
    challenger_bits: str,
    champion_bits: str | None,
    min_solve_rate: float,
    alpha: float,
    same_eval_set: bool,
    against: str,
    run_block: str | None = None,
) -> Decision:
    """Promote when the challenger beats the champion `against` and clears `min_solve_rate`.

    The champion is the baseline (`mazeops.baseline.BASELINE`: the base model with no adapter)
    until an adapter is promoted, then the adapter champion; the rule is the same for both: both
    evaluated on the same maze set (`same_eval_set`), the challenger wins more discordant mazes
    than it loses (b > c) with p < alpha, and its solve rate is at least `min_solve_rate`. A
    champion with no recorded outcomes (`champion_bits` None, e.g. a baseline whose evaluation
    failed) is never beaten: nothing is promoted. The evidence always names the champion and has
    both solve rates, b, c and p (None where they cannot be computed). `run_block` (from
    `mazeops.runs.promotion_block`) is why the challenger's training run forbids its promotion
    (stopped, failed, timed out, unknown): the comparison is still made and recorded, and the
    decision is never to promote, with that reason.
    """
    rate = solve_rate(challenger_bits)
    opponent = "the baseline" if against == BASELINE else f"the champion {against}"
    evidence: dict[str, Any] = {
        "against": against,
        "challenger_solve_rate": rate,
        "champion_solve_rate": solve_rate(champion_bits) if champion_bits is not None else None,
        "b": None,
        "c": None,
        "p_value": None,
        "alpha": alpha,
        "min_solve_rate": min_solve_rate,
        "n_mazes": len(challenger_bits),
    }
    comparable = champion_bits is not None and same_eval_set
    if comparable:
        test = mcnemar_exact(challenger_bits, champion_bits)
        evidence.update(b=test.b, c=test.c, p_value=test.p_value)
    if run_block is not None:
        return Decision(False, run_block, evidence)
    if champion_bits is None:
        return Decision(False, f"{opponent} has no recorded outcomes to compare with; nothing is promoted", evidence)
    if not same_eval_set:
        return Decision(
            False, f"challenger and {opponent} were evaluated on different maze sets; not comparable", evidence
        )
    summary = f"b={test.b} c={test.c} p={test.p_value:.3g}"
    if rate < min_solve_rate:
        return Decision(False, f"solve rate {rate:.3f} is below the minimum {min_solve_rate:.3f} ({summary})", evidence)
    if test.b <= test.c:
        return Decision(False, f"challenger does not win more mazes than {opponent} ({summary})", evidence)
    if test.p_value >= alpha:
        return Decision(False, f"improvement over {opponent} is not significant at alpha={alpha} ({summary})", evidence)
    return Decision(True, f"challenger is significantly better than {opponent} ({summary})", evidence)


def _check_bits(what: str, bits: object) -> None:
    if not isinstance(bits, str) or not _BITS.fullmatch(bits):
        raise InvalidOutcomes(f"{what} must be a non-empty string of '0' and '1', got {str(bits)[:80]!r}")
