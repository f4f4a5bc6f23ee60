"""Evaluating an adapter again: attempt job ids, the refusals and the started execution (moto)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import stop_ray_job
from aws_limits import execution_name_violations
from hypothesis import given, settings
from hypothesis import strategies as st
from mazeops_testing import (
    BASE_MODEL,
    BUCKET,
    RUNS_TABLE,
    Aws,
    FakeHttpServer,
    FakeLambdaContext,
    answer,
    execution_status_change_event,
)

from mazeops.adapter_rows import REEVALUABLE_STATUSES, AdapterNotReevaluable, AdapterRecord
from mazeops.names import (
    MAX_EVAL_ATTEMPT,
    RUN_ID_PATTERN,
    InvalidName,
    eval_job_id,
    parse_eval_job_id,
    parse_job_id,
)
from mazeops.reevaluation import (
    ReevaluationAlreadyStarted,
    next_attempt,
    reevaluation_refusal,
    start_reevaluation,
)
from mazeops.runs import RunsTable

RECORD = AdapterRecord(
    base_model_id=BASE_MODEL,
    adapter_name="run1-step20",
    run_id="run1",
    step=20,
    status="EVAL_FAILED",
    manifest_key="runs/run1/adapters/global_step_20/manifest.json",
    lora_rank=32,
    created_at="2026-12-02T16:00:00Z",
    updated_at="2026-12-02T17:00:00Z",
    error="EvaluationJobFailed: Ray job eval-run1-step20 ended FAILED",
)

# --- job ids -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("run_id", "step", "attempt", "job_id"),
    [
        ("r1", 40, 1, "eval-r1-step40"),
        ("r1", 40, 2, "eval-r1-step40-a2"),
        ("maze-a2", 7, 12, "eval-maze-a2-step7-a12"),
        ("r-step3-a2", 5, 999, "eval-r-step3-a2-step5-a999"),
    ],
)
def test_eval_job_ids_name_the_attempt_from_the_second_on(run_id: str, step: int, attempt: int, job_id: str) -> None:
    assert eval_job_id(run_id, step, attempt) == job_id
    assert parse_eval_job_id(job_id) == (run_id, step, attempt)
    assert parse_job_id(job_id) == (run_id, step)


@pytest.mark.parametrize("attempt", [0, -1, 1000, True, 2.0, "2"])
def test_an_attempt_out_of_range_names_no_job(attempt: object) -> None:
    with pytest.raises(InvalidName, match="attempt"):
        eval_job_id("r1", 40, attempt)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "job_id",
    [
        "eval-r1-step40-a1",
        "eval-r1-step40-a0",
        "eval-r1-step40-a02",
        "eval-r1-step40-a1000",
        "eval-r1-step40-a",
        "eval-r1-step40-b2",
        "eval-r1-a2",
        "eval--a2",
        "train-r1-a2",
    ],
)
def test_malformed_attempt_suffixes_are_refused(job_id: str) -> None:
    with pytest.raises(InvalidName):
        parse_eval_job_id(job_id)
    if job_id.startswith("eval-"):
        with pytest.raises(InvalidName):
            parse_job_id(job_id)


def test_the_longest_attempt_name_is_a_valid_execution_name() -> None:
    name = eval_job_id("r" * 40, 999_999_999, MAX_EVAL_ATTEMPT)
    assert len(name) == 64 and execution_name_violations(name) == []


run_ids = st.from_regex(RUN_ID_PATTERN, fullmatch=True)
steps = st.integers(min_value=1, max_value=999_999_999)
attempts = st.integers(min_value=1, max_value=MAX_EVAL_ATTEMPT)


@settings(max_examples=300, deadline=None)
@given(run_ids, steps, attempts)
def test_eval_job_ids_round_trip(run_id: str, step: int, attempt: int) -> None:
    job_id = eval_job_id(run_id, step, attempt)
    assert parse_eval_job_id(job_id) == (run_id, step, attempt)
    assert parse_job_id(job_id) == (run_id, step)
    assert (job_id == f"eval-{run_id}-step{step}") == (attempt == 1)


@settings(max_examples=300, deadline=None)
@given(st.builds("eval-{}-step{}{}".format, run_ids, steps, st.text(alphabet="-a0123456789", max_size=6)))
def test_a_parsed_eval_job_id_is_rebuilt_exactly(job_id: str) -> None:
    try:
        run_id, step, attempt = parse_eval_job_id(job_id)
    except InvalidName:
        return
    assert eval_job_id(run_id, step, attempt) == job_id


# --- attempts and refusals -----------------------------------------------------------------------------


@pytest.mark.parametrize(("eval_attempts", "expected"), [(None, 2), (1, 2), (2, 3), (998, 999)])
def test_next_attempt_follows_the_last(eval_attempts: int | None, expected: int) -> None:
    assert next_attempt(dataclasses.replace(RECORD, eval_attempts=eval_attempts)) == expected


@pytest.mark.parametrize(
    ("status", "eval_attempts", "refusal"),
    [
        ("CHAMPION", None, "is the champion"),
        ("REGISTERED", None, "is being registered for serving"),
        ("EVALUATING", 2, "is being evaluated now"),
        ("EVAL_FAILED", MAX_EVAL_ATTEMPT, "has had all 999 evaluation attempts"),
        *((status, None, None) for status in REEVALUABLE_STATUSES),
    ],
)
def test_reevaluation_refusals(status: str, eval_attempts: int | None, refusal: str | None) -> None:
    answer = reevaluation_refusal(dataclasses.replace(RECORD, status=status, eval_attempts=eval_attempts))
    assert answer == refusal if refusal is None else refusal in answer


def test_an_unknown_status_is_refused_naming_the_allowed_ones() -> None:
    answer = reevaluation_refusal(dataclasses.replace(RECORD, status="ARCHIVED"))
    assert answer is not None and "is ARCHIVED" in answer and "ROLLED_BACK" in answer


# --- starting the execution ------------------------------------------------------------------------------


def started_inputs(aws: Aws) -> dict[str, dict]:
    listed = aws.sfn.list_executions(stateMachineArn=aws.evaluation_arn)["executions"]
    return {e["name"]: json.loads(aws.sfn.describe_execution(executionArn=e["executionArn"])["input"]) for e in listed}


def test_start_reevaluation_starts_the_next_attempt_with_the_manifest_input(aws: Aws) -> None:
    name, arn = start_reevaluation(aws.sfn, aws.evaluation_arn, BUCKET, dataclasses.replace(RECORD, eval_attempts=2))
    assert name == "eval-run1-step20-a3" and arn.endswith(":execution:maze-evaluation:eval-run1-step20-a3")
    assert started_inputs(aws) == {
        name: {"bucket": BUCKET, "key": RECORD.manifest_key, "run_id": "run1", "step": 20, "attempt": 3}
    }


@pytest.mark.parametrize("status", ["CHAMPION", "REGISTERED", "EVALUATING"])
def test_start_reevaluation_refuses_before_starting_anything(aws: Aws, status: str) -> None:
    with pytest.raises(AdapterNotReevaluable, match=f"{BASE_MODEL}:run1-step20 is"):
        start_reevaluation(aws.sfn, aws.evaluation_arn, BUCKET, dataclasses.replace(RECORD, status=status))
    assert started_inputs(aws) == {}


def test_an_attempt_whose_execution_exists_is_not_started_twice(aws: Aws) -> None:
    start_reevaluation(aws.sfn, aws.evaluation_arn, BUCKET, RECORD)
    with pytest.raises(ReevaluationAlreadyStarted, match="eval-run1-step20-a2 exists already"):
        start_reevaluation(aws.sfn, aws.evaluation_arn, BUCKET, RECORD)
    assert list(started_inputs(aws)) == ["eval-run1-step20-a2"]


def test_an_execution_that_appears_meanwhile_is_not_started_again(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    _, arn = start_reevaluation(aws.sfn, aws.evaluation_arn, BUCKET, RECORD)
    aws.sfn.stop_execution(executionArn=arn)

    def not_found(**kwargs: str) -> None:  # the other start lands between the look-up and the start
        raise aws.sfn.exceptions.ExecutionDoesNotExist({"Error": {"Code": "ExecutionDoesNotExist"}}, "Describe")

    monkeypatch.setattr(aws.sfn, "describe_execution", not_found)
    with pytest.raises(ReevaluationAlreadyStarted, match="started meanwhile"):
        start_reevaluation(aws.sfn, aws.evaluation_arn, BUCKET, RECORD)


# --- the attempt's Ray job is stopped with its execution ---------------------------------------------------


def test_a_failed_reevaluation_stops_the_ray_job_of_its_attempt(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = RunsTable(aws.dynamodb, RUNS_TABLE)
    runs.create_run("run1", "runs/run1/spec.json", "a" * 64, BASE_MODEL, "arn")
    routes = {("POST", "/api/jobs/eval-run1-step20-a2/stop"): answer(200, {"stopped": True})}
    with FakeHttpServer(routes) as server:
        monkeypatch.setenv("RAY_ADDRESS", server.url)
        event = execution_status_change_event("eval-run1-step20-a2", "FAILED", "maze-evaluation")
        assert stop_ray_job.lambda_handler(event, FakeLambdaContext()) == {
            "job_id": "eval-run1-step20-a2",
            "stopped": True,
        }
    assert runs.get_run("run1").status == "SUBMITTED"  # an evaluation leaves its run's row alone
