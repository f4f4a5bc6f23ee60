"""The guard rules (mazeops.guards) and their settings in the run spec: table-driven cases and properties."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mazeops.guards import (
    EvalPoint,
    InvalidGuardSettings,
    collapse_verdict,
    guard_settings,
    spend_verdict,
    stall_verdict,
)
from mazeops.runspec import CollapseGuard, GuardSpec, InvalidRunSpec, parse_run_spec

BASE_MODELS = {"qwen3-vl-8b-sft": "/shared/models/sft"}
NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
BASELINE = EvalPoint(0, 35, 64)
DEFAULT = CollapseGuard()


def points(*solved: int, start: int = 20, every: int = 20) -> list[EvalPoint]:
    return [EvalPoint(start + index * every, n, 64) for index, n in enumerate(solved)]


# --- settings -----------------------------------------------------------------------------------


def spec(guard: object = None) -> dict:
    document: dict = {"base_model_id": "qwen3-vl-8b-sft"}
    if guard is not None:
        document["guard"] = guard
    return document


def test_a_spec_without_a_guard_gets_the_defaults() -> None:
    parsed = parse_run_spec(json.dumps(spec()), "run-1", BASE_MODELS)
    assert parsed.guard == GuardSpec()
    assert parsed.guard.model_dump(mode="json") == {
        "collapse": {"below_baseline_points": 10.0, "below_best_fraction": 0.5, "consecutive_evals": 2},
        "stall_minutes": 360,
        "gpu_hours": 500.0,
    }


@pytest.mark.parametrize(
    ("guard", "expected"),
    [
        ({"collapse": None}, GuardSpec(collapse=None)),
        ({"stall_minutes": None, "gpu_hours": None}, GuardSpec(stall_minutes=None, gpu_hours=None)),
        ({"collapse": {"below_baseline_points": None}}, GuardSpec(collapse=CollapseGuard(below_baseline_points=None))),
        (
            {"collapse": {"consecutive_evals": 3}, "gpu_hours": 48},
            GuardSpec(collapse=CollapseGuard(consecutive_evals=3), gpu_hours=48.0),
        ),
    ],
)
def test_a_guard_or_an_arm_turns_off_with_null(guard: dict, expected: GuardSpec) -> None:
    assert parse_run_spec(json.dumps(spec(guard)), "run-1", BASE_MODELS).guard == expected


@pytest.mark.parametrize(
    ("guard", "message"),
    [
        (
            {"collapse": {"below_baseline_points": None, "below_best_fraction": None}},
            "to turn it off, set collapse null",
        ),
        ({"collapse": {"consecutive_evals": 0}}, "consecutive_evals"),
        ({"collapse": {"below_best_fraction": 1.5}}, "below_best_fraction"),
        ({"collapse": {"below_baseline_points": -5}}, "below_baseline_points"),
        ({"stall_minutes": 0}, "stall_minutes"),
        ({"stall_minutes": "360"}, "stall_minutes"),
        ({"gpu_hours": 0}, "gpu_hours"),
        ({"stal_minutes": 60}, "stal_minutes"),
        ("off", "guard"),
    ],
)
def test_bad_guard_settings_are_refused_at_upload(guard: object, message: str) -> None:
    with pytest.raises(InvalidRunSpec, match=message):
        parse_run_spec(json.dumps(spec(guard)), "run-1", BASE_MODELS)


def test_guard_settings_read_back_from_a_run_row() -> None:
    stored = GuardSpec(collapse=None, gpu_hours=12.5).model_dump(mode="json")
    assert guard_settings(stored) == GuardSpec(collapse=None, gpu_hours=12.5)
    assert guard_settings({"stall_minutes": 360, "gpu_hours": 500}) == GuardSpec()  # DynamoDB gives 500, not 500.0
    assert guard_settings(None) is None
    with pytest.raises(InvalidGuardSettings, match="stall_minutes"):
        guard_settings({"stall_minutes": -1})


# --- collapse -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("solved", "steps"),
    [
        ((45, 12, 10), (40, 60)),  # both latest far below the baseline (35) and below half the best
        ((30, 20, 20), (40, 60)),  # 20 < 35 - 6.4: below the baseline arm only
        ((12, 10), (20, 40)),  # never better than the baseline, two in a row below it
    ],
)
def test_collapse_fires_on_k_consecutive_collapsed_evaluations(solved: tuple[int, ...], steps: tuple[int, ...]) -> None:
    verdict = collapse_verdict(points(*solved), BASELINE, DEFAULT)
    assert verdict is not None and verdict.guard == "collapse"
    assert verdict.steps == steps
    assert verdict.figures["solved"] == list(solved[-2:])


def test_the_reason_names_the_figures() -> None:
    verdict = collapse_verdict(points(45, 12, 10), BASELINE, DEFAULT)
    assert verdict is not None
    assert verdict.reason.startswith(
        "collapse: 12/64 (step 40) and 10/64 (step 60) after best 45/64 (step 20), baseline 35/64"
    )


@pytest.mark.parametrize(
    "solved",
    [
        (45, 12),  # one bad evaluation after a good one: not two in a row
        (45, 12, 40),  # recovered
        (36, 38, 40),  # improving
        (35, 30),  # within 10 points of the baseline and above half the best
        (),
    ],
)
def test_collapse_stays_quiet(solved: tuple[int, ...]) -> None:
    assert collapse_verdict(points(*solved), BASELINE, DEFAULT) is None


def test_without_a_baseline_only_the_best_fraction_arm_applies() -> None:
    assert collapse_verdict(points(30, 20, 20), None, DEFAULT) is None  # 20 >= 0.5 x 30
    verdict = collapse_verdict(points(45, 12, 10), None, DEFAULT)
    assert verdict is not None and "baseline" not in verdict.reason.split(";")[0]


def test_evaluations_are_taken_by_step_whatever_their_order() -> None:
    shuffled = [EvalPoint(60, 10, 64), EvalPoint(20, 45, 64), EvalPoint(40, 12, 64)]
    assert collapse_verdict(shuffled, BASELINE, DEFAULT) == collapse_verdict(points(45, 12, 10), BASELINE, DEFAULT)
    late_good = [EvalPoint(20, 45, 64), EvalPoint(60, 44, 64), EvalPoint(40, 12, 64)]
    assert collapse_verdict(late_good, BASELINE, DEFAULT) is None


def test_a_collapse_guard_that_is_off_never_fires() -> None:
    assert collapse_verdict(points(45, 0, 0, 0), BASELINE, None) is None


def test_an_evaluation_point_must_be_one() -> None:
    with pytest.raises(ValueError, match="not an evaluation"):
        EvalPoint(20, 65, 64)
    with pytest.raises(ValueError, match="not an evaluation"):
        EvalPoint(20, 0, 0)


solved_lists = st.lists(st.integers(0, 64), min_size=0, max_size=12)
guards = st.builds(
    CollapseGuard,
    below_baseline_points=st.one_of(st.none(), st.floats(0.5, 100)),
    below_best_fraction=st.floats(0.05, 0.95),
    consecutive_evals=st.integers(1, 5),
)


@settings(max_examples=300, deadline=None)
@given(solved=solved_lists, baseline=st.integers(0, 64), guard=guards)
def test_collapse_fires_exactly_when_the_last_k_each_break_a_rule(
    solved: list[int], baseline: int, guard: CollapseGuard
) -> None:
    run = points(*solved)
    base = EvalPoint(0, baseline, 64)
    verdict = collapse_verdict(run, base, guard)

    def collapsed(index: int) -> bool:
        rate = run[index].rate
        best = max(point.rate for point in run[: index + 1])
        low_vs_baseline = (
            guard.below_baseline_points is not None and rate < base.rate - guard.below_baseline_points / 100
        )
        return low_vs_baseline or rate < guard.below_best_fraction * best

    k = guard.consecutive_evals
    expected = len(run) >= k and all(collapsed(index) for index in range(len(run) - k, len(run)))
    assert (verdict is not None) == expected
    if verdict is not None:
        assert verdict.steps == tuple(point.step for point in run[-k:])
        assert len(verdict.steps) == k


@settings(max_examples=200, deadline=None)
@given(solved=st.lists(st.integers(0, 64), min_size=1, max_size=10), guard=guards)
def test_a_run_that_never_gets_worse_is_never_stopped(solved: list[int], guard: CollapseGuard) -> None:
    improving = points(*sorted(solved))
    assert collapse_verdict(improving, EvalPoint(0, min(solved), 64), guard) is None


# --- stall and spend ---------------------------------------------------------------------------


def test_stall_counts_from_the_last_adapter_or_from_running() -> None:
    running = NOW - timedelta(hours=10)
    assert stall_verdict(NOW, running, NOW - timedelta(minutes=359), 40, 360) is None
    verdict = stall_verdict(NOW, running, NOW - timedelta(minutes=361), 40, 360)
    assert verdict is not None and verdict.guard == "stall" and verdict.steps == ()
    assert verdict.reason.startswith("stall: no new adapter for 361 min (the last, step 40, at 2026-12-07T05:59:00Z)")
    assert stall_verdict(NOW, NOW - timedelta(minutes=30), None, None, 20) is not None
    assert "none since RUNNING" in stall_verdict(NOW, NOW - timedelta(minutes=30), None, None, 20).reason
    assert stall_verdict(NOW, NOW - timedelta(days=6), None, None, None) is None


def test_an_adapter_from_before_running_does_not_reset_the_stall_clock() -> None:
    running = NOW - timedelta(minutes=100)
    assert stall_verdict(NOW, running, running - timedelta(hours=5), 20, 90) is not None


def test_spend_is_gpus_times_hours_since_running() -> None:
    running = NOW - timedelta(hours=10)
    assert spend_verdict(NOW, running, 6, 60.0) is None  # exactly the budget
    verdict = spend_verdict(NOW, running, 6, 59.0)
    assert verdict is not None and verdict.guard == "spend"
    assert verdict.reason.startswith(
        "spend: 6 GPUs x 10.0 h = 60 GPU-hours since 2026-12-07T02:00:00Z; the budget is 59"
    )
    assert spend_verdict(NOW, running, 6, None) is None


@settings(max_examples=200, deadline=None)
@given(
    minutes=st.integers(0, 20_000),
    limit=st.integers(1, 10_080),
    gpus=st.integers(1, 64),
    budget=st.floats(0.1, 10_000),
)
def test_stall_and_spend_thresholds_are_sharp(minutes: int, limit: int, gpus: int, budget: float) -> None:
    running = NOW - timedelta(minutes=minutes)
    assert (stall_verdict(NOW, running, None, None, limit) is not None) == (minutes > limit)
    assert (spend_verdict(NOW, running, gpus, budget) is not None) == (gpus * minutes / 60 > budget)
