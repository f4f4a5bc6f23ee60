"""Hostile and malformed inputs, each sent through the real code path that receives it in production.

One table of `Row(id, input, expect, message)` per receiver; handlers run against moto and a fake
Ray Jobs API that records every request, so each row also proves nothing was submitted. Prints
"bad input: N tried, N passed" when the module finishes.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import check_adapter
import pytest
import record_eval
import register_adapter
import start_execution
import validate_run_spec
from mazeops_testing import (
    BASE_MODEL,
    BUCKET,
    EVAL_SET_SHA,
    REGISTRY_TABLE,
    RUNS_TABLE,
    Aws,
    FakeHttpServer,
    FakeLambdaContext,
    answer,
    eval_result_document,
    put_adapter,
    put_eval_result,
    s3_object_created_event,
)

from cluster_jobs.evaluate.artifacts import EvaluationRefused
from cluster_jobs.evaluate.job import evaluate_adapter
from cluster_jobs.models.policy import VisionPolicy
from local_stack.cluster_standins.adapter_store import S3AdapterStore
from local_stack.cluster_standins.chat_service import OpenAIChatService
from local_stack.cluster_standins.tiny_model import TINY_BASE_MODEL_ID, build_tiny_qwen3_vl
from mazeops.base_models import UnknownBaseModel
from mazeops.evalresult import InvalidEvalResult
from mazeops.events import InvalidEvent
from mazeops.inputs import InvalidInput
from mazeops.manifest import InvalidManifest
from mazeops.names import InvalidName
from mazeops.runspec import InvalidRunSpec
from tests.fixtures_models import make_tiny_adapter, upload_adapter

CONTEXT = FakeLambdaContext()
SPEC_ARN = "arn:aws:states:us-east-1:123456789012:execution:maze-training:train-run1"
MANIFEST_KEY = "runs/run1/adapters/global_step_10/manifest.json"
ADAPTER_PREFIX = "runs/run1/adapters/global_step_10/"
RESULT_KEY = "runs/run1/evals/global_step_10/result.json"
BITS = "1" * 40 + "0" * 24


@dataclass(frozen=True)
class Row:
    """One hostile input: what is sent, what must come of it, and a part of the message that says why."""

    id: str
    input: Any
    expect: Any
    message: str


def rows(*table: Row) -> list[Any]:
    """The table as pytest parameters named by row id, so a failure names its row."""
    return [pytest.param(row, id=row.id) for row in table]


# --- the summary line and the fake Ray Jobs API -------------------------------------------------

SUMMARY: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def bad_input_summary(request: pytest.FixtureRequest) -> Iterator[None]:
    """Print "bad input: N tried, N passed" once every row of this module has run."""
    yield
    line = f"bad input: {SUMMARY['tried']} tried, {SUMMARY['passed']} passed"
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled():  # what capsys.disabled() does: print past pytest's capture
        print(f"\n{line}")


@pytest.fixture(autouse=True)
def count_row(request: pytest.FixtureRequest) -> Iterator[None]:
    """Count this row as tried, and as passed unless its setup or call failed (pytest has counted those by teardown)."""
    failed_before = request.session.testsfailed
    SUMMARY["tried"] += 1
    yield
    if request.session.testsfailed == failed_before:
        SUMMARY["passed"] += 1


@pytest.fixture(scope="module")
def ray_server() -> Iterator[FakeHttpServer]:
    routes = {
        ("GET", "/api/version"): answer(200, {"ray_version": "2.60.0"}),
        ("POST", "/api/jobs/"): answer(200, {"submission_id": "should-not-happen"}),
    }
    with FakeHttpServer(routes) as server:
        yield server


@pytest.fixture
def ray_api(ray_server: FakeHttpServer, aws: Aws, monkeypatch: pytest.MonkeyPatch) -> FakeHttpServer:
    """The fake Ray Jobs API as the handlers' RAY_ADDRESS, with no request recorded yet."""
    monkeypatch.setenv("RAY_ADDRESS", ray_server.url)
    monkeypatch.setenv("EVAL_SET_SHA256", EVAL_SET_SHA)
    ray_server.requests.clear()
    return ray_server


def keys(aws: Aws, prefix: str = "") -> list[str]:
    return sorted(item["Key"] for item in aws.s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", []))


def table_items(aws: Aws, table: str) -> list[dict]:
    return aws.dynamodb.scan(TableName=table)["Items"]


def registry_row(aws: Aws) -> dict | None:
    key = {"base_model_id": {"S": BASE_MODEL}, "adapter_name": {"S": "run1-step10"}}
    return aws.dynamodb.get_item(TableName=REGISTRY_TABLE, Key=key).get("Item")


def check_adapter_event(**overrides: Any) -> dict[str, Any]:
    return {"bucket": BUCKET, "key": MANIFEST_KEY, "run_id": "run1", "step": 10, **overrides}


# --- run specs -> validate_run_spec ------------------------------------------------------------

GOOD_SPEC = {"base_model_id": BASE_MODEL, "backend": "tiny", "total_steps": 4, "eval_interval": 2, "ckpt_interval": 2}


def spec(**changes: Any) -> bytes:
    return json.dumps({**GOOD_SPEC, **changes}).encode()


RUN_SPEC_ROWS = [
    Row("not-json", b"{base_model_id: qwen", InvalidRunSpec, "run spec is not valid JSON"),
    Row("not-utf8", b"\xff\xfe{}", InvalidRunSpec, "run spec is not valid JSON"),
    Row("json-array", b'[{"base_model_id": "qwen3-vl-8b-sft"}]', InvalidRunSpec, "must be a JSON object, got list"),
    Row("json-null", b"null", InvalidRunSpec, "must be a JSON object, got NoneType"),
    Row("oversized", spec(padding="x" * 70_000), InvalidRunSpec, "bytes; the limit is 65536"),
    Row("unknown-field", spec(learning_rat=1e-5), InvalidRunSpec, "learning_rat: Extra inputs are not permitted"),
    Row("unknown-nested-field", spec(lora={"rank": 32, "dropout": 0.1}), InvalidRunSpec, "lora.dropout: Extra inputs"),
    Row("wrong-type-int", spec(total_steps="many"), InvalidRunSpec, "total_steps: Input should be a valid integer"),
    Row("wrong-type-object", spec(lora="rank-32"), InvalidRunSpec, "lora: Input should be a valid dictionary"),
    Row("wrong-type-backend", spec(backend="gpu"), InvalidRunSpec, "backend: Input should be 'skyrl' or 'tiny'"),
    Row("even-maze-size", spec(maze={"size": 10}), InvalidRunSpec, "maze size must be odd"),
    Row("rank-0", spec(lora={"rank": 0}), InvalidRunSpec, "lora.rank: Input should be greater than or equal to 1"),
    Row(
        "nan-learning-rate",
        b'{"base_model_id": "qwen3-vl-8b-sft", "learning_rate": NaN}',
        InvalidRunSpec,
        "learning_rate",
    ),
    Row(
        "unknown-base-model",
        spec(base_model_id="llama-7b"),
        InvalidRunSpec,
        "unknown base model 'llama-7b'; known: qwen3-vl-8b-sft",
    ),
    Row(
        "base-model-traversal",
        spec(base_model_id="../models"),
        InvalidRunSpec,
        "base_model_id: String should match pattern",
    ),
    Row(
        "run-name-differs",
        spec(run_name="other-run"),
        InvalidRunSpec,
        "run_name 'other-run' differs from the key's run id 'run1'",
    ),
    Row("shared-dir-dotdot", spec(shared_dir="/shared/../etc"), InvalidRunSpec, "shared_dir must not contain '..'"),
    Row("shared-dir-relative", spec(shared_dir="shared"), InvalidRunSpec, "shared_dir: String should match pattern"),
    Row(
        "mini-batch-above-batch",
        spec(train_batch_size=16, policy_mini_batch_size=32),
        InvalidRunSpec,
        "must not exceed train_batch_size",
    ),
    Row(
        "batch-not-multiple",
        spec(train_batch_size=32, policy_mini_batch_size=24),
        InvalidRunSpec,
        "train_batch_size must be a multiple",
    ),
    Row(
        "one-sample-per-prompt",
        spec(n_samples_per_prompt=1),
        InvalidRunSpec,
        "n_samples_per_prompt: Input should be greater",
    ),
]


@pytest.mark.parametrize("row", rows(*RUN_SPEC_ROWS))
def test_run_spec_is_refused(row: Row, aws: Aws, ray_api: FakeHttpServer) -> None:
    """Side effects: no runs/run1/spec.json (nothing under runs/), no runs-table row, no Ray request."""
    aws.s3.put_object(Bucket=BUCKET, Key="requests/run1.json", Body=row.input)
    event = {"bucket": BUCKET, "key": "requests/run1.json", "run_id": "run1", "execution_arn": SPEC_ARN}
    with pytest.raises(row.expect) as raised:
        validate_run_spec.lambda_handler(event, CONTEXT)
    assert row.message in str(raised.value)
    assert keys(aws, "runs/") == []
    assert table_items(aws, RUNS_TABLE) == []
    assert ray_api.requests == []


# --- S3 keys and events -> start_execution --------------------------------------------------------

# What start_execution does with a key: start `invalid-<sha256(key)[:12]>` in one state machine, or ignore it.
TRAINING, EVALUATION, IGNORED = "invalid training execution", "invalid evaluation execution", "ignored"
OUTSIDE = "Ignoring an object outside the request and manifest keys"

KEY_ROWS = [
    Row("request-path-traversal", "requests/../x.json", TRAINING, "not a run spec key: 'requests/../x.json'"),
    Row("request-nested", "requests/a/b.json", TRAINING, "not a run spec key: 'requests/a/b.json'"),
    Row("request-uppercase", "requests/RUN1.json", TRAINING, "invalid run id 'RUN1'"),
    Row("request-unicode", "requests/rün-1.json", TRAINING, "invalid run id 'rün-1'"),
    Row("request-200-chars", f"requests/{'a' * 200}.json", TRAINING, f"invalid run id '{'a' * 40}"),
    Row("request-leading-dash", "requests/-run.json", TRAINING, "invalid run id '-run'"),
    Row("request-shell", "requests/$(reboot).json", TRAINING, "invalid run id '$(reboot)'"),
    Row("request-not-json-suffix", "requests/run1.json.sh", TRAINING, "not a run spec key"),
    Row("manifest-step-01", "runs/x/adapters/global_step_01/manifest.json", EVALUATION, "not an adapter manifest key"),
    Row("manifest-step-0", "runs/x/adapters/global_step_0/manifest.json", EVALUATION, "not an adapter manifest key"),
    Row(
        "manifest-run-colon", "runs/base:x/adapters/global_step_1/manifest.json", EVALUATION, "invalid run id 'base:x'"
    ),
    Row(
        "manifest-run-slash", "runs/a/b/adapters/global_step_1/manifest.json", EVALUATION, "not an adapter manifest key"
    ),
    Row("manifest-run-dotdot", "runs/../adapters/global_step_1/manifest.json", EVALUATION, "invalid run id '..'"),
    Row("manifest-uppercase", "runs/RUN1/adapters/global_step_1/manifest.json", EVALUATION, "invalid run id 'RUN1'"),
    Row("adapter-file", "runs/run1/adapters/global_step_1/adapter_model.safetensors", IGNORED, OUTSIDE),
    Row("serving-prefix", "serving/qwen3-vl-8b-sft/run1-step1/manifest.json", IGNORED, OUTSIDE),
    Row("no-prefix-slash", "requests", IGNORED, OUTSIDE),
]


def logged(caplog: pytest.LogCaptureFixture) -> str:
    """Every message the handler logged, with the `error` each record carries as an extra field."""
    return "\n".join(f"{record.getMessage()} {getattr(record, 'error', '')}" for record in caplog.records)


def execution_inputs(aws: Aws, state_machine_arn: str) -> dict[str, dict]:
    listed = aws.sfn.list_executions(stateMachineArn=state_machine_arn)["executions"]
    return {e["name"]: json.loads(aws.sfn.describe_execution(executionArn=e["executionArn"])["input"]) for e in listed}


@pytest.mark.parametrize("row", rows(*KEY_ROWS))
def test_hostile_key_starts_only_an_invalid_execution_or_is_ignored(
    row: Row, aws: Aws, ray_api: FakeHttpServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Side effects: only that one execution (input with run_id null) or none at all, nothing in S3, no Ray request."""
    result = start_execution.lambda_handler(s3_object_created_event(row.input), CONTEXT)
    name = "invalid-" + hashlib.sha256(row.input.encode()).hexdigest()[:12]
    started = {"bucket": BUCKET, "key": row.input, "run_id": None}
    expected_executions = {
        TRAINING: ({name: started}, {}),
        EVALUATION: ({}, {name: {**started, "step": None, "attempt": 1}}),
        IGNORED: ({}, {}),
    }[row.expect]
    assert (execution_inputs(aws, aws.training_arn), execution_inputs(aws, aws.evaluation_arn)) == expected_executions
    if row.expect == IGNORED:
        assert result == {"status": "ignored", "execution_arn": None, "name": None}
    else:
        state_machine = aws.training_arn if row.expect == TRAINING else aws.evaluation_arn
        execution_arn = state_machine.replace(":stateMachine:", ":execution:") + f":{name}"
        assert result == {"status": "started", "execution_arn": execution_arn, "name": name}
    assert row.message in logged(caplog)
    assert keys(aws) == []
    assert ray_api.requests == []


def malformed(**detail_object: Any) -> dict[str, Any]:
    event = s3_object_created_event("requests/run1.json")
    return {**event, "detail": {**event["detail"], "object": detail_object}}


EVENT_ROWS = [
    Row("empty-object", {}, InvalidEvent, "event has no 'source' and 'detail-type'"),
    Row(
        "array",
        [s3_object_created_event("requests/run1.json")],
        InvalidEvent,
        "event must be a JSON object, got list",
    ),
    Row(
        "s3-event-without-key",
        malformed(size=1, etag="e"),
        InvalidEvent,
        "S3 Object Created event lacks a field: 'key'",
    ),
    Row(
        "s3-event-key-not-string",
        malformed(key=["requests/run1.json"], size=1, etag="e"),
        InvalidEvent,
        "S3 Object Created event",
    ),
]


@pytest.mark.parametrize("row", rows(*EVENT_ROWS))
def test_malformed_event_is_refused_without_an_execution(row: Row, aws: Aws, ray_api: FakeHttpServer) -> None:
    """Side effects: no execution of either state machine, nothing in S3, no Ray request."""
    with pytest.raises(row.expect) as raised:
        start_execution.lambda_handler(row.input, CONTEXT)
    assert row.message in str(raised.value)
    assert (execution_inputs(aws, aws.training_arn), execution_inputs(aws, aws.evaluation_arn)) == ({}, {})
    assert keys(aws) == []
    assert ray_api.requests == []


# --- manifests -> check_adapter ----------------------------------------------------------------------

MANIFEST_ROWS = [
    Row(
        "not-json",
        {"manifest": b"{schema: maze"},
        InvalidManifest,
        "adapter manifest is invalid: <root>: Invalid JSON",
    ),
    Row("json-array", {"manifest": b"[]"}, InvalidManifest, "adapter manifest is invalid"),
    Row(
        "oversized",
        {"manifest": b" " * 70_000 + b"{}"},
        InvalidManifest,
        "manifest.json is 70002 bytes; the limit is 65536",
    ),
    Row(
        "wrong-schema",
        {"manifest": {"schema": "maze-adapter/v2"}},
        InvalidManifest,
        "schema: Input should be 'maze-adapter/v1'",
    ),
    Row("unknown-field", {"manifest": {"served": True}}, InvalidManifest, "served: Extra inputs are not permitted"),
    Row("wrong-type", {"manifest": {"step": "ten"}}, InvalidManifest, "step: Input should be a valid integer"),
    Row(
        "adapter-name-mismatch",
        {"manifest": {"adapter_name": "run1-step11"}},
        InvalidManifest,
        "adapter_name 'run1-step11' must be 'run1-step10'",
    ),
    Row(
        "adapter-name-with-colon",
        {"manifest": {"adapter_name": "x:run1-step10"}},
        InvalidManifest,
        "adapter_name 'x:run1-step10' must be",
    ),
    Row(
        "adapter-name-with-slash",
        {"manifest": {"adapter_name": "../run1-step10"}},
        InvalidManifest,
        "adapter_name '../run1-step10' must be",
    ),
    Row(
        "file-entry-missing",
        {"manifest": {"files": "drop adapter_model.safetensors"}},
        InvalidManifest,
        "files must be exactly",
    ),
    Row(
        "file-entry-traversal",
        {"manifest": {"files": "add ../../serving/x"}},
        InvalidManifest,
        "files must be exactly",
    ),
    Row("bad-sha-format", {"manifest": {"files": "sha XYZ"}}, InvalidManifest, "sha256: String should match pattern"),
    Row(
        "file-missing-in-s3",
        {"delete": "adapter_model.safetensors"},
        InvalidManifest,
        f"adapter file {ADAPTER_PREFIX}adapter_model.safetensors is missing; the manifest says 256 bytes",
    ),
    Row(
        "file-size-differs",
        {"replace": b"swapped weights"},
        InvalidManifest,
        "adapter_model.safetensors is 15 bytes; the manifest says 256 bytes",
    ),
    Row(
        "run-differs-from-key",
        {"manifest": {"run_id": "run2", "adapter_name": "run2-step10"}},
        InvalidManifest,
        f"manifest describes run 'run2' step 10 but is stored at '{MANIFEST_KEY}'",
    ),
    Row(
        "step-differs-from-key",
        {"manifest": {"step": 20, "adapter_name": "run1-step20"}},
        InvalidManifest,
        "manifest describes run 'run1' step 20",
    ),
    Row(
        "unknown-base-model",
        {"manifest": {"base_model_id": "llama-7b"}},
        UnknownBaseModel,
        "unknown base model 'llama-7b'; known: qwen3-vl-8b-sft",
    ),
    Row(
        "base-model-with-colon",
        {"manifest": {"base_model_id": "qwen:x"}},
        InvalidManifest,
        "base_model_id: String should match pattern",
    ),
    Row(
        "rank-differs-from-adapter-config",
        {"manifest": {"lora_rank": 8}},
        InvalidManifest,
        "adapter_config.json has rank 32 alpha 64; the manifest says rank 8 alpha 64",
    ),
    Row(
        "rank-0",
        {"manifest": {"lora_rank": 0}},
        InvalidManifest,
        "lora_rank: Input should be greater than or equal to 1",
    ),
    Row(
        "event-key-outside-layout",
        {"event": {"key": "runs/run1/adapters/global_step_10/../../x/manifest.json"}},
        InvalidName,
        "not an adapter manifest key",
    ),
    Row("event-step-differs-from-key", {"event": {"step": 11}}, InvalidName, "input names run 'run1' step 11"),
    Row("event-other-bucket", {"event": {"bucket": "someone-elses-bucket"}}, InvalidManifest, "artifacts bucket only"),
    Row("event-step-not-int", {"event": {"step": "10"}}, InvalidInput, "input field 'step' must be int, got str"),
]


def hostile_manifest(good: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """The good manifest with `changes`; `files` takes one of the named edits of the file table."""
    document = {**good, **{k: v for k, v in changes.items() if k != "files"}}
    files = dict(good["files"])
    edit = changes.get("files")
    if edit == "drop adapter_model.safetensors":
        del files["adapter_model.safetensors"]
    elif edit == "add ../../serving/x":
        files["../../serving/x"] = files["adapter_config.json"]
    elif edit == "sha XYZ":
        files["adapter_config.json"] = {**files["adapter_config.json"], "sha256": "XYZ"}
    return {**document, "files": files}


def apply_manifest_row(aws: Aws, good: dict[str, Any], change: dict[str, Any]) -> None:
    """Overwrite the uploaded adapter as the row says: manifest body or fields, or one adapter file."""
    manifest = change.get("manifest")
    if manifest is not None:
        body = manifest if isinstance(manifest, bytes) else json.dumps(hostile_manifest(good, manifest)).encode()
        aws.s3.put_object(Bucket=BUCKET, Key=MANIFEST_KEY, Body=body)
    if "delete" in change:
        aws.s3.delete_object(Bucket=BUCKET, Key=ADAPTER_PREFIX + change["delete"])
    if "replace" in change:
        aws.s3.put_object(Bucket=BUCKET, Key=ADAPTER_PREFIX + "adapter_model.safetensors", Body=change["replace"])


@pytest.mark.parametrize("row", rows(*MANIFEST_ROWS))
def test_manifest_is_refused(row: Row, aws: Aws, ray_api: FakeHttpServer) -> None:
    """Side effects: no registry row, no Ray request."""
    apply_manifest_row(aws, put_adapter(aws.s3, "run1", 10), row.input)
    with pytest.raises(row.expect) as raised:
        check_adapter.lambda_handler(check_adapter_event(**row.input.get("event", {})), CONTEXT)
    assert row.message in str(raised.value)
    assert table_items(aws, REGISTRY_TABLE) == []
    assert ray_api.requests == []


# --- adapter files changed after the check -> register_adapter ------------------------------------------

REGISTER_ROWS = [
    Row(
        "same-size-swap",
        {"replace": b"x" * 256},
        InvalidManifest,
        f"{ADAPTER_PREFIX}adapter_model.safetensors changed since it was checked",
    ),
    Row("other-size-swap", {"replace": b"swapped weights"}, InvalidManifest, "and 15 bytes, the manifest pins sha256"),
    Row(
        "file-deleted",
        {"delete": "adapter_config.json"},
        InvalidManifest,
        f"adapter file {ADAPTER_PREFIX}adapter_config.json disappeared",
    ),
    Row(
        "manifest-now-names-another-base",
        {"manifest": {"base_model_id": "qwen3-vl-2b"}},
        InvalidManifest,
        f"manifest describes qwen3-vl-2b:run1-step10, not {BASE_MODEL}:run1-step10",
    ),
    Row("manifest-now-oversized", {"manifest": b" " * 70_000}, InvalidManifest, "the limit is 65536"),
]


@pytest.mark.parametrize("row", rows(*REGISTER_ROWS))
def test_changed_adapter_is_not_registered(row: Row, aws: Aws, ray_api: FakeHttpServer) -> None:
    """Side effects: nothing under serving/, the registry row unchanged, no Ray request."""
    good = put_adapter(aws.s3, "run1", 10)
    check_adapter.lambda_handler(check_adapter_event(), CONTEXT)
    before = registry_row(aws)
    apply_manifest_row(aws, good, row.input)
    event = {"base_model_id": BASE_MODEL, "adapter_name": "run1-step10", "run_id": "run1", "step": 10}
    with pytest.raises(row.expect) as raised:
        register_adapter.lambda_handler(event, CONTEXT)
    assert row.message in str(raised.value)
    assert keys(aws, "serving/") == []
    assert registry_row(aws) == before and before["status"] == {"S": "EVALUATING"}
    assert ray_api.requests == []


# --- evaluation results -> record_eval ----------------------------------------------------------------------

GOOD_OUTCOMES = eval_result_document("run1", 10, BITS)["outcomes"]

EVAL_RESULT_ROWS = [
    Row("not-json", b"{schema: maze-eval", InvalidEvalResult, "evaluation result is invalid: <root>: Invalid JSON"),
    Row("missing", None, InvalidEvalResult, f"evaluation result: s3://{BUCKET}/{RESULT_KEY} does not exist"),
    Row("oversized", b" " * (1024 * 1024 + 1), InvalidEvalResult, "the limit is 1048576"),
    Row("n-solved-inconsistent", {"n_solved": 41}, InvalidEvalResult, "n_solved is 41 but 40 outcomes are solved"),
    Row("n-total-inconsistent", {"n_total": 63}, InvalidEvalResult, "n_total is 63 but there are 64 outcomes"),
    Row("solve-rate-inconsistent", {"solve_rate": 0.9}, InvalidEvalResult, "solve_rate 0.9 is not n_solved / n_total"),
    Row(
        "duplicate-seeds",
        {"outcomes": [GOOD_OUTCOMES[0], *GOOD_OUTCOMES[:63]]},
        InvalidEvalResult,
        "outcomes must be ordered by seed, each seed once",
    ),
    Row(
        "unordered-seeds",
        {"outcomes": GOOD_OUTCOMES[::-1]},
        InvalidEvalResult,
        "outcomes must be ordered by seed, each seed once",
    ),
    Row(
        "wrong-eval-set",
        {"eval_set_sha256": "cd" * 32},
        InvalidEvalResult,
        "was evaluated on maze set cdcdcdcdcdcd..., not the configured abababababab...",
    ),
    Row(
        "another-adapter",
        {"adapter_name": "run1-step20"},
        InvalidEvalResult,
        "describes ('run1', 10, 'run1-step20', 'qwen3-vl-8b-sft')",
    ),
    Row(
        "another-run",
        {"run_id": "run2", "adapter_name": "run2-step10"},
        InvalidEvalResult,
        "describes ('run2', 10, 'run2-step10'",
    ),
    Row(
        "another-base-model",
        {"base_model_id": "qwen3-vl-2b"},
        InvalidEvalResult,
        "describes ('run1', 10, 'run1-step10', 'qwen3-vl-2b')",
    ),
    Row(
        "not-the-fixed-maze-set",
        {
            "outcomes": [{**outcome, "seed": 100 + i} for i, outcome in enumerate(GOOD_OUTCOMES[:10])],
            "n_total": 10,
            "n_solved": sum(outcome["solved"] for outcome in GOOD_OUTCOMES[:10]),
            "solve_rate": sum(outcome["solved"] for outcome in GOOD_OUTCOMES[:10]) / 10,
        },
        InvalidEvalResult,
        "covers 10 mazes (seeds [100, 101, 102]...), not the 64 mazes of the fixed evaluation set",
    ),
    Row("unknown-field", {"promote": True}, InvalidEvalResult, "promote: Extra inputs are not permitted"),
    Row(
        "solve-rate-above-one",
        {"solve_rate": 1.5},
        InvalidEvalResult,
        "solve_rate: Input should be less than or equal to 1",
    ),
]


@pytest.mark.parametrize("row", rows(*EVAL_RESULT_ROWS))
def test_eval_result_is_refused(row: Row, aws: Aws, ray_api: FakeHttpServer) -> None:
    """Side effects: the registry row unchanged (still EVALUATING, no solve rate), no Ray request."""
    put_adapter(aws.s3, "run1", 10)
    check_adapter.lambda_handler(check_adapter_event(), CONTEXT)
    before = registry_row(aws)
    if isinstance(row.input, bytes):
        aws.s3.put_object(Bucket=BUCKET, Key=RESULT_KEY, Body=row.input)
    elif row.input is not None:
        put_eval_result(aws.s3, "run1", 10, BITS, row.input)
    event = {"run_id": "run1", "step": 10, "base_model_id": BASE_MODEL, "adapter_name": "run1-step10"}
    with pytest.raises(row.expect) as raised:
        record_eval.lambda_handler(event, CONTEXT)
    assert row.message in str(raised.value)
    assert registry_row(aws) == before and before["status"] == {"S": "EVALUATING"}
    assert ray_api.requests == []


# --- the tiny model shared by the serving and evaluation tables ------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny Qwen3-VL, a rank-4 adapter for it, and a copy of that adapter naming another base model."""
    root = tmp_path_factory.mktemp("bad-input-models")
    base = build_tiny_qwen3_vl(root / "base")
    good = root / "good"
    make_tiny_adapter(base, good, rank=4, seed=1)
    other_base = root / "other-base"
    shutil.copytree(good, other_base)
    config = json.loads((good / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = "/models/Qwen3-VL-2B"
    (other_base / "adapter_config.json").write_text(json.dumps(config))
    return {"base": base, "good": good, "other-base": other_base}


@pytest.fixture(scope="module")
def tiny_policy(tiny: dict[str, Path]) -> VisionPolicy:
    return VisionPolicy.load(tiny["base"], device="cpu")


# --- chat requests -> OpenAIChatService.handle_chat -----------------------------------------------------


def chat(model: str = f"{TINY_BASE_MODEL_ID}:run1-step1", **fields: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4, **fields}


HUGE_IMAGE_URL = "data:image/png;base64," + "A" * 8_000_000

CHAT_ROWS = [
    Row("model-path-traversal", chat(f"{TINY_BASE_MODEL_ID}:../x"), 400, "invalid adapter name '../x'"),
    Row("model-two-colons", chat(f"{TINY_BASE_MODEL_ID}:a:b"), 400, "invalid adapter name 'a:b'"),
    Row(
        "model-slash",
        chat(f"{TINY_BASE_MODEL_ID}:run1-step1/../../x"),
        400,
        "invalid adapter name 'run1-step1/../../x'",
    ),
    Row("model-unicode", chat(f"{TINY_BASE_MODEL_ID}:rün-step1"), 400, "invalid adapter name 'rün-step1'"),
    Row("model-step-0", chat(f"{TINY_BASE_MODEL_ID}:run1-step0"), 400, "invalid adapter name 'run1-step0'"),
    Row(
        "model-very-long",
        chat(f"{TINY_BASE_MODEL_ID}:{'a' * 300}-step1"),
        400,
        "model: String should have at most 200 characters",
    ),
    Row("model-empty", chat(""), 400, "model: String should have at least 1 character"),
    Row("model-other-base", chat("../x"), 404, "the model '../x' does not exist"),
    Row("body-not-json", b"{model: tiny", 400, "invalid request: <root>: Invalid JSON"),
    Row("body-not-utf8", b"\xff\xfe\x00", 400, "invalid request"),
    Row("body-array", b"[]", 400, "invalid request: <root>: Input should be an object"),
    Row(
        "body-too-many-messages",
        chat(messages=[{"role": "user", "content": "hi"}] * 65),
        400,
        "messages: List should have at most 64 items",
    ),
    Row(
        "body-oversized-image",
        chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": HUGE_IMAGE_URL}}]}]),
        400,
        "String should have at most 8000000 characters",
    ),
    Row(
        "body-oversized-request",
        b'{"model": "x", "messages": [' + b" " * (16 * 1024 * 1024) + b"]}",
        400,
        "the limit is 16777216",
    ),
    Row("body-too-many-tokens", chat(max_tokens=100_000), 400, "max_tokens: Input should be less than or equal to 512"),
    Row("body-stream", chat(stream=True), 400, "stream: Input should be False"),
    Row(
        "body-unknown-role",
        chat(messages=[{"role": "tool", "content": "x"}]),
        400,
        "messages.0.role: Input should be",
    ),
]


@pytest.mark.parametrize("row", rows(*CHAT_ROWS))
def test_chat_request_is_refused_before_any_s3_call(
    row: Row, aws: Aws, tiny_policy: VisionPolicy, tmp_path: Path
) -> None:
    """Side effects: no S3 call at all (the adapter store's client records every call), no adapter loaded."""
    s3_calls: list[str] = []
    aws.s3.meta.events.register("before-call.s3", lambda model, **_: s3_calls.append(model.name))
    store = S3AdapterStore(BUCKET, f"serving/{TINY_BASE_MODEL_ID}/", tmp_path / "cache", aws.s3)
    service = OpenAIChatService(TINY_BASE_MODEL_ID, tiny_policy, store)
    body = row.input if isinstance(row.input, bytes) else json.dumps(row.input)
    status, answer_body = service.handle_chat(body)
    assert status == row.expect
    assert row.message in answer_body["error"]["message"]
    assert s3_calls == []
    assert service.loaded_adapters == [] and list((tmp_path / "cache").iterdir()) == []


# --- evaluation job arguments and adapters -> cluster_jobs.evaluate --------------------------------------

GOOD_MANIFEST_URI = f"s3://{BUCKET}/{MANIFEST_KEY}"
GOOD_OUTPUT_URI = f"s3://{BUCKET}/{RESULT_KEY}"

EVALUATE_ROWS = [
    Row(
        "wrong-base-model",
        {"adapter": "other-base"},
        EvaluationRefused,
        "adapter was trained on base model '/models/Qwen3-VL-2B', not on",
    ),
    Row(
        "rank-mismatch",
        {"manifest": {"lora_rank": 8}},
        EvaluationRefused,
        "adapter_config.json has rank 4; the manifest says 8",
    ),
    Row(
        "alpha-mismatch",
        {"manifest": {"lora_alpha": 4}},
        EvaluationRefused,
        "adapter_config.json has lora_alpha 8; the manifest says 4",
    ),
    Row(
        "sha-mismatch",
        {"replace": "same size"},
        EvaluationRefused,
        "adapter_model.safetensors does not match the manifest",
    ),
    Row("file-larger-than-manifest", {"replace": "larger"}, EvaluationRefused, "bytes; the manifest says"),
    Row(
        "manifest-of-another-run",
        {"manifest": {"run_id": "run2", "adapter_name": "run2-step10"}},
        EvaluationRefused,
        "is for run 'run2' step 10, but its key names run 'run1' step 10",
    ),
    Row(
        "output-of-another-adapter",
        {"output": f"s3://{BUCKET}/runs/run1/evals/global_step_20/result.json"},
        EvaluationRefused,
        "is not the result key of this adapter",
    ),
    Row(
        "manifest-key-outside-layout",
        {"manifest_uri": f"s3://{BUCKET}/runs/run1/adapters/global_step_010/manifest.json"},
        EvaluationRefused,
        "not an adapter manifest key",
    ),
    Row(
        "manifest-not-s3",
        {"manifest_uri": "/tmp/manifest.json"},
        EvaluationRefused,
        "expected an s3://<bucket>/<key> URI, got '/tmp/manifest.json'",
    ),
    Row("unknown-backend", {"backend": "cuda"}, EvaluationRefused, "backend must be one of"),
]


@pytest.mark.parametrize("row", rows(*EVALUATE_ROWS))
def test_evaluation_is_refused_and_writes_nothing(row: Row, aws: Aws, tiny: dict[str, Path]) -> None:
    """Side effects: nothing under runs/run1/evals/ (the output key included), no evaluation started (no log line)."""
    change = row.input
    adapter_dir = tiny[change.get("adapter", "good")]
    upload_adapter(aws.s3, BUCKET, "run1", 10, adapter_dir, manifest_fields=change.get("manifest"))
    if "replace" in change:
        size = (tiny["good"] / "adapter_model.safetensors").stat().st_size
        body = b"\0" * (size if change["replace"] == "same size" else size + 1)
        aws.s3.put_object(Bucket=BUCKET, Key=ADAPTER_PREFIX + "adapter_model.safetensors", Body=body)
    lines: list[str] = []
    with pytest.raises(row.expect) as raised:
        evaluate_adapter(
            change.get("manifest_uri", GOOD_MANIFEST_URI),
            tiny["base"],
            change.get("backend", "transformers"),
            change.get("output", GOOD_OUTPUT_URI),
            s3=aws.s3,
            log=lines.append,
        )
    assert row.message in str(raised.value)
    assert keys(aws, "runs/run1/evals/") == []
    assert [line for line in lines if "has no spec at" not in line] == []  # only which maze set it would play
