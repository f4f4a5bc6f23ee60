"""Every change the project makes to moto's internals (moto pinned at 5.2.5), and one to Python's, in one place.

`apply_patches(runner)` makes Lambda run real code in-process, CloudFormation state machines execute, EventBridge
deliver to Lambda and Step Functions targets, Step Functions emit status change events and keep StopExecution's error
and cause, CloudFormation create
Secrets Manager secrets, and ``ast.parse`` run one call at a time (see docs/design.md;
tests/test_local_stack_patches.py pins each patched internal).
"""

from __future__ import annotations

import ast
import copy
import datetime
import json
import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any

import moto
from moto.awslambda.models import LambdaFunction, lambda_backends
from moto.cloudformation import parsing as cfn_parsing
from moto.core.responses import ActionResult
from moto.core.utils import utcnow
from moto.events.models import Rule, events_backends
from moto.s3.models import FakeBucket
from moto.secretsmanager.models import secretsmanager_backends
from moto.sns.models import sns_backends
from moto.stepfunctions.exceptions import ExecutionDoesNotExist
from moto.stepfunctions.models import StateMachine
from moto.stepfunctions.parser.asl.eval.program_state import ProgramStopped
from moto.stepfunctions.parser.backend.execution import BaseExecutionWorkerCommunication
from moto.stepfunctions.responses import StepFunctionResponse
from moto.stepfunctions.responses import get_backend as stepfunctions_backend
from moto.stepfunctions.utils import cfn_to_api_tags

from local_stack.event_input import TargetInputError, target_input
from local_stack.lambda_runner import InProcessLambdaRunner, LambdaSpec

MOTO_VERSION = "5.2.5"
STATUS_CHANGE_DETAIL_TYPE = "Step Functions Execution Status Change"
# Rule target types delivered here rather than by moto (moto 5.2.5's put_events raises NotImplementedError for SNS).
_DELIVERED_SERVICES = ("lambda", "states", "sns")

logger = logging.getLogger(__name__)

_runner: InProcessLambdaRunner | None = None
_originals: dict[tuple[Any, str], Any] = {}  # (class or module, attribute) -> what the patch replaced
_ast_parse_lock = threading.RLock()


class MotoVersionError(RuntimeError):
    """The installed moto is not the version these patches were written against."""


def apply_patches(lambda_runner: InProcessLambdaRunner) -> None:
    """Install all patches (idempotent); Lambda invocations go to `lambda_runner`."""
    global _runner
    if moto.__version__ != MOTO_VERSION:
        raise MotoVersionError(f"local_stack patches need moto=={MOTO_VERSION}, found {moto.__version__}")
    _runner = lambda_runner
    for owner, name, replacement in _patches():
        if (owner, name) not in _originals:
            _originals[(owner, name)] = owner.__dict__[name]
            setattr(owner, name, replacement)


def remove_patches() -> None:
    """Restore moto's own code."""
    global _runner
    for (owner, name), original in _originals.items():
        setattr(owner, name, original)
    _originals.clear()
    _runner = None


def deliver_to_rule_targets(account_id: str, region: str, rule_name: str, event: dict[str, Any]) -> None:
    """Deliver `event`, without pattern matching, to a default-bus rule's Lambda, Step Functions and SNS
    targets (other target types are skipped with a warning)."""
    rule = events_backends[account_id][region].describe_rule(rule_name, None)
    for target in rule.targets:
        if _target_service(target) in _DELIVERED_SERVICES:
            _deliver(rule, target, event)
        else:
            logger.warning(
                "rule %s: target %s is not Lambda, Step Functions or SNS; not delivered", rule_name, target["Arn"]
            )


def _patches() -> list[tuple[Any, str, Any]]:
    return [
        (LambdaFunction, "_invoke_lambda", _invoke_lambda),
        (StateMachine, "create_from_cloudformation_json", classmethod(_create_state_machine)),
        (FakeBucket, "create_from_cloudformation_json", classmethod(_create_bucket)),
        (Rule, "send_to_targets", _send_to_targets),
        (BaseExecutionWorkerCommunication, "terminated", _terminated),
        (StepFunctionResponse, "stop_execution", _stop_execution),
        (ast, "parse", _serialized_ast_parse),
        (cfn_parsing, "resource_class_from_type", _resource_class_from_type),
    ]


def _original(owner: Any, name: str) -> Callable[..., Any]:
    original = _originals[(owner, name)]
    return original.__func__ if isinstance(original, classmethod) else original


# (a) Lambda -------------------------------------------------------------------------------


def lambda_spec(function: LambdaFunction) -> LambdaSpec:
    """The runner's view of a moto LambdaFunction."""
    return LambdaSpec(
        function_name=function.function_name,
        function_arn=function.function_arn,
        handler=function.handler,
        code_zip=function.code_bytes,
        environment=dict(function.environment_vars),
        timeout_s=int(function.timeout),
        memory_mb=int(function.memory_size),
        region=function.region,
    )


def _invoke_lambda(self: LambdaFunction, event: Any = None) -> tuple[str, bool, str]:
    """Replaces LambdaFunction._invoke_lambda: returns (payload JSON, errored, logs) like moto's."""
    if _runner is None:
        raise RuntimeError("local_stack.moto_patches: no Lambda runner installed")
    # LambdaFunction.invoke passes the parsed payload, or the text "{}" when there was none.
    result = _runner.invoke(lambda_spec(self), {} if event in (None, "{}") else event)
    self.logs_backend.ensure_log_group(self.logs_group_name)
    self.save_logs(result.logs)
    return result.payload, result.errored, result.logs


# (b) Step Functions from CloudFormation ---------------------------------------------------


def _create_state_machine(
    cls: type, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **kwargs: Any
) -> StateMachine:
    """Replaces StateMachine.create_from_cloudformation_json: applies DefinitionSubstitutions and creates the
    machine in the backend the Step Functions API uses (the executing one)."""
    properties = cloudformation_json["Properties"]
    definition = _state_machine_definition(properties)
    for key, value in properties.get("DefinitionSubstitutions", {}).items():
        definition = definition.replace("${" + key + "}", str(value))
    return stepfunctions_backend(account_id, region_name).create_state_machine(
        name=properties.get("StateMachineName", resource_name),
        definition=definition,
        roleArn=properties.get("RoleArn", ""),
        tags=cfn_to_api_tags(properties.get("Tags", [])),
        sm_type=properties.get("StateMachineType"),
    )


def _state_machine_definition(properties: dict[str, Any]) -> str:
    if "DefinitionString" in properties:
        return properties["DefinitionString"]
    if "Definition" in properties:
        return json.dumps(properties["Definition"])
    raise ValueError(
        "AWS::StepFunctions::StateMachine needs DefinitionString or Definition locally "
        "(DefinitionS3Location is not supported)"
    )


# (b2) Secrets Manager from CloudFormation -------------------------------------------------

SECRET_TYPE = "AWS::SecretsManager::Secret"


class CloudFormationSecret:
    """AWS::SecretsManager::Secret, which moto 5.2.5's CloudFormation skips (its Ref would be None): the secret is
    created in the Secrets Manager backend as the template declares it, with a value only if SecretString gives one
    (CloudFormation creates an empty secret when neither SecretString nor GenerateSecretString is given)."""

    def __init__(self, arn: str):
        self.arn = arn

    @property
    def physical_resource_id(self) -> str:
        """The secret's ARN, what Ref answers."""
        return self.arn

    def is_created(self) -> bool:
        """Created at once (CloudFormation waits for nothing)."""
        return True

    @classmethod
    def has_cfn_attr(cls, attr: str) -> bool:
        """Secrets have no GetAtt attributes besides Id (the ARN)."""
        return attr == "Id"

    def get_cfn_attribute(self, attr: str) -> str:
        """GetAtt Id: the ARN."""
        return self.arn

    @classmethod
    def create_from_cloudformation_json(
        cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **kwargs: Any
    ) -> CloudFormationSecret:
        """Create the secret (no version unless SecretString is given), named as the template says or generated."""
        properties = cloudformation_json.get("Properties", {})
        backend = secretsmanager_backends[account_id][region_name]
        answer = backend.create_secret(
            name=properties.get("Name", resource_name),
            secret_string=properties.get("SecretString"),
            secret_binary=None,
            description=properties.get("Description"),
            tags=properties.get("Tags"),
            kms_key_id=properties.get("KmsKeyId"),
            client_request_token=None,
            replica_regions=[],
            force_overwrite=False,
        )
        return cls(json.loads(answer)["ARN"])

    @classmethod
    def update_from_cloudformation_json(
        cls,
        original_resource: CloudFormationSecret,
        new_resource_name: str,
        cloudformation_json: Any,
        account_id: str,
        region_name: str,
    ) -> CloudFormationSecret:
        """A stack update keeps the secret and its value, as CloudFormation does without SecretString."""
        return original_resource

    @classmethod
    def delete_from_cloudformation_json(
        cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str
    ) -> None:
        """Deleting the stack leaves the secret in the backend (the moto server goes with the stack)."""


def _resource_class_from_type(resource_type: str) -> Any:
    """Replaces moto.cloudformation.parsing.resource_class_from_type: adds AWS::SecretsManager::Secret."""
    if resource_type == SECRET_TYPE:
        return CloudFormationSecret
    return _original(cfn_parsing, "resource_class_from_type")(resource_type)


# (c) EventBridge --------------------------------------------------------------------------


def _create_bucket(
    cls: type, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **kwargs: Any
) -> FakeBucket:
    """Replaces FakeBucket.create_from_cloudformation_json: honours EventBridgeConfiguration."""
    bucket = _original(FakeBucket, "create_from_cloudformation_json")(
        cls, resource_name, cloudformation_json, account_id, region_name, **kwargs
    )
    notifications = cloudformation_json.get("Properties", {}).get("NotificationConfiguration", {})
    enabled = notifications.get("EventBridgeConfiguration", {}).get("EventBridgeEnabled")
    if enabled is True or str(enabled).lower() == "true":
        bucket.set_notification_configuration({"EventBridgeConfiguration": {}})
    return bucket


def _send_to_targets(self: Rule, original_event: dict[str, Any], transform_input: bool = True) -> None:
    """Replaces Rule.send_to_targets: skips DISABLED and schedule-only rules, delivers to Lambda and Step Functions
    targets here and leaves every other target type to moto."""
    if self.state != "ENABLED" or not self.event_pattern.get_pattern():
        return
    ours = [target for target in self.targets if _target_service(target) in _DELIVERED_SERVICES]
    others = [target for target in self.targets if target not in ours]
    if others:
        rest = copy.copy(self)
        rest.targets = others
        _original(Rule, "send_to_targets")(rest, original_event, transform_input)
    if ours and self.event_pattern.matches_event(original_event):
        for target in ours:
            _deliver(self, target, original_event)


def _target_service(target: dict[str, Any]) -> str:
    return target["Arn"].split(":")[2]


def _deliver(rule: Rule, target: dict[str, Any], moto_event: dict[str, Any]) -> None:
    """Send one event to one Lambda, Step Functions or SNS target, in a thread (EventBridge is async)."""
    event = _as_delivered(moto_event)
    thread = threading.Thread(
        target=_deliver_now, args=(rule, target, event), name=f"eventbridge-{rule.name}", daemon=True
    )
    thread.start()


def _deliver_now(rule: Rule, target: dict[str, Any], event: dict[str, Any]) -> None:
    if _runner is None:  # the patches were removed (the local stack stopped) meanwhile
        logger.info("rule %s: dropped a delivery to %s after the patches were removed", rule.name, target["Arn"])
        return
    try:
        value = target_input(target, event, rule.name, rule.arn)
        payload = json.dumps(value)
        if _target_service(target) == "sns":  # the message is the input itself: a transformed string stays one
            message = value if isinstance(value, str) else payload
            sns_backends[rule.account_id][rule.region_name].publish(message, arn=target["Arn"])
        elif _target_service(target) == "lambda":
            response_headers: dict[str, str] = {}
            lambda_backends[rule.account_id][rule.region_name].invoke(
                target["Arn"], None, payload, {"x-amz-invocation-type": "Event"}, response_headers
            )
            if "x-amz-function-error" in response_headers:
                logger.warning("rule %s: Lambda target %s failed (see its logs)", rule.name, target["Arn"])
        else:
            stepfunctions_backend(rule.account_id, rule.region_name).start_execution(
                target["Arn"], name=str(uuid.uuid4()), execution_input=payload
            )
    except TargetInputError as exc:
        logger.error("rule %s: %s", rule.name, exc)
    except Exception:  # an asynchronous delivery never fails the caller, as on AWS
        logger.exception("rule %s: delivery to %s failed", rule.name, target["Arn"])


def _as_delivered(moto_event: dict[str, Any]) -> dict[str, Any]:
    """moto's internal event as EventBridge delivers it: ISO time, no ingestion-time, S3's `etag`."""
    event = copy.deepcopy(moto_event)
    event.pop("ingestion-time", None)
    s3_object = event.get("detail", {}).get("object") if isinstance(event.get("detail"), dict) else None
    if isinstance(s3_object, dict) and "eTag" in s3_object:  # moto 5.2.5 says eTag; AWS says etag
        s3_object["etag"] = s3_object.pop("eTag")
    if isinstance(event.get("time"), (int, float)):
        when = datetime.datetime.fromtimestamp(event["time"], tz=datetime.UTC)
        event["time"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    return event


# (d) Step Functions status change events --------------------------------------------------


def _terminated(self: BaseExecutionWorkerCommunication) -> None:
    """Replaces BaseExecutionWorkerCommunication.terminated: record the end, then announce it."""
    _original(BaseExecutionWorkerCommunication, "terminated")(self)
    execution = self.execution
    state = execution.exec_worker.env.program_state()
    if isinstance(state, ProgramStopped):  # moto keeps no error or cause for a stopped execution
        execution.error, execution.cause = state.error, state.cause
    try:
        events_backends[execution.account_id][execution.region_name].put_events(
            [
                {
                    "Source": "aws.states",
                    "DetailType": STATUS_CHANGE_DETAIL_TYPE,
                    "Detail": json.dumps(_status_change_detail(execution)),
                    "Resources": [execution.exec_arn],
                }
            ]
        )
    except Exception:  # the execution has ended either way; only the event is lost
        logger.exception("could not put the status change event of %s", execution.exec_arn)


def _stop_execution(self: StepFunctionResponse) -> ActionResult:
    """Replaces StepFunctionResponse.stop_execution, which drops StopExecution's `error` and `cause`: the stop of a
    running execution carries them to its end (`_terminated`), as a guard's stop (error RunGuard) needs."""
    arn = self._get_param("executionArn")
    backend = self.stepfunction_backend
    backend._validate_execution_arn(arn)
    machine = backend._get_state_machine_for_execution(arn)
    execution = next((candidate for candidate in machine.executions if candidate.execution_arn == arn), None)
    if execution is None:
        raise ExecutionDoesNotExist(f"Execution Does Not Exist: '{arn}'")
    execution.stop(stop_date=utcnow(), error=self._get_param("error"), cause=self._get_param("cause"))
    return ActionResult({"stopDate": execution.stop_date})


def _status_change_detail(execution: Any) -> dict[str, Any]:
    def millis(when: datetime.datetime | None) -> int | None:
        return None if when is None else int(when.timestamp() * 1000)

    return {
        "executionArn": execution.exec_arn,
        "stateMachineArn": execution.state_machine_arn,
        "name": execution.name,
        "status": execution.exec_status.value,
        "startDate": millis(execution.start_date),
        "stopDate": millis(execution.stop_date),
        "input": json.dumps(execution.input_data),
        "output": None if execution.output is None else json.dumps(execution.output),
        "error": execution.error,
        "cause": execution.cause,
    }


# (e) ast.parse ----------------------------------------------------------------------------


def _serialized_ast_parse(*args: Any, **kwargs: Any) -> ast.AST:
    """``ast.parse``, one thread at a time (CPython 3.11's AST constructor is not thread-safe)."""
    with _ast_parse_lock:
        return _original(ast, "parse")(*args, **kwargs)
