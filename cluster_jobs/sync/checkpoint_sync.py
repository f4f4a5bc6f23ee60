"""Checkpoint sync: upload each finished LoRA export to S3, with its manifest last.

S3 is the only state, so the sync is resumable and two watchers never write two manifests for one step
(docs/design.md).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import re
import struct
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from mazeops.layout import ADAPTER_FILES, adapter_manifest_key, adapter_prefix
from mazeops.manifest import AdapterManifest, FileDigest, InvalidManifest, parse_manifest
from mazeops.names import adapter_name, validate_base_model_id, validate_run_id

logger = logging.getLogger(__name__)

CONFIG_FILE, WEIGHTS_FILE = ADAPTER_FILES
# Where an adapter may sit inside global_step_<N>/: the export layout first, then the checkpoint layout.
ADAPTER_SUBDIRS = ("policy", "policy/lora_adapter")
_STEP_DIR = re.compile(r"^global_step_([1-9][0-9]{0,8})$")
_MAX_HEADER_BYTES = 100 * 1024 * 1024


class CheckpointSyncError(RuntimeError):
    """S3 already holds a different manifest for a step, or an upload failed for good."""


class AdapterNotReady(ValueError):
    """The adapter files are missing, partial or malformed (still being written)."""


@dataclass(frozen=True)
class AdapterFiles:
    """The bytes of one finished adapter, read once so that what is checked is what is uploaded."""

    config: bytes
    weights: bytes
    rank: int
    alpha: int

    def digests(self) -> dict[str, FileDigest]:
        """Size and sha256 of each file, keyed by file name."""
        return {
            name: FileDigest(sha256=hashlib.sha256(data).hexdigest(), size=len(data))
            for name, data in ((CONFIG_FILE, self.config), (WEIGHTS_FILE, self.weights))
        }


def find_adapter_dir(step_dir: Path) -> Path | None:
    """The directory under ``global_step_<N>/`` that holds ``adapter_config.json``, if any."""
    for subdir in ADAPTER_SUBDIRS:
        if (step_dir / subdir / CONFIG_FILE).is_file():
            return step_dir / subdir
    return None


def check_safetensors(data: bytes) -> None:
    """Raise AdapterNotReady unless ``data`` is a whole safetensors file (header parses, length matches)."""
    if len(data) < 8:
        raise AdapterNotReady(f"{WEIGHTS_FILE} has {len(data)} bytes; a safetensors file has at least 8")
    (header_len,) = struct.unpack("<Q", data[:8])
    if header_len > min(_MAX_HEADER_BYTES, len(data) - 8):
        raise AdapterNotReady(f"{WEIGHTS_FILE} declares a {header_len}-byte header but has {len(data)} bytes")
    try:
        header = json.loads(data[8 : 8 + header_len])
        ends = [entry["data_offsets"][1] for name, entry in header.items() if name != "__metadata__"]
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError, TypeError, KeyError, IndexError) as error:
        raise AdapterNotReady(f"{WEIGHTS_FILE} header is not valid safetensors JSON: {error}") from None
    if not ends or not all(isinstance(end, int) for end in ends):
        raise AdapterNotReady(f"{WEIGHTS_FILE} header lists no tensors with integer offsets")
    expected = 8 + header_len + max(ends)
    if len(data) != expected:
        raise AdapterNotReady(f"{WEIGHTS_FILE} has {len(data)} bytes; its header declares {expected}")


def read_adapter(adapter_dir: Path) -> AdapterFiles:
    """Read and check both adapter files of ``adapter_dir``.

    Raises:
        AdapterNotReady: a file is missing, the config is not JSON with integer ``r`` and
            ``lora_alpha``, or the weights are not a whole safetensors file.
    """
    try:
        config = (adapter_dir / CONFIG_FILE).read_bytes()
        weights = (adapter_dir / WEIGHTS_FILE).read_bytes()
    except FileNotFoundError as error:
        raise AdapterNotReady(f"adapter file missing: {error.filename}") from None
    try:
        parsed = json.loads(config)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise AdapterNotReady(f"{CONFIG_FILE} is not valid JSON: {error}") from None
    rank = parsed.get("r") if isinstance(parsed, dict) else None
    alpha = parsed.get("lora_alpha") if isinstance(parsed, dict) else None
    if not all(isinstance(value, int) and not isinstance(value, bool) for value in (rank, alpha)):
        raise AdapterNotReady(f"{CONFIG_FILE} needs integer 'r' and 'lora_alpha', got r={rank!r} lora_alpha={alpha!r}")
    check_safetensors(weights)
    return AdapterFiles(config=config, weights=weights, rank=rank, alpha=alpha)


def _file_sizes(adapter_dir: Path) -> tuple[int, ...] | None:
    try:
        return tuple((adapter_dir / name).stat().st_size for name in ADAPTER_FILES)
    except FileNotFoundError:
        return None


def _utc_mtime(path: Path) -> str:
    mtime = datetime.datetime.fromtimestamp(path.stat().st_mtime, tz=datetime.UTC)
    return mtime.strftime("%Y-%m-%dT%H:%M:%SZ")


class CheckpointSync:
    """Uploads a run's finished adapter exports from ``export_dir`` to the artifacts bucket."""

    def __init__(self, export_dir: Path, bucket: str, run_id: str, base_model_id: str, s3_client: Any) -> None:
        self.export_dir = Path(export_dir)
        self.bucket = bucket
        self.run_id = validate_run_id(run_id)
        self.base_model_id = validate_base_model_id(base_model_id)
        self.s3 = s3_client
        self._done: set[int] = set()
        self._last_sizes: dict[int, tuple[int, ...] | None] = {}

    def local_steps(self) -> list[int]:
        """Steps with a ``global_step_<N>`` directory in the export directory, ascending."""
        if not self.export_dir.is_dir():
            return []
        matches = (_STEP_DIR.fullmatch(path.name) for path in self.export_dir.iterdir() if path.is_dir())
        return sorted(int(match[1]) for match in matches if match)

    def sync_once(self, writer_done: bool = False) -> list[int]:
        """Scan once; upload every finished step that S3 lacks. Returns the steps whose manifest this call wrote.

        ``writer_done=True`` (the trainer has exited, files can no longer change) skips the
        sizes-unchanged-since-the-previous-scan wait, so a final pass uploads the last export.
        """
        uploaded = []
        for step in self.local_steps():
            if step in self._done:
                continue
            adapter_dir = find_adapter_dir(self.export_dir / f"global_step_{step}")
            if adapter_dir is None or not (self._stable(step, adapter_dir) or writer_done):
                continue
            if self._manifest_exists(step):
                logger.info("step %d: manifest already in S3, skipping", step)
                self._done.add(step)
                continue
            try:
                files = read_adapter(adapter_dir)
            except AdapterNotReady as error:
                logger.info("step %d: not ready yet: %s", step, error)
                continue
            if self._upload(step, files, _utc_mtime(adapter_dir / WEIGHTS_FILE)):
                uploaded.append(step)
            self._done.add(step)
        return uploaded

    def watch(self, stop_event: threading.Event, interval_s: float = 30.0) -> None:
        """Call :meth:`sync_once` every ``interval_s`` seconds until ``stop_event`` is set.

        A failing scan (S3 unreachable, say) is logged and retried on the next tick; the caller
        runs one last ``sync_once(writer_done=True)`` after the trainer exits, where errors propagate.
        """
        while not stop_event.is_set():
            try:
                self.sync_once()
            except Exception:  # the watcher thread must outlive a transient error
                logger.exception("checkpoint sync scan failed; retrying in %.0f s", interval_s)
            stop_event.wait(interval_s)

    def _stable(self, step: int, adapter_dir: Path) -> bool:
        """True when both files exist with the same sizes as in the previous scan."""
        sizes = _file_sizes(adapter_dir)
        previous = self._last_sizes.get(step)
        self._last_sizes[step] = sizes
        return sizes is not None and sizes == previous

    def _manifest_exists(self, step: int) -> bool:
        try:
            self.s3.head_object(Bucket=self.bucket, Key=adapter_manifest_key(self.run_id, step))
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
        return True

    def _upload(self, step: int, files: AdapterFiles, created_at: str) -> bool:
        """Upload the files, then the manifest if no other writer did; True if this call wrote it."""
        prefix = adapter_prefix(self.run_id, step)
        for name, data, content_type in (
            (CONFIG_FILE, files.config, "application/json"),
            (WEIGHTS_FILE, files.weights, "application/octet-stream"),
        ):
            self.s3.put_object(Bucket=self.bucket, Key=prefix + name, Body=data, ContentType=content_type)
        manifest = AdapterManifest(
            run_id=self.run_id,
            step=step,
            adapter_name=adapter_name(self.run_id, step),
            base_model_id=self.base_model_id,
            lora_rank=files.rank,
            lora_alpha=files.alpha,
            files=files.digests(),
            created_at=created_at,
        )
        key = adapter_manifest_key(self.run_id, step)
        try:
            self.s3.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=manifest.to_json().encode(),
                ContentType="application/json",
                IfNoneMatch="*",
            )
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") not in ("PreconditionFailed", "ConditionalRequestConflict"):
                raise
            self._check_existing(key, manifest)
            logger.info("step %d: another writer put the manifest first; it matches", step)
            return False
        logger.info("step %d: uploaded %s (%d bytes of weights) and its manifest", step, prefix, len(files.weights))
        return True

    def _check_existing(self, key: str, manifest: AdapterManifest) -> None:
        """Raise CheckpointSyncError if the manifest already in S3 pins different files."""
        raw = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        try:
            existing = parse_manifest(raw)
        except InvalidManifest as error:
            raise CheckpointSyncError(f"s3://{self.bucket}/{key} exists but is invalid: {error}") from None
        if existing.files != manifest.files:
            raise CheckpointSyncError(
                f"s3://{self.bucket}/{key} already pins different adapter files than the local export; "
                "the adapter files in S3 may no longer match it"
            )
