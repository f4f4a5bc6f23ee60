"""moto_patches: the moto internals they replace still exist with the same shape.

These fail first when moto is upgraded; the behaviour is covered end to end in
tests/test_local_stack_stack.py.
"""

import ast
import inspect
import io
import json
import threading
import time
import zipfile
from pathlib import Path

import boto3
import moto
import pytest
from moto import mock_aws
from moto.awslambda.models import LambdaBackend, LambdaFunction, lambda_backends
from moto.cloudformation import parsing as cfn_parsing
from moto.core import DEFAULT_ACCOUNT_ID
from moto.events.models import EventPattern, EventsBackend, Rule
from moto.s3.models import FakeBucket
from moto.secretsmanager.models import SecretsManagerBackend
from moto.sns.models import SNSBackend
from moto.stepfunctions.models import StateMachine
from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils
from moto.stepfunctions.parser.asl.component.state.exec.state_task.state_task_lambda import StateTaskLambda
from moto.stepfunctions.parser.asl.eval.program_state import ProgramStopped
from moto.stepfunctions.parser.backend.execution import BaseExecutionWorkerCommunication, Execution
from moto.stepfunctions.parser.models import StepFunctionsParserBackend
from moto.stepfunctions.responses import StepFunctionResponse, get_backend

from local_stack import moto_patches
from local_stack.lambda_runner import InProcessLambdaRunner, LambdaSpec


def parameters(function) -> list[str]:
    return list(inspect.signature(function).parameters)


def test_moto_is_the_pinned_version():
    assert moto.__version__ == moto_patches.MOTO_VERSION


def test_a_different_moto_version_is_refused(monkeypatch, tmp_path):
    monkeypatch.setattr(moto, "__version__", "9.9.9")

    with pytest.raises(moto_patches.MotoVersionError, match="moto==5.2.5"):
        moto_patches.apply_patches(InProcessLambdaRunner(tmp_path, "http://127.0.0.1:1"))


def test_patched_methods_keep_their_signatures():
    assert parameters(LambdaFunction._invoke_lambda) == ["self", "event"]
    assert parameters(Rule.send_to_targets) == ["self", "original_event", "transform_input"]
    assert parameters(BaseExecutionWorkerCommunication.terminated) == ["self"]
    assert parameters(StepFunctionResponse.stop_execution) == ["self"]
    for model in (StateMachine, FakeBucket):
        method = inspect.getattr_static(model, "create_from_cloudformation_json")
        assert isinstance(method, classmethod)
        assert parameters(method.__func__) == [
            "cls",
            "resource_name",
            "cloudformation_json",
            "account_id",
            "region_name",
            "kwargs",
        ]


def test_internals_the_patches_call_are_still_there():
    assert parameters(LambdaBackend.invoke) == [
        "self",
        "function_name",
        "qualifier",
        "body",
        "headers",
        "response_headers",
    ]
    assert parameters(StepFunctionsParserBackend.start_execution)[:4] == [
        "self",
        "state_machine_arn",
        "name",
        "execution_input",
    ]
    assert parameters(StepFunctionsParserBackend.create_state_machine)[:4] == ["self", "name", "definition", "roleArn"]
    assert "sm_type" in parameters(StepFunctionsParserBackend.create_state_machine)
    assert parameters(EventsBackend.put_events) == ["self", "events"]
    assert parameters(EventsBackend.describe_rule) == ["self", "name", "event_bus_arn"]
    assert parameters(FakeBucket.set_notification_configuration) == ["self", "notification_config"]
    assert parameters(get_backend) == ["account", "region"]
    assert parameters(SNSBackend.publish)[:3] == ["self", "message", "arn"]
    assert EventPattern.load(None).get_pattern() == {}
    # _stop_execution and _terminated: a stop's error and cause reach the program's ProgramStopped state
    assert parameters(Execution.stop) == ["self", "stop_date", "error", "cause"]
    assert {"error", "cause"} <= set(parameters(ProgramStopped.__init__))


def test_moto_cloudformation_still_skips_secrets_and_create_secret_takes_what_the_patch_passes():
    """Once moto's CloudFormation creates AWS::SecretsManager::Secret itself, the patch can go."""
    assert cfn_parsing.resource_class_from_type(moto_patches.SECRET_TYPE) is None
    assert parameters(cfn_parsing.resource_class_from_type) == ["resource_type"]
    assert parameters(SecretsManagerBackend.create_secret) == [
        "self",
        "name",
        "secret_string",
        "secret_binary",
        "description",
        "tags",
        "kms_key_id",
        "client_request_token",
        "replica_regions",
        "force_overwrite",
    ]


@mock_aws
def test_lambda_spec_reads_a_moto_function():
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("app.py", "def handler(event, context):\n    return 1\n")
    role = boto3.client("iam").create_role(RoleName="fn-role", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    boto3.client("lambda", region_name="eu-west-1").create_function(
        FunctionName="fn",
        Runtime="python3.12",
        Role=role,
        Handler="app.handler",
        Code={"ZipFile": code.getvalue()},
        Timeout=42,
        MemorySize=512,
        Environment={"Variables": {"A": "1"}},
    )
    function = lambda_backends[DEFAULT_ACCOUNT_ID]["eu-west-1"].get_function("fn")

    spec = moto_patches.lambda_spec(function)

    assert spec == LambdaSpec(
        function_name="fn",
        function_arn=f"arn:aws:lambda:eu-west-1:{DEFAULT_ACCOUNT_ID}:function:fn",
        handler="app.handler",
        code_zip=code.getvalue(),
        environment={"A": "1"},
        timeout_s=42,
        memory_mb=512,
        region="eu-west-1",
    )


def test_the_asl_error_name_is_the_payload_error_type():
    """moto's interpreter names a Lambda failure after the payload's errorType (what patch (a) relies on)."""
    source = inspect.getsource(StateTaskLambda._from_error)
    assert 'cause_object["errorType"]' in source
    exception = lambda_eval_utils.LambdaFunctionErrorException("Unhandled", json.dumps({"errorType": "RayUnavailable"}))
    assert json.loads(exception.payload)["errorType"] == "RayUnavailable"


def test_apply_and_remove_restore_moto(tmp_path: Path):
    originals = {(owner, name): owner.__dict__[name] for owner, name, _ in moto_patches._patches()}

    moto_patches.apply_patches(InProcessLambdaRunner(tmp_path, "http://127.0.0.1:1"))
    try:
        assert all(owner.__dict__[name] is not originals[(owner, name)] for owner, name in originals)
        moto_patches.apply_patches(InProcessLambdaRunner(tmp_path, "http://127.0.0.1:1"))
        assert all(moto_patches._originals[key] is original for key, original in originals.items())
    finally:
        moto_patches.remove_patches()

    assert all(owner.__dict__[name] is originals[(owner, name)] for owner, name in originals)


def test_ast_parse_runs_one_thread_at_a_time_while_patched(tmp_path: Path, monkeypatch):
    inside, most = [0], [0]
    counting = threading.Lock()

    def slow_parse(source: str, *args, **kwargs):
        with counting:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.02)
        with counting:
            inside[0] -= 1
        return source

    def parse_in_threads() -> int:
        most[0] = 0
        threads = [threading.Thread(target=ast.parse, args=("x",)) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return most[0]

    monkeypatch.setattr(ast, "parse", slow_parse)
    assert parse_in_threads() > 1  # unpatched, the threads overlap: the count can see it
    moto_patches.apply_patches(InProcessLambdaRunner(tmp_path, "http://127.0.0.1:1"))
    try:
        assert ast.parse("x") == "x"
        assert parse_in_threads() == 1
    finally:
        moto_patches.remove_patches()
    assert ast.parse is slow_parse


@mock_aws
def test_a_rule_with_an_sns_target_publishes_its_transformed_input(tmp_path: Path):
    """moto's put_events cannot deliver to SNS; the patched rule publishes the target's input to the topic."""
    sns, sqs, events = (boto3.client(name, region_name="us-east-1") for name in ("sns", "sqs", "events"))
    topic = sns.create_topic(Name="notices")["TopicArn"]
    queue = sqs.create_queue(QueueName="inbox")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn, Attributes={"RawMessageDelivery": "true"})
    events.put_rule(Name="ended", EventPattern=json.dumps({"source": ["maze.test"]}))
    transformer = {"InputPathsMap": {"status": "$.detail.status"}, "InputTemplate": '"run ended: <status>"'}
    events.put_targets(Rule="ended", Targets=[{"Id": "topic", "Arn": topic, "InputTransformer": transformer}])
    moto_patches.apply_patches(InProcessLambdaRunner(tmp_path, "http://127.0.0.1:1"))
    try:
        entry = {"Source": "maze.test", "DetailType": "t", "Detail": json.dumps({"status": "ABORTED"})}
        assert events.put_events(Entries=[entry])["FailedEntryCount"] == 0
        deadline = time.monotonic() + 10
        messages: list[dict] = []
        while not messages and time.monotonic() < deadline:
            messages = sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=0).get("Messages", [])
            time.sleep(0.05)
    finally:
        moto_patches.remove_patches()
    assert [message["Body"] for message in messages] == ["run ended: ABORTED"]
