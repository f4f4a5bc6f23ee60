"""Which deployment the CLI talks to: a CloudFormation stack (`--stack`), or `.local-stack/stack.json` (`--local`)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from mazeops.ray_jobs import RayJobsClient, authenticated_client
from mazeops.ray_token import SECRET_OUTPUT, empty_secret_message
from opsctl.errors import OpsError

LOCAL_STACK_FILE = Path(".local-stack") / "stack.json"
STACK_ENV = "MAZEOPS_STACK"
REQUIRED_OUTPUTS = (
    "ArtifactsBucketName",
    "RunsTableName",
    "RegistryTableName",
    "TrainingStateMachineArn",
    "EvaluationStateMachineArn",
)


@dataclass
class Target:
    """One deployment: its AWS session and endpoint, stack outputs and service addresses.

    `overrides` take precedence over the Lambda environment (the local stack's Ray address and serve URL).
    """

    stack_name: str
    session: boto3.Session
    outputs: dict[str, str]
    endpoint_url: str | None = None
    overrides: dict[str, str] = field(default_factory=dict)
    _clients: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    def client(self, service: str) -> Any:
        """The boto3 client for `service` on this deployment's endpoint (one per service)."""
        if service not in self._clients:
            self._clients[service] = self.session.client(service, endpoint_url=self.endpoint_url)
        return self._clients[service]

    @property
    def bucket(self) -> str:
        """The artifacts bucket."""
        return self.outputs["ArtifactsBucketName"]

    @property
    def runs_table(self) -> str:
        """The runs table name."""
        return self.outputs["RunsTableName"]

    @property
    def registry_table(self) -> str:
        """The adapter registry table name."""
        return self.outputs["RegistryTableName"]

    @property
    def state_machines(self) -> dict[str, str]:
        """State machine ARNs by short name: `training`, `evaluation`."""
        return {
            "training": self.outputs["TrainingStateMachineArn"],
            "evaluation": self.outputs["EvaluationStateMachineArn"],
        }

    @cached_property
    def lambda_settings(self) -> dict[str, str]:
        """Environment of the stack's Lambda functions (the first that has BASE_MODELS); {} if unreadable."""
        try:
            cloudformation = self.client("cloudformation")
            functions = self.client("lambda")
            for page in cloudformation.get_paginator("list_stack_resources").paginate(StackName=self.stack_name):
                for resource in page["StackResourceSummaries"]:
                    if resource["ResourceType"] != "AWS::Lambda::Function":
                        continue
                    configuration = functions.get_function_configuration(FunctionName=resource["PhysicalResourceId"])
                    variables = configuration.get("Environment", {}).get("Variables", {})
                    if "BASE_MODELS" in variables:
                        return variables
        except (ClientError, BotoCoreError):
            return {}
        return {}

    @property
    def base_models(self) -> dict[str, str] | None:
        """The deployment's BASE_MODELS map, or None when it cannot be read."""
        raw = self.lambda_settings.get("BASE_MODELS")
        if not raw:
            return None
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            return None
        return value if isinstance(value, dict) else None

    @property
    def ray_address(self) -> str:
        """The Ray dashboard address (Jobs API); OpsError when the deployment names none."""
        return self._setting("RAY_ADDRESS", "Ray address")

    @property
    def serve_url(self) -> str:
        """The Ray Serve URL; OpsError when the deployment names none."""
        return self._setting("SERVE_URL", "serve URL")

    def ray_jobs(self) -> RayJobsClient:
        """A Ray Jobs client of the deployment's head, with the token in the stack's secret (RayAuthTokenSecretArn).

        Raises:
            OpsError: the deployment names no Ray address, or its token secret is unknown, unreadable or empty.
        """
        return authenticated_client(self.ray_address, self.ray_auth_token())

    def ray_auth_token(self) -> str:
        """The Ray cluster's token, read now from the stack's secret with this deployment's session.

        Raises:
            OpsError: the stack has no RayAuthTokenSecretArn output, or the secret is unreadable or holds no token.
        """
        arn = self.outputs.get(SECRET_OUTPUT)
        if not arn:
            raise OpsError(
                f"stack {self.stack_name!r} has no {SECRET_OUTPUT} output, and the Ray Jobs API is only "
                "called with the cluster's token"
            )
        try:
            answer = self.client("secretsmanager").get_secret_value(SecretId=arn)
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            if code == "ResourceNotFoundException":
                raise OpsError(empty_secret_message(arn)) from None
            raise OpsError(f"cannot read the Ray auth token secret {arn}: {error}") from None
        except BotoCoreError as error:
            raise OpsError(f"cannot read the Ray auth token secret {arn}: {error}") from None
        token = (answer.get("SecretString") or "").strip()
        if not token:
            raise OpsError(empty_secret_message(arn))
        return token

    def _setting(self, name: str, what: str) -> str:
        value = self.overrides.get(name) or self.lambda_settings.get(name)
        if not value:
            raise OpsError(
                f"the {what} of stack {self.stack_name!r} is unknown: "
                f"no readable Lambda function configuration of the stack sets {name}"
            )
        return value.rstrip("/")


def _session(region: str | None) -> boto3.Session:
    session = boto3.Session(region_name=region)
    if not session.region_name:
        raise OpsError("no AWS region configured: set AWS_REGION (or AWS_DEFAULT_REGION) or a profile region")
    return session


def _missing_outputs(outputs: dict[str, str], where: str) -> None:
    missing = [name for name in REQUIRED_OUTPUTS if not outputs.get(name)]
    if missing:
        raise OpsError(f"{where} lacks the outputs {', '.join(missing)}")


def stack_target(stack_name: str) -> Target:
    """The deployment of CloudFormation stack `stack_name`, in boto3's configured region."""
    session = _session(None)
    try:
        stacks = session.client("cloudformation").describe_stacks(StackName=stack_name)["Stacks"]
    except ClientError as error:
        raise OpsError(f"cannot read stack {stack_name!r} in {session.region_name}: {error}") from None
    except BotoCoreError as error:
        raise OpsError(f"cannot reach CloudFormation in {session.region_name}: {error}") from None
    outputs = {output["OutputKey"]: output["OutputValue"] for output in stacks[0].get("Outputs", [])}
    _missing_outputs(outputs, f"stack {stack_name!r}")
    return Target(stack_name=stack_name, session=session, outputs=outputs)


def local_target(path: Path = LOCAL_STACK_FILE) -> Target:
    """The local stack described by `path` (moto server endpoint, Ray head, serve app)."""
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise OpsError(f"{path} not found: start the local stack first (make local)") from None
    except (OSError, json.JSONDecodeError) as error:
        raise OpsError(f"cannot read {path}: {error}") from None
    if not isinstance(document, dict) or not isinstance(document.get("outputs"), dict):
        raise OpsError(f"{path} must be a JSON object with an 'outputs' object")
    for key in ("endpoint_url", "region", "stack_name"):
        if not isinstance(document.get(key), str) or not document[key]:
            raise OpsError(f"{path} lacks {key!r}")
    _missing_outputs(document["outputs"], str(path))
    session = _session(document["region"])
    if session.get_credentials() is None:
        # The moto server accepts any credentials; boto3 still needs some to sign requests.
        session = boto3.Session(
            region_name=document["region"], aws_access_key_id="testing", aws_secret_access_key="testing"
        )
    addresses = {"RAY_ADDRESS": document.get("ray_address") or "", "SERVE_URL": document.get("serve_url") or ""}
    return Target(
        stack_name=document["stack_name"],
        session=session,
        outputs=document["outputs"],
        endpoint_url=document["endpoint_url"],
        overrides=addresses,
    )


def resolve_target(stack: str | None, local: bool, local_state: Path = LOCAL_STACK_FILE) -> Target:
    """`--local` (described by `local_state`), else `--stack`, else env MAZEOPS_STACK; OpsError when none is given."""
    if local:
        return local_target(local_state)
    name = stack or os.environ.get(STACK_ENV)
    if not name:
        raise OpsError(f"no deployment chosen: pass --stack NAME or --local, or set {STACK_ENV}")
    return stack_target(name)
