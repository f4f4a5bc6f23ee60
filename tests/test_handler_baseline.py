"""ensure_baseline and record_baseline (moto): a baseline is claimed once, recorded once, or failed with the reason."""

from __future__ import annotations

import json

import check_adapter
import ensure_baseline
import pytest
import record_baseline
import record_eval
from mazeops_testing import (
    BASE_MODEL,
    BUCKET,
    EVAL_SET_SHA,
    REGISTRY_TABLE,
    Aws,
    FakeLambdaContext,
    put_adapter,
    put_eval_result,
)

from mazeops.adapter_rows import AdapterNotFound
from mazeops.baseline import BaselineResult, baseline_result_key
from mazeops.evalresult import InvalidEvalResult, MazeOutcome
from mazeops.inputs import InvalidInput
from mazeops.names import InvalidName
from mazeops.registry import Registry

CONTEXT = FakeLambdaContext()
JOB_ID = f"baseline-{BASE_MODEL}-{EVAL_SET_SHA[:12]}-a1"
RESULT_KEY = baseline_result_key(BASE_MODEL, EVAL_SET_SHA, 1)
BITS = "1" * 10 + "0" * 54
UNORDERED = json.dumps(
    {
        "schema": "maze-baseline/v1",
        "base_model_id": BASE_MODEL,
        "eval_set_name": "maze-eval-64",
        "eval_set_sha256": EVAL_SET_SHA,
        "outcomes": [{"seed": seed, "solved": True, "turns": 1, "error": None} for seed in (1, 0)],
        "backend": "vllm",
        "started_at": "2026-12-02T16:00:00Z",
        "finished_at": "2026-12-02T16:10:00Z",
    }
).encode()


def evaluated(aws: Aws, run_id: str = "run1", step: int = 10) -> str:
    put_adapter(aws.s3, run_id, step)
    key = f"runs/{run_id}/adapters/global_step_{step}/manifest.json"
    check_adapter.lambda_handler({"bucket": BUCKET, "key": key, "run_id": run_id, "step": step}, CONTEXT)
    put_eval_result(aws.s3, run_id, step, "1" * 40 + "0" * 24)
    name = f"{run_id}-step{step}"
    record_eval.lambda_handler(
        {"run_id": run_id, "step": step, "base_model_id": BASE_MODEL, "adapter_name": name}, CONTEXT
    )
    return name


def ensure(adapter: str) -> dict:
    return ensure_baseline.lambda_handler({"base_model_id": BASE_MODEL, "adapter_name": adapter}, CONTEXT)


def settle(status: str = "SUCCEEDED", attempt: int = 1, message: str | None = None, logs_tail: str = "") -> dict:
    event = {
        "base_model_id": BASE_MODEL,
        "eval_set_sha256": EVAL_SET_SHA,
        "attempt": attempt,
        "job": {"status": status, "message": message, "logs_tail": logs_tail},
    }
    return record_baseline.lambda_handler(event, CONTEXT)


def put_result(aws: Aws, body: bytes | None = None, **changes: object) -> None:
    fields = {
        "base_model_id": BASE_MODEL,
        "eval_set_name": "maze-eval-64",
        "eval_set_sha256": EVAL_SET_SHA,
        "outcomes": [MazeOutcome(seed=seed, solved=bit == "1", turns=4) for seed, bit in enumerate(BITS)],
        "backend": "vllm",
        "started_at": "2026-12-02T16:00:00Z",
        "finished_at": "2026-12-02T16:10:00Z",
        **changes,
    }
    aws.s3.put_object(
        Bucket=BUCKET, Key=RESULT_KEY, Body=body if body is not None else BaselineResult(**fields).to_json().encode()
    )


def registry(aws: Aws) -> Registry:
    return Registry(aws.dynamodb, REGISTRY_TABLE)


def test_first_use_claims_attempt_one_on_the_challengers_maze_set(aws: Aws) -> None:
    adapter = evaluated(aws)
    expected = {"status": "EVALUATING", "eval_set_sha256": EVAL_SET_SHA, "attempt": 1, "job_id": JOB_ID, "error": None}
    assert ensure(adapter) == expected
    assert ensure(evaluated(aws, "run2", 5)) == expected  # another challenger, same maze set: the same attempt


def test_a_recorded_baseline_is_ready(aws: Aws) -> None:
    adapter = evaluated(aws)
    ensure(adapter)
    put_result(aws)
    assert settle() == {
        "ready": True,
        "reason": "baseline recorded",
        "solve_rate": 10 / 64,
        "n_solved": 10,
        "n_total": 64,
    }
    assert ensure(adapter)["status"] == "READY"
    baseline = registry(aws).get_baseline(BASE_MODEL, EVAL_SET_SHA)
    assert (baseline.outcomes, baseline.eval_set_name, baseline.job_id) == (BITS, "maze-eval-64", JOB_ID)
    assert settle()["ready"] is True  # a second recorder (a concurrent execution) changes nothing
    assert registry(aws).get_baseline(BASE_MODEL, EVAL_SET_SHA) == baseline


def test_a_failed_job_fails_the_baseline_with_its_message_and_log_tail(aws: Aws) -> None:
    ensure(evaluated(aws))
    answer = settle(
        "FAILED", message="Job entrypoint command failed with exit code 1", logs_tail="x" * 5000 + "CUDA OOM"
    )
    assert answer["ready"] is False and answer["solve_rate"] is None
    assert answer["reason"].startswith(
        f"baseline of {BASE_MODEL} on evaluation set {EVAL_SET_SHA[:12]}... is FAILED (attempt 1, Ray job {JOB_ID}): "
    )
    assert "exit code 1" in answer["reason"] and answer["reason"].endswith("CUDA OOM")
    baseline = registry(aws).get_baseline(BASE_MODEL, EVAL_SET_SHA)
    assert baseline.status == "FAILED" and len(baseline.error) < 1200
    assert ensure(evaluated(aws, "run2", 5))["status"] == "FAILED"  # not retried automatically


@pytest.mark.parametrize(
    ("result", "message"),
    [
        ({}, f"baseline result: s3://{BUCKET}/{RESULT_KEY} does not exist"),
        ({"body": b"{not json"}, "baseline result is invalid: <root>: Invalid JSON"),
        ({"base_model_id": "qwen3-vl-2b"}, f"it is the evaluation of qwen3-vl-2b on {EVAL_SET_SHA[:12]}..."),
        ({"eval_set_sha256": "cd" * 32}, "on cdcdcdcdcdcd..., not of"),
        ({"outcomes": [MazeOutcome(seed=seed, solved=True, turns=1) for seed in range(10)]}, "it covers 10 mazes"),
        ({"body": UNORDERED}, "outcomes must be ordered by seed, each seed once"),
    ],
    ids=["missing", "not-json", "another-base-model", "another-maze-set", "not-the-fixed-seeds", "unordered"],
)
def test_an_unusable_result_fails_the_baseline(aws: Aws, result: dict, message: str) -> None:
    ensure(evaluated(aws))
    if result:
        put_result(aws, result.pop("body", None), **result)
    answer = settle("SUCCEEDED")
    assert answer["ready"] is False and message in answer["reason"]
    assert registry(aws).get_baseline(BASE_MODEL, EVAL_SET_SHA).status == "FAILED"


def test_a_stale_attempt_reports_the_current_one(aws: Aws) -> None:
    ensure(evaluated(aws))
    registry(aws).fail_baseline(BASE_MODEL, EVAL_SET_SHA, 1, "node lost")
    registry(aws).claim_baseline(BASE_MODEL, EVAL_SET_SHA, retry=True)  # an operator started attempt 2
    answer = settle("FAILED", attempt=1)
    assert answer["ready"] is False and "is EVALUATING (attempt 2" in answer["reason"]
    assert registry(aws).get_baseline(BASE_MODEL, EVAL_SET_SHA).status == "EVALUATING"
    assert settle(attempt=3)["ready"] is False


def test_input_checks(aws: Aws) -> None:
    with pytest.raises(AdapterNotFound):
        ensure("ghost-step1")
    put_adapter(aws.s3, "run1", 10)
    check_adapter.lambda_handler(
        {"bucket": BUCKET, "key": "runs/run1/adapters/global_step_10/manifest.json", "run_id": "run1", "step": 10},
        CONTEXT,
    )
    with pytest.raises(InvalidEvalResult, match="no recorded evaluation"):
        ensure("run1-step10")
    with pytest.raises(InvalidName):
        ensure("../x")
    with pytest.raises(InvalidName):
        record_baseline.lambda_handler(
            {"base_model_id": BASE_MODEL, "eval_set_sha256": "x", "attempt": 1, "job": {"status": "SUCCEEDED"}}, CONTEXT
        )
    with pytest.raises(InvalidInput):
        record_baseline.lambda_handler(
            {"base_model_id": BASE_MODEL, "eval_set_sha256": EVAL_SET_SHA, "attempt": 1}, CONTEXT
        )
    assert registry(aws).get_baseline(BASE_MODEL, EVAL_SET_SHA) is None
