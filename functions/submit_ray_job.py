"""Submit the training or evaluation Ray job of a run, or a baseline's evaluation (idempotent by submission id)."""

from __future__ import annotations

import dataclasses
import shlex
from typing import Any

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.utilities.idempotency import (
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.typing import LambdaContext

from mazeops.base_models import base_model_path
from mazeops.baseline import validate_attempt, validate_eval_set_sha256
from mazeops.config import Config, load
from mazeops.failures import one_line_errors
from mazeops.idempotency import idempotency_store
from mazeops.inputs import InvalidInput, field
from mazeops.jobs import JobRequest, baseline_job, evaluation_request, submit_job
from mazeops.layout import adapter_manifest_key, eval_result_key, normalized_spec_key
from mazeops.names import (
    eval_job_id,
    training_job_id,
    validate_base_model_id,
    validate_eval_attempt,
    validate_run_id,
    validate_step,
)
from mazeops.ray_token import ray_jobs_client

IDEMPOTENCY_KEY_PREFIX = "submit_ray_job"

logger = Logger()
tracer = Tracer()


@logger.inject_lambda_context(correlation_id_path="run_id")
@tracer.capture_lambda_handler
@one_line_errors(logger)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Submit the job described by `event`; contract in docs/design.md."""
    config = load()
    kind = field(event, "kind", str)
    if kind == "train":
        job = training_job(config, validate_run_id(field(event, "run_id", str)))
    elif kind == "eval":
        run_id = validate_run_id(field(event, "run_id", str))
        step = validate_step(field(event, "step", int))
        base_model_id = validate_base_model_id(field(event, "base_model_id", str))
        given_attempt = field(event, "attempt", int, optional=True)
        attempt = 1 if given_attempt is None else validate_eval_attempt(given_attempt)
        job = evaluation_job(config, run_id, step, base_model_id, attempt)
    elif kind == "baseline":
        base_model_id = validate_base_model_id(field(event, "base_model_id", str))
        job = baseline_job(
            config.required("artifacts_bucket"),
            config.eval_backend,
            base_model_id,
            base_model_path(config.base_models, base_model_id),
            validate_eval_set_sha256(field(event, "eval_set_sha256", str)),
            validate_attempt(field(event, "attempt", int)),
        )
    else:
        raise InvalidInput(f"kind must be 'train', 'eval' or 'baseline', got {kind[:40]!r}")
    return _submit_once(config, context, job)


def training_job(config: Config, run_id: str) -> JobRequest:
    """The training job of `run_id`: it reads the normalized spec validate_run_spec wrote."""
    bucket = config.required("artifacts_bucket")
    argv = [
        "python",
        "-m",
        "cluster_jobs.train.run",
        "--spec",
        f"s3://{bucket}/{normalized_spec_key(run_id)}",
        "--bucket",
        bucket,
    ]
    return JobRequest(training_job_id(run_id), shlex.join(argv), {"run_id": run_id, "kind": "train"})


def evaluation_job(config: Config, run_id: str, step: int, base_model_id: str, attempt: int) -> JobRequest:
    """The evaluation job of one adapter on the fixed maze set; each attempt is a job of its own id."""
    bucket = config.required("artifacts_bucket")
    argv = [
        "python",
        "-m",
        "cluster_jobs.evaluate.run",
        "--manifest",
        f"s3://{bucket}/{adapter_manifest_key(run_id, step)}",
        "--base-model-path",
        base_model_path(config.base_models, base_model_id),
        "--backend",
        config.eval_backend,
        "--output",
        f"s3://{bucket}/{eval_result_key(run_id, step)}",
    ]
    metadata = {"run_id": run_id, "kind": "eval", "step": str(step)}
    return evaluation_request(eval_job_id(run_id, step, attempt), argv, metadata, config.eval_backend)


def _submit_once(config: Config, context: LambdaContext, job: JobRequest) -> dict[str, Any]:
    """Submit `job` once per job id; a replayed call is answered from the idempotency table."""
    persistence = idempotency_store(config.required("idempotency_table"), IDEMPOTENCY_KEY_PREFIX)
    idempotency = IdempotencyConfig(event_key_jmespath="job_id", response_hook=_replayed)
    idempotency.register_lambda_context(context)
    client = ray_jobs_client(config.required("ray_address"))

    @idempotent_function(
        data_keyword_argument="request",
        persistence_store=persistence,
        config=idempotency,
        key_prefix=IDEMPOTENCY_KEY_PREFIX,
    )
    def submit(request: dict[str, Any]) -> dict[str, Any]:
        info = submit_job(client, job, config.ray_runtime_env)
        logger.info(
            "Ray job submitted", extra={"job_id": info.submission_id, "already_submitted": info.already_submitted}
        )
        return {"job_id": info.submission_id, "status": info.status, "already_submitted": info.already_submitted}

    return submit(request=dataclasses.asdict(job))


def _replayed(response: dict[str, Any], idempotent_data: Any) -> dict[str, Any]:
    logger.info("Submission answered from the idempotency table", extra={"job_id": response.get("job_id")})
    return {**response, "already_submitted": True}
