"""Runs both ASL definitions in moto's Step Functions interpreter, with stub Lambda handlers.

`LambdaFunction._invoke_lambda` is replaced in this module by a call to small Python stubs (an exception becomes a
function error named by its class); retry waits are recorded, not slept; DynamoDB and SNS integrations really run.
A 7-day training run is simulated on a clock that Wait states advance instead of sleeping (`simulated_clock`).
"""

from __future__ import annotations

import datetime
import functools
import io
import json
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import ensure_baseline
import get_ray_job
import pytest
import record_baseline
from mazeops_testing import FakeLambdaContext
from moto import mock_aws
from moto.awslambda.models import LambdaFunction
from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl
from moto.stepfunctions.parser.asl.component.state import state as moto_state
from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils
from moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function import WaitFunction
from moto.stepfunctions.parser.asl.utils import json_path

from mazeops.adapter_rows import AdapterNotReevaluable
from mazeops.baseline import BaselineResult, baseline_job_id, baseline_result_key
from mazeops.champion_rows import ChampionChanged
from mazeops.dynamo import put_if_absent
from mazeops.evalresult import MazeOutcome
from mazeops.names import eval_job_id
from mazeops.polling import (
    EVENTS_PER_POLL,
    HISTORY_EVENT_LIMIT,
    MAX_WAIT_SECONDS,
    POLL_EVENT_BUDGET,
    elapsed_between,
    polls_within,
)
from mazeops.ray_jobs import JobInfo, RayUnavailable
from mazeops.registry import Registry
from mazeops.run_caps import RunCapExceeded
from mazeops.runs import RunAlreadyExists
from mazeops.serve_client import ServeUnavailable, SmokeTestFailed

ROOT = Path(__file__).resolve().parent.parent
REGION = "us-east-1"
FUNCTIONS = {
    "ValidateRunSpecFunctionArn": "validate_run_spec",
    "SubmitRayJobFunctionArn": "submit_ray_job",
    "GetRayJobFunctionArn": "get_ray_job",
    "CheckAdapterFunctionArn": "check_adapter",
    "RecordEvalFunctionArn": "record_eval",
    "EnsureBaselineFunctionArn": "ensure_baseline",
    "RecordBaselineFunctionArn": "record_baseline",
    "CheckRunGuardFunctionArn": "check_run_guard",
    "DecidePromotionFunctionArn": "decide_promotion",
    "RegisterAdapterFunctionArn": "register_adapter",
    "SmokeTestFunctionArn": "smoke_test",
    "PromoteChampionFunctionArn": "promote_champion",
    "RollbackRegistrationFunctionArn": "rollback_registration",
}
BASE = "qwen3-vl-8b-sft"
ADAPTER = "r1-step20"
TRAIN_INPUT = {"bucket": "artifacts", "key": "requests/r1.json", "run_id": "r1", "poll_seconds": 30}
TABLES = {"runs": ["run_id"], "registry": ["base_model_id", "adapter_name"]}
EVAL_INPUT = {"bucket": "artifacts", "key": "runs/r1/adapters/global_step_20/manifest.json", "run_id": "r1", "step": 20}
SHA = "ab" * 32
DAY = 24 * 3600
SEVEN_DAYS = 7 * DAY  # both definitions' TimeoutSeconds
BASELINE_JOB = f"baseline-{BASE}-{SHA[:12]}-a1"

Stub = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass
class Execution:
    """The end of one execution: its description, the states it entered, in order."""

    arn: str
    status: str
    error: str | None
    cause: str | None
    output: dict[str, Any] | None
    states: list[str]
    events: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Stack:
    """Stub functions, tables and topic in moto, and a way to run a definition against them."""

    stubs: dict[str, Stub] = field(default_factory=dict)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    retry_waits: list[float] = field(default_factory=list)
    substitutions: dict[str, str] = field(default_factory=dict)
    machines: dict[str, str] = field(default_factory=dict)
    queue_url: str = ""

    def invoke(self, function_name: str, event: dict[str, Any]) -> tuple[str, bool, str]:
        """What moto's Lambda returns: (payload, errored, logs)."""
        self.calls.append((function_name, event))
        try:
            return json.dumps(self.stubs[function_name](event)), False, ""
        except Exception as error:  # the stub's error is the function's error, shaped as the Python runtime's
            trace = ['  File "/var/task/handler.py", line 1, in lambda_handler\n    raise error\n']
            payload = {
                "errorMessage": str(error),
                "errorType": type(error).__name__,
                "requestId": "r-1",
                "stackTrace": trace,
            }
            return json.dumps(payload), True, ""

    def called(self, function_name: str) -> list[dict[str, Any]]:
        return [event for name, event in self.calls if name == function_name]

    def machine(self, definition: str, **overrides: str) -> str:
        """The ARN of the state machine of `definition`, created with the substitutions (and `overrides` of them)
        on first use."""
        key = "-".join([definition, *(f"{name}{value}" for name, value in sorted(overrides.items()))])
        if key not in self.machines:
            text = (ROOT / "statemachines" / f"{definition}.asl.json").read_text()
            for name, value in (self.substitutions | overrides).items():
                text = text.replace("${" + name + "}", value)
            self.machines[key] = boto3.client("stepfunctions", region_name=REGION).create_state_machine(
                name=key, definition=text, roleArn=f"arn:aws:iam::123456789012:role/{definition}"
            )["stateMachineArn"]
        return self.machines[key]

    def run(self, definition: str, execution_input: dict[str, Any], **overrides: str) -> Execution:
        """Run `definition` (with `overrides` of the substitutions) to its end; its whole history is kept."""
        sfn = boto3.client("stepfunctions", region_name=REGION)
        arn = sfn.start_execution(
            stateMachineArn=self.machine(definition, **overrides),
            name=uuid.uuid4().hex,
            input=json.dumps(execution_input),
        )["executionArn"]
        deadline, pause = time.monotonic() + 60, 0.05
        while (described := sfn.describe_execution(executionArn=arn))["status"] == "RUNNING":
            assert time.monotonic() < deadline, "execution did not end"
            time.sleep(pause)
            pause = min(2 * pause, 1.0)  # a long execution is not slowed by asking after it
        pages = sfn.get_paginator("get_execution_history").paginate(executionArn=arn, maxResults=1000)
        events = [event for page in pages for event in page["events"]]
        return Execution(
            arn=arn,
            status=described["status"],
            error=described.get("error"),
            cause=described.get("cause"),
            output=json.loads(described["output"]) if described.get("output") else None,
            states=[e["stateEnteredEventDetails"]["name"] for e in events if "stateEnteredEventDetails" in e],
            events=events,
        )

    def reset(self) -> None:
        """Forget stubs, calls, waits, table rows and notifications of the previous test."""
        self.stubs.clear()
        self.calls.clear()
        self.retry_waits.clear()
        dynamodb = boto3.client("dynamodb", region_name=REGION)
        for table, keys in TABLES.items():
            for row in dynamodb.scan(TableName=table)["Items"]:
                dynamodb.delete_item(TableName=table, Key={key: row[key] for key in keys})
        self.messages()

    def messages(self) -> list[dict[str, str]]:
        """SNS notifications published since the last call: [{"Subject", "Message"}]."""
        sqs = boto3.client("sqs", region_name=REGION)
        found = sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10).get("Messages", [])
        for message in found:
            sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
        return [{key: json.loads(m["Body"]).get(key) for key in ("Subject", "Message")} for m in found]


def item(table: str, **key: str) -> dict[str, str]:
    answer = boto3.client("dynamodb", region_name=REGION).get_item(
        TableName=table, Key={name: {"S": value} for name, value in key.items()}
    )
    return {name: next(iter(value.values())) for name, value in answer.get("Item", {}).items()}


def put_item(table: str, **values: str) -> None:
    boto3.client("dynamodb", region_name=REGION).put_item(
        TableName=table, Item={name: {"S": value} for name, value in values.items()}
    )


@pytest.fixture(scope="module")
def moto_stack() -> Iterator[Stack]:
    """One moto account for the module: parsing the ASL is the slow part, so each machine is created once."""
    result = Stack()
    with pytest.MonkeyPatch.context() as patch:
        for name, value in {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": REGION,
        }.items():
            patch.setenv(name, value)
        patch.delenv("AWS_ENDPOINT_URL", raising=False)
        patch.setattr(
            LambdaFunction, "_invoke_lambda", lambda self, event=None: result.invoke(self.function_name, event)
        )
        patch.setattr(retrier_decl, "time", SimpleNamespace(sleep=result.retry_waits.append))
        with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
            create_resources(result)
            yield result


@pytest.fixture
def stack(moto_stack: Stack) -> Stack:
    moto_stack.reset()
    return moto_stack


def create_resources(stack: Stack) -> None:
    """Stub functions, the runs and registry tables, and a topic whose messages land in a queue."""
    role = boto3.client("iam").create_role(RoleName="stub", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("stub.py", "")
    lambdas = boto3.client("lambda", region_name=REGION)
    for substitution, function_name in FUNCTIONS.items():
        stack.substitutions[substitution] = lambdas.create_function(
            FunctionName=function_name,
            Runtime="python3.12",
            Role=role,
            Handler="stub.lambda_handler",
            Code={"ZipFile": code.getvalue()},
        )["FunctionArn"]
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    for table, keys in TABLES.items():
        dynamodb.create_table(
            TableName=table,
            KeySchema=[{"AttributeName": k, "KeyType": t} for k, t in zip(keys, ["HASH", "RANGE"], strict=False)],
            AttributeDefinitions=[{"AttributeName": k, "AttributeType": "S"} for k in keys],
            BillingMode="PAY_PER_REQUEST",
        )
    sns, sqs = boto3.client("sns", region_name=REGION), boto3.client("sqs", region_name=REGION)
    topic = sns.create_topic(Name="notifications")["TopicArn"]
    stack.queue_url = sqs.create_queue(QueueName="inbox")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=stack.queue_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn)
    stack.substitutions.update(RunsTableName="runs", RegistryTableName="registry", TopicArn=topic, PollSeconds="0")
    boto3.client("s3", region_name=REGION).create_bucket(Bucket="artifacts")


# ------------------------------------------------------------------ stubs of the handlers


def validate_ok(event: dict[str, Any]) -> dict[str, Any]:
    put_item("runs", run_id=event["run_id"], status="SUBMITTED")
    return {
        "run_id": event["run_id"],
        "spec_key": f"runs/{event['run_id']}/spec.json",
        "spec_sha256": "0" * 64,
        "base_model_id": BASE,
        "backend": "tiny",
        "total_steps": 4,
    }


def submitted(event: dict[str, Any]) -> dict[str, Any]:
    job_ids = {
        "train": lambda: f"train-{event['run_id']}",
        "eval": lambda: f"eval-{event['run_id']}-step{event['step']}",
        "baseline": lambda: baseline_job_id(event["base_model_id"], event["eval_set_sha256"], event["attempt"]),
    }
    return {"job_id": job_ids[event["kind"]](), "status": "PENDING", "already_submitted": False}


def job_statuses(*statuses: str, message: str | None = None, logs_tail: str = "") -> Stub:
    """get_ray_job answering `statuses` in turn (and, as on a poll schedule, no wait before the next poll)."""
    remaining = iter(statuses)

    def get(event: dict[str, Any]) -> dict[str, Any]:
        status = next(remaining)
        terminal = status in ("SUCCEEDED", "FAILED", "STOPPED")
        return {
            "job_id": event["job_id"],
            "status": status,
            "terminal": terminal,
            "message": message,
            "logs_tail": logs_tail,
            "next_poll_seconds": 0,
        }

    return get


def failing(*errors: Exception, then: Stub | None = None) -> Stub:
    """Raise `errors` one per call, then answer with `then`."""
    remaining = iter(errors)

    def call(event: dict[str, Any]) -> dict[str, Any]:
        error = next(remaining, None)
        if error is not None or then is None:
            raise error or AssertionError("called once too often")
        return then(event)

    return call


def adapter_claimed(event: dict[str, Any]) -> dict[str, Any]:
    """check_adapter: claims the challenger's row once (a concurrent execution keeps what the first recorded)."""
    row = {
        name: {"S": value}
        for name, value in {"base_model_id": BASE, "adapter_name": ADAPTER, "status": "EVALUATING"}.items()
    }
    put_if_absent(boto3.client("dynamodb", region_name=REGION), "registry", row, "adapter_name")
    return {
        "duplicate": False,
        "run_id": event["run_id"],
        "step": event["step"],
        "adapter_name": ADAPTER,
        "base_model_id": BASE,
        "manifest_key": event["key"],
        "lora_rank": 32,
    }


def evaluation_stubs(promote: bool) -> dict[str, Stub]:
    return {
        "check_adapter": adapter_claimed,
        "submit_ray_job": submitted,
        "get_ray_job": job_statuses("RUNNING", "SUCCEEDED"),
        "record_eval": lambda e: {
            "solve_rate": 0.75,
            "n_solved": 48,
            "n_total": 64,
            "result_key": "runs/r1/evals/global_step_20/result.json",
        },
        "ensure_baseline": lambda e: {
            "status": "READY",
            "eval_set_sha256": SHA,
            "attempt": 1,
            "job_id": BASELINE_JOB,
            "error": None,
        },
        "check_run_guard": lambda e: {"stopped": False, "guard": None, "reason": "run 'r1': no collapse"},
        "decide_promotion": lambda e: {
            "promote": promote,
            "reason": "beats the champion (McNemar p=0.01)"
            if promote
            else "solve rate 0.75 does not beat the champion",
            "champion": "r0-step40",
            "champion_version": 3,
            "evidence": {"p_value": 0.01},
        },
        "register_adapter": lambda e: {
            "serving_prefix": f"serving/{BASE}/{ADAPTER}/",
            "served_model_id": f"{BASE}:{ADAPTER}",
        },
        "smoke_test": lambda e: {"served_model_id": f"{BASE}:{ADAPTER}", "latency_ms": 120, "answer": "('move', 0)"},
        "promote_champion": lambda e: {"champion": ADAPTER, "previous": ["r0-step40"], "version": 4},
        "rollback_registration": lambda e: {"champion": "r0-step40", "rolled_back": ADAPTER},
    }


# ------------------------------------------------------------------ training


def test_training_succeeds_after_polling(stack: Stack) -> None:
    stack.stubs.update(
        validate_run_spec=validate_ok,
        submit_ray_job=submitted,
        get_ray_job=job_statuses("PENDING", "RUNNING", "SUCCEEDED"),
    )
    execution = stack.run("training", TRAIN_INPUT)

    assert execution.status == "SUCCEEDED"
    assert execution.states.count("GetJobStatus") == 3
    assert execution.states[-3:] == ["RecordRunSucceeded", "NotifyRunSucceeded", "RunSucceeded"]
    validate_event = stack.called("validate_run_spec")[0]
    assert validate_event == {
        "bucket": "artifacts",
        "key": "requests/r1.json",
        "run_id": "r1",
        "execution_arn": execution.arn,
    }
    assert stack.called("submit_ray_job") == [{"kind": "train", "run_id": "r1"}]
    first_poll = stack.called("get_ray_job")[0]
    assert first_poll["job_id"] == "train-r1"
    schedule = first_poll["poll"]
    assert (schedule["poll_seconds"], schedule["timeout_seconds"]) == (0, SEVEN_DAYS)  # the template's, the ASL's
    assert 0 <= elapsed_between(schedule["started_at"], schedule["polled_at"]) < 60
    row = item("runs", run_id="r1")
    assert (row["status"], row["job_id"]) == ("SUCCEEDED", "train-r1")
    [message] = stack.messages()
    assert "succeeded" in message["Subject"] and "train-r1" in message["Message"]
    assert set(execution.output) == {"bucket", "key", "run_id", "poll_seconds", "validate", "submit", "job"}
    assert execution.output["poll_seconds"] == 0  # the template's PollSeconds, not the input's 30


def test_training_job_failure_is_recorded_notified_and_fails_the_execution(stack: Stack) -> None:
    stack.stubs.update(
        validate_run_spec=validate_ok,
        submit_ray_job=submitted,
        get_ray_job=job_statuses(
            "RUNNING", "FAILED", message="Job entrypoint command failed with exit code 1", logs_tail="CUDA OOM"
        ),
    )
    execution = stack.run("training", TRAIN_INPUT)

    assert (execution.status, execution.error) == ("FAILED", "TrainingJobFailed")
    assert "exit code 1" in execution.cause and "CUDA OOM" in execution.cause
    row = item("runs", run_id="r1")
    assert row["status"] == "FAILED" and row["error"].startswith("TrainingJobFailed: Ray job train-r1 ended FAILED")
    [message] = stack.messages()
    assert "failed" in message["Subject"] and "TrainingJobFailed" in message["Message"]


def test_training_retries_ray_unavailable_then_succeeds(stack: Stack) -> None:
    stack.stubs.update(
        validate_run_spec=validate_ok,
        submit_ray_job=failing(RayUnavailable("connection refused"), RayUnavailable("HTTP 503"), then=submitted),
        get_ray_job=job_statuses("SUCCEEDED"),
    )
    execution = stack.run("training", TRAIN_INPUT)

    assert execution.status == "SUCCEEDED"
    assert len(stack.called("submit_ray_job")) == 3
    # IntervalSeconds 2, BackoffRate 2, full jitter: the waits are drawn from [0, 2] and [0, 4].
    assert len(stack.retry_waits) == 2
    assert 0 <= stack.retry_waits[0] <= 2 and 0 <= stack.retry_waits[1] <= 4


def test_training_keeps_polling_while_ray_stays_unreachable(stack: Stack) -> None:
    stack.stubs.update(
        validate_run_spec=validate_ok,
        submit_ray_job=submitted,
        get_ray_job=job_statuses("RUNNING", *["UNREACHABLE"] * 6, "SUCCEEDED"),
    )
    execution = stack.run("training", TRAIN_INPUT)

    assert execution.status == "SUCCEEDED"
    assert execution.states.count("GetJobStatus") == execution.states.count("WaitForJob") == 8
    assert stack.retry_waits == []  # an unreachable head is polled again after the wait, not retried
    assert item("runs", run_id="r1")["status"] == "SUCCEEDED"


def test_training_refused_run_leaves_the_existing_run_untouched(stack: Stack) -> None:
    put_item("runs", run_id="r1", status="SUCCEEDED", job_id="train-r1")
    stack.stubs.update(validate_run_spec=failing(RunAlreadyExists("run r1 exists with another spec")))
    execution = stack.run("training", TRAIN_INPUT)

    assert (execution.status, execution.error, execution.cause) == (
        "FAILED",
        "RunAlreadyExists",
        "run r1 exists with another spec",
    )
    assert item("runs", run_id="r1") == {"run_id": "r1", "status": "SUCCEEDED", "job_id": "train-r1"}
    assert stack.called("submit_ray_job") == []
    [message] = stack.messages()
    assert "failed with RunAlreadyExists: run r1 exists with another spec (execution " in message["Message"]
    assert "stackTrace" not in message["Message"] and "\n" not in message["Message"]


def test_training_over_a_stage_cap_is_refused_and_notified_like_an_invalid_spec(stack: Stack) -> None:
    cause = "2 runs are active (r0, r2); this stage's cap MaxActiveRuns=2 allows no more"
    stack.stubs.update(validate_run_spec=failing(RunCapExceeded(cause)))
    execution = stack.run("training", TRAIN_INPUT)

    assert (execution.status, execution.error, execution.cause) == ("FAILED", "RunCapExceeded", cause)
    assert stack.called("submit_ray_job") == []
    [message] = stack.messages()
    assert f"failed with RunCapExceeded: {cause} (execution " in message["Message"]


# ------------------------------------------------------------------ evaluation


def test_evaluation_of_a_duplicate_adapter_stops_early(stack: Stack) -> None:
    stack.stubs.update(check_adapter=lambda e: {**adapter_claimed(e), "duplicate": True})
    execution = stack.run("evaluation", EVAL_INPUT)

    assert execution.status == "SUCCEEDED"
    assert execution.states[-1] == "AlreadyEvaluated"
    assert stack.called("submit_ray_job") == [] and stack.messages() == []


def test_evaluation_promotes_after_the_smoke_test(stack: Stack) -> None:
    stack.stubs.update(evaluation_stubs(promote=True))
    stack.stubs["smoke_test"] = failing(ServeUnavailable("adapter loading"), then=stack.stubs["smoke_test"])
    execution = stack.run("evaluation", EVAL_INPUT)

    assert execution.status == "SUCCEEDED"
    assert execution.states[-1] == "Promoted"
    order = [name for name, _ in stack.calls]
    assert order.index("register_adapter") < order.index("smoke_test") < order.index("promote_champion")
    assert len(stack.called("smoke_test")) == 2 and len(stack.retry_waits) == 1
    assert stack.called("submit_ray_job") == [
        {"kind": "eval", "run_id": "r1", "step": 20, "base_model_id": BASE, "attempt": 1}
    ]
    assert stack.called("promote_champion") == [{"base_model_id": BASE, "adapter_name": ADAPTER, "champion_version": 3}]
    assert stack.called("rollback_registration") == []
    [message] = stack.messages()
    assert "promoted" in message["Subject"] and "new champion" in message["Message"]


def test_evaluation_not_promoted_marks_the_adapter_rejected(stack: Stack) -> None:
    stack.stubs.update(evaluation_stubs(promote=False))
    execution = stack.run("evaluation", EVAL_INPUT)

    assert execution.status == "SUCCEEDED"
    assert execution.states[-1] == "Rejected"
    row = item("registry", base_model_id=BASE, adapter_name=ADAPTER)
    assert row["status"] == "REJECTED" and row["reason"] == "solve rate 0.75 does not beat the champion"
    assert stack.called("register_adapter") == [] and stack.called("promote_champion") == []
    [message] = stack.messages()
    assert "not promoted" in message["Subject"] and "r0-step40" in message["Message"]


@pytest.mark.parametrize(
    ("failing_step", "error"),
    [
        ("register_adapter", RuntimeError("copy failed")),
        ("smoke_test", SmokeTestFailed("answer is not an action")),
        ("promote_champion", ChampionChanged("champion of qwen3-vl-8b-sft changed meanwhile")),
    ],
)
def test_evaluation_failure_after_registration_rolls_back(stack: Stack, failing_step: str, error: Exception) -> None:
    stack.stubs.update(evaluation_stubs(promote=True))
    stack.stubs[failing_step] = failing(error)
    execution = stack.run("evaluation", EVAL_INPUT)

    assert (execution.status, execution.error) == ("FAILED", "PromotionRolledBack")
    assert execution.cause == f"{type(error).__name__}: {error}"  # one line: no runtime JSON, no stack trace
    [rollback] = stack.called("rollback_registration")
    assert rollback["adapter_name"] == ADAPTER and rollback["error"] == {
        "Error": type(error).__name__,
        "Cause": str(error),
    }
    order = [name for name, _ in stack.calls]
    assert order[-1] == "rollback_registration"
    if failing_step != "promote_champion":
        assert stack.called("promote_champion") == []
    [message] = stack.messages()
    assert "rolled back" in message["Subject"] and "r0-step40" in message["Message"]


def test_evaluation_job_failure_marks_the_adapter_eval_failed(stack: Stack) -> None:
    stack.stubs.update(evaluation_stubs(promote=True))
    stack.stubs["get_ray_job"] = job_statuses("STOPPED", message="Job was intentionally stopped.")
    execution = stack.run("evaluation", EVAL_INPUT)

    assert (execution.status, execution.error) == ("FAILED", "EvaluationJobFailed")
    row = item("registry", base_model_id=BASE, adapter_name=ADAPTER)
    assert row["status"] == "EVAL_FAILED" and "intentionally stopped" in row["error"]
    assert stack.called("record_eval") == []
    [message] = stack.messages()
    assert "evaluation of r1 step 20 failed" in message["Subject"]


# ------------------------------------------------------------------ evaluation: the baseline (first champion)

CHALLENGER_BITS = "1" * 48 + "0" * 16
BASELINE_BITS = "1" * 12 + "0" * 52


def adapter_evaluated(event: dict[str, Any]) -> dict[str, Any]:
    """record_eval: the challenger's row gets its outcomes on the evaluation set SHA."""
    put_item(
        "registry",
        base_model_id=BASE,
        adapter_name=ADAPTER,
        status="EVALUATED",
        outcomes=CHALLENGER_BITS,
        eval_set_sha256=SHA,
    )
    return {"solve_rate": 0.75, "n_solved": 48, "n_total": 64, "result_key": "runs/r1/evals/global_step_20/result.json"}


def jobs_by_id(**statuses: list[str]) -> Stub:
    """get_ray_job answering each job id (dashes as underscores in the keyword) from its own list of statuses (and,
    as on a poll schedule, no wait before the next poll)."""
    remaining = {job_id.replace("_", "-"): iter(answers) for job_id, answers in statuses.items()}

    def get(event: dict[str, Any]) -> dict[str, Any]:
        status = next(remaining[event["job_id"]])
        terminal = status in ("SUCCEEDED", "FAILED", "STOPPED")
        message = "Job entrypoint command failed with exit code 1" if status == "FAILED" else None
        return {
            "job_id": event["job_id"],
            "status": status,
            "terminal": terminal,
            "message": message,
            "logs_tail": "CUDA OOM" if terminal else "",
            "next_poll_seconds": 0,
        }

    return get


def put_baseline_result(bits: str = BASELINE_BITS, attempt: int = 1) -> None:
    """What the baseline's Ray job writes: the base model's outcomes on the evaluation set SHA."""
    result = BaselineResult(
        base_model_id=BASE,
        eval_set_name="maze-eval-64",
        eval_set_sha256=SHA,
        outcomes=[MazeOutcome(seed=seed, solved=bit == "1", turns=5) for seed, bit in enumerate(bits)],
        backend="vllm",
        started_at="2026-12-02T16:00:00Z",
        finished_at="2026-12-02T16:10:00Z",
    )
    boto3.client("s3", region_name=REGION).put_object(
        Bucket="artifacts", Key=baseline_result_key(BASE, SHA, attempt), Body=result.to_json().encode()
    )


@pytest.fixture
def baseline_stack(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Stack:
    """The evaluation stubs, with the real ensure_baseline and record_baseline handlers on moto's registry
    and bucket."""
    for name, value in {
        "REGISTRY_TABLE": "registry",
        "ARTIFACTS_BUCKET": "artifacts",
        "POWERTOOLS_TRACE_DISABLED": "1",
    }.items():
        monkeypatch.setenv(name, value)
    stack.stubs.update(evaluation_stubs(promote=True))
    stack.stubs.update(
        record_eval=adapter_evaluated,
        ensure_baseline=lambda e: ensure_baseline.lambda_handler(e, FakeLambdaContext()),
        record_baseline=lambda e: record_baseline.lambda_handler(e, FakeLambdaContext()),
        get_ray_job=jobs_by_id(
            eval_r1_step20=["RUNNING", "SUCCEEDED"], **{BASELINE_JOB.replace("-", "_"): ["RUNNING", "SUCCEEDED"]}
        ),
    )
    boto3.client("s3", region_name=REGION).delete_object(Bucket="artifacts", Key=baseline_result_key(BASE, SHA, 1))
    return stack


def baseline_submissions(stack: Stack) -> list[dict[str, Any]]:
    return [event for event in stack.called("submit_ray_job") if event["kind"] == "baseline"]


def test_first_evaluation_of_a_base_model_evaluates_and_records_its_baseline_before_deciding(
    baseline_stack: Stack,
) -> None:
    put_baseline_result()
    execution = baseline_stack.run("evaluation", EVAL_INPUT)

    assert execution.status == "SUCCEEDED" and execution.states[-1] == "Promoted"
    assert baseline_submissions(baseline_stack) == [
        {"kind": "baseline", "base_model_id": BASE, "eval_set_sha256": SHA, "attempt": 1}
    ]
    order = [name for name, _ in baseline_stack.calls]
    assert (
        order.index("record_eval")
        < order.index("ensure_baseline")
        < order.index("record_baseline")
        < order.index("decide_promotion")
    )
    assert execution.states.count("GetBaselineJobStatus") == 2
    [recorded] = baseline_stack.called("record_baseline")
    assert recorded == {
        "base_model_id": BASE,
        "eval_set_sha256": SHA,
        "attempt": 1,
        "job": {"status": "SUCCEEDED", "message": None, "logs_tail": "CUDA OOM"},
    }
    assert execution.output["baseline_record"] == {
        "ready": True,
        "reason": "baseline recorded",
        "solve_rate": 12 / 64,
        "n_solved": 12,
        "n_total": 64,
    }
    baseline = Registry(boto3.client("dynamodb", region_name=REGION), "registry").get_baseline(BASE, SHA)
    assert (baseline.status, baseline.attempt, baseline.job_id, baseline.outcomes) == (
        "READY",
        1,
        BASELINE_JOB,
        BASELINE_BITS,
    )
    assert baseline.eval_set_name == "maze-eval-64"


def test_a_later_evaluation_reuses_the_recorded_baseline(baseline_stack: Stack) -> None:
    put_baseline_result()
    first = baseline_stack.run("evaluation", EVAL_INPUT)
    assert first.status == "SUCCEEDED"
    baseline_stack.calls.clear()
    baseline_stack.stubs["get_ray_job"] = jobs_by_id(eval_r1_step20=["SUCCEEDED"])
    second = baseline_stack.run("evaluation", EVAL_INPUT)

    assert second.status == "SUCCEEDED" and second.states[-1] == "Promoted"
    assert "SubmitBaselineJob" not in second.states and "RecordBaseline" not in second.states
    assert baseline_submissions(baseline_stack) == [] and baseline_stack.called("record_baseline") == []
    assert second.output["baseline"]["status"] == "READY"


def test_concurrent_first_evaluations_share_one_baseline_job_and_record_it_once(baseline_stack: Stack) -> None:
    put_baseline_result()
    baseline_stack.stubs["get_ray_job"] = lambda e: {
        "job_id": e["job_id"],
        "status": "SUCCEEDED",
        "terminal": True,
        "message": None,
        "logs_tail": "",
        "next_poll_seconds": 0,
    }
    sfn = boto3.client("stepfunctions", region_name=REGION)
    machine = baseline_stack.machine("evaluation")
    arns = [
        sfn.start_execution(stateMachineArn=machine, name=f"concurrent-{i}", input=json.dumps(EVAL_INPUT))[
            "executionArn"
        ]
        for i in range(2)
    ]
    deadline = time.monotonic() + 60
    while any(sfn.describe_execution(executionArn=arn)["status"] == "RUNNING" for arn in arns):
        assert time.monotonic() < deadline
        time.sleep(0.1)

    assert [sfn.describe_execution(executionArn=arn)["status"] for arn in arns] == ["SUCCEEDED", "SUCCEEDED"]
    submissions = baseline_submissions(baseline_stack)
    assert 1 <= len(submissions) <= 2 and {event["attempt"] for event in submissions} == {1}  # one submission id
    answers = [json.loads(out) for out in [sfn.describe_execution(executionArn=arn)["output"] for arn in arns]]
    assert all(answer["baseline"]["job_id"] == BASELINE_JOB for answer in answers)
    baseline = Registry(boto3.client("dynamodb", region_name=REGION), "registry").get_baseline(BASE, SHA)
    assert (baseline.status, baseline.attempt, baseline.outcomes) == ("READY", 1, BASELINE_BITS)


def test_a_failed_baseline_evaluation_fails_safe_and_leaves_the_champion_alone(baseline_stack: Stack) -> None:
    put_item("registry", base_model_id=BASE, adapter_name="#CHAMPION", champion="r0-step40", version="3")
    baseline_stack.stubs["get_ray_job"] = jobs_by_id(
        eval_r1_step20=["SUCCEEDED"], **{BASELINE_JOB.replace("-", "_"): ["RUNNING", "FAILED"]}
    )
    execution = baseline_stack.run("evaluation", EVAL_INPUT)

    assert (execution.status, execution.error) == ("FAILED", "BaselineUnavailable")
    assert "exit code 1" in execution.cause and "CUDA OOM" in execution.cause
    assert execution.states[-3:] == ["RecordNoBaseline", "NotifyNoBaseline", "NoBaseline"]
    for never in ("decide_promotion", "register_adapter", "smoke_test", "promote_champion", "rollback_registration"):
        assert baseline_stack.called(never) == [], never
    assert item("registry", base_model_id=BASE, adapter_name="#CHAMPION") == {
        "base_model_id": BASE,
        "adapter_name": "#CHAMPION",
        "champion": "r0-step40",
        "version": "3",
    }
    row = boto3.client("dynamodb", region_name=REGION).get_item(
        TableName="registry", Key={"base_model_id": {"S": BASE}, "adapter_name": {"S": ADAPTER}}
    )["Item"]
    assert row["status"] == {"S": "EVALUATED"}
    decision = row["decision"]["M"]
    assert decision["promote"] == {"BOOL": False} and decision["against"] == {"S": "#BASELINE"}
    assert decision["reason"]["S"].startswith("not decided: no baseline to compare with (BaselineUnavailable: ")
    assert decision["challenger_solve_rate"] == {"N": "0.75"} and decision["p_value"] == {"NULL": True}
    baseline = Registry(boto3.client("dynamodb", region_name=REGION), "registry").get_baseline(BASE, SHA)
    assert baseline.status == "FAILED" and "ended FAILED" in baseline.error
    [message] = baseline_stack.messages()
    assert "no baseline" in message["Subject"] and f"mazeops-ops baseline evaluate {BASE}" in message["Message"]


def test_a_failed_baseline_is_not_evaluated_again_by_the_next_evaluation(baseline_stack: Stack) -> None:
    registry = Registry(boto3.client("dynamodb", region_name=REGION), "registry")
    registry.claim_baseline(BASE, SHA)
    registry.fail_baseline(BASE, SHA, 1, "Ray job ended FAILED: bad base model path")
    baseline_stack.stubs["get_ray_job"] = jobs_by_id(eval_r1_step20=["SUCCEEDED"])
    execution = baseline_stack.run("evaluation", EVAL_INPUT)

    assert (execution.status, execution.error) == ("FAILED", "BaselineUnavailable")
    assert "bad base model path" in execution.cause and "DescribeBaselineFailed" in execution.states
    assert baseline_submissions(baseline_stack) == [] and baseline_stack.called("decide_promotion") == []
    assert registry.get_baseline(BASE, SHA).attempt == 1


def test_an_unreadable_baseline_result_fails_safe(baseline_stack: Stack) -> None:
    execution = baseline_stack.run("evaluation", EVAL_INPUT)  # the job SUCCEEDED but wrote no result

    assert (execution.status, execution.error) == ("FAILED", "BaselineUnavailable")
    assert "does not exist" in execution.cause
    assert baseline_stack.called("decide_promotion") == []
    assert Registry(boto3.client("dynamodb", region_name=REGION), "registry").get_baseline(BASE, SHA).status == "FAILED"


# ------------------------------------------------------------------ a 7-day training run on a simulated clock


@dataclass
class SimulatedClock:
    """Seconds added to the Context object's times: each Wait state adds its seconds instead of sleeping them."""

    offset: float = 0.0
    waits: list[int] = field(default_factory=list)

    def wait(self, seconds: int) -> None:
        self.waits.append(seconds)
        self.offset += seconds


@pytest.fixture
def simulated_clock(monkeypatch: pytest.MonkeyPatch) -> SimulatedClock:
    """moto's Wait states advance this clock, and `$$.State.EnteredTime` reads it (`$$.Execution.StartTime` is the
    real start): a wait of a day takes no time, and the ASL and the handlers see it pass."""
    clock = SimulatedClock()

    class ShiftedDatetime(datetime.datetime):
        @classmethod
        def now(cls, tz: datetime.tzinfo | None = None) -> datetime.datetime:
            return datetime.datetime.now(tz) + datetime.timedelta(seconds=clock.offset)

    monkeypatch.setattr(moto_state, "datetime", SimpleNamespace(datetime=ShiftedDatetime, timezone=datetime.UTC))
    monkeypatch.setattr(WaitFunction, "_wait_interval", lambda self, env, wait_seconds: clock.wait(wait_seconds))
    # A thousand polls in seconds: moto parses each JSONPath and builds a Lambda client (with fixed fake keys
    # whatever the state's credentials) at every use; keep both.
    monkeypatch.setattr(json_path, "parse", functools.lru_cache(maxsize=None)(json_path.parse))
    client_for = functools.lru_cache(maxsize=None)(lambda_eval_utils.boto_client_for)
    monkeypatch.setattr(
        lambda_eval_utils,
        "boto_client_for",
        lambda region, service, state_credentials=None: client_for(region=region, service=service),
    )
    return clock


@dataclass
class LongRayJob:
    """A Ray head whose job runs until `ends_at` seconds after the execution started; the head cannot be reached
    in `outage` (seconds after the start, from, to). `now` is set from each poll's own times."""

    ends_at: float
    outage: tuple[float, float]
    now: float = 0.0
    answered: list[str] = field(default_factory=list)

    def get(self, job_id: str) -> JobInfo:
        self._reachable()
        status = "SUCCEEDED" if self.now >= self.ends_at else "RUNNING"
        self.answered.append(status)
        return JobInfo(submission_id=job_id, status=status, message=f"Job {status.lower()}.")

    def logs_tail(self, job_id: str, max_chars: int = 4000) -> str:
        self._reachable()
        return "global_step_2000 uploaded"[-max_chars:]

    def _reachable(self) -> None:
        if self.outage[0] <= self.now < self.outage[1]:
            self.answered.append("unreachable")
            raise RayUnavailable("timed out after 10 s")


@pytest.fixture
def long_job(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> LongRayJob:
    """The real get_ray_job handler on a job that runs for 7 days less 15 minutes, its head down on days 2 to 4."""
    job = LongRayJob(ends_at=SEVEN_DAYS - 15 * 60, outage=(2 * DAY, 4 * DAY))
    for name, value in {
        "RAY_ADDRESS": "http://ray-head.internal:8265",
        "POWERTOOLS_TRACE_DISABLED": "1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(get_ray_job, "ray_jobs_client", lambda address: job)

    def poll(event: dict[str, Any]) -> dict[str, Any]:
        job.now = elapsed_between(event["poll"]["started_at"], event["poll"]["polled_at"])
        return get_ray_job.lambda_handler(event, FakeLambdaContext())

    stack.stubs.update(validate_run_spec=validate_ok, submit_ray_job=submitted, get_ray_job=poll)
    return job


# PollSeconds' MinValue and MaxValue in template.yaml (every value between: tests/test_mazeops_polling.py).
@pytest.mark.parametrize("poll_seconds", [1, MAX_WAIT_SECONDS])
def test_a_seven_day_run_stays_within_the_history_limit(
    stack: Stack, simulated_clock: SimulatedClock, long_job: LongRayJob, poll_seconds: int
) -> None:
    execution = stack.run("training", TRAIN_INPUT, PollSeconds=str(poll_seconds))

    assert execution.status == "SUCCEEDED", execution.cause
    assert item("runs", run_id="r1")["status"] == "SUCCEEDED"
    polls = execution.states.count("GetJobStatus")
    assert long_job.answered[-1] == "SUCCEEDED" and long_job.answered.count("SUCCEEDED") == 1
    assert "unreachable" in long_job.answered and "RUNNING" in long_job.answered
    # The job was seen ending before the execution's timeout: the waits before its last poll add up to less.
    assert long_job.ends_at <= sum(simulated_clock.waits) < SEVEN_DAYS
    assert simulated_clock.waits[0] == poll_seconds and max(simulated_clock.waits) <= MAX_WAIT_SECONDS
    # The history: 9 events a poll, however the poll ended, and the polls no more than the schedule's bound.
    entered = [e["id"] for e in execution.events if e.get("stateEnteredEventDetails", {}).get("name") == "GetJobStatus"]
    assert {later - earlier for earlier, later in zip(entered, entered[1:], strict=False)} == {EVENTS_PER_POLL}
    assert polls <= polls_within(poll_seconds, SEVEN_DAYS) and polls * EVENTS_PER_POLL <= POLL_EVENT_BUDGET
    assert len(execution.events) < HISTORY_EVENT_LIMIT


# ------------------------------------------------------------------ evaluation: the run's collapse guard


def test_evaluation_checks_the_run_guard_before_deciding(stack: Stack) -> None:
    stack.stubs.update(evaluation_stubs(promote=False))
    execution = stack.run("evaluation", EVAL_INPUT)

    assert execution.status == "SUCCEEDED" and execution.states[-1] == "Rejected"
    states = execution.states
    assert states.index("BaselineReady?") < states.index("CheckRunGuard") < states.index("DecidePromotion")
    assert stack.called("check_run_guard") == [
        {"base_model_id": BASE, "adapter_name": ADAPTER, "run_id": "r1", "step": 20}
    ]
    order = [name for name, _ in stack.calls]
    assert order.index("check_run_guard") + 1 == order.index("decide_promotion")
    assert execution.output["guard"] == {"stopped": False, "reason": "run 'r1': no collapse"}
    assert "guard_error" not in execution.output


def test_a_freshly_recorded_baseline_also_passes_through_the_run_guard(baseline_stack: Stack) -> None:
    put_baseline_result()
    execution = baseline_stack.run("evaluation", EVAL_INPUT)

    assert execution.status == "SUCCEEDED" and "RecordBaseline" in execution.states
    states = execution.states
    assert states.index("BaselineRecorded?") < states.index("CheckRunGuard") < states.index("DecidePromotion")
    order = [name for name, _ in baseline_stack.calls]
    assert order.index("record_baseline") < order.index("check_run_guard") < order.index("decide_promotion")


def test_a_failing_run_guard_does_not_lose_the_evaluation(stack: Stack) -> None:
    stack.stubs.update(evaluation_stubs(promote=True))
    stack.stubs["check_run_guard"] = failing(RuntimeError("runs table unreachable"))
    execution = stack.run("evaluation", EVAL_INPUT)

    assert execution.status == "SUCCEEDED" and execution.states[-1] == "Promoted"
    assert execution.states.index("CheckRunGuard") < execution.states.index("DecidePromotion")
    assert len(stack.called("check_run_guard")) == 1 and stack.retry_waits == []  # a handler error is not retried
    assert len(stack.called("decide_promotion")) == 1
    assert execution.output["guard_error"]["Error"] == "RuntimeError"
    assert "runs table unreachable" in execution.output["guard_error"]["Cause"]
    assert "guard" not in execution.output


def test_a_run_guard_that_timed_out_is_retried(stack: Stack) -> None:
    stack.stubs.update(evaluation_stubs(promote=False))
    timed_out = type("Sandbox.Timedout", (Exception,), {})
    stack.stubs["check_run_guard"] = failing(
        timed_out("Task timed out after 60.00 seconds"), then=stack.stubs["check_run_guard"]
    )
    execution = stack.run("evaluation", EVAL_INPUT)

    assert execution.status == "SUCCEEDED" and execution.states[-1] == "Rejected"
    assert len(stack.called("check_run_guard")) == 2 and len(stack.retry_waits) == 1
    assert execution.output["guard"]["stopped"] is False and "guard_error" not in execution.output


# ------------------------------------------------------------------ evaluation: a re-evaluation (attempt 2 on)


def submitted_attempt(event: dict[str, Any]) -> dict[str, Any]:
    """submit_ray_job of an evaluation: the job id of its attempt (eval_job_id)."""
    job_id = eval_job_id(event["run_id"], event["step"], event.get("attempt", 1))
    return {"job_id": job_id, "status": "PENDING", "already_submitted": False}


def test_a_reevaluation_carries_its_attempt_to_the_check_the_submission_and_the_poll(stack: Stack) -> None:
    stack.stubs.update(evaluation_stubs(promote=False), submit_ray_job=submitted_attempt)
    execution = stack.run("evaluation", {**EVAL_INPUT, "attempt": 2})

    assert execution.status == "SUCCEEDED" and execution.states[-1] == "Rejected"
    assert "FirstAttempt" not in execution.states
    assert [event["attempt"] for event in stack.called("check_adapter")] == [2]
    assert stack.called("submit_ray_job") == [
        {"kind": "eval", "run_id": "r1", "step": 20, "base_model_id": BASE, "attempt": 2}
    ]
    assert {event["job_id"] for event in stack.called("get_ray_job")} == {"eval-r1-step20-a2"}


def test_an_input_without_attempt_is_the_first_attempt(stack: Stack) -> None:
    stack.stubs.update(evaluation_stubs(promote=False), submit_ray_job=submitted_attempt)
    execution = stack.run("evaluation", EVAL_INPUT)

    assert execution.status == "SUCCEEDED" and execution.states[:3] == ["Attempt?", "FirstAttempt", "Configure"]
    assert [event["attempt"] for event in stack.called("check_adapter")] == [1]
    assert {event["job_id"] for event in stack.called("get_ray_job")} == {"eval-r1-step20"}


def test_a_refused_reevaluation_fails_visibly_and_leaves_the_champion_alone(stack: Stack) -> None:
    put_item("registry", base_model_id=BASE, adapter_name=ADAPTER, status="CHAMPION")
    stack.stubs.update(evaluation_stubs(promote=True))
    stack.stubs["check_adapter"] = failing(
        AdapterNotReevaluable(f"{BASE}:{ADAPTER} is CHAMPION; only an adapter in EVAL_FAILED, ... is evaluated again")
    )
    execution = stack.run("evaluation", {**EVAL_INPUT, "attempt": 2})

    assert (execution.status, execution.error) == ("FAILED", "AdapterNotReevaluable")
    assert execution.cause.startswith(f"{BASE}:{ADAPTER} is CHAMPION")
    assert item("registry", base_model_id=BASE, adapter_name=ADAPTER)["status"] == "CHAMPION"
    assert stack.called("submit_ray_job") == [] and stack.called("promote_champion") == []
    [message] = stack.messages()
    assert "evaluation of r1 step 20 failed" in message["Subject"] and "(attempt 2," in message["Message"]
