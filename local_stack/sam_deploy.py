"""Deploy a SAM template into the local moto server, as `sam package` + `sam deploy` would:
`package_template`, then `translate` (the AWS SAM translator, offline), then `deploy_stack`."""

from __future__ import annotations

import hashlib
import io
import json
import time
import zipfile
from pathlib import Path
from typing import Any

import boto3
import yaml
from samtranslator.model.exceptions import InvalidDocumentException
from samtranslator.parser.parser import Parser
from samtranslator.translator.translator import Translator
from samtranslator.yaml_helper import intrinsics_multi_constructor

ZIP_TIMESTAMP = (1980, 1, 1, 0, 0, 0)
_SKIPPED_PARTS = {"__pycache__", ".pytest_cache", ".mypy_cache"}

# The AWS managed policies SAM templates commonly name; the translator only needs the ARNs.
MANAGED_POLICIES = {
    name: f"arn:aws:iam::aws:policy/{path}{name}"
    for path, name in [
        ("service-role/", "AWSLambdaBasicExecutionRole"),
        ("service-role/", "AWSLambdaRole"),
        ("service-role/", "AWSLambdaVPCAccessExecutionRole"),
        ("", "AWSXrayWriteOnlyAccess"),
        ("", "AWSXRayDaemonWriteAccess"),
        ("", "CloudWatchLogsFullAccess"),
    ]
}


class TemplateError(ValueError):
    """The SAM template cannot be read, packaged or translated."""


class DeployError(RuntimeError):
    """CloudFormation did not create the stack."""


class _CfnYamlLoader(yaml.SafeLoader):
    """A YAML loader that reads CloudFormation short-form intrinsics (!Ref, !GetAtt, ...)."""


_CfnYamlLoader.add_multi_constructor("!", intrinsics_multi_constructor)


def load_template(template_path: Path) -> dict[str, Any]:
    """Read a CloudFormation/SAM template (YAML or JSON) into a dict."""
    try:
        template = yaml.load(Path(template_path).read_text(), Loader=_CfnYamlLoader)
    except (OSError, yaml.YAMLError) as exc:
        raise TemplateError(f"cannot read template {template_path}: {exc}") from exc
    if not isinstance(template, dict) or not isinstance(template.get("Resources"), dict):
        raise TemplateError(f"template {template_path} has no Resources mapping")
    return template


def package_template(template_path: Path, bucket: str, s3_client: Any) -> dict[str, Any]:
    """Return the template with local code uploaded to `bucket` and ASL files inlined."""
    template_path = Path(template_path)
    template = load_template(template_path)
    base_dir = template_path.parent
    global_code_uri = template.get("Globals", {}).get("Function", {}).get("CodeUri")
    for logical_id, resource in template["Resources"].items():
        properties = resource.setdefault("Properties", {})
        if resource.get("Type") == "AWS::Serverless::Function":
            code_uri = properties.get("CodeUri", global_code_uri)
            if _is_local(code_uri) and "InlineCode" not in properties and "ImageUri" not in properties:
                properties["CodeUri"] = _upload_code(base_dir / code_uri, bucket, s3_client, logical_id)
        elif resource.get("Type") == "AWS::Serverless::StateMachine":
            definition_uri = properties.get("DefinitionUri")
            if _is_local(definition_uri):
                properties["Definition"] = _read_definition(base_dir / definition_uri, logical_id)
                del properties["DefinitionUri"]
    return template


def deterministic_zip(directory: Path) -> bytes:
    """Zip a directory's files in sorted order with fixed timestamps and modes (same input, same bytes)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(directory.rglob("*")):
            relative = path.relative_to(directory)
            if not path.is_file() or _SKIPPED_PARTS & set(relative.parts) or path.suffix == ".pyc":
                continue
            info = zipfile.ZipInfo(relative.as_posix(), date_time=ZIP_TIMESTAMP)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())
    return buffer.getvalue()


def translate(template: dict[str, Any], parameters: dict[str, str], region: str) -> dict[str, Any]:
    """Translate a packaged SAM template into plain CloudFormation, offline."""
    translator = Translator(None, Parser(), boto_session=boto3.session.Session(region_name=region))
    try:
        return translator.translate(
            template, parameter_values=dict(parameters), get_managed_policy_map=lambda: MANAGED_POLICIES
        )
    except InvalidDocumentException as exc:
        messages = "; ".join(str(cause) for cause in exc.causes)
        raise TemplateError(f"SAM translation failed: {messages}") from exc


def deploy_stack(
    cfn_client: Any, name: str, template_body: str, parameters: dict[str, str], timeout_s: float = 60.0
) -> dict[str, str]:
    """Create stack `name` and wait for CREATE_COMPLETE; returns its outputs {OutputKey: OutputValue}."""
    cfn_client.create_stack(
        StackName=name,
        TemplateBody=template_body,
        Parameters=[{"ParameterKey": key, "ParameterValue": str(value)} for key, value in parameters.items()],
        Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"],
    )
    deadline = time.monotonic() + timeout_s
    while True:
        stack = cfn_client.describe_stacks(StackName=name)["Stacks"][0]
        status = stack["StackStatus"]
        if status == "CREATE_COMPLETE":
            return {output["OutputKey"]: output["OutputValue"] for output in stack.get("Outputs", [])}
        if not status.endswith("_IN_PROGRESS"):
            raise DeployError(f"stack {name} ended in {status}: {_failure_reasons(cfn_client, name)}")
        if time.monotonic() > deadline:
            raise DeployError(f"stack {name} still {status} after {timeout_s:.0f} s")
        time.sleep(0.1)


def _failure_reasons(cfn_client: Any, name: str) -> str:
    events = cfn_client.describe_stack_events(StackName=name)["StackEvents"]
    reasons = [
        f"{event['LogicalResourceId']}: {event['ResourceStatusReason']}"
        for event in events
        if event["ResourceStatus"].endswith("FAILED") and event.get("ResourceStatusReason")
    ]
    return "; ".join(reasons) or "no reason given"


def _is_local(uri: Any) -> bool:
    return isinstance(uri, str) and not uri.startswith("s3://")


def _upload_code(directory: Path, bucket: str, s3_client: Any, logical_id: str) -> str:
    if not directory.is_dir():
        raise TemplateError(f"{logical_id}: CodeUri {directory} is not a directory")
    body = deterministic_zip(directory)
    key = f"code/{hashlib.sha256(body).hexdigest()}.zip"
    s3_client.put_object(Bucket=bucket, Key=key, Body=body)
    return f"s3://{bucket}/{key}"


def _read_definition(path: Path, logical_id: str) -> dict[str, Any]:
    try:
        text = path.read_text()
        return json.loads(text) if path.suffix == ".json" else yaml.load(text, Loader=_CfnYamlLoader)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise TemplateError(f"{logical_id}: cannot read DefinitionUri {path}: {exc}") from exc
