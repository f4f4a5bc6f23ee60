"""Fetch an adapter from S3 by its manifest and refuse it unless every check passes (the checks: docs/design.md)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from mazeops.baseline import parse_baseline_result_key
from mazeops.layout import ADAPTER_FILES, adapter_prefix, eval_result_key, parse_manifest_key
from mazeops.manifest import MAX_MANIFEST_BYTES, AdapterManifest, InvalidManifest, parse_manifest, verify_adapter_dir
from mazeops.names import InvalidName
from mazeops.s3_objects import ObjectMissing, ObjectTooLarge, object_size, read_limited

S3_SCHEME = "s3://"


class EvaluationRefused(ValueError):
    """The adapter, its manifest or the job's arguments are unusable; nothing is evaluated or written."""


@dataclass(frozen=True)
class S3Location:
    """A bucket and key, parsed from ``s3://bucket/key``."""

    bucket: str
    key: str

    @property
    def uri(self) -> str:
        """The ``s3://bucket/key`` form."""
        return f"{S3_SCHEME}{self.bucket}/{self.key}"


def parse_s3_uri(uri: str) -> S3Location:
    """Split ``s3://bucket/key``; raise :class:`EvaluationRefused` for anything else."""
    bucket, _, key = uri[len(S3_SCHEME) :].partition("/") if uri.startswith(S3_SCHEME) else ("", "", "")
    if not bucket or not key:
        raise EvaluationRefused(f"expected an s3://<bucket>/<key> URI, got {uri[:200]!r}")
    return S3Location(bucket, key)


def check_output_location(manifest_location: S3Location, output: S3Location) -> None:
    """The result must go to ``runs/<run_id>/evals/global_step_<N>/result.json`` of the manifest's adapter."""
    run_id, step = _manifest_key_names(manifest_location)
    expected = eval_result_key(run_id, step)
    if output.key != expected:
        raise EvaluationRefused(f"--output key {output.key!r} is not the result key of this adapter, {expected!r}")


def check_baseline_output(output: S3Location, base_model_id: str, eval_set_sha256: str) -> None:
    """A baseline's result must go to ``baselines/<base_model_id>/<eval_set_sha256>/attempt_<N>/result.json``."""
    try:
        named = parse_baseline_result_key(output.key)
    except InvalidName as error:
        raise EvaluationRefused(f"--output: {error}") from None
    if named[:2] != (base_model_id, eval_set_sha256):
        raise EvaluationRefused(
            f"--output key {output.key!r} is the result of the baseline of {named[0]} on {named[1][:12]}..., "
            f"not of {base_model_id} on {eval_set_sha256[:12]}..."
        )


def fetch_adapter(s3: Any, manifest_location: S3Location, adapter_dir: Path) -> AdapterManifest:
    """Read and check the manifest, download the adapter files into ``adapter_dir`` and verify them.

    Raises:
        EvaluationRefused: for any missing, malformed or mismatching manifest or file.
    """
    run_id, step = _manifest_key_names(manifest_location)
    try:
        manifest = parse_manifest(read_limited(s3, manifest_location.bucket, manifest_location.key, MAX_MANIFEST_BYTES))
    except (ObjectMissing, ObjectTooLarge, InvalidManifest) as error:
        raise EvaluationRefused(str(error)) from None
    if (manifest.run_id, manifest.step) != (run_id, step):
        raise EvaluationRefused(
            f"manifest at {manifest_location.uri} is for run {manifest.run_id!r} step {manifest.step}, "
            f"but its key names run {run_id!r} step {step}"
        )
    adapter_dir.mkdir(parents=True, exist_ok=True)
    prefix = adapter_prefix(run_id, step)
    for name in ADAPTER_FILES:
        _download(s3, manifest_location.bucket, prefix + name, adapter_dir / name, manifest.files[name].size)
    try:
        verify_adapter_dir(manifest, adapter_dir)
    except InvalidManifest as error:
        raise EvaluationRefused(str(error)) from None
    return manifest


def check_base_model(adapter_dir: Path, base_model_path: str | Path, base_model_id: str) -> None:
    """Refuse an adapter whose ``adapter_config.json`` names another base model than ``base_model_path``.

    PEFT records ``base_model_name_or_path``, the path or Hub id the trainer loaded. It names the
    same model as ``base_model_path`` when:

    * it is empty (nothing recorded; the weight shapes are still checked when the adapter loads), or
    * it equals ``base_model_id`` (the project's id of the base model, e.g. ``qwen3-vl-8b-sft``), or
    * both are existing local directories and they are the same directory (links resolved), or
    * otherwise (trained on another host, or a Hub id), their last path components are equal:
      ``Qwen/Qwen3-VL-8B-Instruct`` matches ``/shared/models/Qwen3-VL-8B-Instruct``.

    Raises:
        EvaluationRefused: when the recorded base model is another one.
    """
    config = json.loads((adapter_dir / ADAPTER_FILES[0]).read_text())
    recorded = config.get("base_model_name_or_path") or ""
    if not isinstance(recorded, str):
        raise EvaluationRefused(f"adapter_config.json has a non-string base_model_name_or_path: {recorded!r}")
    base = Path(base_model_path)
    if not recorded or recorded == base_model_id:
        return
    recorded_path = Path(recorded)
    if recorded_path.is_dir() and base.is_dir():
        same = recorded_path.resolve() == base.resolve()
    else:
        same = recorded_path.name == base.name
    if not same:
        raise EvaluationRefused(
            f"adapter was trained on base model {recorded!r}, not on {str(base_model_path)!r} ({base_model_id})"
        )


def _manifest_key_names(location: S3Location) -> tuple[str, int]:
    """(run_id, step) named by a manifest key; refuse keys outside the layout."""
    try:
        return parse_manifest_key(location.key)
    except InvalidName as error:
        raise EvaluationRefused(str(error)) from None


def _download(s3: Any, bucket: str, key: str, path: Path, expected_size: int) -> None:
    """Download one adapter file, refusing a missing one or one larger than the manifest says."""
    size = object_size(s3, bucket, key)
    if size is None:
        raise EvaluationRefused(f"adapter file missing: s3://{bucket}/{key}")
    if size > expected_size:
        raise EvaluationRefused(f"s3://{bucket}/{key} is {size} bytes; the manifest says {expected_size}")
    try:
        s3.download_file(bucket, key, str(path))
    except ClientError as error:
        raise EvaluationRefused(f"cannot download s3://{bucket}/{key}: {error}") from None
