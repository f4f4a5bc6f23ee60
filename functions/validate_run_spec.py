"""Validate an uploaded run spec, write the normalized spec and create the run's row."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from mazeops.aws_clients import aws_client
from mazeops.config import load
from mazeops.failures import one_line_errors
from mazeops.inputs import field
from mazeops.layout import normalized_spec_key, parse_request_key
from mazeops.names import InvalidName
from mazeops.run_caps import check_active_runs, check_spec_caps
from mazeops.runs import RunsTable
from mazeops.runspec import MAX_SPEC_BYTES, InvalidRunSpec, parse_run_spec
from mazeops.s3_objects import ObjectMissing, ObjectTooLarge, read_limited

logger = Logger()
tracer = Tracer()


@logger.inject_lambda_context(correlation_id_path="run_id")
@tracer.capture_lambda_handler
@one_line_errors(logger)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Validate `s3://bucket/key` as the run spec of `run_id`; contract in docs/design.md."""
    bucket = field(event, "bucket", str)
    key = field(event, "key", str)
    run_id = field(event, "run_id", str, optional=True)
    execution_arn = field(event, "execution_arn", str)
    config = load()
    if bucket != config.required("artifacts_bucket"):
        raise InvalidRunSpec(f"run specs are read from the artifacts bucket only, not {bucket[:100]!r}")
    key_run_id = parse_request_key(key)
    if run_id != key_run_id:
        raise InvalidName(f"run id {run_id!r} does not match the key's run id {key_run_id!r}")
    s3 = aws_client("s3")
    try:
        raw = read_limited(s3, bucket, key, MAX_SPEC_BYTES)
    except (ObjectMissing, ObjectTooLarge) as error:
        raise InvalidRunSpec(f"run spec: {error}") from None
    spec = parse_run_spec(raw, key_run_id, config.base_models)
    check_spec_caps(spec, config.run_caps)
    runs = RunsTable(aws_client("dynamodb"), config.required("runs_table"))
    check_active_runs(runs, key_run_id, config.run_caps.max_active_runs)
    body = json.dumps(spec.model_dump(mode="json"), sort_keys=True, indent=1).encode()
    spec_sha256 = hashlib.sha256(body).hexdigest()
    spec_key = normalized_spec_key(key_run_id)
    runs.create_run(
        key_run_id,
        spec_key,
        spec_sha256,
        spec.base_model_id,
        execution_arn,
        guard=spec.guard.model_dump(mode="json"),
        num_gpus=spec.num_gpus,
    )
    s3.put_object(Bucket=bucket, Key=spec_key, Body=body, ContentType="application/json")
    logger.info("Run spec accepted", extra={"spec_key": spec_key, "spec_sha256": spec_sha256})
    return {
        "run_id": key_run_id,
        "spec_key": spec_key,
        "spec_sha256": spec_sha256,
        "base_model_id": spec.base_model_id,
        "backend": spec.backend,
        "total_steps": spec.total_steps,
    }
