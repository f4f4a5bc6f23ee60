"""Ray job requests: what `submit_ray_job` and `mazeops-ops baseline evaluate` submit, built in one place."""

from __future__ import annotations

import dataclasses
import shlex
from typing import Any

from mazeops.baseline import baseline_job_id, baseline_result_key
from mazeops.config import ConfigError
from mazeops.ray_jobs import JobInfo, RayJobsClient

EVAL_BACKENDS = ("vllm", "transformers")

# The Ray custom resource of the GPUs set apart for evaluation and serving: cluster/raycluster.yaml's `gpu-serve`
# worker group advertises one per GPU, and vLLM evaluation jobs and Ray Serve replicas ask for one besides the GPU,
# so they never hold a GPU of the training group. The colocated trainer asks for every GPU of its placement group at
# once and gives up when they are not free within 180 s (skyrl 0.4.0: skyrl/env_vars.py SKYRL_RAY_PG_TIMEOUT_IN_S).
SERVE_GPU_RESOURCE = "serve_gpu"


@dataclasses.dataclass(frozen=True)
class JobRequest:
    """Everything Ray needs to run one job."""

    job_id: str
    entrypoint: str
    metadata: dict[str, str]
    entrypoint_num_gpus: float | None = None
    entrypoint_num_cpus: float | None = None
    entrypoint_resources: dict[str, float] | None = None


def submit_job(client: RayJobsClient, job: JobRequest, runtime_env: dict[str, Any] | None) -> JobInfo:
    """Submit `job` with `runtime_env` (None: the cluster image as is); idempotent by its job id."""
    return client.submit(
        job.job_id,
        job.entrypoint,
        runtime_env=runtime_env,
        metadata=job.metadata,
        entrypoint_num_gpus=job.entrypoint_num_gpus,
        entrypoint_num_cpus=job.entrypoint_num_cpus,
        entrypoint_resources=job.entrypoint_resources,
    )


def evaluation_request(job_id: str, argv: list[str], metadata: dict[str, str], backend: str) -> JobRequest:
    """An evaluation job (`python -m cluster_jobs.evaluate.run ...`) on `backend`, with its resource reservation.

    Raises ConfigError for an unknown backend.
    """
    if backend not in EVAL_BACKENDS:
        raise ConfigError(f"EVAL_BACKEND must be one of {EVAL_BACKENDS}, got {backend!r}")
    return JobRequest(
        job_id,
        shlex.join(argv),
        metadata,
        entrypoint_num_gpus=1 if backend == "vllm" else None,
        entrypoint_num_cpus=None if backend == "vllm" else 1,
        entrypoint_resources={SERVE_GPU_RESOURCE: 1} if backend == "vllm" else None,
    )


def baseline_job(
    bucket: str, backend: str, base_model_id: str, base_model_path: str, eval_set_sha256: str, attempt: int
) -> JobRequest:
    """One attempt at evaluating the base model with no adapter on the evaluation set `eval_set_sha256`."""
    argv = [
        "python",
        "-m",
        "cluster_jobs.evaluate.run",
        "--base-model-id",
        base_model_id,
        "--eval-set-sha256",
        eval_set_sha256,
        "--base-model-path",
        base_model_path,
        "--backend",
        backend,
        "--output",
        f"s3://{bucket}/{baseline_result_key(base_model_id, eval_set_sha256, attempt)}",
    ]
    metadata = {"kind": "baseline", "base_model_id": base_model_id, "attempt": str(attempt)}
    return evaluation_request(baseline_job_id(base_model_id, eval_set_sha256, attempt), argv, metadata, backend)
