"""The AWS limits check (tests/aws_limits.py): the product template keeps every encoded limit, and a violation
planted in a copy of the translated template (or of a state machine definition) is reported as exactly that
limit, with its documentation page."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from aws_limits import LIMITS, ONE_YEAR_S, check, execution_name_violations, history_bound, state_machine_definitions
from template_testing import PARAMETERS

from mazeops.names import eval_job_id, training_job_id

TOPIC = {"Ref": "NotificationTopic"}
Template = dict[str, Any]
Plant = Callable[[Template, dict[str, Any]], None]


def props(template: Template, name: str) -> dict[str, Any]:
    return template["Resources"][name]["Properties"]


def metric_stat(i: int) -> dict[str, Any]:
    metric = {"Namespace": "AWS/Lambda", "MetricName": "Errors", "Dimensions": [{"Name": "FunctionName", "Value": "f"}]}
    return {"Id": f"m{i}", "MetricStat": {"Metric": metric, "Period": 300, "Stat": "Sum"}, "ReturnData": False}


def setting(resource: str, **values: Any) -> Plant:
    """A plant that sets `values` in `resource`'s properties."""
    return lambda template, definitions: props(template, resource).update(values)


def add_resource(template: Template, name: str, resource_type: str, properties: dict[str, Any]) -> None:
    template["Resources"][name] = {"Type": resource_type, "Properties": properties}


def poll_loop(wait: dict[str, Any], timeout_s: int = 7 * 24 * 3600) -> dict[str, Any]:
    """A definition that polls in a loop: Wait, Task, Choice (9 events a round)."""
    return {
        "StartAt": "Wait",
        "TimeoutSeconds": timeout_s,
        "States": {
            "Wait": {"Type": "Wait", **wait, "Next": "Poll"},
            "Poll": {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke", "Next": "Done?"},
            "Done?": {"Type": "Choice", "Choices": [{"Variable": "$.done", "BooleanEquals": True, "Next": "Done"}],
                      "Default": "Wait"},
            "Done": {"Type": "Succeed"},
        },
    }  # fmt: skip


# Each encoded limit: how to break it in a copy of the translated template (and definitions), and where.
PLANTED: dict[str, tuple[Plant, str]] = {
    "cloudwatch.alarm-metrics": (
        lambda t, d: props(t, "RayFunctionErrorsAlarm")["Metrics"].extend(metric_stat(i) for i in range(8)),
        "RayFunctionErrorsAlarm",
    ),
    "cloudwatch.alarm-actions": (setting("AsyncFailuresAlarm", AlarmActions=[TOPIC] * 6), "AsyncFailuresAlarm"),
    "cloudwatch.period": (setting("AsyncFailuresAlarm", Period=86_401), "AsyncFailuresAlarm"),
    "cloudwatch.alarm-name": (setting("AsyncFailuresAlarm", AlarmName="a" * 256), "AsyncFailuresAlarm"),
    "cloudwatch.alarm-description": (
        lambda t, d: props(t, "WorkflowFunctionErrorsAlarm").update(AlarmDescription="d" * 1025),
        "WorkflowFunctionErrorsAlarm",
    ),
    "cloudwatch.composite-rule-length": (
        lambda t, d: props(t, "WorkflowFunctionErrorsAlarm").update(AlarmRule='ALARM("' + "a" * 10_240 + '")'),
        "WorkflowFunctionErrorsAlarm",
    ),
    "cloudwatch.composite-rule-alarms": (
        lambda t, d: props(t, "WorkflowFunctionErrorsAlarm").update(
            AlarmRule=" OR ".join(f'ALARM("a{i}")' for i in range(101))
        ),
        "WorkflowFunctionErrorsAlarm",
    ),
    "lambda.memory": (setting("ValidateRunSpecFunction", MemorySize=10_241), "ValidateRunSpecFunction"),
    "lambda.timeout": (setting("SmokeTestFunction", Timeout=901), "SmokeTestFunction"),
    "lambda.environment-size": (
        # the translator shares one Variables mapping among the functions: give this one its own
        lambda t, d: props(t, "GetRayJobFunction").update(
            Environment={"Variables": {**props(t, "GetRayJobFunction")["Environment"]["Variables"], "BIG": "x" * 4096}}
        ),
        "GetRayJobFunction",
    ),
    "lambda.layers": (setting("GetRayJobFunction", Layers=["arn:layer"] * 6), "GetRayJobFunction"),
    "lambda.description": (setting("GetRayJobFunction", Description="d" * 257), "GetRayJobFunction"),
    "lambda.function-name": (setting("GetRayJobFunction", FunctionName="get ray job"), "GetRayJobFunction"),
    "lambda.unreserved-concurrency": (
        lambda t, d: props(t, "GetRayJobFunction").update(ReservedConcurrentExecutions=901),
        "AWS::Lambda::Function",
    ),
    "states.definition-size": (
        lambda t, d: d["EvaluationStateMachine"].update(Comment="x" * 1_048_576),
        "EvaluationStateMachine",
    ),
    "states.name": (
        lambda t, d: props(t, "TrainingStateMachine").update(StateMachineName="training:machine"),
        "TrainingStateMachine",
    ),
    "states.state-name": (
        lambda t, d: d["TrainingStateMachine"]["States"].update({"S" * 81: {"Type": "Succeed"}}),
        "TrainingStateMachine." + "S" * 81,
    ),
    "states.timeout": (
        lambda t, d: d["TrainingStateMachine"].update(TimeoutSeconds=ONE_YEAR_S + 1),
        "TrainingStateMachine.TimeoutSeconds",
    ),
    "states.history": (lambda t, d: d.update(TrainingStateMachine=poll_loop({"Seconds": 30})), "TrainingStateMachine"),
    "events.pattern-size": (
        lambda t, d: props(t, "StartExecutionFunctionRunRequested")["EventPattern"]["detail"].update(x=["y" * 2048]),
        "StartExecutionFunctionRunRequested",
    ),
    "events.targets": (
        lambda t, d: props(t, "ExecutionEndedUnfinishedRule")["Targets"].extend(
            {"Id": f"t{i}", "Arn": TOPIC} for i in range(5)
        ),
        "ExecutionEndedUnfinishedRule",
    ),
    "events.input-paths": (
        lambda t, d: props(t, "ExecutionEndedUnfinishedRule")["Targets"][0]["InputTransformer"]["InputPathsMap"].update(
            {f"p{i}": "$.detail" for i in range(95)}
        ),
        "ExecutionEndedUnfinishedRule.NotificationTopic",
    ),
    "events.input-template": (
        lambda t, d: props(t, "ExecutionEndedUnfinishedRule")["Targets"][0]["InputTransformer"].update(
            InputTemplate='"' + "x" * 8192 + '"'
        ),
        "ExecutionEndedUnfinishedRule.NotificationTopic",
    ),
    "events.rule-name": (
        lambda t, d: props(t, "ExecutionEndedUnfinishedRule").update(Name="ended unfinished"),
        "ExecutionEndedUnfinishedRule",
    ),
    "events.rule-description": (
        lambda t, d: props(t, "ExecutionEndedUnfinishedRule").update(Description="d" * 513),
        "ExecutionEndedUnfinishedRule",
    ),
    "sns.topic-name": (lambda t, d: props(t, "NotificationTopic").update(TopicName="maze.rl.ops"), "NotificationTopic"),
    "sns.filter-policy-size": (
        lambda t, d: add_resource(
            t, "Planted", "AWS::SNS::Subscription", {"TopicArn": TOPIC, "FilterPolicy": {"a": ["x" * 262_144]}}
        ),
        "Planted",
    ),
    "sns.filter-policy-keys": (
        lambda t, d: add_resource(
            t, "Planted", "AWS::SNS::Subscription", {"TopicArn": TOPIC, "FilterPolicy": dict.fromkeys("abcdef", [1])}
        ),
        "Planted",
    ),
    "dynamodb.table-name": (lambda t, d: props(t, "RunsTable").update(TableName="ab"), "RunsTable.TableName"),
    "dynamodb.global-indexes": (
        setting("RunsTable", GlobalSecondaryIndexes=[{"IndexName": f"gsi{i:02}"} for i in range(21)]),
        "RunsTable",
    ),
    "dynamodb.local-indexes": (
        setting("RegistryTable", LocalSecondaryIndexes=[{"IndexName": f"lsi{i:02}"} for i in range(6)]),
        "RegistryTable",
    ),
    "dynamodb.ttl-attribute": (
        lambda t, d: props(t, "IdempotencyTable")["TimeToLiveSpecification"].update(AttributeName="e" * 256),
        "IdempotencyTable",
    ),
    "s3.bucket-name": (lambda t, d: props(t, "ArtifactsBucket").update(BucketName="Maze_Artifacts"), "ArtifactsBucket"),
    "s3.lifecycle-rules": (
        lambda t, d: props(t, "AccessLogsBucket")["LifecycleConfiguration"].update(
            Rules=[{"Id": f"r{i}", "Status": "Enabled", "ExpirationInDays": 1} for i in range(1001)]
        ),
        "AccessLogsBucket",
    ),
    "s3.lifecycle-rule-id": (
        lambda t, d: props(t, "AccessLogsBucket")["LifecycleConfiguration"]["Rules"][0].update(Id="i" * 256),
        "AccessLogsBucket",
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def definitions(translated: Template) -> dict[str, Any]:
    return state_machine_definitions(translated, PARAMETERS)


def test_the_product_template_keeps_every_limit(translated: Template, definitions: dict[str, Any]) -> None:
    assert [str(v) for v in check(translated, definitions, PARAMETERS)] == []


def test_every_encoded_limit_has_a_planted_violation_and_a_documentation_page() -> None:
    assert set(PLANTED) == set(LIMITS)
    for limit in LIMITS.values():
        assert limit.url.startswith("https://docs.aws.amazon.com/"), limit


@pytest.mark.parametrize("key", sorted(PLANTED))
def test_a_planted_violation_is_reported_as_its_limit(
    key: str, translated: Template, definitions: dict[str, Any]
) -> None:
    template, machines = copy.deepcopy(translated), copy.deepcopy(definitions)
    plant, where = PLANTED[key]
    plant(template, machines)
    violations = check(template, machines, PARAMETERS)
    assert [(v.limit.key, v.where) for v in violations] == [(key, where)], [str(v) for v in violations]
    assert violations[0].limit.url in str(violations[0])


@pytest.mark.parametrize(("reserved", "quota", "fits"), [("0", 100, True), ("10", 260, True), ("10", 259, False)])
def test_reserved_concurrency_needs_16_x_n_plus_100(
    translated: Template, reserved: str, quota: int, fits: bool
) -> None:
    parameters = {**PARAMETERS, "ReservedConcurrency": reserved}
    found = [v.limit.key for v in check(translated, {}, parameters, account_concurrency=quota)]
    assert found == ([] if fits else ["lambda.unreserved-concurrency"])


def test_the_history_bound_counts_rounds_of_a_fixed_wait_within_the_timeout() -> None:
    assert history_bound(poll_loop({"Seconds": 300})) == 2 + 11 + 2016 * 9  # under 25,000: a 5-minute poll is safe
    assert history_bound(poll_loop({"Seconds": 30})) == 2 + 11 + 20_160 * 9
    assert history_bound(poll_loop({"SecondsPath": "$.wait"})) is None  # not computable
    skipping = poll_loop({"Seconds": 30})
    skipping["States"]["Done?"]["Default"] = "Poll"  # a loop that can go round without waiting
    assert history_bound(skipping) is None


def test_the_product_names_its_executions_within_step_functions_rules() -> None:
    longest_run_id = "r" * 40
    for name in (training_job_id(longest_run_id), eval_job_id(longest_run_id, 999_999_999)):
        assert execution_name_violations(name) == [], name
    for bad in ("train run", "x" * 81, "eval:1", ""):
        [violation] = execution_name_violations(bad)
        assert violation.limit.key == "states.name"
