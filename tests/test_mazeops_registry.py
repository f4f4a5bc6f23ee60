"""Adapter registry: candidates, evaluations, promotion transactions and rollback (moto)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from mazeops_testing import BASE_MODEL, BASE_MODELS, REGISTRY_TABLE, Aws, baseline_result, eval_result_document

from mazeops.adapter_rows import AdapterNotFound, AdapterNotReevaluable
from mazeops.base_models import UnknownBaseModel, base_model_path
from mazeops.baseline import BASELINE
from mazeops.baseline_rows import BaselineRecord
from mazeops.champion_rows import AdapterNotPromotable, ChampionChanged, NoPreviousChampion, champion_model_id
from mazeops.decision import Decision
from mazeops.evalresult import EvalResult
from mazeops.manifest import AdapterManifest
from mazeops.names import InvalidName
from mazeops.registry import Registry

OTHER_BASE = "qwen3-vl-2b"


def manifest(run_id: str, step: int, base: str = BASE_MODEL) -> AdapterManifest:
    digest = {"sha256": "0" * 64, "size": 10}
    return AdapterManifest.model_validate(
        {
            "schema": "maze-adapter/v1",
            "run_id": run_id,
            "step": step,
            "adapter_name": f"{run_id}-step{step}",
            "base_model_id": base,
            "lora_rank": 32,
            "lora_alpha": 64,
            "files": {"adapter_config.json": digest, "adapter_model.safetensors": digest},
            "created_at": "2026-12-02T16:00:00Z",
        }
    )


def registered(registry: Registry, run_id: str, step: int, base: str = BASE_MODEL) -> str:
    """Put an adapter through candidate -> evaluated -> registered; return its name."""
    registry.put_candidate(manifest(run_id, step, base), f"runs/{run_id}/adapters/global_step_{step}/manifest.json")
    registry.record_eval(EvalResult.model_validate(eval_result_document(run_id, step, "1100", base_model_id=base)))
    registry.set_status(base, f"{run_id}-step{step}", "REGISTERED")
    return f"{run_id}-step{step}"


@pytest.fixture
def registry(aws: Aws) -> Registry:
    return Registry(aws.dynamodb, REGISTRY_TABLE)


def test_put_candidate_is_conditional(registry: Registry) -> None:
    assert registry.put_candidate(manifest("run1", 10), "runs/run1/adapters/global_step_10/manifest.json") is True
    assert registry.put_candidate(manifest("run1", 10), "runs/run1/adapters/global_step_10/manifest.json") is False
    row = registry.get_adapter(BASE_MODEL, "run1-step10")
    assert (row.status, row.run_id, row.step, row.lora_rank, row.outcomes) == ("EVALUATING", "run1", 10, 32, None)


def test_record_eval_stores_outcome_bits_and_eval_set(registry: Registry) -> None:
    registry.put_candidate(manifest("run1", 10), "k")
    result = EvalResult.model_validate(eval_result_document("run1", 10, "1011"))
    registry.record_eval(result)
    row = registry.get_adapter(BASE_MODEL, "run1-step10")
    assert (row.status, row.outcomes, row.n_solved, row.n_total) == ("EVALUATED", "1011", 3, 4)
    assert row.solve_rate == pytest.approx(0.75) and row.eval_set_sha256 == result.eval_set_sha256


def test_record_eval_of_an_unknown_adapter_fails(registry: Registry) -> None:
    with pytest.raises(AdapterNotFound):
        registry.record_eval(EvalResult.model_validate(eval_result_document("ghost", 1, "1")))
    assert registry.get_adapter(BASE_MODEL, "ghost-step1") is None


def test_record_decision_keeps_evidence_and_rejects(registry: Registry) -> None:
    registry.put_candidate(manifest("run1", 10), "k")
    registry.record_decision(BASE_MODEL, "run1-step10", Decision(False, "not significant", {"p_value": 0.25, "b": 6}))
    row = registry.get_adapter(BASE_MODEL, "run1-step10")
    assert row.status == "REJECTED"
    assert row.decision == {"promote": False, "reason": "not significant", "p_value": 0.25, "b": 6}


def test_set_status_validates(registry: Registry) -> None:
    with pytest.raises(ValueError, match="unknown adapter status"):
        registry.set_status(BASE_MODEL, "run1-step10", "WINNER")
    with pytest.raises(AdapterNotFound):
        registry.set_status(BASE_MODEL, "run1-step10", "RETIRED")
    with pytest.raises(InvalidName):
        registry.set_status(BASE_MODEL, "../x", "RETIRED")


def test_first_promotion_creates_the_pointer(registry: Registry) -> None:
    first = registered(registry, "run1", 10)
    assert registry.get_champion(BASE_MODEL) is None
    pointer = registry.promote(BASE_MODEL, first, expected_version=0)
    assert (pointer.champion, pointer.previous, pointer.version) == (first, [], 1)
    assert registry.get_champion(BASE_MODEL) == pointer
    assert registry.get_adapter(BASE_MODEL, first).status == "CHAMPION"


def test_promotion_retires_the_old_champion_in_one_transaction(registry: Registry) -> None:
    first, second = registered(registry, "run1", 10), registered(registry, "run1", 20)
    registry.promote(BASE_MODEL, first, 0)
    pointer = registry.promote(BASE_MODEL, second, 1)
    assert (pointer.champion, pointer.previous, pointer.version) == (second, [first], 2)
    assert registry.get_adapter(BASE_MODEL, first).status == "RETIRED"
    assert registry.get_adapter(BASE_MODEL, second).status == "CHAMPION"


def test_promotion_with_a_stale_version_raises_champion_changed(registry: Registry) -> None:
    first, second = registered(registry, "run1", 10), registered(registry, "run1", 20)
    registry.promote(BASE_MODEL, first, 0)
    with pytest.raises(ChampionChanged, match="version 1, expected 0"):
        registry.promote(BASE_MODEL, second, 0)
    assert registry.get_champion(BASE_MODEL).champion == first
    assert registry.get_adapter(BASE_MODEL, second).status == "REGISTERED"


def test_concurrent_pointer_move_is_caught_by_the_transaction(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second, third = (registered(registry, "run1", step) for step in (10, 20, 30))
    registry.promote(BASE_MODEL, first, 0)
    stale = registry.get_champion(BASE_MODEL)
    registry.promote(BASE_MODEL, second, 1)  # someone else wins after our read
    monkeypatch.setattr(registry, "get_champion", lambda base: stale)
    with pytest.raises(ChampionChanged):
        registry.promote(BASE_MODEL, third, 1)
    monkeypatch.undo()
    assert registry.get_champion(BASE_MODEL).champion == second
    assert registry.get_adapter(BASE_MODEL, third).status == "REGISTERED"


def test_only_registered_adapters_can_be_promoted(registry: Registry) -> None:
    registry.put_candidate(manifest("run1", 10), "k")
    with pytest.raises(AdapterNotPromotable):
        registry.promote(BASE_MODEL, "run1-step10", 0)
    with pytest.raises(AdapterNotPromotable):
        registry.promote(BASE_MODEL, "ghost-step1", 0)
    assert registry.get_champion(BASE_MODEL) is None


def test_promoting_the_champion_again_is_a_no_op(registry: Registry) -> None:
    first = registered(registry, "run1", 10)
    pointer = registry.promote(BASE_MODEL, first, 0)
    assert registry.promote(BASE_MODEL, first, 0) == pointer


def test_rollback_returns_to_the_newest_previous_champion(registry: Registry, aws: Aws) -> None:
    a, b, c = (registered(registry, "run1", step) for step in (10, 20, 30))
    registry.promote(BASE_MODEL, a, 0)
    registry.promote(BASE_MODEL, b, 1)
    registry.promote(BASE_MODEL, c, 2)
    pointer = registry.rollback(BASE_MODEL, reason="smoke test failed")
    assert (pointer.champion, pointer.previous, pointer.version) == (b, [a], 4)
    assert registry.get_adapter(BASE_MODEL, b).status == "CHAMPION"
    demoted = registry.get_adapter(BASE_MODEL, c)
    assert (demoted.status, demoted.error) == ("ROLLED_BACK", "smoke test failed")


def test_rollback_skips_former_champions_whose_rows_are_gone(registry: Registry, aws: Aws) -> None:
    a, b, c = (registered(registry, "run1", step) for step in (10, 20, 30))
    for version, adapter in enumerate((a, b, c)):
        registry.promote(BASE_MODEL, adapter, version)
    aws.dynamodb.delete_item(
        TableName=REGISTRY_TABLE, Key={"base_model_id": {"S": BASE_MODEL}, "adapter_name": {"S": b}}
    )
    pointer = registry.rollback(BASE_MODEL)
    assert (pointer.champion, pointer.previous) == (a, [])


def test_rollback_of_the_first_adapter_champion_returns_to_the_baseline(registry: Registry) -> None:
    with pytest.raises(NoPreviousChampion, match="the baseline of 'qwen3-vl-8b-sft' is the champion"):
        registry.rollback(BASE_MODEL)
    first = registered(registry, "run1", 10)
    registry.promote(BASE_MODEL, first, 0)
    pointer = registry.rollback(BASE_MODEL, reason="smoke test failed")
    assert (pointer.champion, pointer.previous, pointer.version, pointer.is_baseline) == (BASELINE, [], 2, True)
    assert registry.get_champion(BASE_MODEL) == pointer
    assert registry.get_adapter(BASE_MODEL, first).status == "ROLLED_BACK"
    with pytest.raises(NoPreviousChampion, match="is the champion; there is nothing to roll back"):
        registry.rollback(BASE_MODEL)


def test_rollback_returns_to_the_baseline_when_no_former_champion_has_a_row(registry: Registry, aws: Aws) -> None:
    a, b = registered(registry, "run1", 10), registered(registry, "run1", 20)
    registry.promote(BASE_MODEL, a, 0)
    registry.promote(BASE_MODEL, b, 1)
    aws.dynamodb.delete_item(
        TableName=REGISTRY_TABLE, Key={"base_model_id": {"S": BASE_MODEL}, "adapter_name": {"S": a}}
    )
    assert registry.rollback(BASE_MODEL).champion == BASELINE


def test_promotion_over_the_baseline_keeps_it_out_of_previous(registry: Registry) -> None:
    first, second = registered(registry, "run1", 10), registered(registry, "run1", 20)
    registry.promote(BASE_MODEL, first, 0)
    registry.rollback(BASE_MODEL)
    pointer = registry.promote(BASE_MODEL, second, 2)
    assert (pointer.champion, pointer.previous, pointer.version) == (second, [], 3)
    assert registry.rollback(BASE_MODEL).champion == BASELINE


def test_the_champion_is_served_as_base_model_or_base_model_colon_adapter(registry: Registry) -> None:
    assert champion_model_id(BASE_MODEL, None) == BASE_MODEL
    first = registered(registry, "run1", 10)
    assert champion_model_id(BASE_MODEL, registry.promote(BASE_MODEL, first, 0)) == f"{BASE_MODEL}:{first}"
    assert champion_model_id(BASE_MODEL, registry.rollback(BASE_MODEL)) == BASE_MODEL


# --- baselines ----------------------------------------------------------------------------------------

SHA = "ab" * 32
OTHER_SHA = "cd" * 32


def test_the_first_claim_puts_attempt_one_and_later_claims_read_it(registry: Registry) -> None:
    assert registry.get_baseline(BASE_MODEL, SHA) is None
    claimed = registry.claim_baseline(BASE_MODEL, SHA)
    assert (claimed.status, claimed.attempt, claimed.job_id) == (
        "EVALUATING",
        1,
        f"baseline-{BASE_MODEL}-{SHA[:12]}-a1",
    )
    assert claimed.result_key == f"baselines/{BASE_MODEL}/{SHA}/attempt_1/result.json"
    assert registry.claim_baseline(BASE_MODEL, SHA) == claimed == registry.get_baseline(BASE_MODEL, SHA)
    assert registry.claim_baseline(BASE_MODEL, SHA, retry=True) == claimed  # EVALUATING: no new attempt
    assert registry.claim_baseline(BASE_MODEL, OTHER_SHA).job_id.endswith(f"-{OTHER_SHA[:12]}-a1")


def test_concurrent_first_claims_agree_on_one_attempt(registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    """A claimer that read 'no baseline' just before another put it: its conditional put fails, it reads the winner."""
    winner = registry.claim_baseline(BASE_MODEL, SHA)
    real_get = registry.get_baseline
    reads = []

    def get_baseline_unseen_once(base: str, sha: str) -> BaselineRecord | None:
        reads.append(sha)
        return real_get(base, sha) if len(reads) > 1 else None

    monkeypatch.setattr(registry, "get_baseline", get_baseline_unseen_once)
    puts = []
    real_put = registry.client.put_item
    monkeypatch.setattr(registry.client, "put_item", lambda **kwargs: puts.append(kwargs) or real_put(**kwargs))
    assert registry.claim_baseline(BASE_MODEL, SHA) == winner
    assert len(puts) == 1 and puts[0]["ConditionExpression"] == "attribute_not_exists(adapter_name)"
    assert len(reads) == 2  # the stale read, then the winner's row


def test_eight_concurrent_first_claims_get_the_same_attempt(registry: Registry) -> None:
    with ThreadPoolExecutor(max_workers=8) as pool:
        claims = list(pool.map(lambda _: registry.claim_baseline(BASE_MODEL, SHA), range(8)))
    assert {(claim.attempt, claim.job_id, claim.status) for claim in claims} == {(1, claims[0].job_id, "EVALUATING")}


def test_record_is_conditional_on_the_evaluating_attempt_and_happens_once(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry.claim_baseline(BASE_MODEL, SHA)
    first = registry.record_baseline(baseline_result("1100", SHA), attempt=1)
    assert (first.status, first.outcomes, first.n_solved, first.n_total, first.eval_set_name) == (
        "READY",
        "1100",
        2,
        4,
        "maze-eval-64",
    )
    assert first.solve_rate == pytest.approx(0.5) and first.backend == "vllm"
    again = registry.record_baseline(baseline_result("1111", SHA), attempt=1)  # a concurrent recorder of the same job
    assert again == first
    assert registry.fail_baseline(BASE_MODEL, SHA, 1, "late failure") == first
    assert registry.record_baseline(baseline_result("1111", SHA), attempt=2) == first
    assert registry.list_adapters(BASE_MODEL) == []


def test_a_failed_baseline_gets_another_attempt_only_when_asked(registry: Registry) -> None:
    registry.claim_baseline(BASE_MODEL, SHA)
    failed = registry.fail_baseline(BASE_MODEL, SHA, 1, "Ray job ended FAILED: CUDA OOM")
    assert (failed.status, failed.error) == ("FAILED", "Ray job ended FAILED: CUDA OOM")
    assert registry.claim_baseline(BASE_MODEL, SHA) == failed
    retried = registry.claim_baseline(BASE_MODEL, SHA, retry=True)
    assert (retried.status, retried.attempt, retried.error) == ("EVALUATING", 2, None)
    assert retried.job_id.endswith("-a2") and retried.result_key.endswith("/attempt_2/result.json")
    assert registry.claim_baseline(BASE_MODEL, SHA, retry=True) == retried  # a concurrent retry finds attempt 2
    assert (
        registry.record_baseline(baseline_result("10", SHA), attempt=1).status == "EVALUATING"
    )  # the failed attempt is over
    assert registry.record_baseline(baseline_result("10", SHA), attempt=2).status == "READY"


def test_listing_baselines(registry: Registry) -> None:
    registry.claim_baseline(BASE_MODEL, SHA)
    registry.claim_baseline(BASE_MODEL, OTHER_SHA)
    registry.claim_baseline(OTHER_BASE, SHA)
    registered(registry, "run1", 10)
    assert {b.eval_set_sha256 for b in registry.list_baselines(BASE_MODEL)} == {SHA, OTHER_SHA}
    assert [row.adapter_name for row in registry.list_adapters(BASE_MODEL)] == ["run1-step10"]
    with pytest.raises(InvalidName):
        registry.claim_baseline(BASE_MODEL, "not-a-sha")


def test_listing(registry: Registry) -> None:
    first = registered(registry, "run1", 10)
    registered(registry, "run2", 5, base=OTHER_BASE)
    registry.put_candidate(manifest("run1", 20), "k")
    registry.promote(BASE_MODEL, first, 0)
    assert [row.adapter_name for row in registry.list_adapters(BASE_MODEL)] == ["run1-step10", "run1-step20"]
    assert registry.list_base_models() == sorted([BASE_MODEL, OTHER_BASE])


def test_base_model_path() -> None:
    assert base_model_path(BASE_MODELS, BASE_MODEL) == BASE_MODELS[BASE_MODEL]
    with pytest.raises(UnknownBaseModel, match="known: qwen3-vl-8b-sft"):
        base_model_path(BASE_MODELS, "llama-9")
    with pytest.raises(InvalidName):
        base_model_path(BASE_MODELS, "../x")


def test_reopen_claims_each_later_attempt_once_and_only_from_a_finished_status(registry: Registry) -> None:
    registry.put_candidate(manifest("run1", 10), "k")
    with pytest.raises(AdapterNotReevaluable, match="is EVALUATING"):
        registry.reopen(BASE_MODEL, "run1-step10", 2)
    registry.set_status(BASE_MODEL, "run1-step10", "EVAL_FAILED", error="EvaluationJobFailed: lost node")
    assert registry.reopen(BASE_MODEL, "run1-step10", 2) is True
    row = registry.get_adapter(BASE_MODEL, "run1-step10")
    assert (row.status, row.eval_attempts, row.error) == ("EVALUATING", 2, None)
    registry.set_status(BASE_MODEL, "run1-step10", "REJECTED")
    assert registry.reopen(BASE_MODEL, "run1-step10", 2) is False  # that attempt ran already
    assert registry.get_adapter(BASE_MODEL, "run1-step10").status == "REJECTED"
    assert registry.reopen(BASE_MODEL, "run1-step10", 3) is True
    assert registry.get_adapter(BASE_MODEL, "run1-step10").eval_attempts == 3


def test_reopen_refuses_a_first_attempt_and_a_missing_row(registry: Registry) -> None:
    with pytest.raises(AdapterNotFound):
        registry.reopen(BASE_MODEL, "ghost-step1", 2)
    with pytest.raises(ValueError, match="first evaluation"):
        registry.reopen(BASE_MODEL, "ghost-step1", 1)
    with pytest.raises(InvalidName):
        registry.reopen(BASE_MODEL, "ghost-step1", 1000)


def test_reopen_leaves_the_champion_alone(registry: Registry) -> None:
    adapter = registered(registry, "run1", 10)
    registry.promote(BASE_MODEL, adapter, expected_version=0)
    champion = registry.get_adapter(BASE_MODEL, adapter)
    with pytest.raises(AdapterNotReevaluable, match="is CHAMPION"):
        registry.reopen(BASE_MODEL, adapter, 2)
    assert registry.get_adapter(BASE_MODEL, adapter) == champion
    assert registry.get_champion(BASE_MODEL).champion == adapter
