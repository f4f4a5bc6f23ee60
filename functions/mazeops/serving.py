"""Copy an adapter into the serving prefix Ray Serve LLM loads it from, verified against its manifest."""

from __future__ import annotations

import base64
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from mazeops.layout import adapter_prefix, serving_adapter_prefix
from mazeops.manifest import AdapterManifest, FileDigest, InvalidManifest

_MISSING_CODES = frozenset({"404", "NoSuchKey", "NotFound"})


@dataclass(frozen=True)
class ServingCopy:
    """Where an adapter is served from, and which of its files this call copied."""

    prefix: str
    copied: tuple[str, ...]


def copy_adapter_to_serving(
    s3: Any, bucket: str, manifest: AdapterManifest, base_model_id: str, adapter: str
) -> ServingCopy:
    """Copy the adapter `manifest` describes to `serving/<base_model_id>/<adapter>/` and verify the copy.

    Args:
        s3: a boto3 S3 client.
        bucket: the artifacts bucket (source and serving copy are both in it).
        manifest: the adapter's parsed manifest.
        base_model_id: the base model the adapter is served on; must be the manifest's.
        adapter: the adapter name being served; must be the manifest's.

    Raises:
        InvalidManifest: the manifest describes another adapter, an adapter file is missing, or a
            copy's SHA-256 or size differs from the manifest (the serving copy is then deleted).
    """
    if (manifest.base_model_id, manifest.adapter_name) != (base_model_id, adapter):
        raise InvalidManifest(
            f"manifest describes {manifest.base_model_id}:{manifest.adapter_name}, not {base_model_id}:{adapter[:80]}"
        )
    source = adapter_prefix(manifest.run_id, manifest.step)
    target = serving_adapter_prefix(base_model_id, manifest.run_id, manifest.step)
    copied = []
    for name, pinned in sorted(manifest.files.items()):
        if _served_digest(s3, bucket, target + name) == (pinned.size, pinned.sha256):
            continue
        try:
            _copy_verified(s3, bucket, source + name, target + name, pinned)
        except InvalidManifest as error:
            raise InvalidManifest(f"{error}; {_delete_serving_copy(s3, bucket, target, manifest.files)}") from None
        copied.append(name)
    return ServingCopy(prefix=target, copied=tuple(copied))


def _copy_verified(s3: Any, bucket: str, source_key: str, target_key: str, pinned: FileDigest) -> None:
    """Server-side copy with a SHA-256 computed by S3; InvalidManifest unless the copy has the pinned digest."""
    try:
        s3.copy_object(
            Bucket=bucket, Key=target_key, CopySource={"Bucket": bucket, "Key": source_key}, ChecksumAlgorithm="SHA256"
        )
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in _MISSING_CODES:
            raise InvalidManifest(f"adapter file {source_key} disappeared since it was checked") from None
        raise
    size, sha256 = _served_digest(s3, bucket, target_key) or (None, None)
    if sha256 is None:
        raise InvalidManifest(f"S3 stored no SHA-256 for the copy of {source_key}; cannot verify it")
    if (size, sha256) != (pinned.size, pinned.sha256):
        raise InvalidManifest(
            f"{source_key} changed since it was checked: sha256 {sha256[:12]}... and {size} bytes, "
            f"the manifest pins sha256 {pinned.sha256[:12]}... and {pinned.size} bytes"
        )


def _served_digest(s3: Any, bucket: str, key: str) -> tuple[int, str | None] | None:
    """(size, hex SHA-256 or None when S3 stored none) of an object; None when it does not exist."""
    try:
        head = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in _MISSING_CODES:
            return None
        raise
    checksum = head.get("ChecksumSHA256")
    return head["ContentLength"], base64.b64decode(checksum).hex() if checksum else None


def _delete_serving_copy(s3: Any, bucket: str, prefix: str, names: Iterable[str]) -> str:
    """Delete the adapter's files below the serving prefix; return a sentence saying whether that worked."""
    try:
        answer = s3.delete_objects(
            Bucket=bucket, Delete={"Objects": [{"Key": prefix + name} for name in sorted(names)], "Quiet": True}
        )
    except ClientError as error:
        return f"the bad serving copy could not be deleted ({error.response.get('Error', {}).get('Code')})"
    failures = [f"{item.get('Key')}: {item.get('Code')}" for item in answer.get("Errors", [])]
    if failures:
        return f"the bad serving copy could not be deleted ({', '.join(failures)})"
    return f"the serving copy s3://{bucket}/{prefix} was deleted"
