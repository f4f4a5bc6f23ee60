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

from mazeops.adapter_rows import AdapterNotFound, AdapterNotReevaluable
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


# --- check_adapter: a re-evaluation (attempt 2 on) ------------------------------------------------------


def check_attempt(attempt: object) -> dict:
    return check_adapter.lambda_handler(
        {"bucket": BUCKET, "key": KEY, "run_id": "run1", "step": 20, "attempt": attempt}, FakeLambdaContext()
    )


def test_attempt_one_claims_the_candidate_as_an_input_without_attempt_does(aws: Aws) -> None:
    put_adapter(aws.s3, "run1", 20)
    first = check_attempt(1)
    assert first["duplicate"] is False
    assert check_attempt(1) == {**first, "duplicate": True}
    assert Registry(aws.dynamodb, REGISTRY_TABLE).get_adapter(BASE_MODEL, "run1-step20").eval_attempts is None


@pytest.mark.parametrize("status", ["EVAL_FAILED", "EVALUATED", "REJECTED", "RETIRED", "ROLLED_BACK"])
def test_a_later_attempt_reopens_a_finished_adapter_once(aws: Aws, status: str) -> None:
    put_adapter(aws.s3, "run1", 20)
    check()
    registry = Registry(aws.dynamodb, REGISTRY_TABLE)
    registry.set_status(BASE_MODEL, "run1-step20", status, error="RayUnavailable: head down")
    answer = check_attempt(2)
    assert answer["duplicate"] is False and answer["adapter_name"] == "run1-step20"
    row = registry.get_adapter(BASE_MODEL, "run1-step20")
    assert (row.status, row.eval_attempts, row.error) == ("EVALUATING", 2, None)
    assert check_attempt(2)["duplicate"] is True  # the same attempt again changes nothing
    assert registry.get_adapter(BASE_MODEL, "run1-step20").eval_attempts == 2


@pytest.mark.parametrize("status", ["CHAMPION", "REGISTERED", "EVALUATING"])
def test_a_later_attempt_never_reopens_a_champion_a_registered_or_an_evaluating_adapter(aws: Aws, status: str) -> None:
    put_adapter(aws.s3, "run1", 20)
    check()
    registry = Registry(aws.dynamodb, REGISTRY_TABLE)
    registry.set_status(BASE_MODEL, "run1-step20", status)
    before = registry.get_adapter(BASE_MODEL, "run1-step20")
    with pytest.raises(AdapterNotReevaluable, match=f"is {status}; only an adapter in EVAL_FAILED"):
        check_attempt(2)
    assert registry.get_adapter(BASE_MODEL, "run1-step20") == before


def test_a_later_attempt_checks_the_adapter_files_before_reopening(aws: Aws) -> None:
    put_adapter(aws.s3, "run1", 20)
    check()
    registry = Registry(aws.dynamodb, REGISTRY_TABLE)
    registry.set_status(BASE_MODEL, "run1-step20", "EVAL_FAILED")
    aws.s3.delete_object(Bucket=BUCKET, Key="runs/run1/adapters/global_step_20/adapter_model.safetensors")
    with pytest.raises(InvalidManifest, match="missing"):
        check_attempt(2)
    assert registry.get_adapter(BASE_MODEL, "run1-step20").status == "EVAL_FAILED"


def test_a_later_attempt_of_an_adapter_without_a_row_fails(aws: Aws) -> None:
    put_adapter(aws.s3, "run1", 20)
    with pytest.raises(AdapterNotFound):
        check_attempt(2)


@pytest.mark.parametrize(("attempt", "error"), [(0, InvalidName), (1000, InvalidName), ("2", InvalidInput)])
def test_a_bad_attempt_is_refused(aws: Aws, attempt: object, error: type) -> None:
    put_adapter(aws.s3, "run1", 20)
    with pytest.raises(error):
        check_attempt(attempt)
