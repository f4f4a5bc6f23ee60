"""Copy an adapter, verified against its manifest, to the serving prefix Ray Serve loads adapters from."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from mazeops.aws_clients import aws_client
from mazeops.config import load
from mazeops.failures import one_line_errors
from mazeops.inputs import field
from mazeops.layout import adapter_manifest_key
from mazeops.manifest import MAX_MANIFEST_BYTES, InvalidManifest, parse_manifest
from mazeops.names import (
    InvalidName,
    adapter_name,
    served_model_id,
    validate_base_model_id,
    validate_run_id,
    validate_step,
)
from mazeops.registry import Registry
from mazeops.s3_objects import ObjectMissing, ObjectTooLarge, read_limited
from mazeops.serving import copy_adapter_to_serving

logger = Logger()
tracer = Tracer()


@logger.inject_lambda_context(correlation_id_path="adapter_name")
@tracer.capture_lambda_handler
@one_line_errors(logger)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Copy and verify the adapter's files for serving; contract in docs/design.md."""
    base_model_id = validate_base_model_id(field(event, "base_model_id", str))
    adapter = field(event, "adapter_name", str)
    run_id = validate_run_id(field(event, "run_id", str))
    step = validate_step(field(event, "step", int))
    if adapter != adapter_name(run_id, step):
        raise InvalidName(f"adapter name {adapter[:80]!r} is not {adapter_name(run_id, step)!r}")
    config = load()
    bucket = config.required("artifacts_bucket")
    s3 = aws_client("s3")
    try:
        manifest = parse_manifest(read_limited(s3, bucket, adapter_manifest_key(run_id, step), MAX_MANIFEST_BYTES))
    except (ObjectMissing, ObjectTooLarge) as error:
        raise InvalidManifest(f"manifest: {error}") from None
    serving = copy_adapter_to_serving(s3, bucket, manifest, base_model_id, adapter)
    Registry(aws_client("dynamodb"), config.required("registry_table")).set_status(base_model_id, adapter, "REGISTERED")
    logger.info("Adapter registered for serving", extra={"serving_prefix": serving.prefix, "copied": serving.copied})
    return {"serving_prefix": serving.prefix, "served_model_id": served_model_id(base_model_id, adapter)}
