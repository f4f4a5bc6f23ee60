"""The SAM template: offline translation, cfn-lint, wiring to the ASL files and handlers, IAM scope, security."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from cfnlint.api import lint_file
from template_testing import DESIGN_OUTPUTS, ROOT, as_list, is_data_key, reference, resources, statements, sub_text

INTEGRATIONS = {
    "arn:aws:states:::lambda:invoke": ("FunctionName", "lambda:InvokeFunction"),
    "arn:aws:states:::dynamodb:updateItem": ("TableName", "dynamodb:UpdateItem"),
    "arn:aws:states:::sns:publish": ("TopicArn", "sns:Publish"),
}
DESIGN_ENVIRONMENT = {
    "ARTIFACTS_BUCKET",
    "RUNS_TABLE",
    "REGISTRY_TABLE",
    "IDEMPOTENCY_TABLE",
    "TOPIC_ARN",
    "RAY_ADDRESS",
    "SERVE_URL",
    "BASE_MODELS",
    "MIN_SOLVE_RATE",
    "MCNEMAR_ALPHA",
    "EVAL_BACKEND",
    "SCHEDULED_RUN_SPEC_KEY",
    "POWERTOOLS_SERVICE_NAME",
    "POWERTOOLS_METRICS_NAMESPACE",
    "RAY_RUNTIME_ENV",
    "EVAL_SET_SHA256",
}
# The functions that call the Ray Jobs API (the cluster watch included), the only ones that read the Ray token's secret.
RAY_JOBS_FUNCTIONS = {"SubmitRayJobFunction", "GetRayJobFunction", "StopRayJobFunction", "WatchClusterFunction"}
# Wildcards that stay, and why.
JUSTIFIED_WILDCARD_ACTIONS = {
    # SNS asks KMS for a data key of the variant it needs when publishing to an encrypted topic.
    "kms:GenerateDataKey*",
}
JUSTIFIED_STAR_RESOURCE_ACTIONS = {
    # CloudWatch Logs' vended-log delivery APIs (Step Functions logging) have no resource-level permissions.
    "logs:CreateLogDelivery",
    "logs:GetLogDelivery",
    "logs:UpdateLogDelivery",
    "logs:DeleteLogDelivery",
    "logs:ListLogDeliveries",
    "logs:PutResourcePolicy",
    "logs:DescribeResourcePolicies",
    "logs:DescribeLogGroups",
}
JUSTIFIED_MANAGED_POLICIES = {
    # SAM's defaults: logs of the function itself, X-Ray segments (Tracing: Active), and ENI management
    # for the Ray-facing functions (SAM attaches it whenever VpcConfig is present, even behind Fn::If).
    "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
    "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess",
    "arn:aws:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole",
}
SERVICE_WIDE_ARN = re.compile(r"^arn:[^:]+:[^:]+:[^:]*:[^:]*:\*$|^arn:[^:]+:s3:::\*$")


def test_translated_template_is_cfn_lint_clean(translated: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "translated.json"
    path.write_text(json.dumps(translated))
    # The translator turns an inlined Definition into a Fn::Join of its lines (`sam deploy` uploads
    # it instead), and cfn-lint validates a Fn::Join list one stack frame per element: the
    # Evaluation definition has more lines than Python's default recursion limit of 1000.
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(5000)
    try:
        matches = [str(match) for match in lint_file(path)]
    finally:
        sys.setrecursionlimit(limit)
    assert matches == []


@pytest.mark.parametrize("machine", ["TrainingStateMachine", "EvaluationStateMachine"])
def test_definition_substitutions_are_exactly_the_asl_placeholders(source: dict[str, Any], machine: str) -> None:
    properties = source["Resources"][machine]["Properties"]
    asl = (ROOT / properties["DefinitionUri"]).read_text()
    assert set(re.findall(r"\$\{(\w+)\}", asl)) == set(properties["DefinitionSubstitutions"])


@pytest.mark.parametrize("machine", ["TrainingStateMachine", "EvaluationStateMachine"])
def test_every_task_resource_exists_and_the_machine_may_use_it(source: dict[str, Any], machine: str) -> None:
    properties = source["Resources"][machine]["Properties"]
    substitutions = properties["DefinitionSubstitutions"]
    definition = json.loads((ROOT / properties["DefinitionUri"]).read_text())
    allowed: dict[str, set[str]] = {}
    for statement in statements(properties["Policies"][0]):
        for action in as_list(statement["Action"]):
            allowed.setdefault(action, set()).update(
                reference(r) for r in as_list(statement["Resource"]) if isinstance(r, dict)
            )
    used: dict[str, set[str]] = {}
    for name, state in definition["States"].items():
        if state["Type"] != "Task":
            continue
        assert state["Resource"] in INTEGRATIONS, f"{name}: unexpected integration {state['Resource']}"
        parameter, action = INTEGRATIONS[state["Resource"]]
        placeholder = re.fullmatch(r"\$\{(\w+)\}", state["Parameters"][parameter])
        assert placeholder, f"{name}: {parameter} is not a substitution"
        target = reference(substitutions[placeholder[1]])
        assert target in source["Resources"], f"{name}: {target} is not in the template"
        used.setdefault(action, set()).add(target)
        if action == "lambda:InvokeFunction":
            handler = source["Resources"][target]["Properties"]["Handler"]
            assert (ROOT / "functions" / f"{handler.split('.')[0]}.py").is_file(), handler
    for action, targets in used.items():
        assert allowed.get(action) == targets, f"{machine} may {action} on {allowed.get(action)}, uses {targets}"
    assert set(allowed) - set(used) <= {"kms:Decrypt", "kms:GenerateDataKey*"} | JUSTIFIED_STAR_RESOURCE_ACTIONS


def test_every_handler_module_has_exactly_one_function(source: dict[str, Any]) -> None:
    handlers = [f["Properties"]["Handler"] for f in resources(source, "AWS::Serverless::Function").values()]
    modules = {path.stem for path in (ROOT / "functions").glob("*.py") if "def lambda_handler" in path.read_text()}
    assert sorted(handlers) == sorted(f"{module}.lambda_handler" for module in modules)
    assert source["Globals"]["Function"]["CodeUri"] == "functions/"


def test_functions_get_the_design_environment(source: dict[str, Any]) -> None:
    assert set(source["Globals"]["Function"]["Environment"]["Variables"]) == DESIGN_ENVIRONMENT
    start = source["Resources"]["StartExecutionFunction"]["Properties"]["Environment"]["Variables"]
    assert start == {
        "TRAINING_STATE_MACHINE_ARN": {"Ref": "TrainingStateMachine"},
        "EVALUATION_STATE_MACHINE_ARN": {"Ref": "EvaluationStateMachine"},
    }
    assert source["Globals"]["Function"]["Tracing"] == "Active"
    assert source["Globals"]["Function"]["Runtime"] == "python3.12"


def test_outputs_include_the_design_names_and_every_function(source: dict[str, Any]) -> None:
    functions = {f"{name}Name" for name in resources(source, "AWS::Serverless::Function")}
    assert DESIGN_OUTPUTS | functions <= set(source["Outputs"])


def test_iam_allows_no_wildcard_where_a_narrower_arn_exists(translated: dict[str, Any]) -> None:
    documents: list[tuple[str, dict[str, Any]]] = []
    for name, role in resources(translated, "AWS::IAM::Role").items():
        assert set(role["Properties"].get("ManagedPolicyArns", [])) <= JUSTIFIED_MANAGED_POLICIES, name
        documents += [(name, policy["PolicyDocument"]) for policy in role["Properties"].get("Policies", [])]
    for policy_type in ("AWS::IAM::ManagedPolicy", "AWS::IAM::Policy"):
        documents += [
            (name, p["Properties"]["PolicyDocument"]) for name, p in resources(translated, policy_type).items()
        ]
    assert len(documents) >= 15
    for name, document in documents:
        for statement in statements(document):
            assert statement["Effect"] == "Allow", name
            actions = as_list(statement["Action"])
            for action in actions:
                assert "*" not in action or action in JUSTIFIED_WILDCARD_ACTIONS, f"{name}: action {action}"
            for resource in as_list(statement["Resource"]):
                text = resource.get("Fn::Sub", "") if isinstance(resource, dict) else resource
                if text == "*":
                    assert set(actions) <= JUSTIFIED_STAR_RESOURCE_ACTIONS, f"{name}: {actions} on *"
                assert not SERVICE_WIDE_ARN.match(text), f"{name}: {actions} on {text}"


def test_artifacts_bucket_is_private_encrypted_versioned_and_tls_only(translated: dict[str, Any]) -> None:
    bucket = translated["Resources"]["ArtifactsBucket"]
    properties = bucket["Properties"]
    assert (bucket["DeletionPolicy"], bucket["UpdateReplacePolicy"]) == ("Retain", "Retain")
    assert properties["VersioningConfiguration"] == {"Status": "Enabled"}
    [rule] = properties["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] in ("AES256", "aws:kms")
    assert set(properties["PublicAccessBlockConfiguration"].values()) == {True}
    assert len(properties["PublicAccessBlockConfiguration"]) == 4
    assert properties["NotificationConfiguration"] == {"EventBridgeConfiguration": {"EventBridgeEnabled": True}}
    assert any("NoncurrentVersionExpiration" in r for r in properties["LifecycleConfiguration"]["Rules"])
    assert properties["LoggingConfiguration"] == {
        "DestinationBucketName": {"Ref": "AccessLogsBucket"},
        "LogFilePrefix": "artifacts/",
    }
    policy = translated["Resources"]["ArtifactsBucketPolicy"]
    [deny] = [s for s in statements(policy["Properties"]["PolicyDocument"]) if s.get("Sid") == "DenyInsecureTransport"]
    assert (deny["Effect"], deny["Principal"], deny["Action"]) == ("Deny", "*", "s3:*")
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert {"Fn::GetAtt": ["ArtifactsBucket", "Arn"]} in deny["Resource"]
    assert {"Fn::Sub": "${ArtifactsBucket.Arn}/*"} in deny["Resource"]


def test_tables_are_on_demand_recoverable_and_encrypted(translated: dict[str, Any]) -> None:
    tables = resources(translated, "AWS::DynamoDB::Table")
    assert set(tables) == {"RunsTable", "RegistryTable", "IdempotencyTable"}
    for name, table in tables.items():
        properties = table["Properties"]
        assert properties["BillingMode"] == "PAY_PER_REQUEST", name
        assert properties["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}, name
        sse = properties["SSESpecification"]
        assert (sse["SSEEnabled"], sse["SSEType"], is_data_key(sse["KMSMasterKeyId"])) == (True, "KMS", True), name
    assert tables["IdempotencyTable"]["Properties"]["TimeToLiveSpecification"] == {
        "AttributeName": "expiration",
        "Enabled": True,
    }
    assert [k["AttributeName"] for k in tables["RegistryTable"]["Properties"]["KeySchema"]] == [
        "base_model_id",
        "adapter_name",
    ]


def test_state_machines_log_errors_with_execution_data_and_trace(translated: dict[str, Any]) -> None:
    machines = resources(translated, "AWS::StepFunctions::StateMachine")
    assert set(machines) == {"TrainingStateMachine", "EvaluationStateMachine"}
    for machine in machines.values():
        properties = machine["Properties"]
        assert properties["LoggingConfiguration"]["Level"] == "ERROR"
        assert properties["LoggingConfiguration"]["IncludeExecutionData"] is True
        assert properties["TracingConfiguration"] == {"Enabled": True}


def test_event_rules_route_uploads_schedule_and_failed_trainings(translated: dict[str, Any]) -> None:
    rules = resources(translated, "AWS::Events::Rule")
    patterns = {name: rule["Properties"].get("EventPattern") for name, rule in rules.items()}
    assert patterns["StartExecutionFunctionRunRequested"]["detail"]["object"]["key"] == [
        {"wildcard": "requests/*.json"}
    ]
    assert patterns["StartExecutionFunctionAdapterPublished"]["detail"]["object"]["key"] == [
        {"wildcard": "runs/*/adapters/global_step_*/manifest.json"}
    ]
    stop = patterns["StopRayJobFunctionExecutionEndedBadly"]
    assert stop["detail"] == {
        "stateMachineArn": [{"Ref": "TrainingStateMachine"}, {"Ref": "EvaluationStateMachine"}],
        "status": ["ABORTED", "TIMED_OUT", "FAILED"],
    }
    schedule = rules["StartExecutionFunctionScheduledRun"]["Properties"]
    assert schedule["State"] == {"Ref": "ScheduleState"} and schedule["ScheduleExpression"] == {
        "Ref": "ScheduleExpression"
    }
    for name, rule in rules.items():
        [target] = rule["Properties"]["Targets"]
        assert reference(target["DeadLetterConfig"]["Arn"]) == "AsyncFailureQueue", name
    for name in ("StartExecutionFunctionEventInvokeConfig", "StopRayJobFunctionEventInvokeConfig"):
        on_failure = translated["Resources"][name]["Properties"]["DestinationConfig"]["OnFailure"]
        assert reference(on_failure["Destination"]) == "AsyncFailureQueue"


def notifying_alarms(translated: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The metric alarms whose ALARM state reaches the topic: their own action, or a composite alarm's."""
    composites = resources(translated, "AWS::CloudWatch::CompositeAlarm")
    for name, composite in composites.items():
        assert composite["Properties"]["AlarmActions"] == [{"Ref": "NotificationTopic"}], name
    rules = " ".join(sub_text(c["Properties"]["AlarmRule"]) for c in composites.values())
    notifying = {}
    for name, alarm in resources(translated, "AWS::CloudWatch::Alarm").items():
        actions = alarm["Properties"].get("AlarmActions")
        if actions is None:  # a child alarm: its composite notifies, once
            assert f'ALARM("${{{name}}}")' in rules, name
        else:
            assert actions == [{"Ref": "NotificationTopic"}], name
        notifying[name] = alarm["Properties"]
    return notifying


def watched_metrics(properties: dict[str, Any]) -> set[tuple[str, str]]:
    """(metric name, dimension value's logical id or "") of each metric an alarm watches; queries as themselves."""
    if "MetricName" in properties:
        return {(properties["MetricName"], reference(properties["Dimensions"][0]["Value"]))}
    watched = set()
    for query in properties["Metrics"]:
        if "MetricStat" in query:
            metric = query["MetricStat"]["Metric"]
            watched.add((metric["MetricName"], reference(metric["Dimensions"][0]["Value"])))
        elif sub_text(query["Expression"]).startswith("SELECT"):
            watched.add((sub_text(query["Expression"]), ""))
    return watched


def test_alarms_cover_every_bad_end_errors_dead_letters_and_rollbacks(translated: dict[str, Any]) -> None:
    watched = set().union(*map(watched_metrics, notifying_alarms(translated).values()))
    for machine in ("TrainingStateMachine", "EvaluationStateMachine"):
        for metric in ("ExecutionsFailed", "ExecutionsTimedOut", "ExecutionsAborted"):
            assert (metric, machine) in watched, (metric, machine)
    functions = set(resources(translated, "AWS::Lambda::Function"))
    assert {name for metric, name in watched if metric == "Errors"} == functions
    assert ("ApproximateNumberOfMessagesVisible", "AsyncFailureQueue") in watched
    assert any("SUM(Rollbacks)" in metric for metric, _ in watched)
    assert any("MAX(RayHeadUnreachable)" in metric for metric, _ in watched)


def test_timed_out_and_aborted_executions_notify_the_topic(translated: dict[str, Any]) -> None:
    rule = translated["Resources"]["ExecutionEndedUnfinishedRule"]["Properties"]
    assert rule["EventPattern"]["detail"] == {
        "stateMachineArn": [{"Ref": "TrainingStateMachine"}, {"Ref": "EvaluationStateMachine"}],
        "status": ["ABORTED", "TIMED_OUT"],
    }
    [target] = rule["Targets"]
    assert target["Arn"] == {"Ref": "NotificationTopic"}
    template = target["InputTransformer"]["InputTemplate"]
    for placeholder in ("<name>", "<status>", "<error>", "<cause>"):
        assert placeholder in template
    policy = translated["Resources"]["NotificationTopicPolicy"]["Properties"]["PolicyDocument"]
    [events] = [s for s in statements(policy) if s["Principal"].get("Service") == "events.amazonaws.com"]
    assert events["Condition"] == {
        "ArnEquals": {"aws:SourceArn": {"Fn::GetAtt": ["ExecutionEndedUnfinishedRule", "Arn"]}}
    }
    assert {s["Principal"]["Service"] for s in statements(policy)} == {
        "cloudwatch.amazonaws.com",
        "events.amazonaws.com",
    }


def test_reserved_concurrency_is_opt_in(source: dict[str, Any], translated: dict[str, Any]) -> None:
    parameter = source["Parameters"]["ReservedConcurrency"]
    assert parameter["Default"] == 0 and parameter["MinValue"] == 0
    assert "16 x N + 100" in parameter["Description"]
    opt_in = {"Fn::If": ["ReserveConcurrency", {"Ref": "ReservedConcurrency"}, {"Ref": "AWS::NoValue"}]}
    for name, function in resources(translated, "AWS::Lambda::Function").items():
        assert function["Properties"]["ReservedConcurrentExecutions"] == opt_in, name
    assert translated["Conditions"]["ReserveConcurrency"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "ReservedConcurrency"}, "0"]}]
    }


def test_data_key_encrypts_topic_queue_logs_and_environments(translated: dict[str, Any]) -> None:
    resources_ = translated["Resources"]
    assert is_data_key(resources_["NotificationTopic"]["Properties"]["KmsMasterKeyId"])
    assert is_data_key(resources_["AsyncFailureQueue"]["Properties"]["KmsMasterKeyId"])
    for name in ("TrainingStateMachineLogGroup", "EvaluationStateMachineLogGroup"):
        assert is_data_key(resources_[name]["Properties"]["KmsKeyId"]), name
    for name, function in resources(translated, "AWS::Lambda::Function").items():
        assert is_data_key(function["Properties"]["KmsKeyArn"]), name
    assert resources_["DataKey"]["Condition"] == "CreateDataKey"  # a prod stack uses the KmsKeyArn parameter
    key = resources_["DataKey"]["Properties"]
    assert key["EnableKeyRotation"] is True
    services = {
        sub_text(s["Principal"]["Service"]): set(as_list(s["Action"]))
        for s in statements(key["KeyPolicy"])
        if "Service" in s["Principal"]
    }
    assert (
        services["cloudwatch.amazonaws.com"]
        == services["events.amazonaws.com"]
        == {"kms:Decrypt", "kms:GenerateDataKey*"}
    )
    assert "kms:GenerateDataKey*" in services["logs.${AWS::Region}.amazonaws.com"]
    roles = {reference(role) for role in resources_["DataKeyUsePolicy"]["Properties"]["Roles"]}
    assert roles == {name for name in resources(translated, "AWS::IAM::Role")}


def test_ray_token_lives_in_a_secret_of_the_data_key_read_only_by_the_ray_jobs_functions(
    translated: dict[str, Any],
) -> None:
    resources_ = translated["Resources"]
    assert "RayAuthToken" not in translated["Parameters"]
    secret = resources_["RayAuthTokenSecret"]
    assert secret["Type"] == "AWS::SecretsManager::Secret"
    assert is_data_key(secret["Properties"]["KmsKeyId"])
    # Created empty: the operator puts the token in, so no value is in the template and a stack update keeps it.
    assert not {"SecretString", "GenerateSecretString"} & set(secret["Properties"])
    assert translated["Outputs"]["RayAuthTokenSecretArn"]["Value"] == {"Ref": "RayAuthTokenSecret"}
    functions = resources(translated, "AWS::Lambda::Function")
    readers = set()
    for name, function in functions.items():
        variables = function["Properties"]["Environment"]["Variables"]
        assert "RAY_AUTH_TOKEN" not in variables, name
        if "RAY_AUTH_TOKEN_SECRET_ARN" in variables:
            assert variables["RAY_AUTH_TOKEN_SECRET_ARN"] == {"Ref": "RayAuthTokenSecret"}, name
            readers.add(name)
    assert readers == RAY_JOBS_FUNCTIONS
    granted = set()
    for policy_type in ("AWS::IAM::Role", "AWS::IAM::ManagedPolicy", "AWS::IAM::Policy"):
        for name, resource in resources(translated, policy_type).items():
            properties = resource["Properties"]
            documents = [p["PolicyDocument"] for p in properties.get("Policies", [])]
            documents += [properties["PolicyDocument"]] if "PolicyDocument" in properties else []
            for statement in (s for document in documents for s in statements(document)):
                actions = as_list(statement["Action"])
                if any(action.startswith("secretsmanager:") for action in actions):
                    assert actions == ["secretsmanager:GetSecretValue"], name
                    assert as_list(statement["Resource"]) == [{"Ref": "RayAuthTokenSecret"}], name
                    granted.add(name)
    assert granted == {f"{name}Role" for name in RAY_JOBS_FUNCTIONS}
    # Secrets Manager decrypts the secret with the reader's kms:Decrypt on the data key.
    key_users = {reference(role) for role in resources_["DataKeyUsePolicy"]["Properties"]["Roles"]}
    assert granted <= key_users
    decrypt = statements(resources_["DataKeyUsePolicy"]["Properties"]["PolicyDocument"])
    assert any("kms:Decrypt" in as_list(s["Action"]) and is_data_key(s["Resource"]) for s in decrypt)


def test_dashboard_body_is_json_with_the_required_widgets(source: dict[str, Any]) -> None:
    body, variables = source["Resources"]["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"]
    filled = re.sub(r"\$\{[^}]+\}", "x", body)
    titles = " | ".join(widget["properties"]["title"] for widget in json.loads(filled)["widgets"])
    for needed in (
        "Training executions",
        "Evaluation executions",
        "Solve rate",
        "Promotions and rollbacks",
        "Lambda errors",
        "Lambda duration",
    ):
        assert needed in titles
    assert "GROUP BY base_model_id" in body and "SolveRate" in body
    assert set(variables) == {"Service"}


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        ("public", True),
        ("", True),
        ("arn:aws:lambda:eu-west-1:017000801446:layer:AWSLambdaPowertoolsPythonV3-python312-x86_64:30", True),
        ("arn:aws:lambda:{region}:017000801446:layer:Powertools:1", False),
        ("powertools", False),
    ],
)
def test_powertools_layer_parameter_accepts_public_an_arn_or_nothing(
    source: dict[str, Any], value: str, accepted: bool
) -> None:
    pattern = source["Parameters"]["PowertoolsLayerArn"]["AllowedPattern"]
    assert bool(re.fullmatch(pattern, value)) is accepted


def test_vpc_config_applies_only_when_subnets_are_given(source: dict[str, Any]) -> None:
    in_vpc = {
        name
        for name, function in resources(source, "AWS::Serverless::Function").items()
        if "VpcConfig" in function["Properties"]
    }
    assert in_vpc == {
        "SubmitRayJobFunction",
        "GetRayJobFunction",
        "StopRayJobFunction",
        "SmokeTestFunction",
        "WatchClusterFunction",
    }
    for name in in_vpc:
        condition = source["Resources"][name]["Properties"]["VpcConfig"]["Fn::If"]
        assert condition[0] == "UseRayVpc" and condition[2] == {"Ref": "AWS::NoValue"}


def test_prod_refuses_to_deploy_without_the_ray_vpc(translated: dict[str, Any], source: dict[str, Any]) -> None:
    rule = translated["Rules"]["ProdRunsInTheRayVpc"]
    assert rule["RuleCondition"] == {"Fn::Equals": [{"Ref": "Stage"}, "prod"]}
    asserted = [a["Assert"] for a in rule["Assertions"]]
    assert asserted == [
        {"Fn::Not": [{"Fn::Contains": [{"Ref": name}, ""]}]} for name in ("RaySubnetIds", "RaySecurityGroupIds")
    ]
    for name in ("RaySubnetIds", "RaySecurityGroupIds"):
        assert source["Parameters"][name]["Default"] == ""  # the local stack and dev run outside a VPC


def test_prod_refuses_to_deploy_without_the_platform_key(translated: dict[str, Any], source: dict[str, Any]) -> None:
    rule = translated["Rules"]["ProdUsesThePlatformKey"]
    assert rule["RuleCondition"] == {"Fn::Equals": [{"Ref": "Stage"}, "prod"]}
    assert [a["Assert"] for a in rule["Assertions"]] == [{"Fn::Not": [{"Fn::Equals": [{"Ref": "KmsKeyArn"}, ""]}]}]
    assert source["Parameters"]["KmsKeyArn"]["Default"] == ""  # the local stack and dev: the stack's own DataKey
    assert source["Conditions"]["CreateDataKey"] == {"Fn::Equals": [{"Ref": "KmsKeyArn"}, ""]}
