"""Helpers for tests of the product template (its fixtures `source` and `translated` are in conftest.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
REGION = "us-east-1"
# The stack outputs docs/design.md names (the ops CLI and the local stack read them).
DESIGN_OUTPUTS = {
    "ArtifactsBucketName",
    "RunsTableName",
    "RegistryTableName",
    "IdempotencyTableName",
    "TopicArn",
    "TrainingStateMachineArn",
    "EvaluationStateMachineArn",
    "DashboardName",
}
PARAMETERS = {"RayAddress": "http://ray-head.internal:8265", "ServeUrl": "http://ray-serve.internal:8000"}


def resources(template: dict[str, Any], resource_type: str) -> dict[str, dict[str, Any]]:
    return {name: r for name, r in template["Resources"].items() if r["Type"] == resource_type}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def reference(value: Any) -> str:
    """The logical id a Ref / GetAtt points to."""
    if "Ref" in value:
        return value["Ref"]
    return value["Fn::GetAtt"][0] if isinstance(value["Fn::GetAtt"], list) else value["Fn::GetAtt"].split(".")[0]


def is_data_key(value: Any) -> bool:
    """Whether ``value`` names the stack's data key: the KmsKeyArn parameter, or DataKey when it is empty."""
    if not isinstance(value, dict) or list(value) != ["Fn::If"]:
        return False
    condition, created, given = value["Fn::If"]
    return condition == "CreateDataKey" and reference(created) == "DataKey" and given == {"Ref": "KmsKeyArn"}


def sub_text(value: Any) -> str:
    """A string, or the text of a Fn::Sub."""
    return value["Fn::Sub"] if isinstance(value, dict) else value


def statements(policy_document: dict[str, Any]) -> list[dict[str, Any]]:
    return as_list(policy_document["Statement"])
