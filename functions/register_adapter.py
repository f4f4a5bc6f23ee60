"""Copy an adapter to the serving prefix Ray Serve LLM loads adapters from.

Input `{"base_model_id", "adapter_name", "run_id", "step"}`; output `{"serving_prefix",
"served_model_id"}`. Errors: InvalidManifest (the files changed since check_adapter). The two
files are copied server side to `serving/<base_model_id>/<adapter_name>/`; S3 computes each
copy's SHA-256, which must equal the manifest's (and the size too), so what is served is
byte for byte what was evaluated. The registry row becomes REGISTERED.
"""

from __future__ import annotations

import base64
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from mazeops.config import load
from mazeops.inputs import field
from mazeops.layout import adapter_manifest_key, adapter_prefix, serving_adapter_prefix
from mazeops.manifest import MAX_MANIFEST_BYTES, InvalidManifest, parse_manifest
from mazeops.names import InvalidName, adapter_name, served_model_id, validate_base_model_id, validate_run_id, validate_step
from mazeops.registry import Registry
from mazeops.s3_objects import ObjectMissing, ObjectTooLarge, object_size, read_limited

logger = Logger()
tracer = Tracer()


@logger.inject_lambda_context(correlation_id_path="adapter_name")
@tracer.capture_lambda_handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Copy and verify the adapter's files for serving; see the module docstring."""
    base_model_id = validate_base_model_id(field(event, "base_model_id", str))
    adapter = field(event, "adapter_name", str)
    run_id = validate_run_id(field(event, "run_id", str))
    step = validate_step(field(event, "step", int))
    if adapter != adapter_name(run_id, step):
        raise InvalidName(f"adapter name {adapter[:80]!r} is not {adapter_name(run_id, step)!r}")
    config = load()
    bucket = config.required("artifacts_bucket")
    s3 = boto3.client("s3")
    try:
        manifest = parse_manifest(read_limited(s3, bucket, adapter_manifest_key(run_id, step), MAX_MANIFEST_BYTES))
    except (ObjectMissing, ObjectTooLarge) as error:
        raise InvalidManifest(f"manifest: {error}") from None
    if manifest.base_model_id != base_model_id:
        raise InvalidManifest(f"manifest names base model {manifest.base_model_id!r}, not {base_model_id!r}")
    source, target = adapter_prefix(run_id, step), serving_adapter_prefix(base_model_id, run_id, step)
    for name, digest in sorted(manifest.files.items()):
        copied_sha256 = _copy(s3, bucket, source + name, target + name)
        if copied_sha256 != digest.sha256:
            raise InvalidManifest(
                f"{source + name} changed since it was checked: sha256 {copied_sha256[:12]}..., manifest {digest.sha256[:12]}..."
            )
        size = object_size(s3, bucket, target + name)
        if size != digest.size:
            raise InvalidManifest(f"{target + name} is {size} bytes; the manifest says {digest.size}")
    Registry(boto3.client("dynamodb"), config.required("registry_table")).set_status(base_model_id, adapter, "REGISTERED")
    logger.info("Adapter registered for serving", extra={"serving_prefix": target})
    return {"serving_prefix": target, "served_model_id": served_model_id(base_model_id, adapter)}


def _copy(s3: Any, bucket: str, source_key: str, target_key: str) -> str:
    """Server-side copy; returns the hex SHA-256 S3 computed for the copy."""
    try:
        answer = s3.copy_object(
            Bucket=bucket, Key=target_key, CopySource={"Bucket": bucket, "Key": source_key}, ChecksumAlgorithm="SHA256"
        )
    except ClientError as error:
        if error.response["Error"]["Code"] in ("NoSuchKey", "404"):
            raise InvalidManifest(f"adapter file {source_key} disappeared since it was checked") from None
        raise
    checksum = answer.get("CopyObjectResult", {}).get("ChecksumSHA256")
    if not checksum:
        raise InvalidManifest(f"S3 returned no SHA-256 for the copy of {source_key}; cannot verify it")
    return base64.b64decode(checksum).hex()
