"""The template's function log groups (retention, the data key, Lambda writing there) and the network of the
Ray-facing functions in the HyperPod VPC: the VPC endpoints CreateVpcEndpoints creates, where, and that every AWS
API their code calls is among them, over HTTPS."""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path
from typing import Any

import botocore.session
import pytest
from cfn_resolve import Stack
from template_testing import PARAMETERS, ROOT, is_data_key, resources, statements, sub_text

FUNCTIONS = ROOT / "functions"
VPC = {
    "RaySubnetIds": "subnet-0aaaaaaaaaaaaaaa1,subnet-0bbbbbbbbbbbbbbb2",
    "RaySecurityGroupIds": "sg-0ccccccccccccccc1,sg-0ddddddddddddddd2",
    "RayVpcId": "vpc-0123456789abcdef0",
    "RayRouteTableIds": "rtb-0eeeeeeeeeeeeeee1,rtb-0fffffffffffffff2",
}
WITH_ENDPOINTS = {**PARAMETERS, **VPC, "CreateVpcEndpoints": "true"}
# boto3 service names -> VPC endpoint service names (com.amazonaws.<region>.<name>), where they differ
# ("AWS services that integrate with AWS PrivateLink", AWS PrivateLink Guide).
ENDPOINT_SERVICE = {"stepfunctions": "states", "cloudwatch": "monitoring"}
# Lambda LoggingConfig LogGroup: 1-512 characters of this pattern (Lambda API Reference, LoggingConfig); CloudWatch
# Logs refuses names that begin with "aws/" (CreateLogGroup, CloudWatch Logs API Reference).
LOG_GROUP_NAME = re.compile(r"[\.\-_/#A-Za-z0-9]{1,512}")


def test_every_function_logs_to_a_declared_group_with_the_retention_parameter_and_the_data_key(
    translated: dict[str, Any],
) -> None:
    groups = resources(translated, "AWS::Logs::LogGroup")
    functions = resources(translated, "AWS::Lambda::Function")
    assert len(functions) == 16
    owners: dict[str, str] = {}
    for name, function in functions.items():
        reference = function["Properties"]["LoggingConfig"]["LogGroup"]
        assert list(reference) == ["Ref"], name  # Ref of a log group is its name, which LoggingConfig takes
        group = groups[reference["Ref"]]
        properties = group["Properties"]
        assert sub_text(properties["LogGroupName"]) == f"/aws/lambda/${{AWS::StackName}}/{name}"
        assert properties["RetentionInDays"] == {"Ref": "LogRetentionDays"}, name
        assert is_data_key(properties["KmsKeyId"]), name
        assert group["DeletionPolicy"] == group["UpdateReplacePolicy"] == "Delete", name
        owners.setdefault(reference["Ref"], name)
    assert len(owners) == len(functions)  # a group of its own for each function


def test_log_group_names_are_valid_for_the_longest_stack_name(translated: dict[str, Any]) -> None:
    stack = Stack(translated, PARAMETERS)
    stack_name = "m" * 128  # CloudFormation stack names: at most 128 characters (CreateStack, StackName)
    for name, group in resources(translated, "AWS::Logs::LogGroup").items():
        text = stack.resolve(group["Properties"]["LogGroupName"]).replace("maze-rl-ops", stack_name)
        assert LOG_GROUP_NAME.fullmatch(text) and not text.startswith("aws/"), name


def test_log_retention_takes_exactly_the_values_cloudwatch_logs_accepts(source: dict[str, Any]) -> None:
    # botocore's model of PutRetentionPolicy documents the accepted values of retentionInDays.
    model = botocore.session.get_session().get_service_model("logs")
    days = model.operation_model("PutRetentionPolicy").input_shape.members["retentionInDays"]
    listed = re.search(r"Possible values are: ([\d, and]+)\.", days.documentation)
    assert listed is not None
    accepted = [int(value) for value in re.findall(r"\d+", listed.group(1))]
    parameter = source["Parameters"]["LogRetentionDays"]
    assert parameter["AllowedValues"] == accepted
    assert parameter["Default"] == 30


def test_the_key_policy_lets_cloudwatch_logs_encrypt_every_group_of_the_stack_only(translated: dict[str, Any]) -> None:
    stack = Stack(translated, PARAMETERS)
    policy = translated["Resources"]["DataKey"]["Properties"]["KeyPolicy"]
    [logs] = [s for s in statements(policy) if sub_text(s["Principal"].get("Service", "")).startswith("logs.")]
    patterns = stack.resolve(logs["Condition"]["ArnLike"]["kms:EncryptionContext:aws:logs:arn"])
    arn = "arn:aws:logs:us-east-1:123456789012:log-group:{}"
    groups = resources(translated, "AWS::Logs::LogGroup")
    assert len(groups) == 18
    for name, group in groups.items():
        group_name = stack.resolve(group["Properties"]["LogGroupName"])
        assert any(fnmatch.fnmatchcase(arn.format(group_name), p) for p in patterns), name
    for elsewhere in ("/aws/lambda/other-stack/StartExecutionFunction", "/aws/lambda/maze-rl-ops-x"):
        assert not any(fnmatch.fnmatchcase(arn.format(elsewhere), p) for p in patterns)


def endpoint_service(endpoint: dict[str, Any]) -> str:
    """The short service name (s3, sns, ...) of a resolved VPC endpoint."""
    return endpoint["Properties"]["ServiceName"].removeprefix("com.amazonaws.us-east-1.")


def test_endpoints_reach_the_services_from_the_functions_subnets_and_route_tables(translated: dict[str, Any]) -> None:
    stack = Stack(translated, WITH_ENDPOINTS)
    assert stack.failed_rules() == []
    endpoints = {endpoint_service(e): e["Properties"] for e in stack.resources("AWS::EC2::VPCEndpoint").values()}
    gateways = {service for service, e in endpoints.items() if e["VpcEndpointType"] == "Gateway"}
    assert gateways == {"s3", "dynamodb"}
    for service in gateways:
        assert endpoints[service]["RouteTableIds"] == VPC["RayRouteTableIds"].split(","), service
        assert "SubnetIds" not in endpoints[service]
    interfaces = set(endpoints) - gateways
    assert interfaces == {"sns", "states", "secretsmanager", "kms", "logs", "xray"}
    subnets = VPC["RaySubnetIds"].split(",")
    for service in interfaces:
        endpoint = endpoints[service]
        assert endpoint["VpcEndpointType"] == "Interface" and endpoint["PrivateDnsEnabled"] is True, service
        assert endpoint["SubnetIds"] == subnets, service
        assert endpoint["SecurityGroupIds"] == [{"Ref": "RayEndpointSecurityGroup"}], service
    assert {e["VpcId"] for e in endpoints.values()} == {VPC["RayVpcId"]}
    in_vpc = [f["Properties"].get("VpcConfig") for f in stack.resources("AWS::Lambda::Function").values()]
    in_vpc = [config for config in in_vpc if config]
    assert len(in_vpc) == 5 and all(config["SubnetIds"] == subnets for config in in_vpc)


def test_the_endpoint_security_group_admits_https_from_the_functions_only(translated: dict[str, Any]) -> None:
    stack = Stack(translated, WITH_ENDPOINTS)
    [group] = stack.resources("AWS::EC2::SecurityGroup").values()
    properties = group["Properties"]
    assert properties["VpcId"] == VPC["RayVpcId"]
    [ingress] = properties["SecurityGroupIngress"]
    first_function_group = VPC["RaySecurityGroupIds"].split(",")[0]
    assert (ingress["IpProtocol"], ingress["FromPort"], ingress["ToPort"]) == ("tcp", 443, 443)
    assert ingress["SourceSecurityGroupId"] == first_function_group and "CidrIp" not in ingress
    assert [rule["CidrIp"] for rule in properties["SecurityGroupEgress"]] == ["127.0.0.1/32"]
    for function in stack.resources("AWS::Lambda::Function").values():  # each function in the VPC has that group
        config = function["Properties"].get("VpcConfig")
        assert not config or first_function_group in config["SecurityGroupIds"]


@pytest.mark.parametrize(
    "values",
    [
        PARAMETERS,
        {**PARAMETERS, **VPC},
        {**PARAMETERS, **VPC, "CreateVpcEndpoints": "false"},
        {**PARAMETERS, "CreateVpcEndpoints": "true"},
    ],
    ids=["defaults", "vpc-without-endpoints", "endpoints-false", "endpoints-without-vpc"],
)
def test_no_network_resource_without_the_vpc_and_the_opt_in(translated: dict[str, Any], values: dict[str, str]) -> None:
    created = Stack(translated, values).resources()
    assert [name for name, r in created.items() if r["Type"].startswith("AWS::EC2::")] == []


@pytest.mark.parametrize("missing", sorted(VPC))
def test_endpoints_refuse_to_deploy_without_each_vpc_parameter(translated: dict[str, Any], missing: str) -> None:
    failed = Stack(translated, {**WITH_ENDPOINTS, missing: ""}).failed_rules()
    assert len(failed) == 1 and missing in failed[0]


def module_file(module: str) -> Path | None:
    """The source file of a module of the functions' package, if it is one."""
    path = FUNCTIONS.joinpath(*module.split("."))
    return next((p for p in (path.with_suffix(".py"), path / "__init__.py") if p.is_file()), None)


def import_closure(handler_module: str) -> list[Path]:
    """The handler's file and every file of functions/ it imports, transitively."""
    seen: dict[str, Path] = {}
    pending = [handler_module]
    while pending:
        module = pending.pop()
        path = module_file(module)
        if path is None or module in seen:
            continue
        seen[module] = path
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                pending += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                pending += [alias.name for alias in node.names]
    return sorted(seen.values())


def aws_services_called(paths: list[Path]) -> set[str]:
    """Endpoint service names of the AWS APIs the code calls: aws_client("<service>"), and X-Ray for the Tracer."""
    called: set[str] = set()
    for path in paths:
        if path.name == "aws_clients.py":  # makes the clients; the callers name the services
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            callee = getattr(node, "func", None)
            name = getattr(callee, "id", getattr(callee, "attr", ""))
            if isinstance(node, ast.Call) and name in ("client", "resource"):
                pytest.fail(f"{path}:{node.lineno}: a boto3 client made outside mazeops.aws_clients")
            if isinstance(node, ast.Call) and name == "aws_client":
                [argument] = node.args
                assert isinstance(argument, ast.Constant), f"{path}:{node.lineno}: service not a literal"
                called.add(ENDPOINT_SERVICE.get(argument.value, argument.value))
            elif isinstance(node, ast.Name) and node.id == "Tracer":
                called.add("xray")  # the X-Ray SDK sends the function's subsegments to the X-Ray API
    return called


def test_every_aws_api_the_vpc_functions_call_has_an_endpoint(translated: dict[str, Any]) -> None:
    stack = Stack(translated, WITH_ENDPOINTS)
    endpoints = {endpoint_service(e) for e in stack.resources("AWS::EC2::VPCEndpoint").values()}
    in_vpc = {
        name: function["Properties"]["Handler"].split(".")[0]
        for name, function in stack.resources("AWS::Lambda::Function").items()
        if function["Properties"].get("VpcConfig")
    }
    assert set(in_vpc) == {
        "SubmitRayJobFunction",
        "GetRayJobFunction",
        "StopRayJobFunction",
        "SmokeTestFunction",
        "WatchClusterFunction",
    }
    everything: set[str] = set()
    for name, handler in in_vpc.items():
        called = aws_services_called(import_closure(handler))
        assert called <= endpoints, f"{name} calls {sorted(called - endpoints)} without an endpoint"
        everything |= called
    assert {"dynamodb", "secretsmanager", "xray"} <= everything  # the scan sees the calls it should


def test_aws_sdk_calls_stay_on_https(translated: dict[str, Any]) -> None:
    # boto3 speaks HTTPS to each service's default endpoint unless given use_ssl=False, an endpoint_url or an
    # AWS_ENDPOINT_URL* variable (the local stack's moto server); none of those in the deployed code or template.
    for path in sorted(FUNCTIONS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.keyword):
                assert node.arg not in ("use_ssl", "verify", "endpoint_url"), f"{path}:{node.value.lineno}"
    environments = [translated["Globals"]["Function"]] if "Globals" in translated else []
    environments += [f["Properties"] for f in resources(translated, "AWS::Lambda::Function").values()]
    for properties in environments:
        variables = properties.get("Environment", {}).get("Variables", {})
        assert not [name for name in variables if name.startswith("AWS_ENDPOINT_URL")]
