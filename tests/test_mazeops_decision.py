"""Exact McNemar test and the promotion rule on crafted outcome tables."""

from __future__ import annotations

import math

import pytest

from mazeops.baseline import BASELINE
from mazeops.decision import InvalidOutcomes, decide, mcnemar_exact, solve_rate
from mazeops.runs import PROMOTABLE_RUN_STATUSES, RUN_STATUSES, RunRecord, promotion_block


def bits(solved: set[int], n: int = 64) -> str:
    return "".join("1" if seed in solved else "0" for seed in range(n))


def test_mcnemar_counts_discordant_pairs_and_sums_the_upper_binomial_tail() -> None:
    result = mcnemar_exact("1101", "1000")
    assert (result.b, result.c) == (2, 0)
    assert result.p_value == pytest.approx(0.25)  # P(X >= 2 | n=2) = 1/4
    result = mcnemar_exact("110100", "001000")
    assert (result.b, result.c) == (3, 1)
    assert result.p_value == pytest.approx((math.comb(4, 3) + 1) / 16)


def test_mcnemar_without_discordant_pairs_has_p_one() -> None:
    result = mcnemar_exact("1010", "1010")
    assert (result.b, result.c, result.p_value) == (0, 0, 1.0)


def test_mcnemar_matches_a_known_value() -> None:
    # b=9, c=1: P(X >= 9 | n=10, 1/2) = 11/1024.
    challenger = "1" * 9 + "0" + "0" * 10
    champion = "0" * 9 + "1" + "0" * 10
    assert mcnemar_exact(challenger, champion).p_value == pytest.approx(11 / 1024)


@pytest.mark.parametrize("bad", ["", "10a1", None, "1 0"])
def test_mcnemar_rejects_malformed_outcomes(bad: object) -> None:
    with pytest.raises(InvalidOutcomes, match="string of '0' and '1'"):
        mcnemar_exact(bad, "1010")  # type: ignore[arg-type]


def test_mcnemar_rejects_unpaired_outcomes() -> None:
    with pytest.raises(InvalidOutcomes, match="not paired"):
        mcnemar_exact("101", "1010")


def test_reference_run_28_to_62_of_64_is_promoted() -> None:
    champion = bits(set(range(28)))
    challenger = bits(set(range(62)))
    decision = decide(challenger, champion, min_solve_rate=0.5, alpha=0.05, same_eval_set=True, against="r1-step10")
    assert decision.promote
    assert decision.evidence["b"] == 34 and decision.evidence["c"] == 0
    assert decision.evidence["p_value"] == pytest.approx(2.0**-34)
    assert decision.evidence["challenger_solve_rate"] == pytest.approx(62 / 64)
    assert decision.evidence["champion_solve_rate"] == pytest.approx(28 / 64)
    assert decision.evidence["against"] == "r1-step10"
    assert decision.reason.startswith("challenger is significantly better than the champion r1-step10 (b=34 c=0")


def test_the_baseline_is_beaten_by_the_same_mcnemar_rule() -> None:
    baseline = bits(set(range(20)))
    decision = decide(bits(set(range(31))), baseline, 0.3, 0.05, True, against=BASELINE)  # b=11, c=0
    assert decision.promote and decision.reason.startswith(
        "challenger is significantly better than the baseline (b=11 c=0"
    )
    assert decision.evidence == {
        "against": BASELINE,
        "challenger_solve_rate": 31 / 64,
        "champion_solve_rate": 20 / 64,
        "b": 11,
        "c": 0,
        "p_value": pytest.approx(2.0**-11),
        "alpha": 0.05,
        "min_solve_rate": 0.3,
        "n_mazes": 64,
    }


def test_a_first_adapter_that_does_not_beat_the_baseline_is_not_promoted_whatever_its_solve_rate() -> None:
    baseline = bits(set(range(50)))
    decision = decide(bits(set(range(3, 54))), baseline, 0.0, 0.05, True, against=BASELINE)  # b=4, c=3, 51/64
    assert not decision.promote and "improvement over the baseline is not significant" in decision.reason
    assert (decision.evidence["b"], decision.evidence["c"]) == (4, 3)


def test_the_minimum_solve_rate_stays_a_floor_above_the_baseline() -> None:
    decision = decide(bits(set(range(20))), bits(set()), 0.5, 0.05, True, against=BASELINE)  # b=20, c=0
    assert not decision.promote and "below the minimum 0.500 (b=20 c=0" in decision.reason
    assert decision.evidence["p_value"] == pytest.approx(2.0**-20) and decision.evidence["champion_solve_rate"] == 0.0


def test_without_a_recorded_baseline_nothing_is_promoted() -> None:
    decision = decide(bits(set(range(64))), None, 0.0, 0.05, True, against=BASELINE)
    assert not decision.promote
    assert decision.reason == "the baseline has no recorded outcomes to compare with; nothing is promoted"
    assert decision.evidence["against"] == BASELINE and decision.evidence["challenger_solve_rate"] == 1.0
    assert [decision.evidence[key] for key in ("champion_solve_rate", "b", "c", "p_value")] == [None] * 4


def test_an_adapter_champion_without_outcomes_is_never_replaced() -> None:
    decision = decide(bits(set(range(64))), None, 0.0, 0.05, True, against="r1-step10")
    assert not decision.promote and "the champion r1-step10 has no recorded outcomes" in decision.reason


def test_tie_is_not_promoted() -> None:
    champion = bits(set(range(40)))
    challenger = bits(set(range(5, 45)))  # wins 5, loses 5
    decision = decide(challenger, champion, 0.5, 0.05, True, against="r1-step10")
    assert not decision.promote
    assert (decision.evidence["b"], decision.evidence["c"]) == (5, 5)
    assert "does not win more" in decision.reason


def test_regression_is_not_promoted() -> None:
    decision = decide(bits(set(range(35))), bits(set(range(50))), 0.5, 0.05, True, against=BASELINE)
    assert not decision.promote and decision.evidence["c"] == 15
    assert "does not win more mazes than the baseline" in decision.reason


def test_non_significant_win_is_not_promoted() -> None:
    champion = bits(set(range(40)))
    challenger = bits(set(range(3, 46)))  # b=6, c=3: p = P(X>=6 | 9) ~ 0.25
    decision = decide(challenger, champion, 0.5, 0.05, True, against="r1-step10")
    assert not decision.promote and "not significant" in decision.reason
    assert decision.evidence["p_value"] == pytest.approx(sum(math.comb(9, k) for k in range(6, 10)) / 512)


def test_significant_win_is_promoted() -> None:
    champion = bits(set(range(40)))
    challenger = bits(set(range(1, 50)))  # b=10, c=1: p = 12/2048
    decision = decide(challenger, champion, 0.5, 0.05, True, against="r1-step10")
    assert decision.promote and decision.evidence["p_value"] == pytest.approx(12 / 2048)


def test_all_equal_is_not_promoted() -> None:
    same = bits(set(range(0, 64, 2)))
    decision = decide(same, same, 0.5, 0.05, True, against=BASELINE)
    assert not decision.promote and decision.evidence["p_value"] == 1.0


def test_significant_win_below_the_minimum_rate_is_not_promoted() -> None:
    decision = decide(bits(set(range(20))), bits(set()), 0.5, 0.05, True, against="r1-step10")
    assert not decision.promote and "below the minimum" in decision.reason


def test_different_eval_sets_are_never_promoted() -> None:
    decision = decide(bits(set(range(62))), bits(set(range(28))), 0.5, 0.05, same_eval_set=False, against="r1-step10")
    assert not decision.promote and "different maze sets" in decision.reason
    assert decision.evidence["champion_solve_rate"] == pytest.approx(28 / 64) and decision.evidence["b"] is None


def test_solve_rate() -> None:
    assert solve_rate("1100") == 0.5
    with pytest.raises(InvalidOutcomes):
        solve_rate("")


@pytest.mark.parametrize("status", ["ABORTED", "FAILED", "TIMED_OUT", "SUBMITTED"])
def test_an_adapter_of_a_run_that_is_not_running_or_succeeded_is_never_promoted(status: str) -> None:
    champion = bits(set(range(10)))
    challenger = bits(set(range(60)))  # b=50, c=0: it would win by far
    reason = promotion_block("r2", run_record("r2", status))
    decision = decide(challenger, champion, 0.5, 0.05, True, against="r1-step10", run_block=reason)
    assert not decision.promote
    assert decision.reason == f"training run 'r2' is {status}; only adapters of RUNNING or SUCCEEDED runs are promoted"
    assert (decision.evidence["b"], decision.evidence["c"]) == (50, 0)  # compared all the same, for the record


@pytest.mark.parametrize("status", ["RUNNING", "SUCCEEDED"])
def test_adapters_of_running_or_succeeded_runs_may_be_promoted(status: str) -> None:
    assert promotion_block("r2", run_record("r2", status)) is None
    decision = decide(bits(set(range(60))), bits(set(range(10))), 0.5, 0.05, True, against="r1-step10", run_block=None)
    assert decision.promote


def test_an_adapter_without_a_run_row_is_never_promoted() -> None:
    reason = promotion_block("hand-made", None)
    assert reason is not None and "no row in the runs table" in reason
    assert not decide(bits(set(range(60))), None, 0.5, 0.05, True, against=BASELINE, run_block=reason).promote


def test_the_promotable_run_statuses_are_exactly_running_and_succeeded() -> None:
    assert PROMOTABLE_RUN_STATUSES == {"RUNNING", "SUCCEEDED"} < RUN_STATUSES


def run_record(run_id: str, status: str) -> RunRecord:
    return RunRecord(run_id, status, f"runs/{run_id}/spec.json", "a" * 64, "b", "arn", "t0", "t1")
