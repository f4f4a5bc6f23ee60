"""Fixtures and helpers of the ops CLI tests (a pytest plugin): a moto deployment reached through `--stack`.

`deployment` is a CloudFormation stack in moto (bucket, runs and registry tables, a Lambda function whose
environment names BASE_MODELS, RAY_ADDRESS and SERVE_URL) whose outputs name two executing state machines,
so `--stack` resolves as against AWS; `fake_head` answers the Ray Jobs API and the chat endpoint.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import botocore.loaders
import botocore.session
import pytest
from mazeops_testing import JsonRequestHandler, baseline_result
from moto import mock_aws

from mazeops.decision import Decision
from mazeops.evalresult import EvalResult, MazeOutcome
from mazeops.layout import adapter_manifest_key, adapter_prefix, eval_result_key
from mazeops.manifest import AdapterManifest, FileDigest
from mazeops.names import adapter_name
from mazeops.registry import Registry
from mazeops.runs import RunsTable
from opsctl.adapters import fixed_eval_set_sha256
from opsctl.cli import main

BASE = "qwen3-vl-8b-sft"
STACK = "maze-test"
RAY_TOKEN = "ray-s3cret"
# Every CLI call builds a fresh boto3 Session; sharing one botocore data loader between them keeps
# the parsed service models, so the tests do not re-read them from disk on each call.
_shared_loader = functools.lru_cache(maxsize=None)(botocore.loaders.create_loader)

PASS_DEFINITION = {"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}}


@dataclass
class FakeHead:
    """Answers the Ray Jobs API (`/api/jobs/<id>`, `/logs`, submission; bearer RAY_TOKEN) and `/v1/chat/completions`.

    A job's `status` may be a list: each GET answers the next one, the last one for good. A submitted
    job is stored with `submitted_statuses` and its request.
    """

    url: str
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    submitted_statuses: list[str] = field(default_factory=lambda: ["PENDING"])
    chat_requests: list[dict[str, Any]] = field(default_factory=list)
    chat_status: int = 200
    on_chat: Callable[[], None] | None = None


def _next_status(job: dict[str, Any]) -> str:
    """The job's status, or the next of its list of statuses (the last one stays)."""
    statuses = job["status"]
    if isinstance(statuses, str):
        return statuses
    return statuses.pop(0) if len(statuses) > 1 else statuses[0]


def _handler(head: FakeHead) -> type[BaseHTTPRequestHandler]:
    class Handler(JsonRequestHandler):
        def do_GET(self) -> None:
            if self.headers.get("Authorization") != f"Bearer {RAY_TOKEN}":
                self.send_json(401, {"detail": "token required"})
                return
            parts = self.path.strip("/").split("/")
            job = head.jobs.get(parts[2]) if len(parts) >= 3 and parts[:2] == ["api", "jobs"] else None
            if job is None:
                self.send_json(404, {"detail": "not found"})
            elif parts[3:] == ["logs"]:
                self.send_json(200, {"logs": job.get("logs", "")})
            else:
                self.send_json(
                    200, {"submission_id": parts[2], "status": _next_status(job), "message": job.get("message")}
                )

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/api/jobs/":
                if self.headers.get("Authorization") != f"Bearer {RAY_TOKEN}":
                    self.send_json(401, {"detail": "token required"})
                    return
                head.jobs[body["submission_id"]] = {"status": list(head.submitted_statuses), "request": body}
                self.send_json(200, {"submission_id": body["submission_id"]})
                return
            head.chat_requests.append(body)
            if head.on_chat:
                head.on_chat()
            if head.chat_status != 200:
                self.send_json(head.chat_status, {"error": "model not found"})
                return
            self.send_json(
                200, {"model": body["model"], "choices": [{"message": {"role": "assistant", "content": "('move', 0)"}}]}
            )

    return Handler


@pytest.fixture
def fake_head() -> Iterator[FakeHead]:
    """A local HTTP server standing in for the Ray dashboard and the Ray Serve endpoint."""
    head = FakeHead(url="")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(head))
    head.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield head
    server.shutdown()
    server.server_close()


@dataclass
class Deployment:
    """Names and clients of the moto deployment."""

    bucket: str
    runs_table: str
    registry_table: str
    training_arn: str
    evaluation_arn: str
    head: FakeHead
    ray_token_secret_arn: str = ""

    @functools.cached_property
    def s3(self) -> Any:
        return boto3.client("s3")

    @functools.cached_property
    def sfn(self) -> Any:
        return boto3.client("stepfunctions")

    @functools.cached_property
    def registry(self) -> Registry:
        return Registry(boto3.client("dynamodb"), self.registry_table)


def _template(ray_address: str, serve_url: str) -> dict[str, Any]:
    return {
        "Parameters": {
            "TrainingArn": {"Type": "String"},
            "EvaluationArn": {"Type": "String"},
            "RoleArn": {"Type": "String"},
            "RayTokenSecretArn": {"Type": "String"},
        },
        "Resources": {
            "Artifacts": {"Type": "AWS::S3::Bucket"},
            "Runs": {
                "Type": "AWS::DynamoDB::Table",
                "Properties": {
                    "BillingMode": "PAY_PER_REQUEST",
                    "AttributeDefinitions": [{"AttributeName": "run_id", "AttributeType": "S"}],
                    "KeySchema": [{"AttributeName": "run_id", "KeyType": "HASH"}],
                },
            },
            "Registry": {
                "Type": "AWS::DynamoDB::Table",
                "Properties": {
                    "BillingMode": "PAY_PER_REQUEST",
                    "AttributeDefinitions": [
                        {"AttributeName": "base_model_id", "AttributeType": "S"},
                        {"AttributeName": "adapter_name", "AttributeType": "S"},
                    ],
                    "KeySchema": [
                        {"AttributeName": "base_model_id", "KeyType": "HASH"},
                        {"AttributeName": "adapter_name", "KeyType": "RANGE"},
                    ],
                },
            },
            "ValidateRunSpecFunction": {
                "Type": "AWS::Lambda::Function",
                "Properties": {
                    "Runtime": "python3.12",
                    "Handler": "validate_run_spec.lambda_handler",
                    "Role": {"Ref": "RoleArn"},
                    "Code": {"ZipFile": "def lambda_handler(event, context): pass"},
                    "Environment": {
                        "Variables": {
                            "BASE_MODELS": json.dumps({BASE: "/shared/models/qwen3-vl-8b-sft"}),
                            "RAY_ADDRESS": ray_address,
                            "SERVE_URL": serve_url,
                        }
                    },
                },
            },
        },
        "Outputs": {
            "ArtifactsBucketName": {"Value": {"Ref": "Artifacts"}},
            "RunsTableName": {"Value": {"Ref": "Runs"}},
            "RegistryTableName": {"Value": {"Ref": "Registry"}},
            "TrainingStateMachineArn": {"Value": {"Ref": "TrainingArn"}},
            "EvaluationStateMachineArn": {"Value": {"Ref": "EvaluationArn"}},
            "RayAuthTokenSecretArn": {"Value": {"Ref": "RayTokenSecretArn"}},
        },
    }


@pytest.fixture
def moto_executing_asl(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """moto with Step Functions executing ASL, fake credentials in us-east-1, no deployment chosen by env."""
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "MAZEOPS_STACK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setattr(botocore.session, "create_loader", _shared_loader)
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        yield


def create_deployment(
    head: FakeHead, training_definition: dict[str, Any] = PASS_DEFINITION, ray_address: str | None = None
) -> Deployment:
    """Create the stack `STACK`, its two state machines and the Ray token's secret (holding RAY_TOKEN)."""
    role = boto3.client("iam").create_role(RoleName="maze-test", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    sfn = boto3.client("stepfunctions")
    training = sfn.create_state_machine(name="training", roleArn=role, definition=json.dumps(training_definition))
    evaluation = sfn.create_state_machine(name="evaluation", roleArn=role, definition=json.dumps(PASS_DEFINITION))
    secret = boto3.client("secretsmanager").create_secret(Name="maze-test-ray-auth-token", SecretString=RAY_TOKEN)
    parameters = {
        "TrainingArn": training["stateMachineArn"],
        "EvaluationArn": evaluation["stateMachineArn"],
        "RoleArn": role,
        "RayTokenSecretArn": secret["ARN"],
    }
    cloudformation = boto3.client("cloudformation")
    cloudformation.create_stack(
        StackName=STACK,
        TemplateBody=json.dumps(_template(ray_address or head.url, head.url)),
        Parameters=[{"ParameterKey": key, "ParameterValue": value} for key, value in parameters.items()],
    )
    outputs = {
        o["OutputKey"]: o["OutputValue"]
        for o in cloudformation.describe_stacks(StackName=STACK)["Stacks"][0]["Outputs"]
    }
    return Deployment(
        bucket=outputs["ArtifactsBucketName"],
        runs_table=outputs["RunsTableName"],
        registry_table=outputs["RegistryTableName"],
        training_arn=outputs["TrainingStateMachineArn"],
        evaluation_arn=outputs["EvaluationStateMachineArn"],
        head=head,
        ray_token_secret_arn=outputs["RayAuthTokenSecretArn"],
    )


@pytest.fixture
def deployment(moto_executing_asl: None, fake_head: FakeHead) -> Deployment:
    """The moto deployment with pass-through state machines and the fake head."""
    return create_deployment(fake_head)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run `mazeops-ops ARGV --stack maze-test`; return (exit status, stdout, stderr)."""
    status = main([*argv, "--stack", STACK])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def eval_result(run_id: str, step: int, bits: str, eval_set_sha256: str | None = None) -> EvalResult:
    """A valid evaluation result of `<run_id>-step<step>` with per-seed outcomes `bits`."""
    return EvalResult.of_outcomes(
        [MazeOutcome(seed=seed, solved=bit == "1", turns=5) for seed, bit in enumerate(bits)],
        run_id=run_id,
        step=step,
        adapter_name=adapter_name(run_id, step),
        base_model_id=BASE,
        eval_set_sha256=eval_set_sha256 or fixed_eval_set_sha256(),
        backend="transformers",
        started_at="2026-12-02T16:00:00Z",
        finished_at="2026-12-02T16:05:00Z",
    )


def bits_with(solved: int, total: int = 64) -> str:
    """An outcome string of `total` mazes, the first `solved` solved."""
    return "1" * solved + "0" * (total - solved)


def seed_adapter(
    deployment: Deployment,
    run_id: str,
    step: int,
    status: str = "EVALUATED",
    solved: int | None = 32,
    eval_set_sha256: str | None = None,
    run_status: str = "SUCCEEDED",
) -> str:
    """Upload an adapter (files, manifest, eval result unless `solved` is None) and register it in `status`.

    Its run gets a row in `run_status` unless it has one already.
    """
    runs = RunsTable(deployment.registry.client, deployment.runs_table)
    if runs.get_run(run_id) is None:
        runs.create_run(run_id, f"runs/{run_id}/spec.json", "a" * 64, BASE, f"{deployment.training_arn}:train-{run_id}")
        runs.set_status(run_id, run_status)
    files = {
        "adapter_config.json": json.dumps({"r": 32, "lora_alpha": 64}).encode(),
        "adapter_model.safetensors": b"w" * 256,
    }
    prefix = adapter_prefix(run_id, step)
    for name, body in files.items():
        deployment.s3.put_object(Bucket=deployment.bucket, Key=prefix + name, Body=body)
    manifest = AdapterManifest(
        run_id=run_id,
        step=step,
        adapter_name=adapter_name(run_id, step),
        base_model_id=BASE,
        lora_rank=32,
        lora_alpha=64,
        files={
            name: FileDigest(sha256=hashlib.sha256(body).hexdigest(), size=len(body)) for name, body in files.items()
        },
        created_at="2026-12-02T16:00:00Z",
    )
    key = adapter_manifest_key(run_id, step)
    deployment.s3.put_object(Bucket=deployment.bucket, Key=key, Body=manifest.to_json().encode())
    registry = deployment.registry
    registry.put_candidate(manifest, key)
    if solved is not None:
        result = eval_result(run_id, step, bits_with(solved), eval_set_sha256)
        deployment.s3.put_object(
            Bucket=deployment.bucket, Key=eval_result_key(run_id, step), Body=result.to_json().encode()
        )
        registry.record_eval(result)
    if status != ("EVALUATING" if solved is None else "EVALUATED"):
        registry.set_status(BASE, manifest.adapter_name, status)
    return manifest.adapter_name


def seed_baseline(deployment: Deployment, solved: int | None, eval_set_sha256: str | None = None) -> None:
    """Claim BASE's baseline on the fixed 9x9 set (or `eval_set_sha256`); unless `solved` is None, record it READY."""
    sha = eval_set_sha256 or fixed_eval_set_sha256()
    deployment.registry.claim_baseline(BASE, sha)
    if solved is None:
        return
    deployment.registry.record_baseline(baseline_result(bits_with(solved), sha, BASE), attempt=1)


def make_champion(deployment: Deployment, adapter: str, reason: str) -> None:
    """Promote `adapter` as the pipeline does: decision evidence, REGISTERED, then the pointer move."""
    registry = deployment.registry
    pointer = registry.get_champion(BASE)
    registry.record_decision(BASE, adapter, Decision(True, reason, {"b": 9, "c": 1, "p_value": 0.01}))
    registry.set_status(BASE, adapter, "REGISTERED")
    registry.promote(BASE, adapter, expected_version=pointer.version if pointer else 0)
