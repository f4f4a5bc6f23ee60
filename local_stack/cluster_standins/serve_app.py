"""The local pipeline's serving app: a Ray Serve application with Ray Serve LLM's OpenAI interface.

It stands in for ``cluster_jobs.serve.llm_app`` on the local Ray head (the tiny model on the CPU); the request
logic is ``chat_service.OpenAIChatService``. No ``from __future__ import annotations`` here: FastAPI must see the
real ``Request`` annotation.
"""

import asyncio
import tempfile
import time
import urllib.request
from pathlib import Path

import boto3
import ray
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from ray import serve

from local_stack.cluster_standins.adapter_store import S3AdapterStore

APP_NAME = "maze-llm"
api = FastAPI(title="maze-rl-ops local OpenAI-compatible server")


class ServeStartError(RuntimeError):
    """The local serving app did not answer in time."""


@serve.deployment(ray_actor_options={"num_cpus": 0.5}, max_ongoing_requests=8)
@serve.ingress(api)
class LocalOpenAIServer:
    """One replica: the base model, an LRU of LoRA adapters, and the OpenAI routes."""

    def __init__(
        self,
        base_model_id: str,
        base_model_path: str,
        bucket: str,
        prefix: str,
        max_adapters_per_replica: int,
        adapter_cache_dir: str | None,
    ) -> None:
        # Imported here: the replica needs torch and transformers, the deploying driver does not.
        from cluster_jobs.models.policy import VisionPolicy
        from local_stack.cluster_standins.chat_service import OpenAIChatService

        cache_dir = Path(tempfile.mkdtemp(prefix="replica-", dir=adapter_cache_dir))
        store = S3AdapterStore(bucket, prefix, cache_dir, boto3.client("s3"))
        self.service = OpenAIChatService(
            base_model_id, VisionPolicy.load(base_model_path), store, max_adapters_per_replica
        )

    @api.get("/v1/models")
    async def models(self) -> JSONResponse:
        status, body = await asyncio.to_thread(self.service.list_models)
        return JSONResponse(body, status_code=status)

    @api.post("/v1/chat/completions")
    async def chat_completions(self, request: Request) -> JSONResponse:
        status, body = await asyncio.to_thread(self.service.handle_chat, await request.body())
        return JSONResponse(body, status_code=status)


def deploy_local_app(
    base_model_id: str,
    base_model_path: str,
    bucket: str,
    prefix: str,
    http_port: int,
    *,
    ray_address: str = "auto",
    max_adapters_per_replica: int = 4,
    adapter_cache_dir: str | None = None,
    timeout_s: float = 180.0,
) -> str:
    """Deploy the app on the running Ray cluster at `ray_address`; return its URL once `/v1/models` answers.

    Connects with `ray.init(address=ray_address)` unless this process is already connected. The
    Serve HTTP proxy listens on 127.0.0.1:`http_port`; the app is named `maze-llm` at route '/'.
    Each replica downloads adapters into a fresh folder below `adapter_cache_dir` (default: the
    system temp dir). The app outlives this driver process.

    Raises:
        ServeStartError: `/v1/models` did not answer 200 within `timeout_s` seconds after the deployment.
    """
    if not ray.is_initialized():
        ray.init(address=ray_address)
    serve.start(http_options={"host": "127.0.0.1", "port": http_port})
    app = LocalOpenAIServer.bind(
        base_model_id, base_model_path, bucket, prefix, max_adapters_per_replica, adapter_cache_dir
    )
    serve.run(app, name=APP_NAME, route_prefix="/")
    url = f"http://127.0.0.1:{http_port}"
    _wait_until_ready(f"{url}/v1/models", timeout_s)
    return url


def _wait_until_ready(models_url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    last_error = "no answer yet"
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(models_url, timeout=10) as response:
                if response.status == 200:
                    return
                last_error = f"HTTP {response.status}"
        except OSError as error:  # urllib.error.URLError and HTTPError are OSErrors
            last_error = str(error)
        time.sleep(0.5)
    raise ServeStartError(f"{models_url} did not answer within {timeout_s:.0f} s: {last_error}")


def main(argv: list[str] | None = None) -> int:
    """`python -m local_stack.cluster_standins.serve_app ...`: deploy the app (the local pipeline's Ray job)."""
    import argparse

    parser = argparse.ArgumentParser(
        description="Deploy the local OpenAI-compatible Ray Serve app (tiny model, LoRA from S3)."
    )
    parser.add_argument("--base-model-id", required=True)
    parser.add_argument("--base-model-path", required=True)
    parser.add_argument("--bucket", required=True)
    parser.add_argument("--prefix", required=True, help="S3 prefix of the adapters, e.g. serving/<base_model_id>/")
    parser.add_argument("--port", type=int, required=True, help="HTTP port of the Serve proxy on 127.0.0.1")
    parser.add_argument("--max-adapters", type=int, default=4, help="adapters cached per replica (LRU)")
    args = parser.parse_args(argv)
    url = deploy_local_app(
        args.base_model_id,
        args.base_model_path,
        args.bucket,
        args.prefix,
        args.port,
        max_adapters_per_replica=args.max_adapters,
    )
    print(f"serving {args.base_model_id} and its adapters at {url}/v1", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
