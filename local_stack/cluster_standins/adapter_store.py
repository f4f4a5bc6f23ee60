"""LoRA adapters in the S3 serving prefix, fetched on demand into a local cache directory.

The layout is Ray Serve LLM's `dynamic_lora_loading_path`: one folder per adapter below the
prefix (`serving/<base_model_id>/<adapter_name>/{adapter_config.json,adapter_model.safetensors}`).
Names are validated before any S3 call, so a hostile name never becomes a key or a local path.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from botocore.exceptions import ClientError

from mazeops.layout import ADAPTER_FILES
from mazeops.names import InvalidName, parse_adapter_name

_MISSING_OBJECT_CODES = {"404", "NoSuchKey", "NotFound"}


class AdapterNotFound(LookupError):
    """The serving prefix holds no complete adapter of that name."""


class S3AdapterStore:
    """Adapters below `s3://<bucket>/<prefix>`, cached in `cache_dir/<adapter_name>/`."""

    def __init__(self, bucket: str, prefix: str, cache_dir: Path, s3_client) -> None:
        """`prefix` is the serving prefix of one base model, e.g. `serving/tiny-qwen3-vl/`."""
        if not bucket or not prefix.strip("/"):
            raise ValueError(f"bucket and prefix must be non-empty, got bucket={bucket!r} prefix={prefix!r}")
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/"
        self.cache_dir = Path(cache_dir)
        self.s3 = s3_client
        self.cache_dir.mkdir(parents=True, exist_ok=True)

    def fetch(self, adapter_name: str) -> Path:
        """Local directory holding the adapter's files, downloaded on first use.

        Raises:
            mazeops.names.InvalidName: `adapter_name` is not `<run_id>-step<N>` (checked before any S3 call).
            AdapterNotFound: an adapter file is missing from the serving prefix.
        """
        parse_adapter_name(adapter_name)
        target = self.cache_dir / adapter_name
        if target.is_dir():
            return target
        staging = Path(tempfile.mkdtemp(prefix=f".{adapter_name}-", dir=self.cache_dir))
        try:
            for file_name in ADAPTER_FILES:
                self._download(f"{self.prefix}{adapter_name}/{file_name}", staging / file_name, adapter_name)
            staging.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return target

    def discard(self, adapter_name: str) -> None:
        """Drop the cached copy, so the next `fetch` downloads the adapter again."""
        parse_adapter_name(adapter_name)
        shutil.rmtree(self.cache_dir / adapter_name, ignore_errors=True)

    def list(self) -> list[str]:
        """Sorted names of the adapter folders in the serving prefix (folders with invalid names are skipped)."""
        names = []
        paginator = self.s3.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix, Delimiter="/"):
            for common in page.get("CommonPrefixes", []):
                name = common["Prefix"][len(self.prefix) :].rstrip("/")
                try:
                    parse_adapter_name(name)
                except InvalidName:
                    continue
                names.append(name)
        return sorted(names)

    def _download(self, key: str, destination: Path, adapter_name: str) -> None:
        try:
            self.s3.download_file(self.bucket, key, str(destination))
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in _MISSING_OBJECT_CODES:
                raise AdapterNotFound(
                    f"adapter {adapter_name!r} not found: s3://{self.bucket}/{key} does not exist"
                ) from None
            raise
