"""Check a newly uploaded adapter against its manifest and register it as a candidate.

The manifest must agree with its key, name a configured base model, and every file it lists must
be present with its size and LoRA shape, so a bad adapter is refused before any GPU job. A
re-evaluation (attempt 2 on) checks the same and re-opens the adapter's registry row instead.
"""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from mazeops.aws_clients import aws_client
from mazeops.base_models import base_model_path
from mazeops.config import load
from mazeops.failures import one_line_errors
from mazeops.inputs import field
from mazeops.layout import adapter_prefix, parse_manifest_key
from mazeops.manifest import MAX_MANIFEST_BYTES, AdapterManifest, InvalidManifest, parse_manifest
from mazeops.names import InvalidName, validate_eval_attempt
from mazeops.registry import Registry
from mazeops.s3_objects import ObjectMissing, ObjectTooLarge, object_size, read_limited

MAX_ADAPTER_CONFIG_BYTES = 64 * 1024

logger = Logger()
tracer = Tracer()


@logger.inject_lambda_context(correlation_id_path="run_id")
@tracer.capture_lambda_handler
@one_line_errors(logger)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Validate the adapter whose manifest is `s3://bucket/key`; contract in docs/design.md."""
    bucket = field(event, "bucket", str)
    key = field(event, "key", str)
    run_id = field(event, "run_id", str, optional=True)
    step = field(event, "step", int, optional=True)
    given_attempt = field(event, "attempt", int, optional=True)
    attempt = 1 if given_attempt is None else validate_eval_attempt(given_attempt)
    config = load()
    if bucket != config.required("artifacts_bucket"):
        raise InvalidManifest(f"manifests are read from the artifacts bucket only, not {bucket[:100]!r}")
    key_run_id, key_step = parse_manifest_key(key)
    if (run_id, step) != (key_run_id, key_step):
        raise InvalidName(f"input names run {run_id!r} step {step!r}; the key names {key_run_id!r} step {key_step}")
    s3 = aws_client("s3")
    try:
        manifest = parse_manifest(read_limited(s3, bucket, key, MAX_MANIFEST_BYTES))
    except (ObjectMissing, ObjectTooLarge) as error:
        raise InvalidManifest(f"manifest: {error}") from None
    if (manifest.run_id, manifest.step) != (key_run_id, key_step):
        raise InvalidManifest(
            f"manifest describes run {manifest.run_id!r} step {manifest.step} but is stored at {key!r}"
        )
    base_model_path(config.base_models, manifest.base_model_id)
    prefix = adapter_prefix(key_run_id, key_step)
    for name, digest in sorted(manifest.files.items()):
        size = object_size(s3, bucket, prefix + name)
        if size != digest.size:
            found = "missing" if size is None else f"{size} bytes"
            raise InvalidManifest(f"adapter file {prefix + name} is {found}; the manifest says {digest.size} bytes")
    _check_lora_shape(s3, bucket, prefix, manifest)
    registry = Registry(aws_client("dynamodb"), config.required("registry_table"))
    if attempt == 1:
        created = registry.put_candidate(manifest, key)
    else:
        created = registry.reopen(manifest.base_model_id, manifest.adapter_name, attempt)
    logger.info(
        "Adapter checked", extra={"adapter_name": manifest.adapter_name, "attempt": attempt, "duplicate": not created}
    )
    return {
        "duplicate": not created,
        "run_id": key_run_id,
        "step": key_step,
        "adapter_name": manifest.adapter_name,
        "base_model_id": manifest.base_model_id,
        "manifest_key": key,
        "lora_rank": manifest.lora_rank,
    }


def _check_lora_shape(s3: Any, bucket: str, prefix: str, manifest: AdapterManifest) -> None:
    """Refuse an adapter whose adapter_config.json disagrees with the manifest's rank/alpha, before any GPU job."""
    key = prefix + "adapter_config.json"
    try:
        config = json.loads(read_limited(s3, bucket, key, MAX_ADAPTER_CONFIG_BYTES))
    except (ObjectMissing, ObjectTooLarge, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InvalidManifest(f"{key}: {error}") from None
    if not isinstance(config, dict):
        raise InvalidManifest(f"{key} must be a JSON object")
    if (config.get("r"), config.get("lora_alpha")) != (manifest.lora_rank, manifest.lora_alpha):
        raise InvalidManifest(
            f"{key} has rank {config.get('r')!r} alpha {config.get('lora_alpha')!r}; "
            f"the manifest says rank {manifest.lora_rank} alpha {manifest.lora_alpha}"
        )
