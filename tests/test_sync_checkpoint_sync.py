"""Checkpoint sync against moto S3: finished-only uploads, manifest last, resumable, no duplicates."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from pathlib import Path

import boto3
import numpy as np
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from safetensors.numpy import save as safetensors_bytes

from cluster_jobs.sync.checkpoint_sync import AdapterNotReady, CheckpointSync, CheckpointSyncError, check_safetensors
from mazeops.layout import adapter_manifest_key, adapter_prefix
from mazeops.manifest import parse_manifest

BUCKET = "artifacts-test"
RUN_ID = "run-a"
BASE = "tiny-qwen3-vl"


@pytest.fixture(scope="module")
def aws():
    with mock_aws():
        yield boto3.client("s3", region_name="us-east-1")  # one client: creating one takes ~1 s


@pytest.fixture
def s3(aws):
    """Fresh, versioned buckets (versions count how often a manifest was written)."""
    for bucket in (BUCKET, "clean-bucket"):
        aws.create_bucket(Bucket=bucket)
        aws.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    yield aws
    for bucket in (BUCKET, "clean-bucket"):
        for version in aws.list_object_versions(Bucket=bucket).get("Versions", []):
            aws.delete_object(Bucket=bucket, Key=version["Key"], VersionId=version["VersionId"])
        aws.delete_bucket(Bucket=bucket)


def weights(seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    return safetensors_bytes({"lora_A.weight": rng.standard_normal((8, 16), dtype=np.float32)})


def write_adapter(export_dir: Path, step: int, rank: int = 8, alpha: int = 16, subdir: str = "policy") -> Path:
    adapter_dir = export_dir / f"global_step_{step}" / subdir
    adapter_dir.mkdir(parents=True, exist_ok=True)
    (adapter_dir / "adapter_config.json").write_text(json.dumps({"r": rank, "lora_alpha": alpha, "peft_type": "LORA"}))
    (adapter_dir / "adapter_model.safetensors").write_bytes(weights(step))
    return adapter_dir


def manifest_versions(client, step: int, bucket: str = BUCKET) -> int:
    listing = client.list_object_versions(Bucket=bucket, Prefix=adapter_manifest_key(RUN_ID, step))
    return len(listing.get("Versions", []))


def read_manifest(client, step: int, bucket: str = BUCKET):
    return parse_manifest(client.get_object(Bucket=bucket, Key=adapter_manifest_key(RUN_ID, step))["Body"].read())


class FlakyClient:
    """An S3 client that fails the manifest upload (a crash between the files and the manifest)."""

    def __init__(self, client):
        self.client = client

    def __getattr__(self, name):
        return getattr(self.client, name)

    def put_object(self, **kwargs):
        if kwargs["Key"].endswith("manifest.json"):
            raise ConnectionError("simulated crash before the manifest")
        return self.client.put_object(**kwargs)


class StaleHeadClient(FlakyClient):
    """An S3 client whose HEAD always misses, as a second watcher racing the first one sees it."""

    def put_object(self, **kwargs):
        return self.client.put_object(**kwargs)

    def head_object(self, **kwargs):
        raise ClientError({"Error": {"Code": "404", "Message": "Not Found"}}, "HeadObject")


def test_finished_step_is_uploaded_after_two_stable_scans(tmp_path, s3):
    adapter_dir = write_adapter(tmp_path, 20, rank=8, alpha=16)
    sync = CheckpointSync(tmp_path, BUCKET, RUN_ID, BASE, s3)
    assert sync.sync_once() == []  # first sight: sizes not yet known to be stable
    assert sync.sync_once() == [20]
    assert sync.sync_once() == []

    manifest = read_manifest(s3, 20)
    assert (manifest.lora_rank, manifest.lora_alpha) == (8, 16)
    assert manifest.adapter_name == "run-a-step20" and manifest.base_model_id == BASE
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        uploaded = s3.get_object(Bucket=BUCKET, Key=adapter_prefix(RUN_ID, 20) + name)["Body"].read()
        assert uploaded == (adapter_dir / name).read_bytes()
        assert manifest.files[name].sha256 == hashlib.sha256(uploaded).hexdigest()
        assert manifest.files[name].size == len(uploaded)


def test_manifest_is_uploaded_after_the_files(tmp_path, s3):
    write_adapter(tmp_path, 2)
    keys = []

    class Recording(FlakyClient):
        def put_object(self, **kwargs):
            keys.append(kwargs["Key"].rsplit("/", 1)[1])
            return self.client.put_object(**kwargs)

    CheckpointSync(tmp_path, BUCKET, RUN_ID, BASE, Recording(s3)).sync_once(writer_done=True)
    assert keys == ["adapter_config.json", "adapter_model.safetensors", "manifest.json"]


def test_half_written_weights_are_not_uploaded(tmp_path, s3):
    adapter_dir = write_adapter(tmp_path, 20)
    full = (adapter_dir / "adapter_model.safetensors").read_bytes()
    (adapter_dir / "adapter_model.safetensors").write_bytes(full[: len(full) // 2])
    sync = CheckpointSync(tmp_path, BUCKET, RUN_ID, BASE, s3)
    for _ in range(3):
        assert sync.sync_once() == []
    assert sync.sync_once(writer_done=True) == []
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET)

    (adapter_dir / "adapter_model.safetensors").write_bytes(full)
    assert sync.sync_once() == []  # the size changed since the last scan
    assert sync.sync_once() == [20]


@pytest.mark.parametrize(
    ("config", "reason"),
    [(None, "missing"), ("{not json", "not valid JSON"), (json.dumps({"r": "32", "lora_alpha": 64}), "integer")],
)
def test_adapter_without_a_valid_config_is_not_uploaded(tmp_path, s3, config, reason, caplog):
    adapter_dir = write_adapter(tmp_path, 4)
    if config is None:
        (adapter_dir / "adapter_model.safetensors").unlink()
    else:
        (adapter_dir / "adapter_config.json").write_text(config)
    sync = CheckpointSync(tmp_path, BUCKET, RUN_ID, BASE, s3)
    with caplog.at_level("INFO"):
        assert sync.sync_once(writer_done=True) == []
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET)
    if config is not None:
        assert reason in caplog.text


def test_growing_files_wait_for_a_stable_scan(tmp_path, s3):
    adapter_dir = write_adapter(tmp_path, 6)
    sync = CheckpointSync(tmp_path, BUCKET, RUN_ID, BASE, s3)
    sync.sync_once()
    (adapter_dir / "adapter_config.json").write_text(
        json.dumps({"r": 8, "lora_alpha": 16, "note": "rewritten, longer"})
    )
    assert sync.sync_once() == []
    assert sync.sync_once() == [6]


@pytest.mark.parametrize(
    "data",
    [b"", b"\x10\x00\x00\x00\x00\x00\x00\x00{}", b"\xff" * 8 + b"{}", b"\x02\x00\x00\x00\x00\x00\x00\x00{}"],
)
def test_safetensors_check_refuses_malformed_files(data):
    with pytest.raises(AdapterNotReady):
        check_safetensors(data)


def test_safetensors_check_refuses_trailing_bytes():
    check_safetensors(weights())
    with pytest.raises(AdapterNotReady, match="header declares"):
        check_safetensors(weights() + b"\x00")


def test_crash_between_files_and_manifest_then_restart(tmp_path, s3):
    write_adapter(tmp_path, 20)
    crashing = CheckpointSync(tmp_path, BUCKET, RUN_ID, BASE, FlakyClient(s3))
    crashing.sync_once()
    with pytest.raises(ConnectionError):
        crashing.sync_once()
    listed = {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]}
    assert listed == {
        adapter_prefix(RUN_ID, 20) + name for name in ("adapter_config.json", "adapter_model.safetensors")
    }

    restarted = CheckpointSync(tmp_path, BUCKET, RUN_ID, BASE, s3)
    restarted.sync_once()
    assert restarted.sync_once() == [20]
    assert manifest_versions(s3, 20) == 1

    CheckpointSync(tmp_path, "clean-bucket", RUN_ID, BASE, s3).sync_once(writer_done=True)
    assert read_manifest(s3, 20) == read_manifest(s3, 20, bucket="clean-bucket")


def test_a_step_already_in_s3_is_skipped_after_restart(tmp_path, s3):
    write_adapter(tmp_path, 10)
    write_adapter(tmp_path, 20)
    assert CheckpointSync(tmp_path, BUCKET, RUN_ID, BASE, s3).sync_once(writer_done=True) == [10, 20]
    again = CheckpointSync(tmp_path, BUCKET, RUN_ID, BASE, s3)
    assert again.sync_once(writer_done=True) == []
    assert manifest_versions(s3, 10) == manifest_versions(s3, 20) == 1


def test_two_watchers_do_not_duplicate(tmp_path, s3):
    write_adapter(tmp_path, 20)
    first = CheckpointSync(tmp_path, BUCKET, RUN_ID, BASE, s3)
    second = CheckpointSync(tmp_path, BUCKET, RUN_ID, BASE, s3)
    racing = CheckpointSync(tmp_path, BUCKET, RUN_ID, BASE, StaleHeadClient(s3))
    results = [watcher.sync_once(writer_done=True) for watcher in (first, second, racing)]
    assert results == [[20], [], []]
    assert manifest_versions(s3, 20) == 1


def test_a_conflicting_manifest_in_s3_is_an_error(tmp_path, s3):
    write_adapter(tmp_path, 20)
    CheckpointSync(tmp_path, BUCKET, RUN_ID, BASE, s3).sync_once(writer_done=True)
    (tmp_path / "global_step_20" / "policy" / "adapter_model.safetensors").write_bytes(weights(seed=99))
    racing = CheckpointSync(tmp_path, BUCKET, RUN_ID, BASE, StaleHeadClient(s3))
    with pytest.raises(CheckpointSyncError, match="different adapter files"):
        racing.sync_once(writer_done=True)
    assert manifest_versions(s3, 20) == 1


def test_checkpoint_layout_and_unrelated_dirs(tmp_path, s3):
    write_adapter(tmp_path, 3, subdir="policy/lora_adapter")
    for name in ("global_step_0", "global_step_x", "dumped_evals", "global_step_007"):
        (tmp_path / name / "policy").mkdir(parents=True)
    (tmp_path / "train_metrics.jsonl").write_text("{}\n")
    assert CheckpointSync(tmp_path, BUCKET, RUN_ID, BASE, s3).sync_once(writer_done=True) == [3]


def test_missing_export_dir_is_an_empty_scan(tmp_path, s3):
    assert CheckpointSync(tmp_path / "not-yet", BUCKET, RUN_ID, BASE, s3).sync_once() == []


def test_watch_uploads_in_the_background_until_stopped(tmp_path, s3):
    sync = CheckpointSync(tmp_path, BUCKET, RUN_ID, BASE, s3)
    stop = threading.Event()
    thread = threading.Thread(target=sync.watch, args=(stop, 0.02), daemon=True)
    thread.start()
    write_adapter(tmp_path, 2)
    deadline = time.monotonic() + 10
    while manifest_versions(s3, 2) == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    stop.set()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert manifest_versions(s3, 2) == 1


def test_bad_names_are_refused(tmp_path, s3):
    with pytest.raises(ValueError, match="invalid run id"):
        CheckpointSync(tmp_path, BUCKET, "../x", BASE, s3)
    with pytest.raises(ValueError, match="invalid base model id"):
        CheckpointSync(tmp_path, BUCKET, RUN_ID, "a:b", s3)
