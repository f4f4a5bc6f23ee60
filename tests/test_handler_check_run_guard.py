"""check_run_guard: the collapse guard on the evaluated adapters of a run (moto: tables, bucket, training execution)."""

from __future__ import annotations

from typing import Any

import check_adapter
import check_run_guard
import decide_promotion
import pytest
import record_eval
from mazeops_testing import (
    BASE_MODEL,
    BUCKET,
    EVAL_SET_SHA,
    REGISTRY_TABLE,
    RUNS_TABLE,
    Aws,
    FakeLambdaContext,
    baseline_result,
    emitted_dimensions,
    emitted_metrics,
    put_adapter,
    put_eval_result,
)

from mazeops.evalresult import InvalidEvalResult
from mazeops.inputs import InvalidInput
from mazeops.registry import Registry
from mazeops.runs import RunRecord, RunsTable
from mazeops.runspec import GuardSpec

CONTEXT = FakeLambdaContext()
RUN = "r1"
OTHER_EVAL_SET = "cd" * 32
DEFAULT_GUARD = GuardSpec().model_dump()
# The reference collapse: best 45/64 at step 20, then 12/64 and 10/64 (each below half the best).
COLLAPSING = {20: 45, 40: 12, 60: 10}


def bits(solved: int, total: int = 64) -> str:
    """Outcome bits with the first `solved` of `total` mazes solved."""
    return "1" * solved + "0" * (total - solved)


def start_run(
    aws: Aws, run_id: str = RUN, status: str = "RUNNING", guard: dict[str, Any] | None = DEFAULT_GUARD
) -> str:
    """The run's row (with `guard` as validate_run_spec records it) in `status`, and its training execution, still
    running; return the execution's ARN."""
    execution_arn = aws.sfn.start_execution(stateMachineArn=aws.training_arn, name=f"train-{run_id}", input="{}")[
        "executionArn"
    ]
    runs = RunsTable(aws.dynamodb, RUNS_TABLE)
    runs.create_run(run_id, f"runs/{run_id}/spec.json", "ab" * 32, BASE_MODEL, execution_arn, guard=guard, num_gpus=6)
    runs.set_status(run_id, status)
    return execution_arn


def evaluated(aws: Aws, step: int, solved: int, run_id: str = RUN, eval_set_sha256: str = EVAL_SET_SHA) -> str:
    """Upload, check and record the evaluation of the run's adapter at `step` (`solved` of 64); return its name."""
    claimed(aws, step, run_id)
    put_eval_result(aws.s3, run_id, step, bits(solved), {"eval_set_sha256": eval_set_sha256})
    name = f"{run_id}-step{step}"
    record_eval.lambda_handler(
        {"run_id": run_id, "step": step, "base_model_id": BASE_MODEL, "adapter_name": name}, CONTEXT
    )
    return name


def claimed(aws: Aws, step: int, run_id: str = RUN) -> str:
    """Upload and check the run's adapter at `step` (its row EVALUATING, no outcomes); return its name."""
    put_adapter(aws.s3, run_id, step)
    key = f"runs/{run_id}/adapters/global_step_{step}/manifest.json"
    check_adapter.lambda_handler({"bucket": BUCKET, "key": key, "run_id": run_id, "step": step}, CONTEXT)
    return f"{run_id}-step{step}"


def record_baseline(aws: Aws, solved: int, eval_set_sha256: str = EVAL_SET_SHA) -> None:
    """The base model's baseline on `eval_set_sha256`, READY with `solved` of 64."""
    registry(aws).claim_baseline(BASE_MODEL, eval_set_sha256)
    assert registry(aws).record_baseline(baseline_result(bits(solved), eval_set_sha256), attempt=1).status == "READY"


def registry(aws: Aws) -> Registry:
    return Registry(aws.dynamodb, REGISTRY_TABLE)


def runs(aws: Aws) -> RunsTable:
    return RunsTable(aws.dynamodb, RUNS_TABLE)


def check(adapter: str) -> dict[str, Any]:
    event = {"base_model_id": BASE_MODEL, "adapter_name": adapter, "run_id": RUN, "step": int(adapter.split("step")[1])}
    return check_run_guard.lambda_handler(event, CONTEXT)


def execution_status(aws: Aws, execution_arn: str) -> str:
    return aws.sfn.describe_execution(executionArn=execution_arn)["status"]


def test_a_collapsed_run_is_stopped_and_none_of_its_adapters_is_promoted(
    aws: Aws, capsys: pytest.CaptureFixture[str]
) -> None:
    execution_arn = start_run(aws)
    record_baseline(aws, 12)
    names = [evaluated(aws, step, solved) for step, solved in COLLAPSING.items()]
    capsys.readouterr()
    answer = check(names[-1])

    reason = "collapse: 12/64 (step 40) and 10/64 (step 60) after best 45/64 (step 20), baseline 12/64"
    assert answer["stopped"] is True and answer["guard"] == "collapse"
    assert answer["reason"].startswith(reason) and "below 50% of the run's best" in answer["reason"]
    run = runs(aws).get_run(RUN)
    assert run.status == "STOPPED" and run.error == answer["reason"]
    assert run.stopped_by["guard"] == "collapse" and run.stopped_by["steps"] == [40, 60]
    assert run.stopped_by["reason"] == answer["reason"] and run.stopped_by["at"]
    assert execution_status(aws, execution_arn) == "ABORTED"
    out = capsys.readouterr().out
    assert emitted_metrics(out) == {"RunsStoppedByGuard": 1}
    assert emitted_dimensions(out, "RunsStoppedByGuard")["guard"] == "collapse"
    # The run's best adapter beats the baseline, but its run is STOPPED: it is not promoted.
    decision = decide_promotion.lambda_handler({"base_model_id": BASE_MODEL, "adapter_name": names[0]}, CONTEXT)
    assert decision["promote"] is False and "is STOPPED" in decision["reason"]
    # A later evaluation of the same run finds it stopped and changes nothing.
    again = check(evaluated(aws, 80, 9))
    assert again == {"stopped": False, "guard": None, "reason": f"run {RUN!r} is STOPPED; guards watch RUNNING runs"}
    assert runs(aws).get_run(RUN).stopped_by == run.stopped_by


def test_a_run_that_improves_is_not_stopped(aws: Aws, capsys: pytest.CaptureFixture[str]) -> None:
    execution_arn = start_run(aws)
    record_baseline(aws, 12)
    names = [evaluated(aws, step, solved) for step, solved in {20: 20, 40: 31, 60: 30, 80: 45}.items()]
    capsys.readouterr()
    answer = check(names[-1])

    assert answer == {"stopped": False, "guard": None, "reason": f"run {RUN!r}: no collapse over 4 evaluation(s)"}
    assert runs(aws).get_run(RUN).status == "RUNNING" and execution_status(aws, execution_arn) == "RUNNING"
    assert "RunsStoppedByGuard" not in emitted_metrics(capsys.readouterr().out)


@pytest.mark.parametrize(
    ("guard", "reason"),
    [
        (None, "has no collapse guard"),  # a run accepted before guards existed
        ({**DEFAULT_GUARD, "collapse": None}, "has no collapse guard"),
    ],
)
def test_a_run_without_a_collapse_guard_is_never_stopped(aws: Aws, guard: dict[str, Any] | None, reason: str) -> None:
    execution_arn = start_run(aws, guard=guard)
    record_baseline(aws, 12)
    names = [evaluated(aws, step, solved) for step, solved in COLLAPSING.items()]
    answer = check(names[-1])

    assert answer == {"stopped": False, "guard": None, "reason": f"run {RUN!r} {reason}"}
    assert runs(aws).get_run(RUN).status == "RUNNING" and execution_status(aws, execution_arn) == "RUNNING"


def test_a_run_with_no_row_is_not_stopped(aws: Aws) -> None:
    record_baseline(aws, 12)
    names = [evaluated(aws, step, solved) for step, solved in COLLAPSING.items()]
    answer = check(names[-1])

    assert (
        answer["stopped"] is False
        and answer["reason"] == f"run {RUN!r} is not in the runs table; guards watch RUNNING runs"
    )
    assert runs(aws).get_run(RUN) is None


@pytest.mark.parametrize("status", ["SUBMITTED", "SUCCEEDED", "FAILED", "STOPPED", "ABORTED"])
def test_a_run_that_is_not_running_is_not_touched(aws: Aws, status: str) -> None:
    execution_arn = start_run(aws, status=status)
    record_baseline(aws, 12)
    names = [evaluated(aws, step, solved) for step, solved in COLLAPSING.items()]
    before = runs(aws).get_run(RUN)
    answer = check(names[-1])

    assert answer == {"stopped": False, "guard": None, "reason": f"run {RUN!r} is {status}; guards watch RUNNING runs"}
    assert runs(aws).get_run(RUN) == before and before.stopped_by is None
    assert execution_status(aws, execution_arn) == "RUNNING"


def test_evaluations_are_taken_by_step_not_by_arrival(aws: Aws) -> None:
    start_run(aws)
    record_baseline(aws, 12)
    evaluated(aws, 20, 45)
    # Step 60 arrives before step 40: the latest two by step are 20 and 60, and step 20 has not collapsed.
    assert check(evaluated(aws, 60, 10))["stopped"] is False
    # Step 40 arrives last, but the latest two by step are now 40 and 60: both collapsed.
    answer = check(evaluated(aws, 40, 12))
    assert answer["stopped"] is True and answer["reason"].startswith("collapse: 12/64 (step 40) and 10/64 (step 60)")
    assert runs(aws).get_run(RUN).stopped_by["steps"] == [40, 60]


def test_an_earlier_step_arriving_late_does_not_hide_a_recovery(aws: Aws) -> None:
    start_run(aws)
    record_baseline(aws, 12)
    for step, solved in {20: 45, 40: 12, 80: 44}.items():
        evaluated(aws, step, solved)
    # Step 60 (collapsed) arrives after step 80 (recovered): the latest two by step are 60 and 80.
    assert check(evaluated(aws, 60, 10))["stopped"] is False
    assert runs(aws).get_run(RUN).status == "RUNNING"


@pytest.mark.parametrize("failed_status", ["EVALUATING", "EVAL_FAILED"])
def test_an_evaluation_without_outcomes_is_not_a_point(aws: Aws, failed_status: str) -> None:
    start_run(aws)
    record_baseline(aws, 12)
    evaluated(aws, 20, 45)
    failed = claimed(aws, 40)
    if failed_status == "EVAL_FAILED":
        registry(aws).set_status(BASE_MODEL, failed, "EVAL_FAILED", "RayUnavailable: connection refused")
    # Were the failed evaluation counted as a collapse, step 60 would make two in a row.
    answer = check(evaluated(aws, 60, 10))

    assert answer == {"stopped": False, "guard": None, "reason": f"run {RUN!r}: no collapse over 2 evaluation(s)"}
    assert runs(aws).get_run(RUN).status == "RUNNING"


def test_only_the_runs_own_evaluations_on_the_challengers_maze_set_count(aws: Aws) -> None:
    start_run(aws)
    record_baseline(aws, 12)
    evaluated(aws, 20, 45)
    evaluated(aws, 40, 12, eval_set_sha256=OTHER_EVAL_SET)  # another maze set: not comparable
    evaluated(aws, 40, 5, run_id="r2")  # another run
    answer = check(evaluated(aws, 60, 10))

    assert answer["stopped"] is False and answer["reason"] == f"run {RUN!r}: no collapse over 2 evaluation(s)"


# The run never beats the baseline and decays slowly: 20/64 and 19/64 are within half of its best (30/64) but more
# than 10 points below a baseline of 40/64.
SLOW_DECAY = {20: 30, 40: 20, 60: 19}


@pytest.mark.parametrize(
    ("baseline", "stopped"),
    [("READY", True), ("missing", False), ("FAILED", False), ("other maze set", False)],
)
def test_the_baseline_arm_needs_a_ready_baseline_on_the_same_maze_set(aws: Aws, baseline: str, stopped: bool) -> None:
    start_run(aws)
    if baseline == "READY":
        record_baseline(aws, 40)
    elif baseline == "FAILED":
        registry(aws).claim_baseline(BASE_MODEL, EVAL_SET_SHA)
        registry(aws).fail_baseline(BASE_MODEL, EVAL_SET_SHA, 1, "Ray job ended FAILED")
    elif baseline == "other maze set":
        record_baseline(aws, 40, OTHER_EVAL_SET)
    names = [evaluated(aws, step, solved) for step, solved in SLOW_DECAY.items()]
    answer = check(names[-1])

    assert answer["stopped"] is stopped
    assert runs(aws).get_run(RUN).status == ("STOPPED" if stopped else "RUNNING")
    if stopped:
        assert "baseline 40/64" in answer["reason"] and "more than 10 points below the baseline" in answer["reason"]


def test_a_run_that_ends_meanwhile_is_answered_with_the_verdict_but_not_stopped(
    aws: Aws, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    execution_arn = start_run(aws)
    record_baseline(aws, 12)
    names = [evaluated(aws, step, solved) for step, solved in COLLAPSING.items()]

    class FinishesAfterTheRead(RunsTable):
        """The run succeeds between the guard's read of its row and its stop."""

        def get_run(self, run_id: str) -> RunRecord | None:
            record = super().get_run(run_id)
            super().set_status(run_id, "SUCCEEDED")
            return record

    monkeypatch.setattr(check_run_guard, "RunsTable", FinishesAfterTheRead)
    capsys.readouterr()
    answer = check(names[-1])

    assert answer["stopped"] is False and answer["guard"] == "collapse"
    assert answer["reason"].startswith("collapse: 12/64 (step 40) and 10/64 (step 60)")
    assert runs(aws).get_run(RUN).status == "SUCCEEDED" and execution_status(aws, execution_arn) == "RUNNING"
    assert "RunsStoppedByGuard" not in emitted_metrics(capsys.readouterr().out)


def test_a_challenger_without_an_evaluation_is_an_error(aws: Aws) -> None:
    start_run(aws)
    with pytest.raises(InvalidEvalResult, match="has no recorded evaluation"):
        check(claimed(aws, 20))


def test_bad_input_is_refused(aws: Aws) -> None:
    with pytest.raises(InvalidInput, match="adapter_name"):
        check_run_guard.lambda_handler({"base_model_id": BASE_MODEL}, CONTEXT)
