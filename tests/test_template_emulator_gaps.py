"""Nothing works only because of a patch: for each fix-up in `local_stack/moto_patches.py`, the translated
template (what `sam deploy` sends CloudFormation) carries the real setting AWS acts on: the handler module and
runtime, substituted ASL, bucket notifications and rule targets, the status change rule's pattern.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from typing import Any

import boto3
from moto import mock_aws
from moto.events.models import EventPattern
from template_testing import REGION, ROOT, as_list, reference, resources

from local_stack.sam_deploy import package_template

PLACEHOLDER = re.compile(r"\$\{([^}]*)\}")


def definition_text(machine: dict[str, Any]) -> str:
    """The ASL text of a translated state machine (the translator joins the inlined lines)."""
    separator, lines = machine["Properties"]["DefinitionString"]["Fn::Join"]
    assert all(isinstance(line, str) for line in lines)
    return separator.join(lines)


def test_a_every_function_package_holds_its_handler_for_the_runtime(monkeypatch_module: Any) -> None:
    with mock_aws():
        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(Bucket="deploy")
        packaged = package_template(ROOT / "template.yaml", "deploy", s3)
        functions = resources(packaged, "AWS::Serverless::Function")
        for name, function in functions.items():
            bucket, key = function["Properties"]["CodeUri"].removeprefix("s3://").split("/", 1)
            body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
            names = zipfile.ZipFile(io.BytesIO(body)).namelist()
            module = function["Properties"]["Handler"].split(".")[0]
            assert f"{module}.py" in names and "mazeops/errors.py" in names, name
    assert packaged["Globals"]["Function"]["Runtime"] == "python3.12"


def test_b_definition_substitutions_cover_every_placeholder_of_the_translated_asl(translated: dict[str, Any]) -> None:
    machines = resources(translated, "AWS::StepFunctions::StateMachine")
    assert set(machines) == {"TrainingStateMachine", "EvaluationStateMachine"}
    for name, machine in machines.items():
        text = definition_text(machine)
        substitutions = machine["Properties"]["DefinitionSubstitutions"]
        assert set(PLACEHOLDER.findall(text)) == set(substitutions), name
        for placeholder, value in substitutions.items():
            assert reference(value) in translated["Resources"] | translated["Parameters"], f"{name}: {placeholder}"
            text = text.replace("${" + placeholder + "}", "x")
        assert "${" not in text, name
        json.loads(text)  # what CloudFormation hands Step Functions is valid JSON


def test_c_the_bucket_sends_object_events_to_eventbridge(translated: dict[str, Any]) -> None:
    bucket = translated["Resources"]["ArtifactsBucket"]["Properties"]
    assert bucket["NotificationConfiguration"]["EventBridgeConfiguration"] == {"EventBridgeEnabled": True}
    s3_rules = [
        r["Properties"]["EventPattern"]
        for r in resources(translated, "AWS::Events::Rule").values()
        if "EventPattern" in r["Properties"] and r["Properties"]["EventPattern"]["source"] == ["aws.s3"]
    ]
    assert len(s3_rules) == 2
    for pattern in s3_rules:
        assert pattern["detail"]["bucket"]["name"] == [{"Ref": "ArtifactsBucket"}]


def test_c_every_rule_target_may_be_invoked_and_gets_the_whole_event(translated: dict[str, Any]) -> None:
    permissions = {
        (reference(p["Properties"]["FunctionName"]), reference(p["Properties"]["SourceArn"]))
        for p in resources(translated, "AWS::Lambda::Permission").values()
        if p["Properties"]["Principal"] == "events.amazonaws.com"
        and p["Properties"]["Action"] == "lambda:InvokeFunction"
    }
    rules = resources(translated, "AWS::Events::Rule")
    assert len(rules) == 6
    for name, rule in rules.items():
        assert rule["Properties"].get("State", "ENABLED") != "DISABLED" or "ScheduleExpression" in rule["Properties"]
        for target in rule["Properties"]["Targets"]:
            if target["Arn"] == {"Ref": "NotificationTopic"}:  # the topic's policy admits this rule
                assert name == "ExecutionEndedUnfinishedRule", name
                continue
            function = reference(target["Arn"])
            assert translated["Resources"][function]["Type"] == "AWS::Lambda::Function", name
            # A Lambda target needs the function's resource policy for this rule (no role); the
            # handlers parse the event as EventBridge sends it: no Input, InputPath or transformer.
            assert (function, name) in permissions, name
            assert not {"Input", "InputPath", "InputTransformer", "RoleArn"} & set(target), name


def test_c_the_schedule_fires_only_on_its_expression_in_the_state_an_operator_sets(
    translated: dict[str, Any], source: dict[str, Any]
) -> None:
    schedule = translated["Resources"]["StartExecutionFunctionScheduledRun"]["Properties"]
    assert "EventPattern" not in schedule  # a schedule-only rule: no event ever matches it
    assert schedule["ScheduleExpression"] == {"Ref": "ScheduleExpression"}
    assert schedule["State"] == {"Ref": "ScheduleState"}
    parameters = source["Parameters"]
    assert re.fullmatch(r"(cron|rate)\(.+\)", parameters["ScheduleExpression"]["Default"])
    assert parameters["ScheduleState"]["Default"] == "DISABLED"


def test_d_the_stop_rule_matches_the_status_change_event_aws_emits(translated: dict[str, Any]) -> None:
    rule = translated["Resources"]["StopRayJobFunctionExecutionEndedBadly"]["Properties"]
    pattern = json.loads(json.dumps(rule["EventPattern"]).replace('{"Ref": "TrainingStateMachine"}', '"arn:train"'))
    matcher = EventPattern.load(json.dumps(pattern))
    # The shape of Step Functions' own event (EventBridge, "Step Functions Execution Status Change").
    event = {
        "version": "0",
        "id": "1",
        "detail-type": "Step Functions Execution Status Change",
        "source": "aws.states",
        "account": "123456789012",
        "time": "2026-12-01T00:00:00Z",
        "region": REGION,
        "resources": ["arn:exec"],
        "detail": {
            "executionArn": "arn:exec",
            "stateMachineArn": "arn:train",
            "name": "train-x",
            "status": "ABORTED",
            "startDate": 1,
            "stopDate": 2,
            "input": "{}",
            "output": None,
            "error": None,
            "cause": None,
        },
    }
    assert matcher.matches_event(event)
    assert not matcher.matches_event({**event, "detail": {**event["detail"], "status": "SUCCEEDED"}})
    assert as_list(rule["Targets"])[0]["Arn"] == {"Fn::GetAtt": ["StopRayJobFunction", "Arn"]}
