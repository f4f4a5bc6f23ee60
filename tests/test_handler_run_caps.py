"""validate_run_spec's per-stage caps (MaxGpusPerRun, MaxStepsPerRun, MaxActiveRuns): refusals that name the cap,
duplicates of admitted runs still answered, finished runs not counted (moto); and how the training state machine
handles the refusal."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import validate_run_spec
from mazeops_testing import BASE_MODEL, BUCKET, RUNS_TABLE, Aws, FakeLambdaContext, put_run
from template_testing import ROOT

from mazeops.config import ConfigError, RunCaps
from mazeops.run_caps import RunCapExceeded, check_spec_caps
from mazeops.runs import ACTIVE_STATUSES, FINISHED_STATUSES, RunsTable
from mazeops.runspec import InvalidRunSpec, RunSpec

SPEC = {"base_model_id": BASE_MODEL, "backend": "tiny", "total_steps": 4, "eval_interval": 2, "ckpt_interval": 2}
ARN = "arn:aws:states:us-east-1:123456789012:execution:maze-training:train-{run_id}"


@pytest.fixture
def caps(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> Aws:
    """The template's default caps in the function's environment."""
    for name, value in {"MAX_GPUS_PER_RUN": "16", "MAX_STEPS_PER_RUN": "2000", "MAX_ACTIVE_RUNS": "2"}.items():
        monkeypatch.setenv(name, value)
    return aws


def validate(aws: Aws, run_id: str, **fields: Any) -> dict[str, Any]:
    """Upload `requests/<run_id>.json` (SPEC with `fields`) and validate it."""
    key = f"requests/{run_id}.json"
    aws.s3.put_object(Bucket=BUCKET, Key=key, Body=json.dumps({**SPEC, **fields}).encode())
    event = {"bucket": BUCKET, "key": key, "run_id": run_id, "execution_arn": ARN.format(run_id=run_id)}
    return validate_run_spec.lambda_handler(event, FakeLambdaContext())


def nothing_recorded(aws: Aws, run_id: str) -> bool:
    listed = aws.s3.list_objects_v2(Bucket=BUCKET, Prefix=f"runs/{run_id}/")["KeyCount"]
    return listed == 0 and RunsTable(aws.dynamodb, RUNS_TABLE).get_run(run_id) is None


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"num_gpus": 24}, "num_gpus 24 exceeds this stage's cap MaxGpusPerRun=16"),
        ({"total_steps": 2001}, "total_steps 2001 exceeds this stage's cap MaxStepsPerRun=2000"),
        (
            {"num_gpus": 17, "total_steps": 5000},
            "num_gpus 17 exceeds this stage's cap MaxGpusPerRun=16; "
            "total_steps 5000 exceeds this stage's cap MaxStepsPerRun=2000",
        ),
    ],
    ids=["gpus", "steps", "both"],
)
def test_a_spec_over_a_cap_is_refused_naming_the_cap(caps: Aws, fields: dict[str, int], message: str) -> None:
    with pytest.raises(RunCapExceeded, match=re.escape(message)) as refused:
        validate(caps, "big-run", **fields)
    assert isinstance(refused.value, InvalidRunSpec)
    assert nothing_recorded(caps, "big-run")


def test_a_spec_at_the_caps_is_accepted(caps: Aws) -> None:
    assert validate(caps, "at-caps", num_gpus=16, total_steps=2000)["total_steps"] == 2000


def test_at_max_active_runs_a_new_run_is_refused_and_an_admitted_one_still_answered(caps: Aws) -> None:
    first, second = validate(caps, "run-a"), validate(caps, "run-b")
    RunsTable(caps.dynamodb, RUNS_TABLE).set_status("run-b", "RUNNING")
    message = "2 runs are active (run-a, run-b); this stage's cap MaxActiveRuns=2 allows no more"
    with pytest.raises(RunCapExceeded, match=re.escape(message)):
        validate(caps, "run-c")
    assert nothing_recorded(caps, "run-c")
    # A duplicate event (or a retried invocation) of an admitted run neither counts itself nor is refused.
    assert validate(caps, "run-a") == first
    assert validate(caps, "run-b") == second
    RunsTable(caps.dynamodb, RUNS_TABLE).set_status("run-a", "SUCCEEDED")
    assert validate(caps, "run-c")["run_id"] == "run-c"
    with pytest.raises(RunCapExceeded, match=re.escape("2 runs are active (run-b, run-c)")):
        validate(caps, "run-d")


def test_finished_runs_do_not_count(caps: Aws) -> None:
    assert sorted(ACTIVE_STATUSES) == ["RUNNING", "SUBMITTED"]
    for status in sorted(FINISHED_STATUSES):
        put_run(caps.dynamodb, f"ended-{status.lower().replace('_', '-')}", status)
    put_run(caps.dynamodb, "live", "RUNNING")
    assert RunsTable(caps.dynamodb, RUNS_TABLE).active_run_ids() == ["live"]
    assert validate(caps, "next")["run_id"] == "next"


def test_without_caps_in_the_environment_nothing_is_capped(aws: Aws) -> None:
    for run_id in ("u1", "u2", "u3"):
        assert validate(aws, run_id, num_gpus=1024, total_steps=100_000)["run_id"] == run_id


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5"])
def test_a_malformed_cap_is_a_configuration_error(caps: Aws, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("MAX_ACTIVE_RUNS", value)
    with pytest.raises(ConfigError, match="MAX_ACTIVE_RUNS must be a positive integer"):
        validate(caps, "run-x")


def test_check_spec_caps_leaves_an_uncapped_field_alone() -> None:
    spec = RunSpec.model_validate({**SPEC, "num_gpus": 64, "total_steps": 9000})
    check_spec_caps(spec, RunCaps(max_steps_per_run=9000))
    with pytest.raises(RunCapExceeded, match="MaxGpusPerRun=63"):
        check_spec_caps(spec, RunCaps(max_gpus_per_run=63))


class PagedScans:
    """A DynamoDB client whose Scan answers in pages of one item, as a large table would."""

    def __init__(self, run_ids: list[str]) -> None:
        self.run_ids = run_ids
        self.requests: list[dict[str, Any]] = []

    def scan(self, **request: Any) -> dict[str, Any]:
        self.requests.append(request)
        start = int(request.get("ExclusiveStartKey", {}).get("n", {}).get("N", "0"))
        answer: dict[str, Any] = {"Items": [{"run_id": {"S": self.run_ids[start]}}]}
        if start + 1 < len(self.run_ids):
            answer["LastEvaluatedKey"] = {"n": {"N": str(start + 1)}}
        return answer


def test_active_runs_are_read_across_every_scan_page() -> None:
    client = PagedScans(["r3", "r1", "r2"])
    assert RunsTable(client, RUNS_TABLE).active_run_ids() == ["r1", "r2", "r3"]
    assert len(client.requests) == 3
    assert all(request["ConsistentRead"] for request in client.requests)


def test_the_training_machine_fails_and_notifies_a_refused_run_as_an_invalid_spec() -> None:
    """RunCapExceeded is caught where InvalidRunSpec is: the same catcher of ValidateRunSpec, hence the same
    failure path (the run-failed notification and the failed execution)."""
    states = json.loads((ROOT / "statemachines" / "training.asl.json").read_text())["States"]

    def catcher(error: str) -> dict[str, Any]:
        return next(c for c in states["ValidateRunSpec"]["Catch"] if {error, "States.ALL"} & set(c["ErrorEquals"]))

    assert catcher(RunCapExceeded.__name__) == catcher(InvalidRunSpec.__name__)
    assert not any(RunCapExceeded.__name__ in r["ErrorEquals"] for r in states["ValidateRunSpec"].get("Retry", []))
