"""Faults on the local stack (real template, state machines and Lambda code) against a scripted Ray Jobs API and
Serve endpoint: Ray down or slow, jobs failed, stopped or crashed, Serve registration failing, duplicate deliveries.
Each case checks the execution's end, the error, the notification, the rows, and that the champion pointer and
every S3 object that existed before are unchanged.
"""

from __future__ import annotations

import inspect
import json
import logging
import re
import shlex
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from cluster_jobs.maze.eval_set import eval_set_for_size
from local_stack.cluster_standins.tiny_model import build_tiny_qwen3_vl
from local_stack.moto_patches import deliver_to_rule_targets
from local_stack.pipeline import BASE_MODEL_ID, MAZE_SIZE, stack_parameters
from local_stack.schedules import fire_scheduled_rule
from local_stack.stack import LocalStack, LocalStackConfig
from mazeops.baseline import BaselineResult
from mazeops.champion_rows import ChampionPointer
from mazeops.cluster_health import read_health
from mazeops.evalresult import EvalResult, MazeOutcome
from mazeops.layout import adapter_prefix, eval_result_key, serving_adapter_prefix
from mazeops.names import adapter_name, eval_job_id, served_model_id, training_job_id
from mazeops.ray_jobs import RayJobsClient
from mazeops.registry import Registry
from mazeops.runs import RunsTable
from opsctl import cli
from tests.fixtures_models import ADAPTER_FILES, make_tiny_adapter, upload_adapter
from tests.mazeops_testing import ACCOUNT, FakeHttpServer, log_messages

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
# The Lambdas build RayJobsClient with its default timeout: a head slower than this is unavailable.
RAY_CLIENT_TIMEOUT_S = inspect.signature(RayJobsClient).parameters["timeout_s"].default
EVAL_SET = eval_set_for_size(MAZE_SIZE)  # the set the pipeline's stack parameters configure
CHAMPION_RUN = "champ"
TRAINING_SPEC = {"base_model_id": BASE_MODEL_ID, "backend": "tiny", "total_steps": 2}
# Both above the local MinSolveRate floor (0.3).
SOLVES_24 = "1" * 24 + "0" * 40  # the champion: beats the baseline (0 of 64) by McNemar, b=24, c=0
SOLVES_40 = "1" * 40 + "0" * 24  # beats the champion by McNemar: b=16, c=0
WATCH_RULE = "WatchClusterFunctionClusterWatch"  # the cluster watch's schedule rule (logical id)
UNREACHABLE_SUBJECT = "maze-rl-ops: Ray cluster unreachable"
RECOVERED_SUBJECT = "maze-rl-ops: Ray cluster answers again"
INVOCATION_SLACK_S = 3.0  # one Lambda invocation on a busy 2-core machine, on top of a retry's sleep
# Retry sleeps are the ASL's, real and jittered (moto applies JitterStrategy FULL): the Ray-down case sleeps up to
# 62 s (2+4+8+16+32, about half on average), the Serve-500 case up to 75 s (5+10+20+40).


# --- a scriptable Ray Jobs API ----------------------------------------------------------------


@dataclass
class JobScript:
    """How the fake cluster runs one job: its end state and, for evaluations, the result it writes."""

    status: str = "SUCCEEDED"
    message: str = "Job finished successfully."
    logs: str = ""
    result_bits: str | None = None  # an evaluation job writes result.json with these outcomes


class FakeRayJobsApi:
    """`POST /api/jobs/`, `GET /api/jobs/<id>`, `GET /api/jobs/<id>/logs`, `POST /api/jobs/<id>/stop`,
    `GET /api/version`.

    A submitted job is PENDING at its first status read, then ends as its `JobScript` says (the
    default script succeeds). A reused submission id answers 500 and an unknown one 404, as Ray
    does. The next `slow_requests` requests are answered after `slow_s` seconds. `down()` closes
    the listening socket (connections are refused) and `up()` listens again on the same port.
    `on_submit(body)` runs before a submission is answered. A job scripted RUNNING runs until a stop
    request, which ends it STOPPED; `forget_jobs()` drops the job table, as a restarted head does.
    """

    def __init__(self) -> None:
        self.scripts: dict[str, JobScript] = {}
        self.requests: list[tuple[str, str, dict[str, Any] | None]] = []
        self.slow_requests = 0
        self.slow_s = 0.0
        self.on_submit: Callable[[dict[str, Any]], None] | None = None
        self.port = 0
        self._jobs: dict[str, dict[str, Any]] = {}
        self._status_reads: dict[str, int] = {}
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def up(self) -> None:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, payload = fake._handle(self.command, self.path, json.loads(raw) if raw else None)
                body = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout)

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def down(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def forget_jobs(self) -> None:
        """Drop every submitted job: each is unknown (404) from now on, as after a head restart."""
        with self._lock:
            self._jobs.clear()
            self._status_reads.clear()

    def reset(self) -> None:
        """Forget scripts, requests and slowness (submitted jobs stay, as on a real head)."""
        with self._lock:
            self.scripts.clear()
            self.requests.clear()
            self.slow_requests, self.slow_s = 0, 0.0

    def submissions(self, job_id: str) -> int:
        """How many `POST /api/jobs/` asked for `job_id`."""
        with self._lock:
            posts = [body for method, path, body in self.requests if (method, path) == ("POST", "/api/jobs/")]
        return sum(1 for body in posts if body["submission_id"] == job_id)

    def requests_for(self, job_id: str) -> list[tuple[str, str]]:
        """(method, path) of every request about `job_id`."""
        with self._lock:
            return [
                (method, path)
                for method, path, body in self.requests
                if f"/{job_id}" in path or (body or {}).get("submission_id") == job_id
            ]

    def _handle(self, method: str, path: str, body: dict[str, Any] | None) -> tuple[int, Any]:
        with self._lock:
            self.requests.append((method, path, body))
            slow = self.slow_requests > 0
            self.slow_requests -= int(slow)
        if slow:
            time.sleep(self.slow_s)
        if (method, path) == ("POST", "/api/jobs/"):
            return self._submit(body or {})
        if (method, path) == ("GET", "/api/version"):
            return 200, {"version": "4", "ray_version": "2.49.0", "ray_commit": "fake", "session_name": "fake"}
        match = re.fullmatch(r"/api/jobs/([^/]+)(/logs|/stop)?", path)
        with self._lock:
            job_id = match[1] if match and match[1] in self._jobs else None
            script = self.scripts.get(job_id, JobScript())
        if job_id is None:
            return 404, {"error": f"no job at {path}"}
        if (method, match[2]) == ("GET", None):
            return 200, self._describe(job_id, script)
        if (method, match[2]) == ("GET", "/logs"):
            return 200, {"logs": script.logs}
        if (method, match[2]) == ("POST", "/stop"):
            if script.status != "RUNNING":
                return 200, {"stopped": False}  # it has ended
            with self._lock:
                self.scripts[job_id] = JobScript(status="STOPPED", message="Job was intentionally stopped.")
            return 200, {"stopped": True}
        return 404, {"error": "no such route"}

    def _submit(self, body: dict[str, Any]) -> tuple[int, Any]:
        job_id = body["submission_id"]
        with self._lock:
            if job_id in self._jobs:
                return 500, {"error": f"Job with submission_id {job_id} already exists."}
            self._jobs[job_id] = body
        if self.on_submit:
            self.on_submit(body)
        return 200, {"submission_id": job_id}

    def _describe(self, job_id: str, script: JobScript) -> dict[str, Any]:
        with self._lock:
            reads = self._status_reads.get(job_id, 0)
            self._status_reads[job_id] = reads + 1
            entrypoint = self._jobs[job_id]["entrypoint"]
        status, message = ("PENDING", "Job has not started yet.") if reads == 0 else (script.status, script.message)
        return {"submission_id": job_id, "status": status, "message": message, "entrypoint": entrypoint}


# --- a scriptable Serve endpoint ----------------------------------------------------------------


@dataclass
class ScriptedServe:
    """`POST /v1/chat/completions` answering per model id; a model not in `answers` gets a completion."""

    answers: dict[str, tuple[int, Any]] = field(default_factory=dict)

    def route(self, body: bytes) -> tuple[int, Any]:
        model = json.loads(body)["model"]
        completion = {
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "('move', 0)"}}],
        }
        return self.answers.get(model, (200, completion))


def serve_requests(server: FakeHttpServer, model: str) -> int:
    """How many chat completions asked for `model`."""
    bodies = [body for _, path, _, body in server.requests if path == "/v1/chat/completions"]
    return sum(1 for body in bodies if json.loads(body)["model"] == model)


# --- the stack and what the tests read from it --------------------------------------------------


class Rig:
    """The running stack, its fakes, clients of the moto server, and the notifications received so far."""

    def __init__(
        self,
        stack: LocalStack,
        ray: FakeRayJobsApi,
        serve: FakeHttpServer,
        serve_script: ScriptedServe,
        adapter_dir: Path,
        queue_url: str,
    ) -> None:
        self.stack, self.ray, self.serve, self.serve_script = stack, ray, serve, serve_script
        self.adapter_dir, self.queue_url = adapter_dir, queue_url
        session = stack.session
        self.sfn, self.s3, self.sqs = session.client("stepfunctions"), session.client("s3"), session.client("sqs")
        self.registry = Registry(session.client("dynamodb"), stack.outputs["RegistryTableName"])
        self.runs = RunsTable(session.client("dynamodb"), stack.outputs["RunsTableName"])
        self.published: list[dict[str, Any]] = []

    @property
    def bucket(self) -> str:
        return self.stack.outputs["ArtifactsBucketName"]

    def execution_arn(self, machine: str, name: str) -> str:
        machine_arn = self.stack.outputs[f"{machine.capitalize()}StateMachineArn"]
        return machine_arn.replace(":stateMachine:", ":execution:", 1) + f":{name}"

    def finished_execution(self, machine: str, name: str, timeout_s: float = 120) -> dict[str, Any]:
        arn = self.execution_arn(machine, name)

        def ended() -> dict[str, Any] | None:
            try:
                described = self.sfn.describe_execution(executionArn=arn)
            except self.sfn.exceptions.ExecutionDoesNotExist:
                return None
            return described if described["status"] != "RUNNING" else None

        return wait_for(ended, timeout_s, f"execution {name} to end")

    def notifications(self, subject: str) -> list[str]:
        """Messages published to the topic with this subject (drains the subscribed queue)."""
        while messages := self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10).get("Messages"):
            for message in messages:
                envelope = json.loads(message["Body"])
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
                self.published.append(envelope)
        return [envelope["Message"] for envelope in self.published if envelope.get("Subject") == subject]

    def request_training(self, run_id: str) -> None:
        self.s3.put_object(Bucket=self.bucket, Key=f"requests/{run_id}.json", Body=json.dumps(TRAINING_SPEC).encode())

    def running(self, run_id: str) -> None:
        """Give `run_id` a RUNNING row, as a training execution would (adapters of other runs never promote)."""
        self.runs.create_run(
            run_id,
            f"runs/{run_id}/spec.json",
            "a" * 64,
            BASE_MODEL_ID,
            self.execution_arn("training", training_job_id(run_id)),
        )
        self.runs.set_status(run_id, "RUNNING")

    def messages_with(self, text: str) -> list[str]:
        """Messages published to the topic, with any subject, that contain `text` (drains the subscribed queue)."""
        self.notifications("")
        return [envelope["Message"] for envelope in self.published if text in envelope["Message"]]

    def watch(self) -> None:
        """Fire the cluster watch's schedule rule and wait until that invocation of the watch has ended."""
        log_group = f"/aws/lambda/{self.stack.outputs['WatchClusterFunctionName']}"

        def ended() -> int:
            return sum(
                message.startswith("REPORT RequestId") for message in log_messages(self.stack.session, log_group)
            )

        before = ended()
        fire_scheduled_rule(self.stack.session.client("events"), self.stack.physical_id(WATCH_RULE))
        wait_for(lambda: ended() > before, 60, "the cluster watch to end")

    def start_running(self, run_id: str, **spec: Any) -> None:
        """Request a training run (`spec` over TRAINING_SPEC) whose Ray job runs until stopped; wait until RUNNING."""
        self.ray.scripts[training_job_id(run_id)] = JobScript(status="RUNNING", message="Job is currently running.")
        body = json.dumps(TRAINING_SPEC | spec).encode()
        self.s3.put_object(Bucket=self.bucket, Key=f"requests/{run_id}.json", Body=body)
        wait_for(
            lambda: (run := self.runs.get_run(run_id)) is not None and run.status == "RUNNING",
            60,
            f"run {run_id} to be RUNNING",
        )

    def set_running_at(self, run_id: str, moment: datetime) -> None:
        """Move the run's clock: when it became RUNNING, as the stall and spend guards read it."""
        self.stack.session.client("dynamodb").update_item(
            TableName=self.stack.outputs["RunsTableName"],
            Key={"run_id": {"S": run_id}},
            UpdateExpression="SET running_at = :at",
            ExpressionAttributeValues={":at": {"S": moment.strftime("%Y-%m-%dT%H:%M:%SZ")}},
        )

    def publish_adapter(self, run_id: str, step: int) -> None:
        upload_adapter(self.s3, self.bucket, run_id, step, self.adapter_dir, base_model_id=BASE_MODEL_ID)

    def write_eval_result(self, submission: dict[str, Any]) -> None:
        """Play the evaluation job: write the result its script asks for to the job's --output.

        A baseline job (the base model with no adapter) solves no maze unless scripted otherwise.
        """
        argv = shlex.split(submission["entrypoint"])
        if "--output" not in argv:
            return  # a training job: it writes nothing here
        bucket, _, key = argv[argv.index("--output") + 1].removeprefix("s3://").partition("/")
        script = self.ray.scripts.get(submission["submission_id"])
        if submission["metadata"].get("kind") == "baseline":
            bits = script.result_bits if script and script.result_bits else "0" * len(EVAL_SET.seeds)
            baseline = BaselineResult(
                base_model_id=BASE_MODEL_ID,
                eval_set_name=EVAL_SET.name,
                eval_set_sha256=argv[argv.index("--eval-set-sha256") + 1],
                outcomes=[
                    MazeOutcome(seed=seed, solved=bit == "1", turns=4, error=None)
                    for seed, bit in zip(EVAL_SET.seeds, bits, strict=False)
                ],
                backend="transformers",
                started_at="2026-12-02T15:00:00Z",
                finished_at="2026-12-02T15:01:00Z",
            )
            self.s3.put_object(Bucket=bucket, Key=key, Body=baseline.to_json().encode())
            return
        if script is None or script.result_bits is None:
            return
        run_id, step = submission["metadata"]["run_id"], int(submission["metadata"]["step"])
        bits = script.result_bits
        result = EvalResult.of_outcomes(
            run_id=run_id,
            step=step,
            adapter_name=adapter_name(run_id, step),
            base_model_id=BASE_MODEL_ID,
            eval_set_sha256=EVAL_SET.sha256,
            outcomes=[
                MazeOutcome(seed=seed, solved=bit == "1", turns=4, error=None)
                for seed, bit in zip(EVAL_SET.seeds, bits, strict=False)
            ],
            backend="transformers",
            started_at="2026-12-02T16:00:00Z",
            finished_at="2026-12-02T16:01:00Z",
        )
        self.s3.put_object(Bucket=bucket, Key=key, Body=result.to_json().encode())


def wait_for(probe: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := probe():
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def task_attempts(rig: Rig, machine: str, name: str, state: str) -> list[tuple[datetime, str | None, str | None]]:
    """(time, error, cause) of each attempt of a Task state, from the execution history; error None = success."""
    history = rig.sfn.get_execution_history(executionArn=rig.execution_arn(machine, name), maxResults=1000)["events"]
    attempts, current = [], None
    for event in history:
        if "stateEnteredEventDetails" in event:
            current = event["stateEnteredEventDetails"]["name"]
        if current != state:
            continue
        if event["type"] == "TaskFailed":
            details = event["taskFailedEventDetails"]
            attempts.append((event["timestamp"], details.get("error"), details.get("cause")))
        elif event["type"] == "TaskSucceeded":
            attempts.append((event["timestamp"], None, None))
    return attempts


def retry_waits(attempts: list[tuple[datetime, str | None, str | None]]) -> list[float]:
    """Seconds between consecutive attempts: the retry's sleep plus the next invocation."""
    return [
        (later - earlier).total_seconds()
        for (earlier, _, _), (later, _, _) in zip(attempts, attempts[1:], strict=False)
    ]


def assert_backoff(waits: list[float], interval_s: float, rate: float) -> None:
    """Each wait is at most its capped interval (JitterStrategy FULL draws it from 0 to the cap)."""
    for retry, wait in enumerate(waits):
        cap = interval_s * rate**retry
        assert wait <= cap + INVOCATION_SLACK_S, (
            f"retry {retry + 1} came after {wait:.1f} s; its backoff is at most {cap:.0f} s"
        )


def task_error_message(cause: str) -> str:
    """The errorMessage of a Lambda function error as a TaskFailed event carries it (the runtime's JSON document)."""
    return json.loads(cause)["errorMessage"]


@dataclass(frozen=True)
class Snapshot:
    """What must survive a fault: every S3 object (key -> ETag) and the champion pointer."""

    objects: dict[str, str]
    champion: ChampionPointer | None


def snapshot(rig: Rig) -> Snapshot:
    pages = rig.s3.get_paginator("list_objects_v2").paginate(Bucket=rig.bucket)
    objects = {item["Key"]: item["ETag"] for page in pages for item in page.get("Contents", [])}
    return Snapshot(objects, rig.registry.get_champion(BASE_MODEL_ID))


def assert_survived(rig: Rig, before: Snapshot) -> None:
    after = snapshot(rig)
    changed = {key: etag for key, etag in before.objects.items() if after.objects.get(key) != etag}
    assert not changed, f"S3 objects deleted or changed: {sorted(changed)}"
    assert after.champion == before.champion


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    work = tmp_path_factory.mktemp("faults")
    base_model = build_tiny_qwen3_vl(work / "models" / BASE_MODEL_ID)
    make_tiny_adapter(base_model, work / "adapter")
    moto_logger = logging.getLogger("moto")
    saved_level = moto_logger.level
    moto_logger.setLevel(logging.CRITICAL)  # every failed ASL state is logged with its whole parse tree
    ray = FakeRayJobsApi()
    ray.up()
    serve_script = ScriptedServe()
    parameters = stack_parameters(base_model, poll_seconds=1)
    try:
        with FakeHttpServer({("POST", "/v1/chat/completions"): serve_script.route}) as serve:
            # The rig plants RUNNING rows for the runs whose adapters it publishes (Rig.running), and they count
            # toward MaxActiveRuns like real runs: room for them beside the training runs the faults request.
            # The cluster watch notifies at the first failed check of an outage (tests fire its rule on demand).
            parameters.update(RayAddress=ray.url, ServeUrl=serve.url, MaxActiveRuns="20", ClusterUnreachableMinutes="0")
            config = LocalStackConfig(
                template_path=REPO / "template.yaml", state_dir=work / "stack", parameters=parameters
            )
            with LocalStack(config) as stack:
                sqs, sns = stack.session.client("sqs"), stack.session.client("sns")
                queue_url = sqs.create_queue(QueueName="fault-notifications")["QueueUrl"]
                queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
                    "QueueArn"
                ]
                sns.subscribe(TopicArn=stack.outputs["TopicArn"], Protocol="sqs", Endpoint=queue_arn)
                rig = Rig(stack, ray, serve, serve_script, work / "adapter", queue_url)
                ray.on_submit = rig.write_eval_result
                yield rig
    finally:
        ray.down()
        moto_logger.setLevel(saved_level)


@pytest.fixture(scope="module")
def champion(rig: Rig) -> ChampionPointer:
    """The first adapter (24 of 64 solved), evaluated and promoted over the baseline through the Evaluation
    state machine."""
    rig.ray.scripts[eval_job_id(CHAMPION_RUN, 1)] = JobScript(result_bits=SOLVES_24)
    rig.running(CHAMPION_RUN)
    rig.publish_adapter(CHAMPION_RUN, 1)
    execution = rig.finished_execution("evaluation", eval_job_id(CHAMPION_RUN, 1))
    assert execution["status"] == "SUCCEEDED", execution.get("cause")
    pointer = rig.registry.get_champion(BASE_MODEL_ID)
    assert pointer is not None and pointer.champion == adapter_name(CHAMPION_RUN, 1)
    return pointer


@pytest.fixture
def before(rig: Rig, champion: ChampionPointer) -> Snapshot:
    """Fakes reset to healthy defaults, and the state every fault must leave unchanged."""
    rig.ray.reset()
    rig.serve_script.answers.clear()
    return snapshot(rig)


# --- 1. Ray head down or slow -------------------------------------------------------------------


def test_ray_head_down_at_submit_fails_the_run_after_retries_with_backoff(rig: Rig, before: Snapshot) -> None:
    run_id = "ray-down"
    rig.ray.down()
    try:
        started = time.monotonic()
        rig.request_training(run_id)
        execution = rig.finished_execution("training", training_job_id(run_id))
        elapsed = time.monotonic() - started
    finally:
        rig.ray.up()

    assert (execution["status"], execution["error"]) == ("FAILED", "RayUnavailable")
    # The execution's cause is the function's one-line message (mazeops.failures), not the runtime's JSON.
    assert re.fullmatch(
        re.escape(f"GET /api/jobs/train-{run_id}: cannot reach Ray at {rig.ray.url}: [Errno 111] Connection refused")
        + r" \(request [0-9a-f-]+; trace in the function's log\)",
        execution["cause"],
    )
    attempts = task_attempts(rig, "training", training_job_id(run_id), "SubmitTrainingJob")
    assert [error for _, error, _ in attempts] == ["RayUnavailable"] * 6  # the first try and MaxAttempts 5 retries
    waits = retry_waits(attempts)
    assert_backoff(waits, interval_s=2, rate=2)
    print(
        f"Ray down: {len(attempts)} attempts, waits {[round(wait, 1) for wait in waits]} s, execution {elapsed:.1f} s"
    )
    run = rig.runs.get_run(run_id)
    assert run.status == "FAILED" and run.error.startswith("RayUnavailable: ")
    [message] = rig.notifications(f"maze-rl-ops: training run {run_id} failed")
    assert "failed with RayUnavailable" in message and "Connection refused" in message
    assert_survived(rig, before)


def test_a_ray_head_slower_than_the_client_timeout_is_retried_and_the_run_succeeds(rig: Rig, before: Snapshot) -> None:
    run_id = "ray-slow"
    rig.ray.slow_requests, rig.ray.slow_s = 1, RAY_CLIENT_TIMEOUT_S + 2

    rig.request_training(run_id)
    execution = rig.finished_execution("training", training_job_id(run_id))

    assert execution["status"] == "SUCCEEDED", execution.get("cause")
    [(_, error, cause), (_, succeeded, _)] = task_attempts(
        rig, "training", training_job_id(run_id), "SubmitTrainingJob"
    )
    assert (error, succeeded) == ("RayUnavailable", None)
    assert task_error_message(cause).startswith(
        f"GET /api/jobs/train-{run_id}: cannot reach Ray at {rig.ray.url}: timed out (request "
    )
    assert rig.ray.submissions(training_job_id(run_id)) == 1
    assert rig.runs.get_run(run_id).status == "SUCCEEDED"
    assert len(rig.notifications(f"maze-rl-ops: training run {run_id} succeeded")) == 1
    assert_survived(rig, before)


# --- 2. the training job fails or is stopped ------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "message"),
    [
        ("FAILED", "Job entrypoint command failed with exit code 1, last available logs: CUDA out of memory"),
        ("STOPPED", "Job was intentionally stopped."),
    ],
    ids=["failed", "stopped"],
)
def test_a_failed_or_stopped_training_job_fails_the_run(rig: Rig, before: Snapshot, status: str, message: str) -> None:
    run_id = f"job-{status.lower()}"
    job_id = training_job_id(run_id)
    rig.ray.scripts[job_id] = JobScript(
        status=status, message=message, logs="step 1\nTraceback (most recent call last):\nboom\n"
    )

    rig.request_training(run_id)
    execution = rig.finished_execution("training", job_id)

    cause = f"Ray job {job_id} ended {status}: {message} | log tail: step 1\nTraceback (most recent call last):\nboom\n"
    assert (execution["status"], execution["error"], execution["cause"]) == ("FAILED", "TrainingJobFailed", cause)
    run = rig.runs.get_run(run_id)
    assert (run.status, run.job_id, run.error) == ("FAILED", job_id, f"TrainingJobFailed: {cause}")
    [notification] = rig.notifications(f"maze-rl-ops: training run {run_id} failed")
    assert f"failed with TrainingJobFailed: {cause}" in notification
    # The FAILED execution's status change event reaches stop_ray_job, which asks Ray to stop the job
    # and keeps the run's recorded status.
    wait_for(lambda: ("POST", f"/api/jobs/{job_id}/stop") in rig.ray.requests_for(job_id), 30, "the stop request")
    assert rig.ray.submissions(job_id) == 1
    assert rig.runs.get_run(run_id).status == "FAILED"
    assert_survived(rig, before)


# --- 3. the evaluation job crashes ----------------------------------------------------------------


def test_a_crashed_evaluation_job_fails_the_evaluation_and_keeps_the_champion(rig: Rig, before: Snapshot) -> None:
    run_id, step = "eval-crash", 2
    job_id = eval_job_id(run_id, step)
    logs = (
        "Evaluating 64 mazes\nTraceback (most recent call last):\nRuntimeError: CUDA error: an illegal memory access\n"
    )
    rig.ray.scripts[job_id] = JobScript(
        status="FAILED", message="Job entrypoint command failed with exit code 1", logs=logs
    )

    rig.publish_adapter(run_id, step)
    execution = rig.finished_execution("evaluation", job_id)

    cause = f"Ray job {job_id} ended FAILED: Job entrypoint command failed with exit code 1 | log tail: {logs}"
    assert (execution["status"], execution["error"], execution["cause"]) == ("FAILED", "EvaluationJobFailed", cause)
    row = rig.registry.get_adapter(BASE_MODEL_ID, adapter_name(run_id, step))
    assert (row.status, row.error, row.solve_rate) == ("EVAL_FAILED", f"EvaluationJobFailed: {cause}", None)
    [notification] = rig.notifications(f"maze-rl-ops: evaluation of {run_id} step {step} failed")
    assert f"failed with EvaluationJobFailed: {cause}" in notification
    assert eval_result_key(run_id, step) not in snapshot(rig).objects
    assert rig.ray.submissions(job_id) == 1
    assert_survived(rig, before)


# --- 4. Serve registration fails ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("http_status", "error", "attempts"),
    [(500, "ServeUnavailable", 5), (404, "SmokeTestFailed", 1)],  # 500: the first try and 4 retries; 404: no retry
    ids=["serve-500", "unknown-adapter-404"],
)
def test_a_failed_smoke_test_rolls_the_registration_back(
    rig: Rig, before: Snapshot, http_status: int, error: str, attempts: int
) -> None:
    run_id, step = f"serve-{http_status}", 1
    adapter = adapter_name(run_id, step)
    model = served_model_id(BASE_MODEL_ID, adapter)
    rig.ray.scripts[eval_job_id(run_id, step)] = JobScript(result_bits=SOLVES_40)
    message = f"The model `{model}` does not exist." if http_status == 404 else "Internal Server Error"
    rig.serve_script.answers[model] = (http_status, {"error": {"message": message, "code": http_status}})
    rig.running(run_id)

    rig.publish_adapter(run_id, step)
    execution = rig.finished_execution("evaluation", eval_job_id(run_id, step), timeout_s=150)

    assert (execution["status"], execution["error"]) == ("FAILED", "PromotionRolledBack")
    failed_as, _, smoke_cause = execution["cause"].partition(": ")
    assert failed_as == error
    assert f"HTTP {http_status}" in smoke_cause and message in smoke_cause and "(request " in smoke_cause
    assert "\n" not in execution["cause"] and "stackTrace" not in execution["cause"]  # one line, no Python trace
    smoke_tests = task_attempts(rig, "evaluation", eval_job_id(run_id, step), "SmokeTest")
    assert [failed for _, failed, _ in smoke_tests] == [error] * attempts
    assert_backoff(retry_waits(smoke_tests), interval_s=5, rate=2)
    print(f"Serve {http_status}: smoke test waits {[round(wait, 1) for wait in retry_waits(smoke_tests)]} s")
    assert serve_requests(rig.serve, model) == attempts
    row = rig.registry.get_adapter(BASE_MODEL_ID, adapter)
    assert (row.status, row.error.split(": ")[0], row.decision["promote"]) == ("ROLLED_BACK", error, True)
    served = [
        key for key in snapshot(rig).objects if key.startswith(serving_adapter_prefix(BASE_MODEL_ID, run_id, step))
    ]
    assert served == []
    champion_files = [
        key for key in before.objects if key.startswith(serving_adapter_prefix(BASE_MODEL_ID, CHAMPION_RUN, 1))
    ]
    assert len(champion_files) == 2  # adapter_config.json and adapter_model.safetensors, unchanged (assert_survived)
    [notification] = rig.notifications(f"maze-rl-ops: promotion of {adapter} rolled back")
    assert (
        f"rolled back after {error}: " in notification
        and f"The champion is {before.champion.champion}." in notification
    )
    assert_survived(rig, before)


# --- 5. a stopped run's adapter -------------------------------------------------------------------


def test_an_adapter_of_a_run_stopped_after_it_landed_is_evaluated_but_never_promoted(
    rig: Rig, before: Snapshot
) -> None:
    run_id, step = "stopped-run", 1
    job_id, adapter = training_job_id(run_id), adapter_name(run_id, step)
    rig.ray.scripts[job_id] = JobScript(status="RUNNING", message="training")
    rig.ray.scripts[eval_job_id(run_id, step)] = JobScript(result_bits=SOLVES_40)  # would beat the champion
    rig.request_training(run_id)
    wait_for(
        lambda: (run := rig.runs.get_run(run_id)) is not None and run.status == "RUNNING", 60, "the run to be RUNNING"
    )

    for name in ADAPTER_FILES:  # the first adapter lands (its manifest comes last) ...
        rig.s3.upload_file(str(rig.adapter_dir / name), rig.bucket, adapter_prefix(run_id, step) + name)
    rig.sfn.stop_execution(executionArn=rig.execution_arn("training", job_id), cause="stopped by an operator")
    wait_for(lambda: rig.runs.get_run(run_id).status == "ABORTED", 60, "stop_ray_job to mark the run ABORTED")
    rig.publish_adapter(run_id, step)  # ... and its manifest is delivered after the stop
    execution = rig.finished_execution("evaluation", eval_job_id(run_id, step))

    assert execution["status"] == "SUCCEEDED", execution.get("cause")
    row = rig.registry.get_adapter(BASE_MODEL_ID, adapter)
    reason = f"training run {run_id!r} is ABORTED; only adapters of RUNNING or SUCCEEDED runs are promoted"
    assert (row.status, row.solve_rate, row.decision["promote"], row.decision["reason"]) == (
        "REJECTED",
        0.625,
        False,
        reason,
    )
    assert serve_requests(rig.serve, served_model_id(BASE_MODEL_ID, adapter)) == 0
    assert not [
        key for key in snapshot(rig).objects if key.startswith(serving_adapter_prefix(BASE_MODEL_ID, run_id, step))
    ]
    assert_survived(rig, before)


# --- 6. duplicate deliveries ----------------------------------------------------------------------


def test_duplicate_deliveries_and_a_replayed_submit_never_submit_twice(rig: Rig, before: Snapshot) -> None:
    run_id = "dup-run"
    job_id = training_job_id(run_id)
    key = f"requests/{run_id}.json"
    router_log_group = f"/aws/lambda/{rig.stack.outputs['StartExecutionFunctionName']}"

    rig.request_training(run_id)
    rig.request_training(run_id)  # the same bytes again: S3 sends a second Object Created event
    head = rig.s3.head_object(Bucket=rig.bucket, Key=key)
    redelivered = {
        "version": "0",
        "id": "9f0c6b0e-0000-4000-8000-000000000001",
        "detail-type": "Object Created",
        "source": "aws.s3",
        "account": ACCOUNT,
        "time": "2026-12-02T16:00:00Z",
        "region": rig.stack.config.region,
        "resources": [f"arn:aws:s3:::{rig.bucket}"],
        "detail": {
            "version": "0",
            "bucket": {"name": rig.bucket},
            "object": {"key": key, "size": head["ContentLength"], "etag": head["ETag"].strip('"')},
            "reason": "PutObject",
        },
    }
    rule = rig.stack.physical_id("StartExecutionFunctionRunRequested")
    for _ in range(2):  # EventBridge delivers the same event twice (at-least-once)
        deliver_to_rule_targets(ACCOUNT, rig.stack.config.region, rule, redelivered)

    execution = rig.finished_execution("training", job_id)
    outcomes = wait_for(lambda: router_outcomes(rig, router_log_group, job_id), 120, "the router's four invocations")
    ray_requests = len(rig.ray.requests_for(job_id))
    replay = rig.stack.session.client("lambda").invoke(
        FunctionName=rig.stack.outputs["SubmitRayJobFunctionName"],
        Payload=json.dumps({"kind": "train", "run_id": run_id}).encode(),
    )

    assert execution["status"] == "SUCCEEDED", execution.get("cause")
    # One start; the other three are duplicates, found by the idempotency table (Powertools) or,
    # for an event it has not seen, by the existing execution's name.
    assert outcomes.count("Execution started") == 1
    assert "Duplicate event answered from the idempotency table" in outcomes
    assert set(outcomes) <= {
        "Execution started",
        "Duplicate event answered from the idempotency table",
        "Execution already exists; duplicate event",
    }
    executions = rig.sfn.list_executions(stateMachineArn=rig.stack.outputs["TrainingStateMachineArn"])["executions"]
    assert [listed["name"] for listed in executions].count(job_id) == 1
    assert "FunctionError" not in replay
    assert json.loads(replay["Payload"].read()) == {"job_id": job_id, "status": "PENDING", "already_submitted": True}
    assert rig.ray.submissions(job_id) == 1
    assert len(rig.ray.requests_for(job_id)) == ray_requests  # the replay was answered from the idempotency table
    assert_survived(rig, before)


def router_outcomes(rig: Rig, log_group: str, execution_name: str) -> list[str] | None:
    """The router's log messages about `execution_name`, once there are four (None before)."""
    messages = []
    for message in log_messages(rig.stack.session, log_group):
        if not message.startswith("{"):
            continue
        line = json.loads(message)
        about = line.get("execution_name") or line.get("execution_arn", "").rpartition(":")[2]
        if about == execution_name:
            messages.append(line["message"])
    return messages if len(messages) >= 4 else None


# --- 7. run guards --------------------------------------------------------------------------------


def solving(n: int) -> str:
    """Outcomes of an evaluation that solves the first `n` of the 64 mazes."""
    return "1" * n + "0" * (len(EVAL_SET.seeds) - n)


def assert_stopped_by_guard(rig: Rig, run_id: str, guard: str) -> dict[str, Any]:
    """The run is STOPPED by `guard`, its training execution ABORTED with RunGuard and the reason, its Ray job asked to
    stop, and the topic told; returns the run's `stopped_by`."""
    job_id = training_job_id(run_id)
    run = rig.runs.get_run(run_id)
    assert run.status == "STOPPED", run
    assert run.stopped_by["guard"] == guard and run.error == run.stopped_by["reason"], run
    execution = rig.finished_execution("training", job_id)
    assert (execution["status"], execution.get("error"), execution.get("cause")) == (
        "ABORTED",
        "RunGuard",
        run.stopped_by["reason"],
    )
    wait_for(lambda: ("POST", f"/api/jobs/{job_id}/stop") in rig.ray.requests_for(job_id), 30, "the stop request")
    [message] = wait_for(lambda: rig.messages_with(f"Execution {job_id} of "), 30, "the ABORTED notification")
    assert f"ended ABORTED (error: RunGuard; cause: {run.stopped_by['reason']})" in message
    assert rig.runs.get_run(run_id).status == "STOPPED"  # stop_ray_job keeps the guard's status
    return run.stopped_by


def test_a_collapsed_run_is_stopped_after_its_kth_collapsed_evaluation_and_never_promoted(
    rig: Rig, before: Snapshot
) -> None:
    run_id = "collapse"
    # Step 1 is the run's best (below the champion); 2 and 3 fall below half of it; 4 would beat the champion.
    outcomes = {1: solving(20), 2: solving(5), 3: solving(4), 4: SOLVES_40}
    for step, bits in outcomes.items():
        rig.ray.scripts[eval_job_id(run_id, step)] = JobScript(result_bits=bits)
    rig.start_running(run_id)

    for step in (1, 2):
        rig.publish_adapter(run_id, step)
        assert rig.finished_execution("evaluation", eval_job_id(run_id, step))["status"] == "SUCCEEDED"
        assert rig.runs.get_run(run_id).status == "RUNNING"  # at most one collapsed evaluation: fewer than K = 2
    rig.publish_adapter(run_id, 3)
    assert rig.finished_execution("evaluation", eval_job_id(run_id, 3))["status"] == "SUCCEEDED"

    stopped_by = assert_stopped_by_guard(rig, run_id, "collapse")
    assert stopped_by["steps"] == [2, 3]
    assert stopped_by["reason"].startswith("collapse: 5/64 (step 2) and 4/64 (step 3) after best 20/64 (step 1)")
    rows = {step: rig.registry.get_adapter(BASE_MODEL_ID, adapter_name(run_id, step)) for step in (1, 2, 3)}
    assert {step: (row.status, row.n_solved) for step, row in rows.items()} == {
        1: ("REJECTED", 20),
        2: ("REJECTED", 5),
        3: ("REJECTED", 4),
    }
    assert "is STOPPED" in rows[3].decision["reason"]

    rig.publish_adapter(run_id, 4)  # an adapter better than the champion, after the stop
    assert rig.finished_execution("evaluation", eval_job_id(run_id, 4))["status"] == "SUCCEEDED"
    late = rig.registry.get_adapter(BASE_MODEL_ID, adapter_name(run_id, 4))
    reason = f"training run {run_id!r} is STOPPED; only adapters of RUNNING or SUCCEEDED runs are promoted"
    assert (late.status, late.n_solved, late.decision["promote"], late.decision["reason"]) == (
        "REJECTED",
        40,
        False,
        reason,
    )
    assert serve_requests(rig.serve, served_model_id(BASE_MODEL_ID, adapter_name(run_id, 4))) == 0
    assert rig.ray.submissions(training_job_id(run_id)) == 1
    assert_survived(rig, before)


def test_a_stalled_run_is_stopped_by_the_cluster_watch(rig: Rig, before: Snapshot) -> None:
    run_id = "stalled"
    rig.start_running(run_id)
    rig.watch()
    assert rig.runs.get_run(run_id).status == "RUNNING"  # just started: no stall

    rig.set_running_at(run_id, datetime.now(UTC) - timedelta(hours=7))  # the default stall guard: 360 minutes
    rig.watch()

    stopped_by = assert_stopped_by_guard(rig, run_id, "stall")
    assert stopped_by["steps"] == [], stopped_by
    assert stopped_by["reason"].startswith("stall: no new adapter for 420 min (none since RUNNING at "), stopped_by
    assert_survived(rig, before)


def test_a_run_past_its_gpu_hours_is_stopped_by_the_cluster_watch(rig: Rig, before: Snapshot) -> None:
    run_id = "overspent"
    rig.start_running(run_id, num_gpus=2, guard={"gpu_hours": 1})
    run = rig.runs.get_run(run_id)
    assert (run.num_gpus, run.guard["gpu_hours"], run.guard["stall_minutes"]) == (2, 1, 360)

    rig.set_running_at(run_id, datetime.now(UTC) - timedelta(minutes=45))  # 1.5 GPU-hours, no stall yet
    rig.watch()

    stopped_by = assert_stopped_by_guard(rig, run_id, "spend")
    assert stopped_by["figures"]["num_gpus"] == 2 and stopped_by["steps"] == [], stopped_by
    assert_survived(rig, before)


# --- 8. a cluster outage ----------------------------------------------------------------------------


def test_an_outage_is_recorded_notified_shown_and_its_failed_evaluation_runs_again_after_it(
    rig: Rig, before: Snapshot, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id, step = "outage", 1
    first, second = eval_job_id(run_id, step), eval_job_id(run_id, step, attempt=2)
    rig.ray.scripts[second] = JobScript(result_bits=solving(20))  # evaluated, not better than the champion
    rig.running(run_id)
    runs_table = rig.stack.outputs["RunsTableName"]
    dynamodb = rig.stack.session.client("dynamodb")
    rig.ray.down()
    try:
        rig.watch()
        health = read_health(dynamodb, runs_table)
        assert not health.reachable and health.unreachable_since == health.checked_at, health
        assert "Connection refused" in health.error
        rig.watch()  # still down: no second notice
        [notice] = rig.notifications(UNREACHABLE_SUBJECT)
        assert f"since {health.unreachable_since}" in notice and run_id in notice
        assert read_health(dynamodb, runs_table).unreachable_since == health.unreachable_since

        capsys.readouterr()
        state = Path(rig.stack.config.state_dir) / "stack.json"
        cli.main(["run", "show", run_id, "--local", "--local-state", str(state)])
        shown = capsys.readouterr().out
        assert re.search(rf"^\s*cluster +unreachable since {re.escape(health.unreachable_since)}", shown, re.M), shown

        rig.publish_adapter(run_id, step)  # its evaluation cannot reach the head
        failed = rig.finished_execution("evaluation", first)
    finally:
        rig.ray.up()

    assert (failed["status"], failed["error"]) == ("FAILED", "RayUnavailable")
    row = rig.registry.get_adapter(BASE_MODEL_ID, adapter_name(run_id, step))
    assert row.status == "EVAL_FAILED" and row.error.startswith("RayUnavailable: "), row
    time.sleep(6)  # the local EvalRetryBackoffSeconds (5) after the failure
    rig.watch()

    assert read_health(dynamodb, runs_table).reachable
    [recovered] = rig.notifications(RECOVERED_SUBJECT)
    assert f"since {health.unreachable_since}" in recovered
    assert len(rig.notifications(UNREACHABLE_SUBJECT)) == 1
    retried = rig.finished_execution("evaluation", second)
    assert retried["status"] == "SUCCEEDED", retried.get("cause")
    row = rig.registry.get_adapter(BASE_MODEL_ID, adapter_name(run_id, step))
    assert (row.status, row.n_solved, row.eval_attempts, row.decision["promote"]) == ("REJECTED", 20, 2, False)
    assert (rig.ray.submissions(first), rig.ray.submissions(second)) == (0, 1)
    rig.watch()  # answered again: no further notice, no further attempt
    assert len(rig.notifications(RECOVERED_SUBJECT)) == 1
    assert rig.ray.submissions(eval_job_id(run_id, step, attempt=3)) == 0
    assert_survived(rig, before)


def test_a_job_the_head_forgot_fails_its_run_as_lost(rig: Rig, before: Snapshot) -> None:
    run_id = "forgotten"
    job_id = training_job_id(run_id)
    rig.start_running(run_id)

    rig.ray.forget_jobs()  # the head restarted
    execution = rig.finished_execution("training", job_id)

    assert (execution["status"], execution["error"]) == ("FAILED", "RayJobLost")
    run = rig.runs.get_run(run_id)
    assert run.status == "FAILED" and run.error.startswith("RayJobLost: "), run
    assert f"Ray job {job_id} no longer exists" in run.error
    [message] = rig.notifications(f"maze-rl-ops: training run {run_id} failed")
    assert "failed with RayJobLost" in message
    assert_survived(rig, before)
