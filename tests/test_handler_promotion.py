"""decide_promotion, register_adapter, smoke_test, promote_champion, rollback_registration (moto + fake serve)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import check_adapter
import decide_promotion
import promote_champion
import pytest
import record_eval
import register_adapter
import rollback_registration
import smoke_test
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
    baseline_result,
    closed_port_url,
    emitted_metrics,
    put_adapter,
    put_eval_result,
    put_run,
)

from mazeops.adapter_rows import AdapterNotFound
from mazeops.baseline import BASELINE
from mazeops.champion_rows import AdapterNotPromotable, ChampionChanged
from mazeops.evalresult import InvalidEvalResult
from mazeops.inputs import InvalidInput
from mazeops.manifest import InvalidManifest
from mazeops.names import InvalidName
from mazeops.registry import Registry
from mazeops.runs import RunNotPromotable, RunsTable
from mazeops.serve_client import ServeUnavailable, SmokeTestFailed

CONTEXT = FakeLambdaContext()
SMOKE_PNG = Path(__file__).parents[1] / "functions" / "mazeops" / "smoke_maze.png"


@pytest.fixture(autouse=True)
def min_solve_rate(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    """Low enough that the reference run's starting point (28/64) can have been a champion."""
    monkeypatch.setenv("MIN_SOLVE_RATE", "0.4")


@pytest.fixture(autouse=True)
def weak_baseline(aws: Aws) -> None:
    """The base model's baseline on the evaluation set: it solves none of the 64 mazes."""
    record_baseline_bits(aws, "0" * 64)


def record_baseline_bits(aws: Aws, bits: str, eval_set_sha256: str = EVAL_SET_SHA) -> None:
    """Claim and record the baseline of BASE_MODEL on `eval_set_sha256` with outcomes `bits` (replacing any)."""
    aws.dynamodb.delete_item(
        TableName=REGISTRY_TABLE,
        Key={"base_model_id": {"S": BASE_MODEL}, "adapter_name": {"S": f"#BASELINE#{eval_set_sha256}"}},
    )
    registry(aws).claim_baseline(BASE_MODEL, eval_set_sha256)
    assert registry(aws).record_baseline(baseline_result(bits, eval_set_sha256), attempt=1).status == "READY"


def evaluated(aws: Aws, run_id: str, step: int, bits: str, eval_set_sha256: str | None = None) -> str:
    """Upload, check and record an adapter's evaluation (its run RUNNING unless it has a row); return its name."""
    if RunsTable(aws.dynamodb, RUNS_TABLE).get_run(run_id) is None:
        put_run(aws.dynamodb, run_id)
    put_adapter(aws.s3, run_id, step)
    key = f"runs/{run_id}/adapters/global_step_{step}/manifest.json"
    check_adapter.lambda_handler({"bucket": BUCKET, "key": key, "run_id": run_id, "step": step}, CONTEXT)
    put_eval_result(aws.s3, run_id, step, bits, {"eval_set_sha256": eval_set_sha256} if eval_set_sha256 else None)
    name = f"{run_id}-step{step}"
    record_eval.lambda_handler(
        {"run_id": run_id, "step": step, "base_model_id": BASE_MODEL, "adapter_name": name}, CONTEXT
    )
    return name


def decide(adapter: str) -> dict:
    return decide_promotion.lambda_handler({"base_model_id": BASE_MODEL, "adapter_name": adapter}, CONTEXT)


def register(adapter: str) -> dict:
    run_id, _, step = adapter.rpartition("-step")
    event = {"base_model_id": BASE_MODEL, "adapter_name": adapter, "run_id": run_id, "step": int(step)}
    return register_adapter.lambda_handler(event, CONTEXT)


def promote(adapter: str, version: int) -> dict:
    return promote_champion.lambda_handler(
        {"base_model_id": BASE_MODEL, "adapter_name": adapter, "champion_version": version}, CONTEXT
    )


def rollback(adapter: str, error: dict | None = None) -> dict:
    event = {
        "base_model_id": BASE_MODEL,
        "adapter_name": adapter,
        "error": error or {"Error": "SmokeTestFailed", "Cause": "HTTP 404"},
    }
    return rollback_registration.lambda_handler(event, CONTEXT)


def champion_through_the_flow(aws: Aws, run_id: str, step: int, bits: str) -> dict:
    adapter = evaluated(aws, run_id, step, bits)
    decision = decide(adapter)
    assert decision["promote"], decision["reason"]
    register(adapter)
    return promote(adapter, decision["champion_version"])


def registry(aws: Aws) -> Registry:
    return Registry(aws.dynamodb, REGISTRY_TABLE)


def serving_keys(aws: Aws) -> list[str]:
    return sorted(obj["Key"] for obj in aws.s3.list_objects_v2(Bucket=BUCKET, Prefix="serving/").get("Contents", []))


# --- decide_promotion --------------------------------------------------------------------------


def test_first_adapter_that_beats_the_baseline_is_promoted(aws: Aws) -> None:
    adapter = evaluated(aws, "run1", 10, "1" * 40 + "0" * 24)
    result = decide(adapter)
    assert (result["promote"], result["champion"], result["champion_version"]) == (True, BASELINE, 0)
    assert result["reason"].startswith("challenger is significantly better than the baseline (b=40 c=0")
    evidence = result["evidence"]
    assert (evidence["against"], evidence["champion_solve_rate"], evidence["b"], evidence["c"]) == (
        BASELINE,
        0.0,
        40,
        0,
    )
    assert evidence["challenger_solve_rate"] == pytest.approx(40 / 64) and evidence["p_value"] == pytest.approx(
        2.0**-40
    )
    assert registry(aws).get_adapter(BASE_MODEL, adapter).decision == {
        "promote": True,
        "reason": result["reason"],
        **evidence,
    }


@pytest.mark.parametrize("status", ["ABORTED", "FAILED", "TIMED_OUT"])
def test_an_adapter_of_a_stopped_or_failed_run_is_rejected_with_the_reason(aws: Aws, status: str) -> None:
    put_run(aws.dynamodb, "run1", status)
    adapter = evaluated(aws, "run1", 10, "1" * 40 + "0" * 24)  # would beat the baseline by b=40 c=0
    result = decide(adapter)
    reason = f"training run 'run1' is {status}; only adapters of RUNNING or SUCCEEDED runs are promoted"
    assert (result["promote"], result["reason"], result["evidence"]["b"]) == (False, reason, 40)
    row = registry(aws).get_adapter(BASE_MODEL, adapter)
    assert (row.status, row.decision["reason"], row.solve_rate) == ("REJECTED", reason, 40 / 64)
    assert registry(aws).get_champion(BASE_MODEL) is None


def test_a_run_stopped_after_the_decision_fails_the_promotion_and_keeps_the_champion(aws: Aws) -> None:
    adapter = evaluated(aws, "run1", 10, "1" * 40 + "0" * 24)
    assert decide(adapter)["promote"]
    register(adapter)
    RunsTable(aws.dynamodb, RUNS_TABLE).set_status("run1", "ABORTED")
    with pytest.raises(RunNotPromotable, match="training run 'run1' is ABORTED"):
        promote(adapter, 0)
    assert registry(aws).get_champion(BASE_MODEL) is None


def test_first_adapter_no_better_than_the_baseline_is_rejected(aws: Aws) -> None:
    record_baseline_bits(aws, "1" * 38 + "0" * 26)
    adapter = evaluated(aws, "run1", 10, "0" * 2 + "1" * 40 + "0" * 22)  # b=4 c=2
    result = decide(adapter)
    assert (
        not result["promote"]
        and "improvement over the baseline is not significant at alpha=0.05 (b=4 c=2" in result["reason"]
    )
    assert result["evidence"]["champion_solve_rate"] == pytest.approx(38 / 64)
    assert registry(aws).get_adapter(BASE_MODEL, adapter).status == "REJECTED"


@pytest.mark.parametrize("state", ["missing", "FAILED", "EVALUATING", "other-maze-set"])
def test_without_a_ready_baseline_on_the_challengers_maze_set_nothing_is_promoted(aws: Aws, state: str) -> None:
    key = {"base_model_id": {"S": BASE_MODEL}, "adapter_name": {"S": f"#BASELINE#{EVAL_SET_SHA}"}}
    aws.dynamodb.delete_item(TableName=REGISTRY_TABLE, Key=key)
    if state in ("FAILED", "EVALUATING"):
        registry(aws).claim_baseline(BASE_MODEL, EVAL_SET_SHA)
    if state == "FAILED":
        registry(aws).fail_baseline(BASE_MODEL, EVAL_SET_SHA, 1, "Ray job ended FAILED")
    if state == "other-maze-set":
        record_baseline_bits(aws, "0" * 64, eval_set_sha256="cd" * 32)
    adapter = evaluated(aws, "run1", 10, "1" * 64)
    result = decide(adapter)
    assert (
        not result["promote"]
        and result["reason"] == "the baseline has no recorded outcomes to compare with; nothing is promoted"
    )
    assert result["evidence"]["against"] == BASELINE and result["evidence"]["p_value"] is None
    assert registry(aws).get_adapter(BASE_MODEL, adapter).status == "REJECTED"
    assert registry(aws).get_champion(BASE_MODEL) is None


def test_first_adapter_below_the_minimum_is_rejected_though_it_beats_the_baseline(aws: Aws) -> None:
    adapter = evaluated(aws, "run1", 10, "1" * 20 + "0" * 44)
    result = decide(adapter)
    assert not result["promote"] and "below the minimum 0.400 (b=20 c=0" in result["reason"]
    assert registry(aws).get_adapter(BASE_MODEL, adapter).status == "REJECTED"


def test_reference_run_beats_its_champion(aws: Aws) -> None:
    champion_through_the_flow(aws, "run1", 10, "1" * 28 + "0" * 36)
    challenger = evaluated(aws, "run1", 100, "1" * 62 + "0" * 2)
    result = decide(challenger)
    assert (result["promote"], result["champion"], result["champion_version"]) == (True, "run1-step10", 1)
    assert (result["evidence"]["b"], result["evidence"]["c"]) == (34, 0)


def test_insignificant_challenger_is_rejected(aws: Aws) -> None:
    champion_through_the_flow(aws, "run1", 10, "1" * 40 + "0" * 24)
    challenger = evaluated(aws, "run1", 20, "0" * 3 + "1" * 43 + "0" * 18)  # b=6, c=3
    result = decide(challenger)
    assert not result["promote"] and "not significant" in result["reason"]


def test_challenger_on_another_maze_set_is_never_promoted(aws: Aws) -> None:
    champion_through_the_flow(aws, "run1", 10, "1" * 32 + "0" * 32)
    challenger = evaluated(aws, "run1", 20, "1" * 64, eval_set_sha256="cd" * 32)
    assert "different maze sets" in decide(challenger)["reason"]


def test_deciding_about_the_champion_itself_changes_nothing(aws: Aws) -> None:
    champion_through_the_flow(aws, "run1", 10, "1" * 40 + "0" * 24)
    result = decide("run1-step10")
    assert not result["promote"] and "already the champion" in result["reason"]
    assert registry(aws).get_adapter(BASE_MODEL, "run1-step10").status == "CHAMPION"


def test_decide_needs_an_evaluated_adapter(aws: Aws) -> None:
    with pytest.raises(AdapterNotFound):
        decide("ghost-step1")
    put_adapter(aws.s3, "run1", 10)
    check_adapter.lambda_handler(
        {"bucket": BUCKET, "key": "runs/run1/adapters/global_step_10/manifest.json", "run_id": "run1", "step": 10},
        CONTEXT,
    )
    with pytest.raises(InvalidEvalResult, match="no recorded evaluation"):
        decide("run1-step10")
    with pytest.raises(InvalidName):
        decide("../x")


# --- register_adapter --------------------------------------------------------------------------


def test_register_copies_and_verifies_the_files(aws: Aws) -> None:
    adapter = evaluated(aws, "run1", 10, "1" * 40 + "0" * 24)
    assert register(adapter) == {
        "serving_prefix": f"serving/{BASE_MODEL}/run1-step10/",
        "served_model_id": f"{BASE_MODEL}:run1-step10",
    }
    assert serving_keys(aws) == [
        f"serving/{BASE_MODEL}/run1-step10/adapter_config.json",
        f"serving/{BASE_MODEL}/run1-step10/adapter_model.safetensors",
    ]
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        source = aws.s3.get_object(Bucket=BUCKET, Key=f"runs/run1/adapters/global_step_10/{name}")["Body"].read()
        assert aws.s3.get_object(Bucket=BUCKET, Key=f"serving/{BASE_MODEL}/run1-step10/{name}")["Body"].read() == source
    assert registry(aws).get_adapter(BASE_MODEL, adapter).status == "REGISTERED"
    assert register(adapter)["served_model_id"] == f"{BASE_MODEL}:run1-step10"  # repeatable


def test_register_refuses_files_changed_since_the_check(aws: Aws) -> None:
    adapter = evaluated(aws, "run1", 10, "1" * 40 + "0" * 24)
    aws.s3.put_object(
        Bucket=BUCKET, Key="runs/run1/adapters/global_step_10/adapter_model.safetensors", Body=b"swapped weights"
    )
    with pytest.raises(InvalidManifest, match="changed since it was checked"):
        register(adapter)
    assert registry(aws).get_adapter(BASE_MODEL, adapter).status == "EVALUATED"
    assert serving_keys(aws) == []


def test_register_refuses_a_vanished_file_or_manifest(aws: Aws) -> None:
    adapter = evaluated(aws, "run1", 10, "1" * 40 + "0" * 24)
    aws.s3.delete_object(Bucket=BUCKET, Key="runs/run1/adapters/global_step_10/adapter_config.json")
    with pytest.raises(InvalidManifest, match="disappeared"):
        register(adapter)
    aws.s3.delete_object(Bucket=BUCKET, Key="runs/run1/adapters/global_step_10/manifest.json")
    with pytest.raises(InvalidManifest, match="does not exist"):
        register(adapter)


def test_register_input_checks(aws: Aws) -> None:
    event = {"base_model_id": BASE_MODEL, "adapter_name": "run1-step11", "run_id": "run1", "step": 10}
    with pytest.raises(InvalidName):
        register_adapter.lambda_handler(event, CONTEXT)
    with pytest.raises(InvalidName):
        register_adapter.lambda_handler({**event, "base_model_id": "a:b"}, CONTEXT)
    with pytest.raises(InvalidInput):
        register_adapter.lambda_handler({**event, "step": None}, CONTEXT)


# --- smoke_test ----------------------------------------------------------------------------------


def smoke(adapter: str = "run1-step10") -> dict:
    return smoke_test.lambda_handler({"base_model_id": BASE_MODEL, "adapter_name": adapter}, CONTEXT)


def test_smoke_test_sends_the_packaged_maze_picture(
    aws: Aws, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    body = {
        "model": f"{BASE_MODEL}:run1-step10",
        "choices": [{"message": {"role": "assistant", "content": "('move', 3)"}}],
    }
    with FakeHttpServer({("POST", "/v1/chat/completions"): answer(200, body)}) as server:
        monkeypatch.setenv("SERVE_URL", server.url)
        result = smoke()
    assert (result["served_model_id"], result["answer"]) == (f"{BASE_MODEL}:run1-step10", "('move', 3)")
    sent = json.loads(server.requests[0][3])
    assert sent["model"] == f"{BASE_MODEL}:run1-step10"
    image_uri = next(part for part in sent["messages"][0]["content"] if part["type"] == "image_url")["image_url"]["url"]
    assert base64.b64decode(image_uri.removeprefix("data:image/png;base64,")) == SMOKE_PNG.read_bytes()
    assert "SmokeTestLatency" in emitted_metrics(capsys.readouterr().out)


def test_smoke_test_failures(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeHttpServer({("POST", "/v1/chat/completions"): answer(404, {"error": "model not found"})}) as server:
        monkeypatch.setenv("SERVE_URL", server.url)
        with pytest.raises(SmokeTestFailed, match="404"):
            smoke()
    monkeypatch.setenv("SERVE_URL", closed_port_url())
    with pytest.raises(ServeUnavailable):
        smoke()
    with pytest.raises(InvalidName):
        smoke("run1-step10:evil")


# --- promote_champion ----------------------------------------------------------------------------


def test_promotion_and_its_metric(aws: Aws, capsys: pytest.CaptureFixture[str]) -> None:
    first = champion_through_the_flow(aws, "run1", 10, "1" * 28 + "0" * 36)
    assert first == {"champion": "run1-step10", "previous": [], "version": 1}
    assert emitted_metrics(capsys.readouterr().out)["Promotions"] == 1
    second = champion_through_the_flow(aws, "run1", 100, "1" * 62 + "0" * 2)
    assert second == {"champion": "run1-step100", "previous": ["run1-step10"], "version": 2}


def test_promotion_after_someone_else_promoted_raises_champion_changed(aws: Aws) -> None:
    champion_through_the_flow(aws, "run1", 10, "1" * 28 + "0" * 36)
    late = evaluated(aws, "run2", 10, "1" * 62 + "0" * 2)
    decision = decide(late)
    register(late)
    champion_through_the_flow(aws, "run3", 10, "1" * 64)  # wins meanwhile
    with pytest.raises(ChampionChanged):
        promote(late, decision["champion_version"])


def test_promotion_of_an_unregistered_adapter(aws: Aws) -> None:
    adapter = evaluated(aws, "run1", 10, "1" * 40 + "0" * 24)
    with pytest.raises(AdapterNotPromotable):
        promote(adapter, 0)
    with pytest.raises(InvalidInput):
        promote(adapter, "0")  # type: ignore[arg-type]


# --- rollback_registration -----------------------------------------------------------------------


def test_rollback_of_a_challenger_that_never_became_champion(aws: Aws, capsys: pytest.CaptureFixture[str]) -> None:
    champion_through_the_flow(aws, "run1", 10, "1" * 28 + "0" * 36)
    challenger = evaluated(aws, "run1", 20, "1" * 62 + "0" * 2)
    register(challenger)
    capsys.readouterr()
    assert rollback(challenger) == {"champion": "run1-step10", "rolled_back": challenger}
    row = registry(aws).get_adapter(BASE_MODEL, challenger)
    assert (row.status, row.error) == ("ROLLED_BACK", "SmokeTestFailed: HTTP 404")
    assert registry(aws).get_champion(BASE_MODEL).version == 1
    assert serving_keys(aws) == [
        f"serving/{BASE_MODEL}/run1-step10/adapter_config.json",
        f"serving/{BASE_MODEL}/run1-step10/adapter_model.safetensors",
    ]
    assert emitted_metrics(capsys.readouterr().out) == {"Rollbacks": 1}


def test_rollback_of_a_challenger_that_had_become_champion(aws: Aws) -> None:
    champion_through_the_flow(aws, "run1", 10, "1" * 28 + "0" * 36)
    champion_through_the_flow(aws, "run1", 20, "1" * 62 + "0" * 2)
    assert rollback("run1-step20", {"Error": "States.Timeout", "Cause": "notify timed out"}) == {
        "champion": "run1-step10",
        "rolled_back": "run1-step20",
    }
    pointer = registry(aws).get_champion(BASE_MODEL)
    assert (pointer.champion, pointer.previous, pointer.version) == ("run1-step10", [], 3)
    assert registry(aws).get_adapter(BASE_MODEL, "run1-step10").status == "CHAMPION"
    assert registry(aws).get_adapter(BASE_MODEL, "run1-step20").status == "ROLLED_BACK"
    assert all("run1-step20" not in key for key in serving_keys(aws))


def test_rollback_of_the_first_champion_returns_to_the_baseline(aws: Aws) -> None:
    champion_through_the_flow(aws, "run1", 10, "1" * 40 + "0" * 24)
    assert rollback("run1-step10") == {"champion": BASELINE, "rolled_back": "run1-step10"}
    pointer = registry(aws).get_champion(BASE_MODEL)
    assert (pointer.champion, pointer.previous, pointer.version) == (BASELINE, [], 2)
    assert registry(aws).get_adapter(BASE_MODEL, "run1-step10").status == "ROLLED_BACK"
    assert serving_keys(aws) == []
    challenger = evaluated(aws, "run1", 20, "1" * 30 + "0" * 34)
    result = decide(challenger)  # compared with the baseline again
    assert (result["promote"], result["champion"], result["champion_version"]) == (True, BASELINE, 2)


def test_a_repeated_rollback_leaves_the_baseline_champion(aws: Aws) -> None:
    champion_through_the_flow(aws, "run1", 10, "1" * 40 + "0" * 24)
    rollback("run1-step10")
    assert rollback("run1-step10") == {"champion": BASELINE, "rolled_back": "run1-step10"}
    assert registry(aws).get_champion(BASE_MODEL).version == 2


def test_rollback_before_anything_was_registered(aws: Aws) -> None:
    assert rollback("run9-step1", {"Error": "InvalidManifest"}) == {"champion": BASELINE, "rolled_back": "run9-step1"}
    with pytest.raises(InvalidName):
        rollback("../../serving")
