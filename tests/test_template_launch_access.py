"""Who may write where in the artifacts bucket (ArtifactsBucketPolicy): with LauncherRoleArns and ClusterRoleArn set,
each guarded prefix's Deny names exactly the principals allowed to write there, which are exactly the stack's roles
that its IAM lets write there plus those parameters; with them empty, only the serving/ guard and the TLS deny
remain. Also the run caps' parameters reaching validate_run_spec."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from cfn_resolve import PSEUDO, Stack
from template_testing import PARAMETERS, as_list, resources, statements, sub_text

ACCOUNT = PSEUDO["AWS::AccountId"]
LAUNCHERS = [f"arn:aws:iam::{ACCOUNT}:role/mazeops-launcher", f"arn:aws:iam::{ACCOUNT}:role/ops/*"]
CLUSTER = f"arn:aws:iam::{ACCOUNT}:role/hyperpod-ray-pod-identity"
RESTRICTED = {**PARAMETERS, "LauncherRoleArns": ",".join(LAUNCHERS), "ClusterRoleArn": CLUSTER}
WRITE_ACTIONS = {"s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion"}
BUCKET_ARN = "${ArtifactsBucket.Arn}/"
# The guarded prefixes and who besides the stack's own roles may write there, for RESTRICTED.
PARAMETER_WRITERS = {
    "requests/": set(LAUNCHERS),
    "schedules/": set(LAUNCHERS),
    "runs/": {CLUSTER},
    "baselines/": {CLUSTER},
    "serving/": set(),
}


def role_arn(name: str) -> str:
    """The ARN a stack role `name` stands for in these tests."""
    return f"arn:aws:iam::{ACCOUNT}:role/{name}"


def with_role_arns(template: dict[str, Any]) -> dict[str, Any]:
    """A copy of `template` with each `GetAtt <role>.Arn` of its IAM roles replaced by role_arn(<role>), so that
    joining and splitting them resolves to text."""
    roles = set(resources(template, "AWS::IAM::Role"))

    def replace(value: Any) -> Any:
        if isinstance(value, list):
            return [replace(item) for item in value]
        if not isinstance(value, dict):
            return value
        target = value.get("Fn::GetAtt")
        if len(value) == 1 and isinstance(target, list) and target[0] in roles and target[1] == "Arn":
            return role_arn(target[0])
        return {key: replace(item) for key, item in value.items()}

    return replace(copy.deepcopy(template))


def bucket_statements(translated: dict[str, Any], values: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The artifacts bucket policy's statements by Sid, for parameter `values`."""
    stack = Stack(with_role_arns(translated), values)
    policy = stack.resources("AWS::S3::BucketPolicy")["ArtifactsBucketPolicy"]["Properties"]["PolicyDocument"]
    return {statement["Sid"]: statement for statement in statements(policy)}


def prefixes(resource_list: Any, scheduled_key: str = "schedules/weekly.json") -> set[str]:
    """The guarded prefixes (`requests/`, ...) that bucket object ARNs fall under."""
    found = set()
    for resource in as_list(resource_list):
        text = sub_text(resource)
        if isinstance(text, str) and text.startswith(BUCKET_ARN):
            key = text.removeprefix(BUCKET_ARN).replace("${ScheduledRunSpecKey}", scheduled_key)
            found.add(key.split("/", 1)[0] + "/")
    return found & set(PARAMETER_WRITERS)


def stack_writers(translated: dict[str, Any]) -> dict[str, set[str]]:
    """For each guarded prefix, the stack's roles whose IAM policies allow writing or deleting objects there."""
    writers: dict[str, set[str]] = {prefix: set() for prefix in PARAMETER_WRITERS}
    for name, role in resources(translated, "AWS::IAM::Role").items():
        for policy in role["Properties"].get("Policies", []):
            for statement in statements(policy["PolicyDocument"]):
                if statement["Effect"] == "Allow" and WRITE_ACTIONS & set(as_list(statement["Action"])):
                    for prefix in prefixes(statement["Resource"]):
                        writers[prefix].add(role_arn(name))
    return writers


def test_each_guarded_prefix_denies_all_but_exactly_its_writers(translated: dict[str, Any]) -> None:
    guards = {sid: s for sid, s in bucket_statements(translated, RESTRICTED).items() if sid != "DenyInsecureTransport"}
    expected = {prefix: writers | PARAMETER_WRITERS[prefix] for prefix, writers in stack_writers(translated).items()}
    # The stack's own writers, found in its IAM policies: the schedule's copier, the spec normalizer, registration.
    assert expected["requests/"] >= {role_arn("StartExecutionFunctionRole")}
    assert expected["runs/"] >= {role_arn("ValidateRunSpecFunctionRole")}
    assert expected["serving/"] >= {role_arn("RegisterAdapterFunctionRole")}
    guarded: dict[str, set[str]] = {}
    for sid, guard in guards.items():
        assert (guard["Effect"], guard["Principal"]) == ("Deny", "*"), sid
        assert set(as_list(guard["Action"])) == WRITE_ACTIONS, sid
        [(operator, condition)] = guard["Condition"].items()
        [(key, principals)] = condition.items()
        assert (operator, key) == ("ArnNotLike", "aws:PrincipalArn"), sid
        assert len(as_list(principals)) == len(set(as_list(principals))), sid
        for prefix in prefixes(guard["Resource"]):
            assert prefix not in guarded, f"{prefix} guarded twice"
            guarded[prefix] = set(as_list(principals))
    assert guarded == expected


def test_the_standing_spec_is_guarded_wherever_it_is_kept(translated: dict[str, Any]) -> None:
    elsewhere = bucket_statements(translated, {**RESTRICTED, "ScheduledRunSpecKey": "standing/weekly.json"})
    resource_texts = [sub_text(r) for r in as_list(elsewhere["StandingSpecsOnlyFromLaunchers"]["Resource"])]
    assert f"{BUCKET_ARN}standing/weekly.json" in resource_texts
    assert f"{BUCKET_ARN}schedules/*" in resource_texts


def test_the_cluster_policy_writes_only_where_the_cluster_role_is_allowed(translated: dict[str, Any]) -> None:
    document = translated["Resources"]["RayClusterAccessPolicy"]["Properties"]["PolicyDocument"]
    written = set()
    for statement in statements(document):
        if WRITE_ACTIONS & set(as_list(statement["Action"])):
            written |= prefixes(statement["Resource"])
    assert written and written <= {prefix for prefix, extra in PARAMETER_WRITERS.items() if CLUSTER in extra}


@pytest.mark.parametrize(
    "values",
    [PARAMETERS, {**PARAMETERS, "LauncherRoleArns": ""}, {**PARAMETERS, "ClusterRoleArn": ""}],
    ids=["defaults", "launchers-empty", "cluster-empty"],
)
def test_empty_parameters_leave_their_prefixes_unguarded(translated: dict[str, Any], values: dict[str, str]) -> None:
    assert set(bucket_statements(translated, values)) == {"DenyInsecureTransport", "ServingCopiesOnlyFromRegistration"}


def test_one_parameter_guards_only_its_own_prefixes(translated: dict[str, Any]) -> None:
    launchers_only = bucket_statements(translated, {**PARAMETERS, "LauncherRoleArns": LAUNCHERS[0]})
    assert set(launchers_only) == {
        "DenyInsecureTransport",
        "ServingCopiesOnlyFromRegistration",
        "RunRequestsOnlyFromLaunchers",
        "StandingSpecsOnlyFromLaunchers",
    }
    assert launchers_only["StandingSpecsOnlyFromLaunchers"]["Condition"]["ArnNotLike"]["aws:PrincipalArn"] == [
        LAUNCHERS[0]
    ]
    cluster_only = bucket_statements(translated, {**PARAMETERS, "ClusterRoleArn": CLUSTER})
    assert set(cluster_only) == {
        "DenyInsecureTransport",
        "ServingCopiesOnlyFromRegistration",
        "RunArtifactsOnlyFromTheCluster",
        "BaselinesOnlyFromTheCluster",
    }


def test_the_run_caps_reach_validate_run_spec(translated: dict[str, Any]) -> None:
    stack = Stack(translated, {**PARAMETERS, "MaxGpusPerRun": "8", "MaxStepsPerRun": "500", "MaxActiveRuns": "1"})
    functions = stack.resources("AWS::Lambda::Function")
    variables = functions["ValidateRunSpecFunction"]["Properties"]["Environment"]["Variables"]
    assert (variables["MAX_GPUS_PER_RUN"], variables["MAX_STEPS_PER_RUN"], variables["MAX_ACTIVE_RUNS"]) == (
        "8",
        "500",
        "1",
    )
    defaults = {name: translated["Parameters"][name]["Default"] for name in ("MaxGpusPerRun", "MaxStepsPerRun")}
    assert defaults == {"MaxGpusPerRun": 16, "MaxStepsPerRun": 2000}
    assert translated["Parameters"]["MaxActiveRuns"]["Default"] == 2
    for name, function in functions.items():
        if name != "ValidateRunSpecFunction":
            assert not {"MAX_GPUS_PER_RUN", "MAX_ACTIVE_RUNS"} & set(function["Properties"]["Environment"]["Variables"])
