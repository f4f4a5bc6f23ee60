"""`LocalStack`: the project's AWS stack in a moto server inside this process, plus an optional local Ray head.

What it starts, in which order, and what is real or emulated: docs/design.md. One per process (moto is process-wide).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import boto3
import requests
from moto.server import ThreadedMotoServer

from local_stack import moto_patches, sam_deploy
from local_stack.credentials import FAKE_CREDENTIALS
from local_stack.lambda_runner import InProcessLambdaRunner
from local_stack.ray_head import RayHead
from local_stack.schedules import ScheduleTicker
from mazeops.ray_jobs import RayJobsClient, authenticated_client
from mazeops.ray_token import SECRET_OUTPUT

DEPLOY_BUCKET = "local-stack-deploy"
# Values the product template needs locally unless the caller overrides them: no Lambda layer
# (the virtual environment provides Powertools); without a Ray head, Ray and Serve addresses
# where nothing listens (port 9, "discard"), so calls fail fast as RayUnavailable. With a head, its addresses.
LOCAL_PARAMETER_DEFAULTS = {
    "PowertoolsLayerArn": "",
    "RayAddress": "http://127.0.0.1:9",
    "ServeUrl": "http://127.0.0.1:9",
}
# The token the stack puts into the Ray token's secret after deploying when it has no head: one no head knows.
NO_HEAD_RAY_TOKEN = "no-ray-head-" + "0" * 32

logger = logging.getLogger(__name__)


@dataclass
class LocalStackConfig:
    """How to start a LocalStack. Relative paths are relative to the current directory."""

    template_path: Path = Path("template.yaml")  # its directory is the repository root for Ray jobs
    state_dir: Path = Path(".local-stack")  # stack.json, template.cfn.json, unpacked Lambda code
    parameters: dict[str, str] = field(default_factory=dict)  # template parameters; win over local defaults
    stack_name: str = "maze-rl-ops"
    region: str = "us-east-1"
    with_ray: bool = False
    serve_port: int = 8000  # Ray Serve port on the local head; 0 picks a free one
    # Fire the cluster watch's schedule rule (logical id `watch_rule`) every this many seconds while the stack runs;
    # None: only on demand (local_stack.schedules.fire_scheduled_rule).
    watch_interval_s: float | None = None
    watch_rule: str = "WatchClusterFunctionClusterWatch"


class StackNotRunning(RuntimeError):
    """The local stack was asked for its endpoint before start() or after stop()."""


class UnknownStackResource(LookupError):
    """The stack has no resource with this logical id."""


class EndpointSession(boto3.session.Session):
    """A boto3 session whose clients and resources default to one endpoint URL."""

    def __init__(self, endpoint_url: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.endpoint_url = endpoint_url

    def client(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("endpoint_url", self.endpoint_url)
        return super().client(*args, **kwargs)

    def resource(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("endpoint_url", self.endpoint_url)
        return super().resource(*args, **kwargs)


class LocalStack:
    """Context manager running the stack: `start` on enter, `stop` on exit."""

    def __init__(self, config: LocalStackConfig):
        self.config = config
        self.outputs: dict[str, str] = {}
        self.timings: dict[str, float] = {}
        self.ray: RayHead | None = None
        self.tickers: list[ScheduleTicker] = []
        self._server: ThreadedMotoServer | None = None
        self._endpoint_url: str | None = None
        self._session: EndpointSession | None = None
        self._saved_moto_port: str | None = None

    @property
    def endpoint_url(self) -> str:
        """http://127.0.0.1:<port> of the moto server."""
        if self._endpoint_url is None:
            raise StackNotRunning("the local stack is not running: call start() first")
        return self._endpoint_url

    @property
    def session(self) -> EndpointSession:
        """A boto3 session (fake credentials, the stack's region) whose clients use the moto server."""
        if self._session is None:
            self._session = EndpointSession(
                self.endpoint_url,
                aws_access_key_id=FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                aws_secret_access_key=FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                aws_session_token=FAKE_CREDENTIALS["AWS_SESSION_TOKEN"],
                region_name=self.config.region,
            )
        return self._session

    @property
    def ray_address(self) -> str | None:
        """The Ray dashboard URL when started with Ray, else None."""
        return self.ray.address if self.ray else None

    def ray_jobs(self) -> RayJobsClient:
        """A Ray Jobs client of the local head, authenticated with its token.

        Raises:
            RuntimeError: if the stack was started without Ray.
        """
        if self.ray is None:
            raise RuntimeError("this local stack was started without a Ray head")
        return authenticated_client(self.ray.address, self.ray.auth_token)

    @property
    def serve_url(self) -> str | None:
        """Where a Ray Serve app on the local head answers, else None."""
        return self.ray.serve_url if self.ray else None

    def environment(self) -> dict[str, str]:
        """Variables that point a process (a Ray job, a CLI) at this stack.

        PYTHONPATH starts with the template's directory (the repository root) and its
        functions/ directory, so jobs import `cluster_jobs` and `mazeops` from the checkout;
        PATH starts with this interpreter's directory, so a job's `python` is this virtual
        environment's, as `python` on the cluster is the Ray image's.
        """
        root = Path(self.config.template_path).resolve().parent
        paths = [str(root), str(root / "functions")]
        if os.environ.get("PYTHONPATH"):
            paths.append(os.environ["PYTHONPATH"])
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_REGION": self.config.region,
            "AWS_DEFAULT_REGION": self.config.region,
            **FAKE_CREDENTIALS,
            "PYTHONPATH": os.pathsep.join(paths),
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
            # torch's OpenMP threads spin while waiting; on a small shared CPU that slows jobs up to 10x.
            "OMP_WAIT_POLICY": "PASSIVE",
        }

    def start(self) -> LocalStack:
        """Start the moto server with the patches, the Ray head (if configured) and the deployed stack, then write
        ``<state_dir>/stack.json``; on failure, stop what was started."""
        started = time.monotonic()
        try:
            self._start_moto()
            self.timings["moto_s"] = time.monotonic() - started
            if self.config.with_ray:
                self.ray = RayHead(self.environment(), serve_port=self.config.serve_port)
                self.ray.launch()
            self._deploy()
            self.timings["deploy_s"] = time.monotonic() - started - self.timings["moto_s"]
            if self.ray:
                self.ray.wait_until_ready()
            if self.config.watch_interval_s is not None:
                self.start_ticker(self.config.watch_rule, self.config.watch_interval_s)
            self._write_state()
        except BaseException:
            self.stop()
            raise
        self.timings["start_s"] = time.monotonic() - started
        return self

    def stop(self) -> None:
        """Stop the schedule tickers, the Ray head and the moto server, remove the patches; safe to call twice."""
        for ticker in self.tickers:
            ticker.stop()
        self.tickers.clear()
        if self.ray:
            self.ray.stop()
            self.ray = None
        if self._server is not None:
            self._abort_running_executions()
            moto_patches.remove_patches()
            self._server.stop()
            self._server = None
            self._endpoint_url = None
            self._session = None
            if self._saved_moto_port is None:
                os.environ.pop("MOTO_PORT", None)
            else:
                os.environ["MOTO_PORT"] = self._saved_moto_port

    def _abort_running_executions(self) -> None:
        """Stop executions still running, so their threads do not outlive the server."""
        sfn = self.session.client("stepfunctions")
        for machine in sfn.list_state_machines()["stateMachines"]:
            running = sfn.list_executions(stateMachineArn=machine["stateMachineArn"], statusFilter="RUNNING")
            for execution in running["executions"]:
                sfn.stop_execution(executionArn=execution["executionArn"], cause="local stack stopped")

    def start_ticker(self, rule_logical_id: str, interval_s: float) -> ScheduleTicker:
        """Fire the stack's schedule rule `rule_logical_id` every `interval_s` seconds until the stack stops."""
        rule_name = self.physical_id(rule_logical_id)
        ticker = ScheduleTicker(self.session.client("events"), rule_name, interval_s).start()
        self.tickers.append(ticker)
        return ticker

    def physical_id(self, logical_id: str) -> str:
        """The physical name/ARN of a resource of the stack (e.g. a schedule rule's name)."""
        # Listed rather than described: moto's DescribeStackResource answers HTTP 500 for every
        # resource once the stack holds a type its CloudFormation skipped, as the product template does.
        cloudformation = self.session.client("cloudformation")
        for page in cloudformation.get_paginator("list_stack_resources").paginate(StackName=self.config.stack_name):
            for resource in page["StackResourceSummaries"]:
                if resource["LogicalResourceId"] == logical_id:
                    return resource["PhysicalResourceId"]
        raise UnknownStackResource(f"stack {self.config.stack_name!r} has no resource {logical_id!r}")

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _start_moto(self) -> None:
        # The embedded server logs every request through werkzeug; keep warnings only.
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self._endpoint_url = f"http://{host}:{port}"
        self._saved_moto_port = os.environ.get("MOTO_PORT")
        os.environ["MOTO_PORT"] = str(port)
        requests.post(f"{self._endpoint_url}/moto-api/reset", timeout=30).raise_for_status()
        requests.post(
            f"{self._endpoint_url}/moto-api/config",
            json={"stepfunctions": {"execute_state_machine": True}},
            timeout=30,
        ).raise_for_status()
        runner = InProcessLambdaRunner(Path(self.config.state_dir) / "lambda-code", self._endpoint_url)
        moto_patches.apply_patches(runner)

    def _deploy(self) -> None:
        s3 = self.session.client("s3")
        s3.create_bucket(Bucket=DEPLOY_BUCKET)
        packaged = sam_deploy.package_template(Path(self.config.template_path), DEPLOY_BUCKET, s3)
        parameters = self._parameters(packaged)
        template = sam_deploy.translate(packaged, parameters, self.config.region)
        state_dir = Path(self.config.state_dir)
        state_dir.mkdir(parents=True, exist_ok=True)
        template_body = json.dumps(template, indent=1)
        (state_dir / "template.cfn.json").write_text(template_body)
        self.outputs = sam_deploy.deploy_stack(
            self.session.client("cloudformation"), self.config.stack_name, template_body, parameters
        )
        self._put_ray_token()

    def _put_ray_token(self) -> None:
        """Put the Ray head's token (or, without a head, one no head knows) into the stack's token secret."""
        secret_arn = self.outputs.get(SECRET_OUTPUT)
        if not secret_arn:
            return  # a template without the secret (tests deploy small ones)
        token = self.ray.auth_token if self.ray else NO_HEAD_RAY_TOKEN
        self.session.client("secretsmanager").put_secret_value(SecretId=secret_arn, SecretString=token)

    def _parameters(self, template: dict[str, Any]) -> dict[str, str]:
        """Local defaults for the parameters the template declares, then the caller's values."""
        declared = template.get("Parameters", {})
        defaults = dict(LOCAL_PARAMETER_DEFAULTS)
        if self.ray:
            defaults.update({"RayAddress": self.ray.address, "ServeUrl": self.ray.serve_url})
        parameters = {name: value for name, value in defaults.items() if name in declared}
        parameters.update(self.config.parameters)
        return parameters

    def _write_state(self) -> None:
        state = {
            "endpoint_url": self.endpoint_url,
            "region": self.config.region,
            "stack_name": self.config.stack_name,
            "outputs": self.outputs,
            "ray_address": self.ray_address,
            "serve_url": self.serve_url,
        }
        (Path(self.config.state_dir) / "stack.json").write_text(json.dumps(state, indent=2) + "\n")
