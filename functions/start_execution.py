"""Start the state machine an EventBridge event calls for: training for a run spec upload, evaluation
for an adapter manifest, and a scheduled run request for a Scheduled Event. Duplicate and
redelivered events start nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import UTC
from pathlib import PurePosixPath
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.idempotency import (
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from mazeops.aws_clients import aws_client
from mazeops.config import Config, ConfigError, load
from mazeops.events import (
    S3_OBJECT_CREATED,
    SCHEDULED_EVENT,
    S3ObjectCreated,
    ScheduledEvent,
    event_kind,
    parse_s3_object_created,
    parse_scheduled_event,
)
from mazeops.failures import one_line_errors
from mazeops.idempotency import idempotency_store
from mazeops.layout import (
    MANIFEST_FILE,
    REQUEST_PREFIX,
    RUNS_PREFIX,
    parse_manifest_key,
    parse_request_key,
    run_spec_request_key,
)
from mazeops.names import InvalidName, eval_job_id, training_job_id, validate_run_id

IDEMPOTENCY_KEY_PREFIX = "start_execution"

logger = Logger()
tracer = Tracer()
metrics = Metrics(namespace="MazeRlOps")


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@one_line_errors(logger)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Route an S3 Object Created or Scheduled Event to its state machine; contract in docs/design.md."""
    config = load()
    kind = event_kind(event)
    if kind == S3_OBJECT_CREATED:
        created = parse_s3_object_created(event)
        trigger = {"bucket": created.bucket, "key": created.key, "etag": created.etag}
        return _once(config, context, trigger, lambda: _start_for_object(config, created))
    if kind == SCHEDULED_EVENT:
        scheduled = parse_scheduled_event(event)
        trigger = {"schedule": scheduled.rule_arn, "time": scheduled.time.isoformat()}
        return _once(config, context, trigger, lambda: _request_scheduled_run(config, scheduled))
    logger.warning("Ignoring an event of an unexpected kind", extra={"source": kind[0], "detail_type": kind[1]})
    return {"status": "ignored", "execution_arn": None, "name": None}


def _once(
    config: Config, context: LambdaContext, trigger: dict[str, str], start: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """Run `start()` once per `trigger`; a redelivered trigger gets the first answer as a duplicate."""
    persistence = idempotency_store(config.required("idempotency_table"), IDEMPOTENCY_KEY_PREFIX)
    idempotency = IdempotencyConfig(response_hook=_replayed)
    idempotency.register_lambda_context(context)

    @idempotent_function(
        data_keyword_argument="trigger",
        persistence_store=persistence,
        config=idempotency,
        key_prefix=IDEMPOTENCY_KEY_PREFIX,
    )
    def start_once(trigger: dict[str, str]) -> dict[str, Any]:
        return start()

    return start_once(trigger=trigger)


def _replayed(response: dict[str, Any], idempotent_data: Any) -> dict[str, Any]:
    metrics.add_metric(name="DuplicateEvents", unit=MetricUnit.Count, value=1)
    logger.info("Duplicate event answered from the idempotency table", extra={"execution_name": response.get("name")})
    return {**response, "status": "duplicate"}


@tracer.capture_method
def _start_for_object(config: Config, created: S3ObjectCreated) -> dict[str, Any]:
    if created.bucket != config.required("artifacts_bucket"):
        logger.warning("Ignoring an object in another bucket", extra={"bucket": created.bucket})
        return {"status": "ignored", "execution_arn": None, "name": None}
    key = created.key
    if key.startswith(REQUEST_PREFIX):
        try:
            run_id: str | None = parse_request_key(key)
            name = training_job_id(run_id)
        except InvalidName as error:
            run_id, name = None, _invalid_name(key, error)
        payload = {"bucket": created.bucket, "key": key, "run_id": run_id}
        result = _start(config.required("training_state_machine_arn"), name, payload)
        if result["status"] == "started" and run_id is not None:
            metrics.add_metric(name="RunsStarted", unit=MetricUnit.Count, value=1)
        return result
    if key.startswith(RUNS_PREFIX) and key.endswith(f"/{MANIFEST_FILE}"):
        try:
            run_id, step = parse_manifest_key(key)
            name = eval_job_id(run_id, step)
        except InvalidName as error:
            run_id, step, name = None, None, _invalid_name(key, error)
        payload = {"bucket": created.bucket, "key": key, "run_id": run_id, "step": step, "attempt": 1}
        return _start(config.required("evaluation_state_machine_arn"), name, payload)
    logger.info("Ignoring an object outside the request and manifest keys", extra={"key": key[:300]})
    return {"status": "ignored", "execution_arn": None, "name": None}


def _invalid_name(key: str, error: InvalidName) -> str:
    metrics.add_metric(name="RejectedEvents", unit=MetricUnit.Count, value=1)
    name = "invalid-" + hashlib.sha256(key.encode("utf-8", "replace")).hexdigest()[:12]
    logger.warning(
        "Invalid key; starting an execution that will fail visibly", extra={"execution_name": name, "error": str(error)}
    )
    return name


def _start(state_machine_arn: str, name: str, payload: dict[str, Any]) -> dict[str, Any]:
    """Start execution `name`; an existing one of that name (running or closed) is a duplicate.

    StartExecution on a running standard execution with the same name and input succeeds
    (it is idempotent) and would hide the duplicate, so the execution is looked up first.
    """
    logger.set_correlation_id(name)
    sfn = aws_client("stepfunctions")
    execution_arn = state_machine_arn.replace(":stateMachine:", ":execution:", 1) + f":{name}"
    try:
        sfn.describe_execution(executionArn=execution_arn)
        return _duplicate(execution_arn, name)
    except sfn.exceptions.ExecutionDoesNotExist:
        pass
    try:
        answer = sfn.start_execution(stateMachineArn=state_machine_arn, name=name, input=json.dumps(payload))
    except sfn.exceptions.ExecutionAlreadyExists:
        return _duplicate(execution_arn, name)
    logger.info("Execution started", extra={"execution_arn": answer["executionArn"]})
    return {"status": "started", "execution_arn": answer["executionArn"], "name": name}


def _duplicate(execution_arn: str, name: str) -> dict[str, Any]:
    metrics.add_metric(name="DuplicateEvents", unit=MetricUnit.Count, value=1)
    logger.info("Execution already exists; duplicate event", extra={"execution_arn": execution_arn})
    return {"status": "duplicate", "execution_arn": execution_arn, "name": name}


@tracer.capture_method
def _request_scheduled_run(config: Config, scheduled: ScheduledEvent) -> dict[str, Any]:
    """Copy the standing spec to `requests/<stem>-<yyyymmddhhmm>.json`; its upload starts the run."""
    bucket = config.required("artifacts_bucket")
    spec_key = config.required("scheduled_run_spec_key")
    run_id = validate_run_id(f"{PurePosixPath(spec_key).stem}-{scheduled.time.astimezone(UTC):%Y%m%d%H%M}")
    request_key = run_spec_request_key(run_id)
    try:
        aws_client("s3").copy_object(Bucket=bucket, Key=request_key, CopySource={"Bucket": bucket, "Key": spec_key})
    except ClientError as error:
        if error.response["Error"]["Code"] in ("NoSuchKey", "404"):
            raise ConfigError(f"SCHEDULED_RUN_SPEC_KEY s3://{bucket}/{spec_key} does not exist") from None
        raise
    name = training_job_id(run_id)
    logger.set_correlation_id(name)
    logger.info("Scheduled run requested", extra={"request_key": request_key})
    return {"status": "started", "execution_arn": None, "name": name, "request_key": request_key}
