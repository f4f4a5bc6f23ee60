"""Adapter fetch and checks of the evaluation job, against moto S3 (no model is loaded here).

The broken-adapter cases through the CLI (exit code 2, nothing written) are in test_evaluate_job.py.
"""

from __future__ import annotations

import json
import shutil

import boto3
import pytest
from moto import mock_aws

from cluster_jobs.evaluate.artifacts import (
    EvaluationRefused,
    S3Location,
    check_base_model,
    check_output_location,
    fetch_adapter,
    parse_s3_uri,
)
from cluster_jobs.evaluate.backends import DEFAULT_MAX_NEW_TOKENS, answer_budget, vllm_engine_args
from local_stack.cluster_standins.tiny_model import GENERATION_MAX_NEW_TOKENS, TINY_BASE_MODEL_ID, build_tiny_qwen3_vl
from mazeops.layout import adapter_prefix
from tests.fixtures_models import make_tiny_adapter, upload_adapter

BUCKET = "eval-artifacts-test"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval-artifacts")
    base_dir = build_tiny_qwen3_vl(root / "base")
    make_tiny_adapter(base_dir, root / "adapter", rank=4, seed=1)
    return base_dir, root / "adapter"


@pytest.fixture
def s3(monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


def _location(key: str) -> S3Location:
    return S3Location(BUCKET, key)


def test_parse_s3_uri():
    assert parse_s3_uri("s3://b-1/runs/x/manifest.json") == S3Location("b-1", "runs/x/manifest.json")
    assert parse_s3_uri("s3://b-1/k").uri == "s3://b-1/k"
    for bad in ("runs/x", "s3://", "s3://bucket", "s3://bucket/", "https://bucket/key"):
        with pytest.raises(EvaluationRefused):
            parse_s3_uri(bad)


def test_fetch_verifies_and_returns_the_manifest(s3, tiny, tmp_path):
    key = upload_adapter(s3, BUCKET, "run-a", 20, tiny[1])
    manifest = fetch_adapter(s3, _location(key), tmp_path / "adapter")
    assert (manifest.run_id, manifest.step, manifest.adapter_name, manifest.lora_rank) == (
        "run-a",
        20,
        "run-a-step20",
        4,
    )
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        assert (tmp_path / "adapter" / name).read_bytes() == (tiny[1] / name).read_bytes()


def test_file_larger_than_the_manifest_says_is_refused_before_download(s3, tiny, tmp_path):
    key = upload_adapter(s3, BUCKET, "run-a", 1, tiny[1])
    weights = (tiny[1] / "adapter_model.safetensors").read_bytes()
    s3.put_object(Bucket=BUCKET, Key=adapter_prefix("run-a", 1) + "adapter_model.safetensors", Body=weights + b"x")
    with pytest.raises(EvaluationRefused, match="the manifest says"):
        fetch_adapter(s3, _location(key), tmp_path)
    assert not (tmp_path / "adapter_model.safetensors").exists()


def test_manifest_for_another_step_or_run_than_its_key_is_refused(s3, tiny, tmp_path):
    key = upload_adapter(s3, BUCKET, "run-a", 2, tiny[1], manifest_fields={"step": 3, "adapter_name": "run-a-step3"})
    with pytest.raises(EvaluationRefused, match="is for run 'run-a' step 3, but its key names run 'run-a' step 2"):
        fetch_adapter(s3, _location(key), tmp_path)
    key = upload_adapter(
        s3, BUCKET, "run-b", 2, tiny[1], manifest_fields={"run_id": "run-a", "adapter_name": "run-a-step2"}
    )
    with pytest.raises(EvaluationRefused, match="is for run 'run-a'"):
        fetch_adapter(s3, _location(key), tmp_path)


def test_missing_malformed_or_misplaced_manifest_is_refused(s3, tiny, tmp_path):
    with pytest.raises(EvaluationRefused, match="does not exist"):
        fetch_adapter(s3, _location("runs/run-a/adapters/global_step_9/manifest.json"), tmp_path)
    s3.put_object(Bucket=BUCKET, Key="runs/run-a/adapters/global_step_8/manifest.json", Body=b"{not json")
    with pytest.raises(EvaluationRefused, match="manifest is invalid"):
        fetch_adapter(s3, _location("runs/run-a/adapters/global_step_8/manifest.json"), tmp_path)
    with pytest.raises(EvaluationRefused, match="not an adapter manifest key"):
        fetch_adapter(s3, _location("runs/run-a/adapters/latest/manifest.json"), tmp_path)


def test_output_must_be_the_adapters_result_key():
    manifest = _location("runs/run-a/adapters/global_step_20/manifest.json")
    check_output_location(manifest, S3Location("other-bucket", "runs/run-a/evals/global_step_20/result.json"))
    for key in ("runs/run-a/evals/global_step_2/result.json", "runs/run-b/evals/global_step_20/result.json", "x.json"):
        with pytest.raises(EvaluationRefused, match="is not the result key"):
            check_output_location(manifest, S3Location(BUCKET, key))


def _adapter_recording(tmp_path, recorded):
    adapter = tmp_path / "recorded"
    adapter.mkdir(exist_ok=True)
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 4, "base_model_name_or_path": recorded}))
    return adapter


def test_base_model_check(tiny, tmp_path):
    base_dir = tiny[0]
    link = tmp_path / "link-to-base"
    link.symlink_to(base_dir)
    other = tmp_path / "other" / base_dir.name
    shutil.copytree(base_dir, other)
    accepted = [
        None,
        "",
        TINY_BASE_MODEL_ID,
        str(base_dir),
        str(link),
        f"/elsewhere/{base_dir.name}",
        f"org/{base_dir.name}",
    ]
    for recorded in accepted:
        check_base_model(_adapter_recording(tmp_path, recorded), base_dir, TINY_BASE_MODEL_ID)
    for recorded in (str(other), "Qwen/Qwen3-VL-8B-Instruct", "/models/other-model"):
        with pytest.raises(EvaluationRefused, match="was trained on base model"):
            check_base_model(_adapter_recording(tmp_path, recorded), base_dir, TINY_BASE_MODEL_ID)


def test_answer_budget_comes_from_the_generation_config(tiny, tmp_path):
    assert answer_budget(tiny[0]) == GENERATION_MAX_NEW_TOKENS
    assert answer_budget(tmp_path) == DEFAULT_MAX_NEW_TOKENS


def test_vllm_engine_args():
    args = vllm_engine_args("/models/qwen3-vl", lora_rank=32, images_per_prompt=2)
    assert args == {
        "model": "/models/qwen3-vl",
        "enable_lora": True,
        "max_lora_rank": 32,
        "max_loras": 1,
        "limit_mm_per_prompt": {"image": 2},
    }
    assert vllm_engine_args("m", lora_rank=4, images_per_prompt=2)["max_lora_rank"] == 8
    assert vllm_engine_args("m", lora_rank=33, images_per_prompt=2)["max_lora_rank"] == 64
    with pytest.raises(EvaluationRefused, match="above vLLM's largest"):
        vllm_engine_args("m", lora_rank=1024, images_per_prompt=2)
