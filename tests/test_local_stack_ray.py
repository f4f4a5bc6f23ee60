"""LocalStack with a local Ray head: only requests with the head's token get in; a job submitted through the Ray
Jobs REST API (urllib) runs with the stack's environment, writes to the emulated S3, and the head stops with it."""

import contextlib
import json
import shlex
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from local_stack.ray_head import SERVE_PROXY_READY_CHECK_TIMEOUT_S
from local_stack.stack import LocalStack, LocalStackConfig
from tests.mazeops_testing import log_messages

MINI_STACK = Path(__file__).parent / "fixtures" / "mini_stack"


def ray_api(address: str, token: str, method: str, path: str, body: dict | None = None) -> dict:
    request = urllib.request.Request(
        f"{address}{path}",
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"} | ({"Authorization": f"Bearer {token}"} if token else {}),
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def wait_for_job(address: str, token: str, submission_id: str, timeout_s: float = 180.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = ray_api(address, token, "GET", f"/api/jobs/{submission_id}")
        if job["status"] in ("SUCCEEDED", "FAILED", "STOPPED"):
            return job
        time.sleep(0.5)
    raise AssertionError(f"Ray job {submission_id} did not finish in {timeout_s:.0f} s")


def lambda_logs(stack, function_name: str) -> str:
    return "\n".join(log_messages(stack.session, f"/aws/lambda/{function_name}"))


def mini_ray_stack(state_dir, stack_name: str) -> LocalStackConfig:
    """The mini stack with a local Ray head (and no Serve app)."""
    return LocalStackConfig(
        template_path=MINI_STACK / "template.yaml",
        state_dir=state_dir,
        stack_name=stack_name,
        with_ray=True,
        serve_port=0,
    )


@pytest.mark.slow
def test_a_ray_job_reaches_the_stack_and_the_head_stops_with_it(tmp_path):
    with LocalStack(mini_ray_stack(tmp_path, "mini-ray")) as stack:
        head = stack.ray
        temp_dir = head.temp_dir
        pid = head._process.pid
        state = json.loads((tmp_path / "stack.json").read_text())
        assert state["ray_address"] == stack.ray_address == head.address
        assert state["serve_url"] == f"http://127.0.0.1:{head.serve_port}" and head.serve_port != 8000

        bucket = stack.outputs["BucketName"]
        script = (
            "import boto3, os, ray; print('endpoint', os.environ['AWS_ENDPOINT_URL']); ray.init(); "
            # what a worker (Serve's controller is one) reads: the head's settings
            "print('proxy ready check', "
            "ray.get(ray.remote(lambda: os.environ['RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S']).remote()), 's'); "
            f"boto3.client('s3').put_object(Bucket='{bucket}', Key='in/from-ray.json', Body=b'{{\"mode\": \"ok\"}}')"
        )
        entrypoint = f"python -c {shlex.quote(script)}"
        request = {"entrypoint": entrypoint, "submission_id": "write-request"}
        for token, refusal in (("", "401"), ("0" * 64, "403")):
            with pytest.raises(urllib.error.HTTPError, match=refusal):
                ray_api(stack.ray_address, token, "POST", "/api/jobs/", request)
        secret = stack.session.client("secretsmanager").get_secret_value(
            SecretId=stack.outputs["RayAuthTokenSecretArn"]
        )
        assert secret["SecretString"] == head.auth_token  # what the functions read, as on a real deployment
        submitted = ray_api(stack.ray_address, head.auth_token, "POST", "/api/jobs/", request)
        assert submitted["submission_id"] == "write-request"

        job = wait_for_job(stack.ray_address, head.auth_token, "write-request")
        logs = ray_api(stack.ray_address, head.auth_token, "GET", "/api/jobs/write-request/logs")["logs"]
        assert job["status"] == "SUCCEEDED", logs
        assert f"endpoint {stack.endpoint_url}" in logs
        assert f"proxy ready check {SERVE_PROXY_READY_CHECK_TIMEOUT_S} s" in logs

        sfn = stack.session.client("stepfunctions")
        arn = stack.outputs["StateMachineArn"].replace(":stateMachine:", ":execution:") + ":from-ray"
        deadline = time.monotonic() + 60
        status = None
        while time.monotonic() < deadline and status in (None, "RUNNING"):
            with contextlib.suppress(sfn.exceptions.ExecutionDoesNotExist):
                status = sfn.describe_execution(executionArn=arn)["status"]
            time.sleep(0.2)
        assert status == "SUCCEEDED", lambda_logs(stack, stack.outputs["RouterFunctionName"])

    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not temp_dir.exists()
    leftovers = [p.pid for p in psutil.process_iter(["cmdline"]) if str(temp_dir) in " ".join(p.info["cmdline"] or [])]
    assert leftovers == []


@pytest.mark.slow
def test_a_restarted_head_answers_on_the_same_address_and_token_and_knows_no_earlier_job(tmp_path):
    with LocalStack(mini_ray_stack(tmp_path, "mini-ray-restart")) as stack:
        head = stack.ray
        address, token, temp_dir, pid = head.address, head.auth_token, head.temp_dir, head._process.pid
        ray_api(address, token, "POST", "/api/jobs/", {"entrypoint": "sleep 300", "submission_id": "long"})
        deadline = time.monotonic() + 60
        while ray_api(address, token, "GET", "/api/jobs/long")["status"] != "RUNNING":
            assert time.monotonic() < deadline, "the job did not start"
            time.sleep(0.5)
        job_pids = [p.pid for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", "300"]]

        head.halt()  # a crashed head: nothing answers on its address
        with pytest.raises(urllib.error.URLError, match="Connection refused"):
            ray_api(address, token, "GET", "/api/version")
        assert head.restart() is head

        assert (head.address, head.auth_token, head.temp_dir) == (address, token, temp_dir)
        assert head._process.pid != pid and not psutil.pid_exists(pid)  # the old head's process was waited for
        assert job_pids and not any(psutil.pid_exists(job) for job in job_pids)
        with pytest.raises(urllib.error.HTTPError, match="404"):
            ray_api(address, token, "GET", "/api/jobs/long")
        secret = stack.session.client("secretsmanager").get_secret_value(
            SecretId=stack.outputs["RayAuthTokenSecretArn"]
        )
        assert secret["SecretString"] == token
        ray_api(address, token, "POST", "/api/jobs/", {"entrypoint": "echo again", "submission_id": "after"})
        job = wait_for_job(address, token, "after")
        assert job["status"] == "SUCCEEDED"
        with pytest.raises(urllib.error.HTTPError, match="401"):
            ray_api(address, "", "GET", "/api/jobs/after")

    assert not temp_dir.exists()
