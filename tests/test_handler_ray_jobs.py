"""submit_ray_job, get_ray_job, stop_ray_job against a fake Ray Jobs API (and moto for tables)."""

from __future__ import annotations

import json
import shlex
from datetime import datetime, timedelta

import get_ray_job
import pytest
import stop_ray_job
import submit_ray_job
from aws_lambda_powertools.utilities.parameters import base as powertools_base
from botocore.exceptions import ClientError
from get_ray_job import RayJobLost
from mazeops_testing import (
    BASE_MODEL,
    BUCKET,
    RAY_AUTH_TOKEN,
    RUNS_TABLE,
    Aws,
    FakeHttpServer,
    FakeLambdaContext,
    answer,
    closed_port_url,
    execution_status_change_event,
)

from mazeops import ray_token
from mazeops.aws_clients import aws_client
from mazeops.base_models import UnknownBaseModel
from mazeops.config import ConfigError
from mazeops.inputs import InvalidInput
from mazeops.names import InvalidName
from mazeops.ray_jobs import MissingRayAuthToken, RayJobError, RayUnavailable
from mazeops.runs import RunsTable


class _FrozenDatetime(datetime):
    """datetime whose now() answers a fixed moment (the Powertools cache's clock)."""

    moment: datetime

    @classmethod
    def at(cls, moment: datetime) -> type[_FrozenDatetime]:
        return type("FrozenAt", (cls,), {"moment": moment})

    @classmethod
    def now(cls, tz=None) -> datetime:
        return cls.moment


class FakeRay(FakeHttpServer):
    """A Jobs API that keeps submitted jobs in memory and answers 500 for a reused id, as Ray does."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict] = {}
        super().__init__({("POST", "/api/jobs/"): self._submit, ("GET", "/api/version"): answer(200, {"version": "4"})})

    def _submit(self, body: bytes) -> tuple[int, object]:
        request = json.loads(body)
        job_id = request["submission_id"]
        if job_id in self.jobs:
            return 500, f"Job with submission_id {job_id} already exists".encode()
        self.jobs[job_id] = request
        self.routes[("GET", f"/api/jobs/{job_id}")] = answer(
            200, {"submission_id": job_id, "status": "PENDING", "message": "Job has not started yet."}
        )
        return 200, {"submission_id": job_id}

    def posts(self) -> int:
        return sum(1 for method, path, *_ in self.requests if method == "POST" and path == "/api/jobs/")


@pytest.fixture
def ray(aws: Aws, monkeypatch: pytest.MonkeyPatch):
    """A fake Jobs API; every request the handlers sent to it must carry the configured token."""
    with FakeRay() as server:
        monkeypatch.setenv("RAY_ADDRESS", server.url)
        yield server
    assert {headers.get("Authorization") for _method, _path, headers, _body in server.requests} <= {
        f"Bearer {RAY_AUTH_TOKEN}"
    }


def submit(event: dict) -> dict:
    return submit_ray_job.lambda_handler(event, FakeLambdaContext())


def test_training_submission(ray: FakeRay, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_RUNTIME_ENV", json.dumps({"working_dir": "s3://code/pkg.zip"}))
    result = submit({"kind": "train", "run_id": "run1"})
    assert result == {"job_id": "train-run1", "status": "PENDING", "already_submitted": False}
    job = ray.jobs["train-run1"]
    assert shlex.split(job["entrypoint"]) == [
        "python",
        "-m",
        "cluster_jobs.train.run",
        "--spec",
        f"s3://{BUCKET}/runs/run1/spec.json",
        "--bucket",
        BUCKET,
    ]
    assert job["metadata"] == {"run_id": "run1", "kind": "train"}
    assert job["runtime_env"] == {"working_dir": "s3://code/pkg.zip"}
    assert "entrypoint_num_gpus" not in job and "entrypoint_resources" not in job


def test_evaluation_submission_on_vllm_reserves_a_gpu(ray: FakeRay, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BASE_MODELS", json.dumps({BASE_MODEL: "/models/with space; rm -rf /"}))
    result = submit({"kind": "eval", "run_id": "run1", "step": 20, "base_model_id": BASE_MODEL})
    assert result["job_id"] == "eval-run1-step20"
    job = ray.jobs["eval-run1-step20"]
    assert shlex.split(job["entrypoint"]) == [
        "python",
        "-m",
        "cluster_jobs.evaluate.run",
        "--manifest",
        f"s3://{BUCKET}/runs/run1/adapters/global_step_20/manifest.json",
        "--base-model-path",
        "/models/with space; rm -rf /",
        "--backend",
        "vllm",
        "--output",
        f"s3://{BUCKET}/runs/run1/evals/global_step_20/result.json",
    ]
    assert job["entrypoint_num_gpus"] == 1 and "entrypoint_num_cpus" not in job
    # a GPU of the group set apart for evaluation and serving, never one the trainer needs
    assert job["entrypoint_resources"] == {"serve_gpu": 1}
    assert job["metadata"] == {"run_id": "run1", "kind": "eval", "step": "20"}
    assert "runtime_env" not in job


def test_evaluation_on_transformers_asks_no_gpu(ray: FakeRay, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVAL_BACKEND", "transformers")
    submit({"kind": "eval", "run_id": "run1", "step": 20, "base_model_id": BASE_MODEL})
    job = ray.jobs["eval-run1-step20"]
    assert (
        "entrypoint_num_gpus" not in job
        and "entrypoint_resources" not in job
        and job["entrypoint_num_cpus"] == 1
        and "--backend transformers" in job["entrypoint"]
    )


SHA = "ab" * 32
BASELINE_JOB = f"baseline-{BASE_MODEL}-{SHA[:12]}-a2"


def test_baseline_submission_evaluates_the_base_model_with_no_adapter(
    ray: FakeRay, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = submit({"kind": "baseline", "base_model_id": BASE_MODEL, "eval_set_sha256": SHA, "attempt": 2})
    assert result == {"job_id": BASELINE_JOB, "status": "PENDING", "already_submitted": False}
    job = ray.jobs[BASELINE_JOB]
    assert shlex.split(job["entrypoint"]) == [
        "python",
        "-m",
        "cluster_jobs.evaluate.run",
        "--base-model-id",
        BASE_MODEL,
        "--eval-set-sha256",
        SHA,
        "--base-model-path",
        "/models/Qwen3-VL-8B-SFT",
        "--backend",
        "vllm",
        "--output",
        f"s3://{BUCKET}/baselines/{BASE_MODEL}/{SHA}/attempt_2/result.json",
    ]
    assert job["entrypoint_num_gpus"] == 1 and job["entrypoint_resources"] == {"serve_gpu": 1}
    assert job["metadata"] == {
        "kind": "baseline",
        "base_model_id": BASE_MODEL,
        "attempt": "2",
    }
    # Concurrent first evaluations of the base model submit the same attempt: one job.
    again = submit({"kind": "baseline", "base_model_id": BASE_MODEL, "eval_set_sha256": SHA, "attempt": 2})
    assert again == {**result, "already_submitted": True} and ray.posts() == 1


def test_second_submission_is_answered_without_a_second_job(ray: FakeRay) -> None:
    first = submit({"kind": "train", "run_id": "run1"})
    again = submit({"kind": "train", "run_id": "run1"})
    assert again == {**first, "already_submitted": True}
    assert ray.posts() == 1


def test_submission_after_the_idempotency_record_is_gone_finds_the_existing_job(ray: FakeRay, aws: Aws) -> None:
    submit({"kind": "train", "run_id": "run1"})
    for item in aws.dynamodb.scan(TableName="maze-idempotency-test")["Items"]:
        aws.dynamodb.delete_item(TableName="maze-idempotency-test", Key={"id": item["id"]})
    assert submit({"kind": "train", "run_id": "run1"})["already_submitted"] is True
    assert ray.posts() == 1


@pytest.mark.parametrize(
    "event, error",
    [
        ({"kind": "deploy", "run_id": "run1"}, InvalidInput),
        ({"kind": "train", "run_id": "../../etc"}, InvalidName),
        ({"kind": "train", "run_id": "run1; reboot"}, InvalidName),
        ({"kind": "eval", "run_id": "run1", "step": "20", "base_model_id": BASE_MODEL}, InvalidInput),
        ({"kind": "eval", "run_id": "run1", "step": 0, "base_model_id": BASE_MODEL}, InvalidName),
        ({"kind": "eval", "run_id": "run1", "step": 20, "base_model_id": "llama-9"}, UnknownBaseModel),
        ({"kind": "eval", "run_id": "run1", "step": 20}, InvalidInput),
        ({"kind": "baseline", "base_model_id": BASE_MODEL, "eval_set_sha256": "ab" * 32}, InvalidInput),
        ({"kind": "baseline", "base_model_id": BASE_MODEL, "eval_set_sha256": "../x", "attempt": 1}, InvalidName),
        ({"kind": "baseline", "base_model_id": BASE_MODEL, "eval_set_sha256": "ab" * 32, "attempt": 0}, InvalidName),
        (
            {"kind": "baseline", "base_model_id": "llama-9", "eval_set_sha256": "ab" * 32, "attempt": 1},
            UnknownBaseModel,
        ),
        ({"run_id": "run1"}, InvalidInput),
    ],
)
def test_bad_submissions_are_refused_before_ray_is_called(ray: FakeRay, event: dict, error: type) -> None:
    with pytest.raises(error):
        submit(event)
    assert ray.requests == []


def test_unreachable_ray_is_retriable_and_leaves_no_idempotency_record(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAY_ADDRESS", closed_port_url())
    with pytest.raises(RayUnavailable):
        submit({"kind": "train", "run_id": "run1"})
    assert aws.dynamodb.scan(TableName="maze-idempotency-test")["Items"] == []


@pytest.mark.parametrize("handler", [submit_ray_job, get_ray_job])
def test_no_secret_configured_no_call(ray: FakeRay, aws: Aws, monkeypatch: pytest.MonkeyPatch, handler) -> None:
    monkeypatch.setenv("RAY_AUTH_TOKEN_SECRET_ARN", "")
    event = {"kind": "train", "run_id": "run1"} if handler is submit_ray_job else {"job_id": "train-run1"}
    with pytest.raises(MissingRayAuthToken, match="RAY_AUTH_TOKEN_SECRET_ARN is not set"):
        handler.lambda_handler(event, FakeLambdaContext())
    assert ray.requests == []
    assert aws.dynamodb.scan(TableName="maze-idempotency-test")["Items"] == []


@pytest.mark.parametrize("handler", [submit_ray_job, get_ray_job, stop_ray_job])
@pytest.mark.parametrize("value", [None, "  \n"], ids=["never-set", "blank"])
def test_empty_secret_raises_before_any_ray_request(
    ray: FakeRay, aws: Aws, monkeypatch: pytest.MonkeyPatch, handler, value: str | None
) -> None:
    """A secret the operator has not filled yet (as the stack creates it), or filled with blanks."""
    arn = aws.secretsmanager.create_secret(Name="maze-ray-auth-token-unset")["ARN"]
    if value is not None:
        aws.secretsmanager.put_secret_value(SecretId=arn, SecretString=value)
    monkeypatch.setenv("RAY_AUTH_TOKEN_SECRET_ARN", arn)
    event = {
        submit_ray_job: {"kind": "train", "run_id": "run1"},
        get_ray_job: {"job_id": "train-run1"},
        stop_ray_job: execution_status_change_event("train-run1", "FAILED"),
    }[handler]
    with pytest.raises(MissingRayAuthToken, match="holds no token"):
        handler.lambda_handler(event, FakeLambdaContext())
    assert ray.requests == []
    assert aws.dynamodb.scan(TableName="maze-idempotency-test")["Items"] == []


def test_rotated_token_is_used_once_the_cached_one_is_older_than_its_max_age(
    ray: FakeRay, aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator rotates the token with put-secret-value alone; the handlers pick it up within TOKEN_MAX_AGE_S."""
    ray.routes[("GET", "/api/jobs/train-run1")] = answer(200, {"submission_id": "train-run1", "status": "RUNNING"})
    rotated = "rotated-token-" + "9" * 32
    get_ray_job.lambda_handler({"job_id": "train-run1"}, FakeLambdaContext())
    aws.secretsmanager.put_secret_value(SecretId=aws.ray_token_secret_arn, SecretString=rotated)
    get_ray_job.lambda_handler({"job_id": "train-run1"}, FakeLambdaContext())  # still within the cache age
    later = datetime.now() + timedelta(seconds=ray_token.TOKEN_MAX_AGE_S + 1)
    monkeypatch.setattr(powertools_base, "datetime", _FrozenDatetime.at(later))
    get_ray_job.lambda_handler({"job_id": "train-run1"}, FakeLambdaContext())
    sent = [headers.get("Authorization") for _method, _path, headers, _body in ray.requests]
    assert sent == [f"Bearer {RAY_AUTH_TOKEN}", f"Bearer {RAY_AUTH_TOKEN}", f"Bearer {rotated}"]
    ray.requests.clear()  # the `ray` fixture checks that every request carried the fixture's token


def test_rotated_token_is_used_by_a_fresh_execution_environment(ray: FakeRay, aws: Aws) -> None:
    ray.routes[("GET", "/api/jobs/train-run1")] = answer(200, {"submission_id": "train-run1", "status": "RUNNING"})
    rotated = "rotated-token-" + "8" * 32
    aws.secretsmanager.put_secret_value(SecretId=aws.ray_token_secret_arn, SecretString=rotated)
    ray_token.clear_cache()
    get_ray_job.lambda_handler({"job_id": "train-run1"}, FakeLambdaContext())
    assert [headers.get("Authorization") for *_, headers, _body in ray.requests] == [f"Bearer {rotated}"]
    ray.requests.clear()


def test_secret_marked_for_deletion_is_refused_not_retried(ray: FakeRay, aws: Aws) -> None:
    aws.secretsmanager.delete_secret(SecretId=aws.ray_token_secret_arn, RecoveryWindowInDays=7)
    with pytest.raises(ray_token.RayTokenUnreadable, match="cannot read the Ray auth token"):
        get_ray_job.lambda_handler({"job_id": "train-run1"}, FakeLambdaContext())
    assert ray.requests == []


def test_throttled_secret_read_is_retriable_and_a_poll_answers_unreachable(
    ray: FakeRay, aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Secrets Manager throttling must not fail a long run's poll: it is RayUnavailable, which polls ride out."""

    def throttled(**kwargs: object) -> None:
        raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "GetSecretValue")

    monkeypatch.setattr(aws_client("secretsmanager"), "get_secret_value", throttled)
    with pytest.raises(RayUnavailable, match="Rate exceeded"):
        submit({"kind": "train", "run_id": "run1"})
    assert scheduled_poll("train-run1")["status"] == get_ray_job.UNREACHABLE
    assert ray.requests == []


def test_refused_submission_is_a_job_error(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    routes = {
        ("GET", "/api/jobs/train-run1"): answer(404, b"no"),
        ("POST", "/api/jobs/"): answer(400, b"bad runtime_env"),
    }
    with FakeHttpServer(routes) as server:
        monkeypatch.setenv("RAY_ADDRESS", server.url)
        with pytest.raises(RayJobError, match="bad runtime_env"):
            submit({"kind": "train", "run_id": "run1"})


def test_bad_configuration_is_reported(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVAL_BACKEND", "tensorrt")
    monkeypatch.setenv("RAY_ADDRESS", "http://127.0.0.1:1")
    with pytest.raises(ConfigError, match="EVAL_BACKEND"):
        submit({"kind": "eval", "run_id": "run1", "step": 20, "base_model_id": BASE_MODEL})
    monkeypatch.setenv("RAY_RUNTIME_ENV", "{oops")
    with pytest.raises(ConfigError, match="RAY_RUNTIME_ENV"):
        submit({"kind": "train", "run_id": "run1"})
    monkeypatch.delenv("RAY_RUNTIME_ENV")
    monkeypatch.delenv("RAY_ADDRESS")
    with pytest.raises(ConfigError, match="RAY_ADDRESS is not set"):
        submit({"kind": "train", "run_id": "run1"})


# --- get_ray_job ------------------------------------------------------------------------------


def poll(job_id: object) -> dict:
    return get_ray_job.lambda_handler({"job_id": job_id}, FakeLambdaContext())


def test_poll_of_a_running_job_has_no_logs(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    routes = {
        ("GET", "/api/jobs/train-run1"): answer(
            200, {"submission_id": "train-run1", "status": "RUNNING", "message": "Job is running."}
        )
    }
    with FakeHttpServer(routes) as server:
        monkeypatch.setenv("RAY_ADDRESS", server.url)
        assert poll("train-run1") == {
            "job_id": "train-run1",
            "status": "RUNNING",
            "terminal": False,
            "message": "Job is running.",
            "logs_tail": "",
        }
    assert [path for _m, path, *_ in server.requests] == ["/api/jobs/train-run1"]


def test_poll_of_a_failed_job_carries_the_log_tail(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    routes = {
        ("GET", "/api/jobs/eval-run1-step20"): answer(200, {"status": "FAILED", "message": "exit 1" * 1000}),
        ("GET", "/api/jobs/eval-run1-step20/logs"): answer(200, {"logs": "x" * 10_000 + "Traceback: boom"}),
    }
    with FakeHttpServer(routes) as server:
        monkeypatch.setenv("RAY_ADDRESS", server.url)
        result = poll("eval-run1-step20")
    assert result["terminal"] and result["status"] == "FAILED"
    assert result["logs_tail"].endswith("Traceback: boom") and len(result["logs_tail"]) == 4000
    assert len(result["message"]) == 2000


def test_poll_of_a_baseline_job(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    routes = {
        ("GET", f"/api/jobs/{BASELINE_JOB}"): answer(
            200, {"submission_id": BASELINE_JOB, "status": "PENDING", "message": None}
        )
    }
    with FakeHttpServer(routes) as server:
        monkeypatch.setenv("RAY_ADDRESS", server.url)
        assert poll(BASELINE_JOB)["status"] == "PENDING"
        with pytest.raises(InvalidName):
            poll(f"baseline-{BASE_MODEL}-{SHA[:12]}-a0")
        with pytest.raises(InvalidName):
            poll("baseline-../x-abababababab-a1")


def test_poll_errors(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeHttpServer({}) as server:
        monkeypatch.setenv("RAY_ADDRESS", server.url)
        with pytest.raises(
            RayJobLost, match="Ray job train-run1 no longer exists on the cluster: the Ray head restarted"
        ):
            poll("train-run1")
        with pytest.raises(InvalidName):
            poll("../api/version")
        with pytest.raises(InvalidInput):
            poll(None)
    monkeypatch.setenv("RAY_ADDRESS", closed_port_url())
    with pytest.raises(RayUnavailable):
        poll("train-run1")


# Two days into a run polled every 30 s: the next wait is 1% of the run's age (mazeops.polling).
SCHEDULE = {
    "poll_seconds": 30,
    "started_at": "2026-12-01T10:00:00.000Z",
    "polled_at": "2026-12-03T10:00:00.000Z",
    "timeout_seconds": 604800,
}


def scheduled_poll(job_id: str, schedule: dict = SCHEDULE) -> dict:
    return get_ray_job.lambda_handler({"job_id": job_id, "poll": schedule}, FakeLambdaContext())


def test_poll_on_a_schedule_answers_the_next_wait(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    routes = {("GET", "/api/jobs/train-run1"): answer(200, {"status": "RUNNING", "message": "Job is running."})}
    with FakeHttpServer(routes) as server:
        monkeypatch.setenv("RAY_ADDRESS", server.url)
        assert scheduled_poll("train-run1") == {
            "job_id": "train-run1",
            "status": "RUNNING",
            "terminal": False,
            "message": "Job is running.",
            "logs_tail": "",
            "next_poll_seconds": 1728,
        }
        assert (
            scheduled_poll("train-run1", SCHEDULE | {"polled_at": "2026-12-01T10:00:05.000Z"})["next_poll_seconds"]
            == 30
        )
        with pytest.raises(InvalidInput, match="poll_seconds"):
            scheduled_poll("train-run1", SCHEDULE | {"poll_seconds": 0})
        with pytest.raises(InvalidInput, match="polled_at"):
            scheduled_poll("train-run1", SCHEDULE | {"polled_at": "now"})


def test_poll_on_a_schedule_answers_an_unreachable_head_as_a_status(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    """The next poll is the retry: no error for the state machine to retry, which would add history events."""
    monkeypatch.setenv("RAY_ADDRESS", closed_port_url())
    answered = scheduled_poll("train-run1")
    assert (answered["status"], answered["terminal"], answered["next_poll_seconds"]) == ("UNREACHABLE", False, 1728)
    assert answered["message"] and answered["logs_tail"] == ""
    routes = {
        ("GET", "/api/jobs/train-run1"): answer(200, {"status": "SUCCEEDED", "message": "done"}),
        ("GET", "/api/jobs/train-run1/logs"): answer(503, "restarting"),
    }
    with FakeHttpServer(routes) as server:  # the head fails between the status and the log tail
        monkeypatch.setenv("RAY_ADDRESS", server.url)
        assert scheduled_poll("train-run1")["status"] == "UNREACHABLE"


def test_poll_on_a_schedule_still_fails_on_a_lost_job_or_a_refused_token(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    routes = {("GET", "/api/jobs/train-run2"): answer(401, "Unauthorized")}
    with FakeHttpServer(routes) as server:
        monkeypatch.setenv("RAY_ADDRESS", server.url)
        with pytest.raises(RayJobLost):
            scheduled_poll("train-run1")
        with pytest.raises(RayJobError):
            scheduled_poll("train-run2")


# --- stop_ray_job -----------------------------------------------------------------------------


def stop(event: dict) -> dict:
    return stop_ray_job.lambda_handler(event, FakeLambdaContext())


@pytest.mark.parametrize("status", ["ABORTED", "TIMED_OUT", "FAILED"])
def test_stop_of_a_training_run(aws: Aws, monkeypatch: pytest.MonkeyPatch, status: str) -> None:
    runs = RunsTable(aws.dynamodb, RUNS_TABLE)
    runs.create_run("run1", "runs/run1/spec.json", "a" * 64, BASE_MODEL, "arn")
    with FakeHttpServer({("POST", "/api/jobs/train-run1/stop"): answer(200, {"stopped": True})}) as server:
        monkeypatch.setenv("RAY_ADDRESS", server.url)
        assert stop(execution_status_change_event("train-run1", status)) == {"job_id": "train-run1", "stopped": True}
    row = runs.get_run("run1")
    assert row.status == status and row.error == f"execution {status} at 2026-12-02T17:00:00Z"


def test_stop_keeps_the_failure_the_state_machine_recorded(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = RunsTable(aws.dynamodb, RUNS_TABLE)
    runs.create_run("run1", "runs/run1/spec.json", "a" * 64, BASE_MODEL, "arn")
    runs.set_status("run1", "FAILED", error="TrainingJobFailed: driver exit code 1")
    with FakeHttpServer({("POST", "/api/jobs/train-run1/stop"): answer(200, {"stopped": False})}) as server:
        monkeypatch.setenv("RAY_ADDRESS", server.url)
        assert stop(execution_status_change_event("train-run1", "FAILED")) == {"job_id": "train-run1", "stopped": False}
    row = runs.get_run("run1")
    assert (row.status, row.error) == ("FAILED", "TrainingJobFailed: driver exit code 1")


def test_stop_of_a_job_that_never_started_and_a_run_without_row(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeHttpServer({}) as server:
        monkeypatch.setenv("RAY_ADDRESS", server.url)
        assert stop(execution_status_change_event("train-run1")) == {"job_id": "train-run1", "stopped": False}
    assert RunsTable(aws.dynamodb, RUNS_TABLE).get_run("run1") is None


def test_stop_of_an_evaluation_leaves_the_runs_table_alone(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = RunsTable(aws.dynamodb, RUNS_TABLE)
    runs.create_run("run1", "runs/run1/spec.json", "a" * 64, BASE_MODEL, "arn")
    with FakeHttpServer({("POST", "/api/jobs/eval-run1-step20/stop"): answer(200, {"stopped": False})}) as server:
        monkeypatch.setenv("RAY_ADDRESS", server.url)
        assert stop(execution_status_change_event("eval-run1-step20", "FAILED", "maze-evaluation")) == {
            "job_id": "eval-run1-step20",
            "stopped": False,
        }
    assert runs.get_run("run1").status == "SUBMITTED"


def test_nothing_to_stop(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_ADDRESS", closed_port_url())  # never contacted
    assert stop(execution_status_change_event("invalid-0123456789ab")) == {"job_id": None, "stopped": False}
    assert stop(execution_status_change_event("train-run1", "SUCCEEDED")) == {"job_id": None, "stopped": False}


def test_stop_with_ray_down_is_retriable(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_ADDRESS", closed_port_url())
    with pytest.raises(RayUnavailable):
        stop(execution_status_change_event("train-run1"))
