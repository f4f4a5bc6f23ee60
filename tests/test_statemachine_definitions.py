"""Static checks of the two ASL definitions: statelint, retries, catches, error names, ordering."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from statelint.linter import Linter

from mazeops import champion_rows, ray_jobs, runs, serve_client

ROOT = Path(__file__).resolve().parent.parent
DEFINITIONS = {
    "training": ROOT / "statemachines" / "training.asl.json",
    "evaluation": ROOT / "statemachines" / "evaluation.asl.json",
}
SEVEN_DAYS = 7 * 24 * 3600
LAMBDA_TRANSIENT = {
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
}
# Error names the definitions match on must be the class names the handlers raise.
HANDLER_ERRORS = {
    cls.__name__
    for cls in (
        ray_jobs.RayUnavailable,
        serve_client.ServeUnavailable,
        serve_client.SmokeTestFailed,
        champion_rows.ChampionChanged,
        runs.RunAlreadyExists,
    )
}


def load(name: str) -> dict[str, Any]:
    return json.loads(DEFINITIONS[name].read_text())


def tasks(definition: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: state for name, state in definition["States"].items() if state["Type"] == "Task"}


def successors(state: dict[str, Any]) -> set[str]:
    """Every state reachable in one transition (Next, Default, Choices, Catch)."""
    found = {state[key] for key in ("Next", "Default") if key in state}
    found |= {choice["Next"] for choice in state.get("Choices", [])}
    found |= {catcher["Next"] for catcher in state.get("Catch", [])}
    return found


def reachable(definition: dict[str, Any], start: str, avoiding: str | None = None) -> set[str]:
    """States reachable from `start` without passing through `avoiding`."""
    seen, frontier = set(), [start]
    while frontier:
        name = frontier.pop()
        if name in seen or name == avoiding:
            continue
        seen.add(name)
        frontier.extend(successors(definition["States"][name]))
    return seen


def after_error_cleaning(states: dict[str, Any], name: str) -> str:
    """Where a Catch leads once the Lambda error's cause has been cut to its message (the Clean chain)."""
    if not name.startswith("IsLambdaErrorFor"):
        return name
    choice, parse = states[name], states[name]["Choices"][0]["Next"]
    keep = states[parse]["Next"]
    assert choice["Default"] == states[keep]["Next"] == name.removeprefix("IsLambdaErrorFor")
    return choice["Default"]


@pytest.mark.parametrize("name", sorted(DEFINITIONS))
def test_every_error_catch_keeps_only_the_message_of_a_lambda_error(name: str) -> None:
    """Causes that reach a record, a notification or a Fail state are one line (mazeops.failures)."""
    states = load(name)["States"]
    chains = 0
    for state_name, state in states.items():
        for catcher in state.get("Catch", []):
            if catcher["ResultPath"] in ("$.error", "$.rollback_error"):
                assert catcher["Next"].startswith("IsLambdaErrorFor"), f"{state_name} -> {catcher['Next']}"
                after_error_cleaning(states, catcher["Next"])
    for state_name, state in states.items():
        if state_name.startswith("IsLambdaErrorFor"):
            chains += 1
            path = state["Choices"][0]["And"][0]["Variable"].removesuffix(".Cause")
            parse = states[state["Choices"][0]["Next"]]
            keep = states[parse["Next"]]
            assert parse["Parameters"] == {"Error.$": f"{path}.Error", "Cause.$": f"States.StringToJson({path}.Cause)"}
            assert keep["Parameters"] == {"Error.$": f"{path}.Error", "Cause.$": f"{path}.Cause.errorMessage"}
            assert parse["ResultPath"] == keep["ResultPath"] == path
    assert chains == {"training": 2, "evaluation": 5}[name]


@pytest.mark.parametrize("name", sorted(DEFINITIONS))
def test_statelint_finds_no_problem(name: str) -> None:
    assert Linter.validate(str(DEFINITIONS[name])) == []


@pytest.mark.parametrize("name", sorted(DEFINITIONS))
def test_every_state_is_reachable_and_every_transition_exists(name: str) -> None:
    definition = load(name)
    states = definition["States"]
    assert reachable(definition, definition["StartAt"]) == set(states)


@pytest.mark.parametrize("name", sorted(DEFINITIONS))
def test_top_level_timeout_is_seven_days(name: str) -> None:
    assert load(name)["TimeoutSeconds"] == SEVEN_DAYS


@pytest.mark.parametrize("name", sorted(DEFINITIONS))
def test_every_task_catches_every_error(name: str) -> None:
    for state_name, state in tasks(load(name)).items():
        last = state["Catch"][-1]
        assert last["ErrorEquals"] == ["States.ALL"], state_name
        assert last["ResultPath"] not in (None, "$"), f"{state_name} would lose its state on error"


@pytest.mark.parametrize("name", sorted(DEFINITIONS))
def test_lambda_tasks_retry_transient_lambda_errors(name: str) -> None:
    for state_name, state in tasks(load(name)).items():
        if state["Resource"] != "arn:aws:states:::lambda:invoke":
            continue
        retried = {error for retrier in state["Retry"] for error in retrier["ErrorEquals"]}
        assert retried >= LAMBDA_TRANSIENT, state_name
        assert "ResultSelector" in state and state["ResultPath"].startswith("$."), state_name


# What a Lambda function that timed out or ran out of memory reports to Step Functions: `Lambda.Unknown`
# ("Handle Lambda service exceptions", docs.aws.amazon.com/step-functions/latest/dg/bp-lambda-serviceexception.html),
# `Sandbox.Timedout` from the newer runtimes. Every Lambda task retries them but the one whose call is not
# idempotent: check_adapter claims the adapter's row only if absent, so a retry after a timed-out attempt that
# wrote the claim would read its own claim as a duplicate event and skip the evaluation.
LAMBDA_TIMEOUTS = {"Lambda.Unknown", "Sandbox.Timedout"}
NOT_RETRIED_AFTER_A_TIMEOUT = {"training": set(), "evaluation": {"CheckAdapter"}}


@pytest.mark.parametrize("name", sorted(DEFINITIONS))
def test_idempotent_lambda_tasks_retry_a_timed_out_invocation(name: str) -> None:
    for state_name, state in tasks(load(name)).items():
        if state["Resource"] != "arn:aws:states:::lambda:invoke":
            continue
        retried = {error for retrier in state["Retry"] for error in retrier["ErrorEquals"]}
        if state_name in NOT_RETRIED_AFTER_A_TIMEOUT[name]:
            assert not retried & LAMBDA_TIMEOUTS, state_name
        else:
            assert retried >= LAMBDA_TIMEOUTS, state_name


# The states that call Ray (submit, poll): the training job; the adapter's and the baseline's evaluation jobs.
RAY_TASKS = {
    "training": {"SubmitTrainingJob", "GetJobStatus"},
    "evaluation": {"SubmitEvalJob", "GetEvalJobStatus", "SubmitBaselineJob", "GetBaselineJobStatus"},
}
# The polls run on a schedule: get_ray_job answers an unreachable head as status UNREACHABLE and the next poll is
# the retry (test_ray_jobs_are_polled_on_a_growing_schedule).
SCHEDULED_POLLS = {"training": {"GetJobStatus"}, "evaluation": {"GetEvalJobStatus", "GetBaselineJobStatus"}}


@pytest.mark.parametrize("name", sorted(DEFINITIONS))
def test_ray_calls_retry_ray_unavailable_with_full_jitter(name: str) -> None:
    ray_tasks = {
        state_name: state
        for state_name, state in tasks(load(name)).items()
        if "SubmitRayJob" in json.dumps(state) or "GetRayJob" in json.dumps(state)
    }
    assert set(ray_tasks) == RAY_TASKS[name]
    for state_name, state in ray_tasks.items():
        if state_name in SCHEDULED_POLLS[name]:
            continue
        retrier = next(r for r in state["Retry"] if r["ErrorEquals"] == ["RayUnavailable"])
        # An evaluation's submit rides out a blip only: the cluster watch retries a failed evaluation (eval_retry).
        attempts = 3 if state_name == "SubmitEvalJob" else 5
        shape = (retrier["IntervalSeconds"], retrier["BackoffRate"], retrier["MaxAttempts"])
        assert shape == (2, 2.0, attempts), state_name
        assert retrier["JitterStrategy"] == "FULL"


@pytest.mark.parametrize("name", sorted(DEFINITIONS))
def test_custom_error_names_are_handler_exception_classes(name: str) -> None:
    definition = load(name)
    matched = {
        error
        for state in tasks(definition).values()
        for handler in state.get("Retry", []) + state.get("Catch", [])
        for error in handler["ErrorEquals"]
        if not error.startswith(("States.", "Lambda.", "DynamoDB.")) and error not in LAMBDA_TIMEOUTS
    }
    assert matched and matched <= HANDLER_ERRORS


def test_training_polls_until_the_job_ends() -> None:
    states = load("training")["States"]
    choice = states["JobFinished?"]
    assert choice["Default"] == "WaitForJob"
    assert {c["Next"] for c in choice["Choices"]} == {"RecordRunSucceeded", "DescribeJobFailure"}
    assert states["DescribeJobFailure"]["Parameters"]["Error"] == "TrainingJobFailed"
    assert states["RunFailed"]["ErrorPath"] == "$.error.Error"


# (state machine, wait, poll, result path) of every Ray job poll.
POLL_LOOPS = [
    ("training", "WaitForJob", "GetJobStatus", "$.job"),
    ("evaluation", "WaitForEvalJob", "GetEvalJobStatus", "$.job"),
    ("evaluation", "WaitForBaselineJob", "GetBaselineJobStatus", "$.baseline_job"),
]


@pytest.mark.parametrize(("name", "wait", "poll_state", "result_path"), POLL_LOOPS)
def test_ray_jobs_are_polled_on_a_growing_schedule(name: str, wait: str, poll_state: str, result_path: str) -> None:
    """Each poll asks when to poll next (mazeops.polling); the first waits PollSeconds."""
    definition = load(name)
    states = definition["States"]
    poll = states[poll_state]
    assert states[wait]["Next"] == poll_state and states[poll["Next"]]["Default"] == wait
    configure = states["Configure"]["Parameters"]
    first_wait = configure[result_path.removeprefix("$.")]["next_poll_seconds.$"]
    assert first_wait == configure["poll_seconds.$"] == "States.StringToJson('${PollSeconds}')"
    assert poll["Parameters"]["Payload"]["poll"] == {
        "poll_seconds.$": "$.poll_seconds",
        "started_at.$": "$$.Execution.StartTime",
        "polled_at.$": "$$.State.EnteredTime",
        "timeout_seconds": definition["TimeoutSeconds"],
    }
    assert poll["ResultPath"] == result_path
    assert poll["ResultSelector"]["next_poll_seconds.$"] == "$.Payload.next_poll_seconds"
    assert states[wait]["SecondsPath"] == f"{result_path}.next_poll_seconds"
    # No retry or catch of RayUnavailable: each would add history events to every poll of an outage.
    handled = {error for handler in poll["Retry"] + poll["Catch"] for error in handler["ErrorEquals"]}
    assert "RayUnavailable" not in handled


def test_evaluation_moves_the_champion_only_after_the_smoke_test() -> None:
    definition = load("evaluation")
    states = definition["States"]
    assert "PromoteChampion" not in reachable(definition, definition["StartAt"], avoiding="SmokeTest")
    assert states["SmokeTest"]["Next"] == "PromoteChampion"
    for state_name in ("RegisterAdapter", "SmokeTest", "PromoteChampion"):
        assert after_error_cleaning(states, states[state_name]["Catch"][-1]["Next"]) == "RollbackRegistration", (
            state_name
        )
    assert states["PromotionRolledBack"]["Error"] == "PromotionRolledBack"
    retrier = next(r for r in states["SmokeTest"]["Retry"] if r["ErrorEquals"] == ["ServeUnavailable"])
    assert retrier["MaxAttempts"] == 4 and retrier["BackoffRate"] > 1


def test_evaluation_rollback_never_reaches_the_promotion() -> None:
    definition = load("evaluation")
    assert "PromoteChampion" not in reachable(definition, "RollbackRegistration")
    assert "RegisterAdapter" not in reachable(definition, "RollbackRegistration")


def test_evaluation_decides_only_once_the_baseline_is_ready_and_fails_safe_without_it() -> None:
    definition = load("evaluation")
    states = definition["States"]
    assert "DecidePromotion" not in reachable(definition, definition["StartAt"], avoiding="EnsureBaseline")
    assert states["RecordEval"]["Next"] == "EnsureBaseline"
    ready = {choice["Next"] for name in ("BaselineReady?", "BaselineRecorded?") for choice in states[name]["Choices"]}
    assert ready == {"CheckRunGuard", "SubmitBaselineJob"}
    assert states["CheckRunGuard"]["Next"] == "DecidePromotion"
    for state_name in ("EnsureBaseline", "SubmitBaselineJob", "GetBaselineJobStatus", "RecordBaseline"):
        assert after_error_cleaning(states, states[state_name]["Catch"][-1]["Next"]) == "RecordNoBaseline", state_name
    assert reachable(definition, "RecordNoBaseline") == {"RecordNoBaseline", "NotifyNoBaseline", "NoBaseline"}
    assert states["NoBaseline"]["Error"] == "BaselineUnavailable"


def test_evaluation_decides_after_the_run_guard_whatever_the_guard_does() -> None:
    """A run's collapse guard runs between the baseline and the decision; its failure leads to the decision too."""
    definition = load("evaluation")
    states = definition["States"]
    assert "DecidePromotion" not in reachable(definition, definition["StartAt"], avoiding="CheckRunGuard")
    guard = states["CheckRunGuard"]
    assert guard["Parameters"]["FunctionName"] == "${CheckRunGuardFunctionArn}"
    assert guard["ResultPath"] == "$.guard" and set(guard["ResultSelector"]) == {"stopped.$", "reason.$"}
    assert guard["Catch"] == [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.guard_error", "Next": "DecidePromotion"}]
    assert successors(guard) == {"DecidePromotion"}
