"""watch_cluster against moto (tables, bucket, state machines, topic) and a fake Ray Jobs API."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
import watch_cluster
from mazeops_testing import (
    BASE_MODEL,
    BUCKET,
    RAY_AUTH_TOKEN,
    REGISTRY_TABLE,
    RUNS_TABLE,
    Aws,
    FakeHttpServer,
    FakeLambdaContext,
    answer,
    closed_port_url,
    emitted_metrics,
    put_adapter,
    put_run,
    scheduled_event,
)

from mazeops.cluster_health import ClusterHealth, format_time, read_health
from mazeops.config import load
from mazeops.dynamo import to_item
from mazeops.runs import RunsTable
from mazeops.runspec import GuardSpec

# moto stamps an object's LastModified with the real clock: the watch's times are taken relative to it.
REAL_NOW = datetime.now(UTC).replace(microsecond=0)


@dataclass
class Watch:
    """The moto clients, the fake head and the notices' inbox of one test."""

    aws: Aws
    ray: FakeHttpServer
    sns: Any
    queue_url: str

    def __call__(self, now: datetime, ray_address: str | None = None) -> dict[str, Any]:
        config = load()
        if ray_address is not None:
            config = dataclasses.replace(config, ray_address=ray_address)
        return watch_cluster.watch(config, self.aws.dynamodb, self.aws.s3, self.aws.sfn, self.sns, now)

    def notices(self) -> list[dict[str, str]]:
        """Notifications published since the last call: [{"Subject", "Message"}]."""
        sqs = boto3.client("sqs")
        found = sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10).get("Messages", [])
        for message in found:
            sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
        return [{key: json.loads(m["Body"])[key] for key in ("Subject", "Message")} for m in found]

    def job(self, run_id: str, status: str) -> None:
        """The fake head answers the run's training job in `status`."""
        job_id = f"train-{run_id}"
        self.ray.routes[("GET", f"/api/jobs/{job_id}")] = answer(200, {"submission_id": job_id, "status": status})


@pytest.fixture
def watch(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> Iterator[Watch]:
    """A head that answers its version, a topic whose notifications land in a queue, and the watch's settings."""
    sns, sqs = boto3.client("sns"), boto3.client("sqs")
    topic = sns.create_topic(Name="maze-notifications")["TopicArn"]
    queue_url = sqs.create_queue(QueueName="inbox")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn)
    for name, value in {
        "TOPIC_ARN": topic,
        "CLUSTER_UNREACHABLE_MINUTES": "15",
        "EVAL_RETRY_BACKOFF_SECONDS": "300",
        "EVAL_RETRY_MAX_ATTEMPTS": "3",
    }.items():
        monkeypatch.setenv(name, value)
    with FakeHttpServer({("GET", "/api/version"): answer(200, {"version": "4", "ray_version": "2.52.0"})}) as ray:
        monkeypatch.setenv("RAY_ADDRESS", ray.url)
        yield Watch(aws, ray, sns, queue_url)
    assert {headers.get("Authorization") for _method, _path, headers, _body in ray.requests} <= {
        f"Bearer {RAY_AUTH_TOKEN}"
    }


def guarded_run(aws: Aws, run_id: str, running_at: datetime, num_gpus: int = 6, guard: GuardSpec | None = None) -> str:
    """A RUNNING run with guard settings, GPUs and running_at, and its training execution; its execution ARN."""
    execution = aws.sfn.start_execution(stateMachineArn=aws.training_arn, name=f"train-{run_id}", input="{}")
    runs = RunsTable(aws.dynamodb, RUNS_TABLE)
    spec = (guard or GuardSpec()).model_dump(mode="json")
    runs.create_run(
        run_id, f"runs/{run_id}/spec.json", "ab" * 32, BASE_MODEL, execution["executionArn"], spec, num_gpus
    )
    runs.set_status(run_id, "RUNNING", job_id=f"train-{run_id}")
    aws.dynamodb.update_item(
        TableName=RUNS_TABLE,
        Key={"run_id": {"S": run_id}},
        UpdateExpression="SET running_at = :at",
        ExpressionAttributeValues={":at": {"S": running_at.strftime("%Y-%m-%dT%H:%M:%S.000Z")}},
    )
    return execution["executionArn"]


def run_status(aws: Aws, run_id: str) -> str:
    record = RunsTable(aws.dynamodb, RUNS_TABLE).get_run(run_id)
    assert record is not None
    return record.status


def execution_status(aws: Aws, arn: str) -> str:
    return aws.sfn.describe_execution(executionArn=arn)["status"]


# --- the head's health and its notices --------------------------------------------------------


def test_an_outage_is_recorded_and_notified_once_after_the_threshold(watch: Watch) -> None:
    put_run(watch.aws.dynamodb, "r1", "RUNNING")
    put_run(watch.aws.dynamodb, "r2", "SUBMITTED")
    put_run(watch.aws.dynamodb, "r0", "SUCCEEDED")
    down = closed_port_url()
    start = REAL_NOW

    first = watch(start, down)
    assert first == {"reachable": False, "notice": None, "stopped": [], "retried": []}
    health = read_health(watch.aws.dynamodb, RUNS_TABLE)
    assert health is not None and not health.reachable and health.unreachable_since == format_time(start)
    assert health.error is not None and "cannot reach Ray" in health.error
    assert watch(start + timedelta(minutes=10), down)["notice"] is None
    assert watch.notices() == []

    assert watch(start + timedelta(minutes=15), down)["notice"] == "unreachable"
    assert watch(start + timedelta(minutes=20), down)["notice"] is None
    [notice] = watch.notices()
    assert notice["Subject"] == "maze-rl-ops: Ray cluster unreachable"
    assert f"since {format_time(start)} (15 minutes" in notice["Message"]
    assert "Active runs (RUNNING or SUBMITTED): r1, r2." in notice["Message"]
    assert "starts again on its own once the head answers" in notice["Message"]
    health = read_health(watch.aws.dynamodb, RUNS_TABLE)
    assert health is not None and health.notified_at == format_time(start + timedelta(minutes=15))

    assert watch(start + timedelta(minutes=25))["notice"] == "recovered"
    [recovered] = watch.notices()
    assert recovered["Subject"] == "maze-rl-ops: Ray cluster answers again"
    assert f"unreachable since {format_time(start)} (25 minutes)" in recovered["Message"]
    assert read_health(watch.aws.dynamodb, RUNS_TABLE) == ClusterHealth(
        True, format_time(start + timedelta(minutes=25))
    )
    assert watch(start + timedelta(minutes=30))["notice"] is None
    assert watch.notices() == []


def test_a_short_outage_notifies_nothing(watch: Watch) -> None:
    down = closed_port_url()
    assert watch(REAL_NOW, down)["reachable"] is False
    assert watch(REAL_NOW + timedelta(minutes=10))["notice"] is None
    assert watch.notices() == []


def test_a_refused_token_counts_as_unreachable(watch: Watch) -> None:
    watch.ray.routes[("GET", "/api/version")] = answer(401, b"invalid token")
    summary = watch(REAL_NOW)
    health = read_health(watch.aws.dynamodb, RUNS_TABLE)
    assert summary["reachable"] is False and health is not None and "HTTP 401" in (health.error or "")


def test_an_address_that_is_not_a_ray_dashboard_counts_as_unreachable(watch: Watch) -> None:
    watch.ray.routes.pop(("GET", "/api/version"))  # answered 404
    assert watch(REAL_NOW)["reachable"] is False
    health = read_health(watch.aws.dynamodb, RUNS_TABLE)
    assert health is not None and "not found" in (health.error or "")


@pytest.mark.parametrize(("reachable", "value"), [(True, 0), (False, 1)])
def test_the_handler_emits_the_unreachable_metric(
    watch: Watch, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], reachable: bool, value: int
) -> None:
    if not reachable:
        monkeypatch.setenv("RAY_ADDRESS", closed_port_url())
    summary = watch_cluster.lambda_handler(scheduled_event(rule="maze-cluster-watch"), FakeLambdaContext())
    assert summary["reachable"] is reachable
    assert emitted_metrics(capsys.readouterr().out) == {"RayHeadUnreachable": value}


# --- the stall and spend guards ---------------------------------------------------------------


def test_a_stalled_run_is_stopped(watch: Watch) -> None:
    arn = guarded_run(watch.aws, "r1", REAL_NOW - timedelta(hours=3), guard=GuardSpec(stall_minutes=60))
    put_adapter(watch.aws.s3, "r1", 20)  # uploaded now (moto's clock)
    put_adapter(watch.aws.s3, "r1", 10)
    watch.job("r1", "RUNNING")
    key = "runs/r1/adapters/global_step_10/manifest.json"
    uploaded = watch.aws.s3.head_object(Bucket=BUCKET, Key=key)["LastModified"]

    assert watch(uploaded + timedelta(minutes=59))["stopped"] == []
    assert run_status(watch.aws, "r1") == "RUNNING"

    summary = watch(uploaded + timedelta(minutes=61))
    assert summary["stopped"] == [{"run_id": "r1", "guard": "stall"}]
    record = RunsTable(watch.aws.dynamodb, RUNS_TABLE).get_run("r1")
    assert record is not None and record.status == "STOPPED" and record.stopped_by is not None
    assert record.stopped_by["guard"] == "stall" and "no new adapter for 61 min" in record.stopped_by["reason"]
    assert execution_status(watch.aws, arn) == "ABORTED"
    assert watch(uploaded + timedelta(minutes=70))["stopped"] == []  # stopped once


def test_a_run_without_adapters_stalls_from_running_at(watch: Watch) -> None:
    guarded_run(watch.aws, "r1", REAL_NOW - timedelta(minutes=30), guard=GuardSpec(stall_minutes=60))
    watch.job("r1", "RUNNING")
    assert watch(REAL_NOW)["stopped"] == []
    assert watch(REAL_NOW + timedelta(minutes=31))["stopped"] == [{"run_id": "r1", "guard": "stall"}]


@pytest.mark.parametrize("job_status", ["PENDING", "SUCCEEDED", "FAILED"])
def test_a_run_whose_job_is_not_running_is_not_stalled(watch: Watch, job_status: str) -> None:
    arn = guarded_run(watch.aws, "r1", REAL_NOW - timedelta(hours=10), guard=GuardSpec(stall_minutes=60))
    watch.job("r1", job_status)
    assert watch(REAL_NOW)["stopped"] == []
    assert run_status(watch.aws, "r1") == "RUNNING" and execution_status(watch.aws, arn) == "RUNNING"


def test_no_run_is_guarded_while_the_head_is_unreachable(watch: Watch) -> None:
    guarded_run(watch.aws, "r1", REAL_NOW - timedelta(hours=10), guard=GuardSpec(stall_minutes=60, gpu_hours=1))
    watch.job("r1", "RUNNING")
    assert watch(REAL_NOW, closed_port_url())["stopped"] == []
    assert run_status(watch.aws, "r1") == "RUNNING"


def test_a_run_over_its_gpu_hours_is_stopped(watch: Watch) -> None:
    arn = guarded_run(
        watch.aws, "r1", REAL_NOW - timedelta(hours=2), num_gpus=6, guard=GuardSpec(stall_minutes=None, gpu_hours=10)
    )
    watch.job("r1", "RUNNING")
    assert watch(REAL_NOW - timedelta(minutes=20))["stopped"] == []  # 6 GPUs x 1.67 h = 10 GPU-hours
    assert watch(REAL_NOW)["stopped"] == [{"run_id": "r1", "guard": "spend"}]
    record = RunsTable(watch.aws.dynamodb, RUNS_TABLE).get_run("r1")
    assert record is not None and record.stopped_by is not None and record.stopped_by["guard"] == "spend"
    assert execution_status(watch.aws, arn) == "ABORTED"


def test_runs_without_guard_settings_or_running_at_are_not_guarded(watch: Watch) -> None:
    put_run(watch.aws.dynamodb, "r1", "RUNNING")  # a row from before guards: no guard, no running_at
    guarded_run(watch.aws, "r2", REAL_NOW - timedelta(hours=10), guard=GuardSpec(stall_minutes=None, gpu_hours=None))
    watch.job("r1", "RUNNING")
    watch.job("r2", "RUNNING")
    assert watch(REAL_NOW + timedelta(days=3))["stopped"] == []
    assert run_status(watch.aws, "r1") == run_status(watch.aws, "r2") == "RUNNING"


def test_one_runs_failure_does_not_spare_the_others(watch: Watch) -> None:
    guarded_run(watch.aws, "r1", REAL_NOW - timedelta(hours=10), guard=GuardSpec(stall_minutes=60))  # job 404
    guarded_run(watch.aws, "r2", REAL_NOW - timedelta(hours=10), guard=GuardSpec(stall_minutes=60))
    watch.job("r2", "RUNNING")
    assert watch(REAL_NOW)["stopped"] == [{"run_id": "r2", "guard": "stall"}]
    assert run_status(watch.aws, "r1") == "RUNNING"


# --- evaluations started again after an infrastructure failure --------------------------------


def failed_adapter(aws: Aws, name: str, error: str, failed_at: datetime, attempts: int | None = None) -> None:
    """An EVAL_FAILED registry row (as RecordEvalFailed writes it) with its manifest in the bucket."""
    run_id, step = name.rsplit("-step", 1)
    put_adapter(aws.s3, run_id, int(step))
    row = {
        "base_model_id": BASE_MODEL,
        "adapter_name": name,
        "run_id": run_id,
        "step": int(step),
        "status": "EVAL_FAILED",
        "manifest_key": f"runs/{run_id}/adapters/global_step_{step}/manifest.json",
        "lora_rank": 32,
        "created_at": "2026-12-02T15:00:00Z",
        "updated_at": failed_at.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
        "error": error,
        "eval_attempts": attempts,
    }
    aws.dynamodb.put_item(TableName=REGISTRY_TABLE, Item=to_item(row))


def evaluation_executions(aws: Aws) -> dict[str, dict[str, Any]]:
    """Name -> input of every execution of the evaluation state machine."""
    found = aws.sfn.list_executions(stateMachineArn=aws.evaluation_arn)["executions"]
    return {e["name"]: json.loads(aws.sfn.describe_execution(executionArn=e["executionArn"])["input"]) for e in found}


UNAVAILABLE = "RayUnavailable: POST /api/jobs/: cannot reach Ray at http://ray:8265: Connection refused"


def test_an_infrastructure_failure_is_evaluated_again_after_its_backoff(watch: Watch) -> None:
    failed_at = REAL_NOW
    failed_adapter(watch.aws, "r1-step20", UNAVAILABLE, failed_at)
    assert watch(failed_at + timedelta(seconds=299))["retried"] == []
    assert watch(failed_at + timedelta(seconds=300))["retried"] == ["eval-r1-step20-a2"]
    assert evaluation_executions(watch.aws) == {
        "eval-r1-step20-a2": {
            "bucket": BUCKET,
            "key": "runs/r1/adapters/global_step_20/manifest.json",
            "run_id": "r1",
            "step": 20,
            "attempt": 2,
        }
    }
    # Until its CheckAdapter re-opens the row, a later watch finds the attempt started: it logs and starts nothing.
    assert watch(failed_at + timedelta(seconds=600))["retried"] == []
    assert list(evaluation_executions(watch.aws)) == ["eval-r1-step20-a2"]


def test_a_second_failure_waits_twice_as_long_and_the_last_attempt_is_final(watch: Watch) -> None:
    failed_adapter(watch.aws, "r1-step20", "RayJobNotFound: gone", REAL_NOW, attempts=2)
    failed_adapter(watch.aws, "r1-step30", UNAVAILABLE, REAL_NOW - timedelta(days=1), attempts=3)
    assert watch(REAL_NOW + timedelta(seconds=599))["retried"] == []
    assert watch(REAL_NOW + timedelta(seconds=600))["retried"] == ["eval-r1-step20-a3"]
    assert list(evaluation_executions(watch.aws)) == ["eval-r1-step20-a3"]


def test_an_adapter_failure_is_not_evaluated_again(watch: Watch) -> None:
    failed_adapter(watch.aws, "r1-step20", "InvalidManifest: files: missing adapter_model.safetensors", REAL_NOW)
    failed_adapter(watch.aws, "r1-step30", "EvaluationJobFailed: Ray job eval-r1-step30 ended FAILED", REAL_NOW)
    assert watch(REAL_NOW + timedelta(days=1))["retried"] == []
    assert evaluation_executions(watch.aws) == {}


def test_no_evaluation_starts_while_the_head_is_unreachable(watch: Watch) -> None:
    failed_adapter(watch.aws, "r1-step20", UNAVAILABLE, REAL_NOW)
    assert watch(REAL_NOW + timedelta(hours=1), closed_port_url())["retried"] == []
    assert evaluation_executions(watch.aws) == {}
