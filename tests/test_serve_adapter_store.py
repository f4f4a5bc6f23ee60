"""S3AdapterStore against moto S3: download and cache, missing adapters, hostile names, listing."""

from __future__ import annotations

import json

import pytest

from local_stack.cluster_standins.adapter_store import AdapterNotFound, S3AdapterStore
from mazeops.names import InvalidName

PREFIX = "serving/tiny-qwen3-vl/"
LORA_CONFIG = json.dumps({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"]}).encode()


@pytest.fixture
def store(s3, bucket, tmp_path):
    return S3AdapterStore(bucket, PREFIX, tmp_path / "cache", s3)


@pytest.fixture
def weights() -> bytes:
    return b"safetensors bytes: the store moves them, the policy reads them"


def _upload(s3, bucket: str, name: str, config: bytes, weights: bytes) -> None:
    s3.put_object(Bucket=bucket, Key=f"{PREFIX}{name}/adapter_config.json", Body=config)
    s3.put_object(Bucket=bucket, Key=f"{PREFIX}{name}/adapter_model.safetensors", Body=weights)


def test_fetch_downloads_once_then_serves_from_cache(s3, bucket, store, weights, tmp_path, s3_calls):
    _upload(s3, bucket, "run-a-step2", LORA_CONFIG, weights)
    uploads = len(s3_calls)
    path = store.fetch("run-a-step2")
    assert path == tmp_path / "cache" / "run-a-step2"
    assert (path / "adapter_config.json").read_bytes() == LORA_CONFIG
    assert (path / "adapter_model.safetensors").read_bytes() == weights
    after_download = len(s3_calls)
    assert after_download > uploads
    assert store.fetch("run-a-step2") == path
    assert len(s3_calls) == after_download


def test_missing_adapter_is_not_found(s3, bucket, store, tmp_path):
    with pytest.raises(AdapterNotFound, match="run-a-step9"):
        store.fetch("run-a-step9")
    s3.put_object(Bucket=bucket, Key=f"{PREFIX}run-a-step3/adapter_config.json", Body=LORA_CONFIG)
    with pytest.raises(AdapterNotFound, match="adapter_model.safetensors"):
        store.fetch("run-a-step3")
    assert list((tmp_path / "cache").iterdir()) == []


def test_hostile_names_are_refused_before_any_s3_call(store, s3_calls):
    for name in ("..", "../run-a-step1", "a/b", "run-a-step1:x", "run:a:step1", "x" * 300 + "-step1", "", None):
        with pytest.raises(InvalidName):
            store.fetch(name)
    assert s3_calls == []


def test_list_names_valid_adapter_folders(s3, bucket, store, weights):
    for name in ("run-b-step20", "run-a-step10", "Not_An_Adapter"):
        _upload(s3, bucket, name, LORA_CONFIG, weights)
    s3.put_object(Bucket=bucket, Key="serving/other-base/run-c-step1/adapter_config.json", Body=b"{}")
    assert store.list() == ["run-a-step10", "run-b-step20"]


def test_discard_forces_a_new_download(s3, bucket, store, weights, s3_calls):
    _upload(s3, bucket, "run-a-step1", LORA_CONFIG, weights)
    path = store.fetch("run-a-step1")
    store.discard("run-a-step1")
    assert not path.exists()
    before = len(s3_calls)
    assert store.fetch("run-a-step1") == path
    assert len(s3_calls) > before
