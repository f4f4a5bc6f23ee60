"""check_adapter and record_eval: manifest and result checks, duplicates, SolveRate (moto)."""

from __future__ import annotations

import json

import check_adapter
import pytest
import record_eval
from mazeops_testing import (
    BASE_MODEL,
    BUCKET,
    REGISTRY_TABLE,
    Aws,
    FakeLambdaContext,
    emitted_dimensions,
    emitted_metrics,
    put_adapter,
    put_eval_result,
)

from mazeops.base_models import UnknownBaseModel
from mazeops.evalresult import InvalidEvalResult
from mazeops.inputs import InvalidInput
from mazeops.manifest import InvalidManifest
from mazeops.names import InvalidName
from mazeops.registry import Registry

KEY = "runs/run1/adapters/global_step_20/manifest.json"


def check(key: str = KEY, run_id: object = "run1", step: object = 20, bucket: str = BUCKET) -> dict:
    return check_adapter.lambda_handler(
        {"bucket": bucket, "key": key, "run_id": run_id, "step": step}, FakeLambdaContext()
    )


def test_valid_adapter_becomes_a_candidate(aws: Aws) -> None:
    put_adapter(aws.s3, "run1", 20)
    assert check() == {
        "duplicate": False,
        "run_id": "run1",
        "step": 20,
        "adapter_name": "run1-step20",
        "base_model_id": BASE_MODEL,
        "manifest_key": KEY,
        "lora_rank": 32,
    }
    row = Registry(aws.dynamodb, REGISTRY_TABLE).get_adapter(BASE_MODEL, "run1-step20")
    assert (row.status, row.manifest_key) == ("EVALUATING", KEY)


def test_second_check_is_a_duplicate(aws: Aws) -> None:
    put_adapter(aws.s3, "run1", 20)
    first = check()
    assert check() == {**first, "duplicate": True}


def test_manifest_describing_another_adapter_is_refused(aws: Aws) -> None:
    manifest = put_adapter(aws.s3, "run2", 20)
    aws.s3.put_object(Bucket=BUCKET, Key=KEY, Body=json.dumps(manifest).encode())
    with pytest.raises(InvalidManifest, match="describes run 'run2'"):
        check()


def test_unknown_base_model(aws: Aws) -> None:
    put_adapter(aws.s3, "run1", 20, base_model_id="llama-9")
    with pytest.raises(UnknownBaseModel, match="llama-9"):
        check()


@pytest.mark.parametrize("file, body", [("adapter_model.safetensors", b"short"), ("adapter_config.json", None)])
def test_adapter_files_must_match_the_manifest_sizes(aws: Aws, file: str, body: bytes | None) -> None:
    put_adapter(aws.s3, "run1", 20)
    key = f"runs/run1/adapters/global_step_20/{file}"
    if body is None:
        aws.s3.delete_object(Bucket=BUCKET, Key=key)
    else:
        aws.s3.put_object(Bucket=BUCKET, Key=key, Body=body)
    with pytest.raises(InvalidManifest, match="missing" if body is None else "5 bytes"):
        check()
    assert Registry(aws.dynamodb, REGISTRY_TABLE).get_adapter(BASE_MODEL, "run1-step20") is None


@pytest.mark.parametrize(
    "body, message",
    [
        (b"not json", "invalid"),
        (b"{}", "invalid"),
        (b"x" * (64 * 1024 + 1), "limit is 65536"),
        (None, "does not exist"),
    ],
)
def test_bad_or_missing_manifests(aws: Aws, body: bytes | None, message: str) -> None:
    if body is not None:
        aws.s3.put_object(Bucket=BUCKET, Key=KEY, Body=body)
    with pytest.raises(InvalidManifest, match=message):
        check()


@pytest.mark.parametrize(
    "key, run_id, step, error",
    [
        ("runs/../adapters/global_step_20/manifest.json", None, None, InvalidName),
        ("runs/run1/adapters/global_step_20/manifest.json", "run2", 20, InvalidName),
        ("runs/run1/adapters/global_step_20/manifest.json", "run1", 21, InvalidName),
        ("runs/run1/adapters/global_step_20/manifest.json", "run1", "20", InvalidInput),
        ("requests/run1.json", "run1", 20, InvalidName),
    ],
)
def test_hostile_or_inconsistent_input(aws: Aws, key: str, run_id: object, step: object, error: type) -> None:
    with pytest.raises(error):
        check(key, run_id, step)


def test_other_bucket_is_refused(aws: Aws) -> None:
    with pytest.raises(InvalidManifest, match="artifacts bucket"):
        check(bucket="someone-elses-bucket")


# --- record_eval ------------------------------------------------------------------------------


def record(**overrides: object) -> dict:
    event = {"run_id": "run1", "step": 20, "base_model_id": BASE_MODEL, "adapter_name": "run1-step20", **overrides}
    return record_eval.lambda_handler(event, FakeLambdaContext())


@pytest.fixture
def candidate(aws: Aws) -> Registry:
    put_adapter(aws.s3, "run1", 20)
    check()
    return Registry(aws.dynamodb, REGISTRY_TABLE)


def test_result_is_recorded_with_the_solve_rate_metric(
    aws: Aws, candidate: Registry, capsys: pytest.CaptureFixture[str]
) -> None:
    put_eval_result(aws.s3, "run1", 20, "1" * 48 + "0" * 16)
    assert record() == {
        "solve_rate": 0.75,
        "n_solved": 48,
        "n_total": 64,
        "result_key": "runs/run1/evals/global_step_20/result.json",
    }
    row = candidate.get_adapter(BASE_MODEL, "run1-step20")
    assert (row.status, row.outcomes) == ("EVALUATED", "1" * 48 + "0" * 16)
    out = capsys.readouterr().out
    assert emitted_metrics(out) == {"SolveRate": 0.75}
    assert emitted_dimensions(out, "SolveRate")["base_model_id"] == BASE_MODEL


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"run_id": "run2"}, "describes"),
        ({"base_model_id": "qwen3-vl-2b"}, "describes"),
        ({"n_solved": 3}, "n_solved"),
        ({"outcomes": []}, "n_total"),
        ({"eval_set_sha256": "zz"}, "eval_set_sha256"),
    ],
)
def test_inconsistent_results_are_refused(aws: Aws, candidate: Registry, overrides: dict, message: str) -> None:
    put_eval_result(aws.s3, "run1", 20, "1100" + "0" * 60, overrides)
    with pytest.raises(InvalidEvalResult, match=message):
        record()
    assert candidate.get_adapter(BASE_MODEL, "run1-step20").status == "EVALUATING"


def test_result_on_another_maze_set_is_refused_when_the_set_is_pinned(
    aws: Aws, candidate: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVAL_SET_SHA256", "cd" * 32)
    put_eval_result(aws.s3, "run1", 20, "1100" + "0" * 60)
    with pytest.raises(InvalidEvalResult, match="maze set"):
        record()
    monkeypatch.setenv("EVAL_SET_SHA256", "ab" * 32)
    assert record()["n_solved"] == 2


def test_missing_oversized_or_non_json_results(aws: Aws, candidate: Registry) -> None:
    with pytest.raises(InvalidEvalResult, match="does not exist"):
        record()
    key = "runs/run1/evals/global_step_20/result.json"
    aws.s3.put_object(Bucket=BUCKET, Key=key, Body=b"{" * (1024 * 1024 + 1))
    with pytest.raises(InvalidEvalResult, match="limit"):
        record()
    aws.s3.put_object(Bucket=BUCKET, Key=key, Body=b"<html>")
    with pytest.raises(InvalidEvalResult, match="invalid"):
        record()


def test_adapter_name_must_match_run_and_step(aws: Aws) -> None:
    with pytest.raises(InvalidName):
        record(adapter_name="run1-step21")
    with pytest.raises(InvalidName):
        record(run_id="RUN1")
