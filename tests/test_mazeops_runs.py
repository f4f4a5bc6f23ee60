"""Runs table: conditional creation, duplicates, status updates (moto)."""

from __future__ import annotations

import pytest
from mazeops_testing import RUNS_TABLE, Aws

from mazeops.guards import GuardVerdict, guard_settings
from mazeops.names import InvalidName
from mazeops.run_stop import GUARD_STOP_ERROR, stop_run
from mazeops.runs import RunAlreadyExists, RunNotFound, RunsTable, promotion_block
from mazeops.runspec import GuardSpec

SHA_A, SHA_B = "a" * 64, "b" * 64


def create(runs: RunsTable, sha: str = SHA_A, arn: str = "arn:exec:1"):
    return runs.create_run("run1", "runs/run1/spec.json", sha, "qwen3-vl-8b-sft", arn)


def test_create_then_get(aws: Aws) -> None:
    runs = RunsTable(aws.dynamodb, RUNS_TABLE)
    created = create(runs)
    stored = runs.get_run("run1")
    assert stored == created
    assert (stored.status, stored.spec_sha256, stored.execution_arn, stored.job_id) == (
        "SUBMITTED",
        SHA_A,
        "arn:exec:1",
        None,
    )


def test_duplicate_with_the_same_spec_returns_the_first_row(aws: Aws) -> None:
    runs = RunsTable(aws.dynamodb, RUNS_TABLE)
    first = create(runs)
    again = create(runs, arn="arn:exec:2")
    assert again == first and again.execution_arn == "arn:exec:1"


def test_same_id_with_another_spec_is_refused(aws: Aws) -> None:
    runs = RunsTable(aws.dynamodb, RUNS_TABLE)
    create(runs)
    with pytest.raises(RunAlreadyExists, match="run1"):
        create(runs, sha=SHA_B)
    assert runs.get_run("run1").spec_sha256 == SHA_A


def test_set_status(aws: Aws) -> None:
    runs = RunsTable(aws.dynamodb, RUNS_TABLE)
    create(runs)
    runs.set_status("run1", "RUNNING", job_id="train-run1")
    runs.set_status("run1", "ABORTED", error="execution ABORTED")
    stored = runs.get_run("run1")
    assert (stored.status, stored.job_id, stored.error) == ("ABORTED", "train-run1", "execution ABORTED")


def test_set_status_of_a_missing_run_or_unknown_status(aws: Aws) -> None:
    runs = RunsTable(aws.dynamodb, RUNS_TABLE)
    with pytest.raises(RunNotFound):
        runs.set_status("ghost", "FAILED")
    assert runs.get_run("ghost") is None
    create(runs)
    with pytest.raises(ValueError, match="unknown run status"):
        runs.set_status("run1", "DONE")


def test_hostile_run_ids_are_refused(aws: Aws) -> None:
    runs = RunsTable(aws.dynamodb, RUNS_TABLE)
    with pytest.raises(InvalidName):
        runs.get_run("../etc")
    with pytest.raises(InvalidName):
        runs.create_run("Run 1", "k", SHA_A, "b", "arn")


# --- a guard's stop -------------------------------------------------------------------------------

VERDICT = GuardVerdict("collapse", "collapse: 12/64 (step 40) and 10/64 (step 60) after best 45/64 (step 20)", (40, 60))


def test_the_guard_settings_and_gpus_are_recorded_with_the_run(aws: Aws) -> None:
    runs = RunsTable(aws.dynamodb, RUNS_TABLE)
    guard = GuardSpec().model_dump(mode="json")
    runs.create_run("run1", "runs/run1/spec.json", SHA_A, "qwen3-vl-8b-sft", "arn:exec:1", guard=guard, num_gpus=6)
    stored = runs.get_run("run1")
    assert (stored.guard, stored.num_gpus, stored.stopped_by) == (guard, 6, None)
    assert guard_settings(stored.guard) == GuardSpec()


def test_only_a_running_run_is_marked_stopped(aws: Aws) -> None:
    runs = RunsTable(aws.dynamodb, RUNS_TABLE)
    create(runs)
    assert runs.mark_stopped("run1", VERDICT) is False  # SUBMITTED
    assert runs.mark_stopped("nope", VERDICT) is False
    runs.set_status("run1", "RUNNING", job_id="train-run1")
    assert runs.mark_stopped("run1", VERDICT) is True
    stored = runs.get_run("run1")
    assert stored.status == "STOPPED" and stored.error == VERDICT.reason
    assert {key: stored.stopped_by[key] for key in ("guard", "reason", "steps")} == {
        "guard": "collapse",
        "reason": VERDICT.reason,
        "steps": [40, 60],
    }
    assert stored.stopped_by["at"]
    spend = GuardVerdict("spend", "spend: later", ())
    assert runs.mark_stopped("run1", spend) is False
    assert runs.get_run("run1").stopped_by["guard"] == "collapse"
    assert promotion_block("run1", runs.get_run("run1")) is not None


def test_stop_run_marks_the_run_and_stops_its_training_execution(aws: Aws) -> None:
    runs = RunsTable(aws.dynamodb, RUNS_TABLE)
    sfn = StopRecorder()
    create(runs)
    assert stop_run(runs, sfn, "run1", VERDICT) is False  # not RUNNING: nothing stopped
    assert sfn.stopped == []
    runs.set_status("run1", "RUNNING", job_id="train-run1")
    assert stop_run(runs, sfn, "run1", VERDICT) is True
    assert sfn.stopped == [("arn:exec:1", GUARD_STOP_ERROR, VERDICT.reason)]
    # a retried stop (its first attempt failed after marking the row) stops the execution again, keeps the verdict
    assert stop_run(runs, sfn, "run1", GuardVerdict("stall", "stall: later", ())) is False
    assert [call[0] for call in sfn.stopped] == ["arn:exec:1", "arn:exec:1"]
    assert runs.get_run("run1").stopped_by["guard"] == "collapse"


class StopRecorder:
    """The Step Functions client's stop_execution, recorded."""

    class exceptions:
        class ExecutionDoesNotExist(Exception):
            pass

    def __init__(self) -> None:
        self.stopped: list[tuple[str, str, str]] = []

    def stop_execution(self, executionArn: str, error: str, cause: str) -> dict:
        self.stopped.append((executionArn, error, cause))
        return {}
