"""start_execution: S3 and schedule events start the right executions once (moto)."""

from __future__ import annotations

import hashlib
import json

import pytest
import start_execution
from mazeops_testing import (
    BUCKET,
    Aws,
    FakeLambdaContext,
    emitted_metrics,
    execution_status_change_event,
    s3_object_created_event,
    scheduled_event,
)

from mazeops.adapter_rows import AdapterRecord
from mazeops.config import ConfigError
from mazeops.events import InvalidEvent
from mazeops.reevaluation import start_reevaluation


def executions(aws: Aws, arn: str) -> dict[str, dict]:
    """Execution name -> input of every execution of the state machine."""
    listed = aws.sfn.list_executions(stateMachineArn=arn)["executions"]
    return {e["name"]: json.loads(aws.sfn.describe_execution(executionArn=e["executionArn"])["input"]) for e in listed}


def call(event: dict) -> dict:
    return start_execution.lambda_handler(event, FakeLambdaContext())


def test_run_spec_upload_starts_training(aws: Aws, capsys: pytest.CaptureFixture[str]) -> None:
    result = call(s3_object_created_event("requests/run1.json"))
    assert result["status"] == "started" and result["name"] == "train-run1"
    assert result["execution_arn"].endswith(":execution:maze-training:train-run1")
    assert executions(aws, aws.training_arn) == {
        "train-run1": {"bucket": BUCKET, "key": "requests/run1.json", "run_id": "run1"}
    }
    assert emitted_metrics(capsys.readouterr().out) == {"RunsStarted": 1}


def test_redelivered_event_is_a_duplicate(aws: Aws, capsys: pytest.CaptureFixture[str]) -> None:
    event = s3_object_created_event("requests/run1.json")
    first = call(event)
    capsys.readouterr()
    again = call(event)
    assert again == {**first, "status": "duplicate"}
    assert emitted_metrics(capsys.readouterr().out) == {"DuplicateEvents": 1}
    assert list(executions(aws, aws.training_arn)) == ["train-run1"]


def test_reupload_of_a_running_request_is_a_duplicate(aws: Aws, capsys: pytest.CaptureFixture[str]) -> None:
    call(s3_object_created_event("requests/run1.json", etag="1111"))
    capsys.readouterr()
    again = call(s3_object_created_event("requests/run1.json", etag="2222"))
    assert again["status"] == "duplicate" and again["name"] == "train-run1"
    assert emitted_metrics(capsys.readouterr().out) == {"DuplicateEvents": 1}
    assert len(executions(aws, aws.training_arn)) == 1


def test_reupload_after_the_execution_ended_is_a_duplicate(aws: Aws) -> None:
    call(s3_object_created_event("requests/run1.json", etag="1111"))
    arn = aws.sfn.list_executions(stateMachineArn=aws.training_arn)["executions"][0]["executionArn"]
    aws.sfn.stop_execution(executionArn=arn)
    assert call(s3_object_created_event("requests/run1.json", etag="3333"))["status"] == "duplicate"


def test_manifest_upload_starts_evaluation(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POLL_SECONDS", "5")
    key = "runs/run1/adapters/global_step_20/manifest.json"
    result = call(s3_object_created_event(key))
    assert (result["status"], result["name"]) == ("started", "eval-run1-step20")
    assert executions(aws, aws.evaluation_arn) == {
        "eval-run1-step20": {"bucket": BUCKET, "key": key, "run_id": "run1", "step": 20, "attempt": 1}
    }
    assert executions(aws, aws.training_arn) == {}


@pytest.mark.parametrize(
    "key, machine",
    [
        ("requests/../../etc/passwd.json", "training"),
        ("requests/Run One.json", "training"),
        ("requests/run1.yaml", "training"),
        ("requests/a/b.json", "training"),
        ("runs/RUN/adapters/global_step_1/manifest.json", "evaluation"),
        ("runs/run1/adapters/global_step_0/manifest.json", "evaluation"),
        ("runs/run1/adapters/../global_step_1/manifest.json", "evaluation"),
    ],
)
def test_hostile_keys_start_a_visible_invalid_execution(
    aws: Aws, capsys: pytest.CaptureFixture[str], key: str, machine: str
) -> None:
    result = call(s3_object_created_event(key))
    name = "invalid-" + hashlib.sha256(key.encode()).hexdigest()[:12]
    assert (result["status"], result["name"]) == ("started", name)
    arn = aws.training_arn if machine == "training" else aws.evaluation_arn
    started = executions(aws, arn)
    assert list(started) == [name]
    assert started[name]["run_id"] is None and started[name]["key"] == key
    if machine == "evaluation":
        assert started[name]["attempt"] == 1  # the evaluation state machine's input always names its attempt
    assert emitted_metrics(capsys.readouterr().out) == {"RejectedEvents": 1}


@pytest.mark.parametrize("key", ["runs/run1/spec.json", "serving/base/x/adapter_config.json", "notes.txt"])
def test_other_keys_are_ignored(aws: Aws, key: str) -> None:
    assert call(s3_object_created_event(key))["status"] == "ignored"
    assert executions(aws, aws.training_arn) == executions(aws, aws.evaluation_arn) == {}


def test_other_buckets_and_event_kinds_are_ignored(aws: Aws) -> None:
    assert call(s3_object_created_event("requests/run1.json", bucket="someone-elses-bucket"))["status"] == "ignored"
    assert call(execution_status_change_event("train-run1"))["status"] == "ignored"
    assert executions(aws, aws.training_arn) == {}


def test_malformed_events_are_refused(aws: Aws) -> None:
    event = s3_object_created_event("requests/run1.json")
    del event["detail"]["object"]
    with pytest.raises(InvalidEvent):
        call(event)
    with pytest.raises(InvalidEvent):
        call({"hello": "world"})


def test_schedule_copies_the_standing_spec_and_the_copy_starts_training(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCHEDULED_RUN_SPEC_KEY", "schedules/nightly.json")
    aws.s3.put_object(Bucket=BUCKET, Key="schedules/nightly.json", Body=b'{"base_model_id": "qwen3-vl-8b-sft"}')
    result = call(scheduled_event("2026-12-02T03:00:00Z"))
    assert result == {
        "status": "started",
        "execution_arn": None,
        "name": "train-nightly-202612020300",
        "request_key": "requests/nightly-202612020300.json",
    }
    copied = aws.s3.get_object(Bucket=BUCKET, Key="requests/nightly-202612020300.json")["Body"].read()
    assert copied == b'{"base_model_id": "qwen3-vl-8b-sft"}'
    assert executions(aws, aws.training_arn) == {}  # started by the copy's own S3 event:
    assert call(s3_object_created_event(result["request_key"]))["name"] == "train-nightly-202612020300"
    assert call(scheduled_event("2026-12-02T03:00:00Z"))["status"] == "duplicate"


def test_schedule_without_its_spec_is_a_config_error(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="SCHEDULED_RUN_SPEC_KEY is not set"):
        call(scheduled_event())
    monkeypatch.setenv("SCHEDULED_RUN_SPEC_KEY", "schedules/missing.json")
    with pytest.raises(ConfigError, match="does not exist"):
        call(scheduled_event())


def test_a_reevaluation_starts_with_the_input_of_the_manifest_upload_and_its_attempt(aws: Aws) -> None:
    key = "runs/run1/adapters/global_step_20/manifest.json"
    call(s3_object_created_event(key))
    record = AdapterRecord(
        base_model_id="qwen3-vl-8b-sft",
        adapter_name="run1-step20",
        run_id="run1",
        step=20,
        status="EVAL_FAILED",
        manifest_key=key,
        lora_rank=32,
        created_at="2026-12-02T16:00:00Z",
        updated_at="2026-12-02T16:00:00Z",
    )
    name, _ = start_reevaluation(aws.sfn, aws.evaluation_arn, BUCKET, record)
    started = executions(aws, aws.evaluation_arn)
    assert name == "eval-run1-step20-a2"
    assert started[name] == {**started["eval-run1-step20"], "attempt": 2}
