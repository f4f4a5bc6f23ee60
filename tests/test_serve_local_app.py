"""End to end: a local Ray head, the Serve app deployed with `deploy_local_app`, moto S3 as a server, real HTTP.

The Ray head (`ray start --head --block`, its own temp dir and ports on 127.0.0.1, token authentication with a
token made here) gets the local stack's environment; `deploy_local_app` runs in its own driver process, so this
test process never connects to Ray.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import boto3
import pytest
from moto.server import ThreadedMotoServer

from cluster_jobs.maze.env import MazeEpisode
from cluster_jobs.maze.eval_set import load_eval_set
from cluster_jobs.maze.prompt import observation_message
from local_stack.cluster_standins.tiny_model import TINY_BASE_MODEL_ID, build_tiny_qwen3_vl
from local_stack.net import free_port
from local_stack.ray_head import SERVE_PROXY_READY_CHECK_TIMEOUT_S
from mazeops import serve_client
from tests.fixtures_models import make_tiny_adapter

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[1]
BUCKET = "artifacts"
PREFIX = f"serving/{TINY_BASE_MODEL_ID}/"
ADAPTER = "run-a-step1"


def _wait_for_port(port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout_s} s")


@pytest.fixture(scope="module")
def s3_endpoint():
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    s3.create_bucket(Bucket=BUCKET)
    yield endpoint, s3
    server.stop()


@pytest.fixture(scope="module")
def ray_env(s3_endpoint):
    """Environment of the Ray head and of the deploying driver."""
    return os.environ | {
        "AWS_ENDPOINT_URL": s3_endpoint[0],
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "functions")]),
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(32),
        "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",  # a test head stops at once
        "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": SERVE_PROXY_READY_CHECK_TIMEOUT_S,  # as the local stack's head
    }


@pytest.fixture(scope="module")
def ray_head(ray_env):
    """Address of a Ray head started for this module; stopped (its process group) afterwards."""
    port = free_port()
    temp_dir = tempfile.mkdtemp(prefix="ray-serve-test-", dir="/tmp")
    head = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "ray"),
            "start",
            "--head",
            "--block",
            "--node-ip-address=127.0.0.1",
            f"--port={port}",
            "--num-cpus=2",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={temp_dir}",
        ],
        env=ray_env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
    )
    try:
        _wait_for_port(port, timeout_s=60)
        yield f"127.0.0.1:{port}"
    finally:
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        shutil.rmtree(temp_dir, ignore_errors=True)


def deploy_in_a_driver_process(ray_env: dict, ray_address: str, base_dir: Path, cache_dir: Path) -> str:
    """Run `deploy_local_app` in its own Python process, as the local stack does; return the URL it printed.

    A separate driver reads Ray's authentication settings from its own environment at import time;
    the Serve app outlives the driver.
    """
    script = (
        "import sys; from local_stack.cluster_standins.serve_app import deploy_local_app; "
        "print(deploy_local_app(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), "
        "ray_address=sys.argv[6], adapter_cache_dir=sys.argv[7]))"
    )
    arguments = [TINY_BASE_MODEL_ID, str(base_dir), BUCKET, PREFIX, str(free_port()), ray_address, str(cache_dir)]
    done = subprocess.run(
        [sys.executable, "-c", script, *arguments], env=ray_env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve-app-models")
    base_dir = build_tiny_qwen3_vl(root / "base")
    make_tiny_adapter(base_dir, root / ADAPTER, seed=1)
    return base_dir, root / ADAPTER


def _get(url: str) -> tuple[int, dict]:
    with urllib.request.urlopen(url, timeout=60) as response:
        return response.status, json.loads(response.read())


def _post(url: str, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _chat(url: str, model: str) -> tuple[int, dict]:
    observation = MazeEpisode(load_eval_set().mazes[0]).observation()
    body = {
        "model": model,
        "messages": [observation_message(observation, first=True)],
        "max_tokens": 8,
        "temperature": 0,
    }
    return _post(f"{url}/v1/chat/completions", json.dumps(body).encode())


def test_deployed_app_serves_an_adapter_uploaded_after_start(ray_env, ray_head, s3_endpoint, models, tmp_path):
    base_dir, adapter_dir = models
    _, s3 = s3_endpoint
    url = deploy_in_a_driver_process(ray_env, ray_head, base_dir, tmp_path)
    assert url.startswith("http://127.0.0.1:")

    assert _get(f"{url}/v1/models")[1]["data"][0]["id"] == TINY_BASE_MODEL_ID
    assert len(_get(f"{url}/v1/models")[1]["data"]) == 1
    for path in adapter_dir.iterdir():
        s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}{ADAPTER}/{path.name}", Body=path.read_bytes())
    served_id = f"{TINY_BASE_MODEL_ID}:{ADAPTER}"
    assert [card["id"] for card in _get(f"{url}/v1/models")[1]["data"]] == [TINY_BASE_MODEL_ID, served_id]

    status, completion = _chat(url, served_id)
    assert status == 200, completion
    assert completion["object"] == "chat.completion"
    assert completion["model"] == served_id
    assert isinstance(completion["choices"][0]["message"]["content"], str)
    status, base_completion = _chat(url, TINY_BASE_MODEL_ID)
    assert status == 200, base_completion
    assert base_completion["choices"][0]["message"]["content"] != completion["choices"][0]["message"]["content"]

    smoke = serve_client.smoke_test(url, served_id, serve_client.load_smoke_image())  # the smoke_test Lambda's client
    assert smoke.served_model_id == served_id

    cached = sorted(path.name for path in tmp_path.glob(f"replica-*/{ADAPTER}/*"))
    assert cached == ["adapter_config.json", "adapter_model.safetensors"]

    status, error = _chat(url, f"{TINY_BASE_MODEL_ID}:run-z-step9")
    assert (status, error["error"]["code"]) == (404, "model_not_found")
    assert _chat(url, f"{TINY_BASE_MODEL_ID}:../{ADAPTER}")[0] == 400
    status, error = _post(f"{url}/v1/chat/completions", b"{not json")
    assert status == 400 and "Invalid JSON" in error["error"]["message"]
