"""Runs table: conditional creation, duplicates, status updates (moto)."""

from __future__ import annotations

import pytest
from mazeops_testing import RUNS_TABLE, Aws

from mazeops.names import InvalidName
from mazeops.runs import RunAlreadyExists, RunNotFound, RunsTable

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
