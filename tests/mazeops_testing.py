"""Shared test helpers for the mazeops domain modules and the Lambda handlers: the `aws` fixture (moto with the
handlers' bucket, tables and state machines), events shaped as AWS delivers them, a fake Lambda context, documents
written to the bucket, `FakeHttpServer` (routes-table HTTP server) and `log_messages` (a CloudWatch Logs group).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import pytest
from moto import mock_aws

from mazeops import ray_token
from mazeops.baseline import BaselineResult
from mazeops.evalresult import MazeOutcome
from mazeops.runs import RunsTable

os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "1")

REGION = "us-east-1"
ACCOUNT = "123456789012"
BUCKET = "maze-artifacts-test"
RUNS_TABLE = "maze-runs-test"
REGISTRY_TABLE = "maze-registry-test"
IDEMPOTENCY_TABLE = "maze-idempotency-test"
BASE_MODEL = "qwen3-vl-8b-sft"
BASE_MODELS = {BASE_MODEL: "/models/Qwen3-VL-8B-SFT"}
EVAL_SET_SHA = "ab" * 32
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/maze-sfn"
PASS_DEFINITION = json.dumps({"StartAt": "Pass", "States": {"Pass": {"Type": "Pass", "End": True}}})

# moto sets boto3.DEFAULT_SESSION to None while a mock runs, so every boto3.client() call would
# build a new session and parse the service models again (~0.3 s each). One session, created
# after moto is imported (so it carries moto's request hook), is shared by all tests instead.
_SHARED_SESSION = boto3.session.Session()


@dataclass
class FakeLambdaContext:
    """The attributes Powertools reads from a Lambda context."""

    function_name: str = "maze-test-function"
    function_version: str = "$LATEST"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:maze-test-function"
    aws_request_id: str = "c6af9ac6-7b61-11e6-9a41-93e812345678"

    def get_remaining_time_in_millis(self) -> int:
        return 300_000


# The Ray token the `aws` fixture puts into the token secret it gives the handlers (RAY_AUTH_TOKEN_SECRET_ARN).
RAY_AUTH_TOKEN = "handler-test-token-" + "7" * 24


@dataclass
class Aws:
    """moto clients, the ARNs of the two state machines and of the Ray token's secret."""

    s3: Any
    dynamodb: Any
    sfn: Any
    training_arn: str
    evaluation_arn: str
    secretsmanager: Any = None
    ray_token_secret_arn: str = ""


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[Aws]:
    """moto with the artifacts bucket, the three tables, both state machines, the Ray token's secret (holding
    RAY_AUTH_TOKEN) and the Lambda env."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "POWERTOOLS_TRACE_DISABLED": "1",
        "POWERTOOLS_SERVICE_NAME": "maze-rl-ops-test",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    # Executions stay RUNNING until stopped, as a training run's does: moto keeps a config given to any earlier
    # mock_aws in the process (the state machine tests turn execution on), so it is turned off here by name.
    with mock_aws(config={"stepfunctions": {"execute_state_machine": False}}):
        monkeypatch.setattr(boto3, "DEFAULT_SESSION", _SHARED_SESSION)
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket=BUCKET)
        dynamodb = boto3.client("dynamodb")
        _create_table(dynamodb, RUNS_TABLE, ["run_id"])
        _create_table(dynamodb, REGISTRY_TABLE, ["base_model_id", "adapter_name"])
        _create_table(dynamodb, IDEMPOTENCY_TABLE, ["id"])
        sfn = boto3.client("stepfunctions")
        training = sfn.create_state_machine(name="maze-training", definition=PASS_DEFINITION, roleArn=ROLE_ARN)
        evaluation = sfn.create_state_machine(name="maze-evaluation", definition=PASS_DEFINITION, roleArn=ROLE_ARN)
        secretsmanager = boto3.client("secretsmanager")
        secret_arn = secretsmanager.create_secret(Name="maze-ray-auth-token", SecretString=RAY_AUTH_TOKEN)["ARN"]
        ray_token.clear_cache()
        for name, value in {
            "ARTIFACTS_BUCKET": BUCKET,
            "RUNS_TABLE": RUNS_TABLE,
            "REGISTRY_TABLE": REGISTRY_TABLE,
            "IDEMPOTENCY_TABLE": IDEMPOTENCY_TABLE,
            "BASE_MODELS": json.dumps(BASE_MODELS),
            "TRAINING_STATE_MACHINE_ARN": training["stateMachineArn"],
            "EVALUATION_STATE_MACHINE_ARN": evaluation["stateMachineArn"],
            "MIN_SOLVE_RATE": "0.5",
            "MCNEMAR_ALPHA": "0.05",
            "EVAL_BACKEND": "vllm",
            "RAY_AUTH_TOKEN_SECRET_ARN": secret_arn,
        }.items():
            monkeypatch.setenv(name, value)
        yield Aws(
            s3, dynamodb, sfn, training["stateMachineArn"], evaluation["stateMachineArn"], secretsmanager, secret_arn
        )
        ray_token.clear_cache()


def _create_table(dynamodb: Any, name: str, keys: list[str]) -> None:
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": key, "KeyType": kind} for key, kind in zip(keys, ["HASH", "RANGE"], strict=False)],
        AttributeDefinitions=[{"AttributeName": key, "AttributeType": "S"} for key in keys],
        BillingMode="PAY_PER_REQUEST",
    )


# --- events as AWS delivers them ---------------------------------------------------------


def s3_object_created_event(
    key: str, bucket: str = BUCKET, etag: str = "b1946ac92492d2347c6235b4d2611184", size: int = 120
) -> dict[str, Any]:
    """An S3 "Object Created" event as EventBridge delivers it."""
    return {
        "version": "0",
        "id": "17793124-05d4-b198-2fde-7ededc63b103",
        "detail-type": "Object Created",
        "source": "aws.s3",
        "account": ACCOUNT,
        "time": "2026-12-02T16:00:00Z",
        "region": REGION,
        "resources": [f"arn:aws:s3:::{bucket}"],
        "detail": {
            "version": "0",
            "bucket": {"name": bucket},
            "object": {"key": key, "size": size, "etag": etag, "sequencer": "00617F08299329D189"},
            "request-id": "N4N7GDK58NMKJ12R",
            "requester": ACCOUNT,
            "source-ip-address": "1.2.3.4",
            "reason": "PutObject",
        },
    }


def scheduled_event(time: str = "2026-12-02T03:00:00Z", rule: str = "maze-nightly") -> dict[str, Any]:
    """A "Scheduled Event" from an EventBridge schedule rule."""
    return {
        "version": "0",
        "id": "89d1a02d-5ec7-412e-82f5-13505f849b41",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": ACCOUNT,
        "time": time,
        "region": REGION,
        "resources": [f"arn:aws:events:{REGION}:{ACCOUNT}:rule/{rule}"],
        "detail": {},
    }


def execution_status_change_event(
    name: str, status: str = "ABORTED", state_machine: str = "maze-training"
) -> dict[str, Any]:
    """A "Step Functions Execution Status Change" event."""
    sm_arn = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{state_machine}"
    return {
        "version": "0",
        "id": "315c1398-40ff-a850-213b-158f73e60175",
        "detail-type": "Step Functions Execution Status Change",
        "source": "aws.states",
        "account": ACCOUNT,
        "time": "2026-12-02T17:00:00Z",
        "region": REGION,
        "resources": [f"arn:aws:states:{REGION}:{ACCOUNT}:execution:{state_machine}:{name}"],
        "detail": {
            "executionArn": f"arn:aws:states:{REGION}:{ACCOUNT}:execution:{state_machine}:{name}",
            "stateMachineArn": sm_arn,
            "name": name,
            "status": status,
            "startDate": 1796227200000,
            "stopDate": 1796230800000,
            "input": "{}",
            "output": None,
        },
    }


# --- rows and documents ---------------------------------------------------------------------


def put_run(dynamodb: Any, run_id: str, status: str = "RUNNING") -> None:
    """The run's row in `status` (created if absent), as validate_run_spec and the Training state machine write it."""
    runs = RunsTable(dynamodb, RUNS_TABLE)
    execution = f"arn:aws:states:{REGION}:{ACCOUNT}:execution:maze-training:train-{run_id}"
    runs.create_run(run_id, f"runs/{run_id}/spec.json", "ab" * 32, BASE_MODEL, execution)
    runs.set_status(run_id, status)


def put_adapter(s3: Any, run_id: str, step: int, base_model_id: str = BASE_MODEL, rank: int = 32) -> dict[str, Any]:
    """Upload adapter files and their manifest (manifest last); return the manifest document."""
    prefix = f"runs/{run_id}/adapters/global_step_{step}/"
    files = {
        "adapter_config.json": json.dumps({"r": rank, "lora_alpha": 2 * rank, "peft_type": "LORA"}).encode(),
        "adapter_model.safetensors": hashlib.sha256(f"{run_id}-{step}".encode()).digest() * 8,
    }
    for name, body in files.items():
        s3.put_object(Bucket=BUCKET, Key=prefix + name, Body=body)
    manifest = {
        "schema": "maze-adapter/v1",
        "run_id": run_id,
        "step": step,
        "adapter_name": f"{run_id}-step{step}",
        "base_model_id": base_model_id,
        "lora_rank": rank,
        "lora_alpha": 2 * rank,
        "files": {
            name: {"sha256": hashlib.sha256(body).hexdigest(), "size": len(body)} for name, body in files.items()
        },
        "created_at": "2026-12-02T16:00:00Z",
    }
    s3.put_object(Bucket=BUCKET, Key=prefix + "manifest.json", Body=json.dumps(manifest).encode())
    return manifest


def baseline_result(
    bits: str, eval_set_sha256: str, base_model_id: str = BASE_MODEL, eval_set_name: str = "maze-eval-64"
) -> BaselineResult:
    """A vLLM baseline result of `base_model_id` on `eval_set_sha256` whose maze i is solved where `bits[i]` is "1"."""
    outcomes = [MazeOutcome(seed=seed, solved=bit == "1", turns=3) for seed, bit in enumerate(bits)]
    return BaselineResult(
        base_model_id=base_model_id,
        eval_set_name=eval_set_name,
        eval_set_sha256=eval_set_sha256,
        outcomes=outcomes,
        backend="vllm",
        started_at="2026-12-02T16:00:00Z",
        finished_at="2026-12-02T16:10:00Z",
    )


def eval_result_document(
    run_id: str, step: int, bits: str, base_model_id: str = BASE_MODEL, eval_set_sha256: str = EVAL_SET_SHA
) -> dict[str, Any]:
    """An evaluation result whose outcomes are `bits` ('1' = solved) for seeds 0..len-1."""
    solved = bits.count("1")
    return {
        "schema": "maze-eval/v1",
        "run_id": run_id,
        "step": step,
        "adapter_name": f"{run_id}-step{step}",
        "base_model_id": base_model_id,
        "eval_set_sha256": eval_set_sha256,
        "n_total": len(bits),
        "n_solved": solved,
        "solve_rate": solved / len(bits),
        "outcomes": [{"seed": seed, "solved": bit == "1", "turns": 5, "error": None} for seed, bit in enumerate(bits)],
        "backend": "transformers",
        "started_at": "2026-12-02T16:00:00Z",
        "finished_at": "2026-12-02T16:10:00Z",
    }


def put_eval_result(
    s3: Any, run_id: str, step: int, bits: str, overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Write an evaluation result to its key; `overrides` replace top-level fields."""
    document = {**eval_result_document(run_id, step, bits), **(overrides or {})}
    s3.put_object(
        Bucket=BUCKET, Key=f"runs/{run_id}/evals/global_step_{step}/result.json", Body=json.dumps(document).encode()
    )
    return document


def emitted_metrics(captured_stdout: str) -> dict[str, float]:
    """Metric name -> value from the CloudWatch EMF lines Powertools printed."""
    found: dict[str, float] = {}
    for line in captured_stdout.splitlines():
        if not line.startswith("{") or '"_aws"' not in line:
            continue
        document = json.loads(line)
        for directive in document["_aws"]["CloudWatchMetrics"]:
            for metric in directive["Metrics"]:
                value = document[metric["Name"]]
                found[metric["Name"]] = value[0] if isinstance(value, list) else value
    return found


def emitted_dimensions(captured_stdout: str, metric_name: str) -> dict[str, str]:
    """Dimension name -> value of the EMF line that carries `metric_name`."""
    for line in captured_stdout.splitlines():
        if line.startswith("{") and '"_aws"' in line and f'"{metric_name}"' in line:
            document = json.loads(line)
            names = document["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0]
            return {name: document[name] for name in names}
    raise AssertionError(f"metric {metric_name} was not emitted")


# --- a tiny HTTP server -----------------------------------------------------------------------

Route = Callable[[bytes], tuple[int, Any]]


@dataclass
class FakeHttpServer:
    """A local HTTP server: `routes[(method, path)]` returns (status, body) for a request body.

    A body that is bytes is sent as is; anything else as JSON. Unknown routes answer 404.
    `requests` records (method, path, headers, body) of every request.
    """

    routes: dict[tuple[str, str], Route]
    requests: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)

    def __enter__(self) -> FakeHttpServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                server.requests.append((self.command, self.path, dict(self.headers), body))
                route = server.routes.get((self.command, self.path))
                status, payload = route(body) if route else (404, b"no such route")
                raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()


class JsonRequestHandler(BaseHTTPRequestHandler):
    """A quiet request handler of the fake servers that answers in JSON."""

    def log_message(self, *args: Any) -> None:
        pass

    def send_json(self, status: int, body: Any) -> None:
        """Answer `status` with `body` as a JSON document."""
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


def answer(status: int, body: Any) -> Route:
    """A route that always answers `status` with `body`."""
    return lambda _request: (status, body)


def closed_port_url() -> str:
    """An http URL on 127.0.0.1 where nothing listens (connections are refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def log_messages(session: boto3.Session, group: str) -> list[str]:
    """Every message in the CloudWatch Logs group `group`, oldest first; none while the group does not exist yet
    (a Lambda's lines reach their group after the invocation that wrote them: on a loaded machine, later)."""
    logs = session.client("logs")
    try:
        return [
            event["message"]
            for page in logs.get_paginator("filter_log_events").paginate(logGroupName=group)
            for event in page["events"]
        ]
    except logs.exceptions.ResourceNotFoundException:
        return []
