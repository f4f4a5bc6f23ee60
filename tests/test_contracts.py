"""The shared contracts: names, S3 layout, run spec, adapter manifest, evaluation result."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mazeops import layout, names
from mazeops.evalresult import EvalResult, InvalidEvalResult, MazeOutcome, parse_eval_result
from mazeops.manifest import AdapterManifest, InvalidManifest, digest_adapter_dir, parse_manifest, verify_adapter_dir
from mazeops.runspec import InvalidRunSpec, parse_run_spec

BASE_MODELS = {"qwen3-vl-8b-sft": "/shared/models/qwen3-vl-8b-sft"}

HOSTILE_NAMES = [
    "",
    "-leading",
    "trailing-",
    "UPPER",
    "../etc",
    "a/b",
    "a:b",
    "a b",
    "a;rm -rf",
    "x" * 41,
    "run\n",
    "ünï",
    None,
    42,
]


@pytest.mark.parametrize("value", HOSTILE_NAMES)
def test_hostile_run_ids_are_refused(value):
    with pytest.raises(names.InvalidName, match="invalid run id"):
        names.validate_run_id(value)


def test_names_round_trip():
    assert names.adapter_name("maze-grpo", 20) == "maze-grpo-step20"
    assert names.parse_adapter_name("maze-grpo-step20") == ("maze-grpo", 20)
    assert names.served_model_id("qwen3-vl-8b-sft", "maze-grpo-step20") == "qwen3-vl-8b-sft:maze-grpo-step20"
    assert names.training_job_id("r1") == "train-r1"
    assert names.eval_job_id("r1", 40) == "eval-r1-step40"


@pytest.mark.parametrize("value", ["r1-step0", "r1-step01", "r1-step", "r1", "../x-step1", "a:b-step1", "r1-step1/x"])
def test_bad_adapter_names_are_refused(value):
    with pytest.raises(names.InvalidName):
        names.parse_adapter_name(value)


@pytest.mark.parametrize("value", ["qwen:evil", "a/b", "../x", "", "-x"])
def test_bad_base_model_ids_are_refused(value):
    with pytest.raises(names.InvalidName):
        names.validate_base_model_id(value)


def test_layout_keys_round_trip():
    key = layout.adapter_manifest_key("r1", 20)
    assert key == "runs/r1/adapters/global_step_20/manifest.json"
    assert layout.parse_manifest_key(key) == ("r1", 20)
    assert layout.parse_request_key(layout.run_spec_request_key("r1")) == "r1"
    assert layout.eval_result_key("r1", 20) == "runs/r1/evals/global_step_20/result.json"
    assert layout.serving_adapter_prefix("base", "r1", 20) == "serving/base/r1-step20/"


@pytest.mark.parametrize(
    "key",
    [
        "requests/../x.json",
        "requests/a/b.json",
        "requests/UP.json",
        "requests/x.yaml",
        "runs/r1/adapters/global_step_01/manifest.json",
        "runs/r1/adapters/global_step_0/manifest.json",
        "runs/../adapters/global_step_1/manifest.json",
        "runs/r1/adapters/global_step_1/sub/manifest.json",
        "runs/r1/adapters/global_step_1/manifest.json.bak",
    ],
)
def test_layout_refuses_keys_outside_the_layout(key):
    with pytest.raises(names.InvalidName):
        if key.startswith("requests/"):
            layout.parse_request_key(key)
        else:
            layout.parse_manifest_key(key)


def test_run_spec_defaults_are_the_reference_run():
    from cluster_jobs.maze.eval_set import TRAINING_SEED_OFFSET

    spec = parse_run_spec(b'{"base_model_id": "qwen3-vl-8b-sft"}', "r1", BASE_MODELS)
    assert (spec.run_id, spec.backend, spec.lora.rank, spec.eval_interval, spec.ckpt_interval) == (
        "r1",
        "skyrl",
        32,
        10,
        20,
    )
    assert (spec.n_samples_per_prompt, spec.train_batch_size, spec.max_turns, spec.temperature) == (8, 32, 15, 0.7)
    # SkyRL's PPO clip range and KL coefficient; the KL loss off, as in the reference recipe
    assert (spec.eps_clip_low, spec.eps_clip_high, spec.use_kl_loss, spec.kl_loss_coef) == (0.2, 0.2, False, 0.001)
    assert (spec.update_epochs_per_batch, spec.seed) == (1, 42)
    assert spec.base_model_path == "/shared/models/qwen3-vl-8b-sft"
    assert spec.maze.seed_offset == TRAINING_SEED_OFFSET  # the cluster's first training seed, the SFT starts' mazes
    assert spec.turn_cost == 0.0  # VisGym's reward: a solve earns the same whatever its length
    assert (spec.lr_warmup_steps, spec.lr_scheduler) == (0, "constant_with_warmup")  # SkyRL's defaults


LR_SCHEDULERS = ["constant_with_warmup", "cosine", "linear"]
LR_SCHEDULER_ERROR = "lr_scheduler: Input should be 'constant_with_warmup', 'cosine' or 'linear'"


@pytest.mark.parametrize("name", LR_SCHEDULERS)
def test_run_spec_takes_the_lr_schedulers_of_skyrl_and_transformers(name):
    document = {"base_model_id": "qwen3-vl-8b-sft", "lr_scheduler": name}
    assert parse_run_spec(json.dumps(document), "r1", BASE_MODELS).lr_scheduler == name


@given(st.text(max_size=30).filter(lambda name: name not in LR_SCHEDULERS))
def test_run_spec_refuses_any_other_lr_scheduler_by_name(name):
    document = {"base_model_id": "qwen3-vl-8b-sft", "lr_scheduler": name}
    with pytest.raises(InvalidRunSpec, match=f"^run spec is invalid: {LR_SCHEDULER_ERROR}$"):
        parse_run_spec(json.dumps(document), "r1", BASE_MODELS)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"not json", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"base_model_id": "nope"}', "unknown base model 'nope'"),
        (b'{"base_model_id": "qwen3-vl-8b-sft", "lr": 1}', "lr: Extra inputs are not permitted"),
        (b'{"base_model_id": "qwen3-vl-8b-sft", "run_name": "other"}', "differs from the key's run id"),
        (b'{"base_model_id": "qwen3-vl-8b-sft", "maze": {"size": 10}}', "maze.size"),
        (b'{"base_model_id": "qwen3-vl-8b-sft", "lora": {"rank": 0}}', "lora.rank"),
        (
            b'{"base_model_id": "qwen3-vl-8b-sft", "maze": {"seed_offset": 63}}',
            "maze.seed_offset: Input should be greater than or equal to 64",
        ),
        (b'{"base_model_id": "qwen3-vl-8b-sft", "shared_dir": "/shared/../etc"}', "must not contain '..'"),
        (b'{"base_model_id": "qwen3-vl-8b-sft", "turn_cost": 0.07}', "max_turns must be below 1"),
        (b'{"base_model_id": "qwen3-vl-8b-sft", "turn_cost": 0.02, "max_turns": 50}', "got 0.02 "),
        (
            b'{"base_model_id": "qwen3-vl-8b-sft", "turn_cost": -0.01}',
            "turn_cost: Input should be greater than or equal to 0",
        ),
        (b'{"base_model_id": "qwen3-vl-8b-sft", "turn_cost": NaN}', "turn_cost: Input should be a finite number"),
        (b'{"base_model_id": "qwen3-vl-8b-sft", "train_batch_size": 30}', "multiple of policy_mini_batch_size"),
        (b'{"base_model_id": "qwen3-vl-8b-sft", "backend": "slurm"}', "backend"),
        (b'{"base_model_id": "qwen3-vl-8b-sft", "eps_clip_low": 1.0}', "eps_clip_low: Input should be less than 1"),
        (b'{"base_model_id": "qwen3-vl-8b-sft", "eps_clip_high": 0}', "eps_clip_high: Input should be greater than 0"),
        (
            b'{"base_model_id": "qwen3-vl-8b-sft", "update_epochs_per_batch": 0}',
            "update_epochs_per_batch: Input should be greater than or equal to 1",
        ),
        (b'{"base_model_id": "qwen3-vl-8b-sft", "use_kl_loss": "yes"}', "use_kl_loss: Input should be a valid boolean"),
        (b'{"base_model_id": "qwen3-vl-8b-sft", "kl_loss_coef": -0.1}', "kl_loss_coef: Input should be greater than"),
        # transformers' `constant` would ignore lr_warmup_steps; restarts have no place in a run that decays once
        (b'{"base_model_id": "qwen3-vl-8b-sft", "lr_scheduler": "constant"}', LR_SCHEDULER_ERROR),
        (b'{"base_model_id": "qwen3-vl-8b-sft", "lr_scheduler": "cosine_with_restarts"}', LR_SCHEDULER_ERROR),
        (b'{"base_model_id": "qwen3-vl-8b-sft", "lr_scheduler": "Cosine"}', LR_SCHEDULER_ERROR),
        (b'{"base_model_id": "qwen3-vl-8b-sft", "lr_scheduler": null}', LR_SCHEDULER_ERROR),
        (b"\xff\xfe", "not valid JSON"),
        (b" " * (64 * 1024 + 1), "the limit is 65536"),
    ],
)
def test_bad_run_specs_get_clear_errors(raw, message):
    with pytest.raises(InvalidRunSpec, match=message.replace("(", r"\(").replace(".", r"\.")):
        parse_run_spec(raw, "r1", BASE_MODELS)


def _write_adapter(directory, rank=32, alpha=64):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "adapter_config.json").write_text(json.dumps({"r": rank, "lora_alpha": alpha}))
    (directory / "adapter_model.safetensors").write_bytes(b"weights" * 10)
    return directory


def _manifest_for(directory, **overrides):
    fields = {
        "run_id": "r1",
        "step": 20,
        "adapter_name": "r1-step20",
        "base_model_id": "qwen3-vl-8b-sft",
        "lora_rank": 32,
        "lora_alpha": 64,
        "files": digest_adapter_dir(directory),
        "created_at": "2026-12-02T16:00:00Z",
    }
    fields.update(overrides)
    return AdapterManifest(**fields)


def test_manifest_round_trips_and_verifies(tmp_path):
    adapter = _write_adapter(tmp_path / "a")
    manifest = _manifest_for(adapter)
    parsed = parse_manifest(manifest.to_json())
    assert parsed == manifest
    assert json.loads(manifest.to_json())["schema"] == "maze-adapter/v1"
    verify_adapter_dir(parsed, adapter)


def test_manifest_catches_tampered_weights(tmp_path):
    adapter = _write_adapter(tmp_path / "a")
    manifest = _manifest_for(adapter)
    (adapter / "adapter_model.safetensors").write_bytes(b"weightz" * 10)
    with pytest.raises(InvalidManifest, match="adapter_model.safetensors does not match"):
        verify_adapter_dir(manifest, adapter)


def test_manifest_catches_rank_mismatch(tmp_path):
    adapter = _write_adapter(tmp_path / "a", rank=16)
    manifest = _manifest_for(adapter)
    with pytest.raises(InvalidManifest, match="rank 16; the manifest says 32"):
        verify_adapter_dir(manifest, adapter)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"adapter_name": "r1-step40"}, "must be 'r1-step20'"),
        ({"run_id": "../x"}, "run_id"),
        ({"files": {}}, "files must be exactly"),
        ({"schema": "maze-adapter/v0"}, "schema"),
        ({"extra": 1}, "Extra inputs"),
    ],
)
def test_bad_manifests_get_clear_errors(tmp_path, change, message):
    document = json.loads(_manifest_for(_write_adapter(tmp_path / "a")).to_json())
    document.update(change)
    with pytest.raises(InvalidManifest, match=message):
        parse_manifest(json.dumps(document))


def _eval_document(outcomes):
    solved = sum(outcomes)
    return {
        "schema": "maze-eval/v1",
        "run_id": "r1",
        "step": 20,
        "adapter_name": "r1-step20",
        "base_model_id": "qwen3-vl-8b-sft",
        "eval_set_sha256": "0" * 64,
        "n_total": len(outcomes),
        "n_solved": solved,
        "solve_rate": solved / len(outcomes),
        "outcomes": [{"seed": i, "solved": bool(s), "turns": 3, "error": None} for i, s in enumerate(outcomes)],
        "backend": "transformers",
        "started_at": "2026-12-02T16:00:00Z",
        "finished_at": "2026-12-02T16:01:00Z",
    }


def test_eval_result_round_trips():
    result = parse_eval_result(json.dumps(_eval_document([1, 0, 1, 1])))
    assert result.outcome_bits == "1011"
    assert result.seeds == [0, 1, 2, 3]
    assert parse_eval_result(result.to_json()) == result


def test_a_result_of_outcomes_derives_its_counts_and_equals_the_document():
    document = _eval_document([1, 0, 1, 1])
    fields = {name: value for name, value in document.items() if name not in ("n_total", "n_solved", "solve_rate")}
    outcomes = [MazeOutcome(**outcome) for outcome in fields.pop("outcomes")]
    fields.pop("schema")
    result = EvalResult.of_outcomes(outcomes, **fields)
    assert (result.n_total, result.n_solved, result.solve_rate) == (4, 3, 0.75)
    assert result == parse_eval_result(json.dumps(document))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"n_solved": 4}, "n_solved is 4 but 3"),
        ({"solve_rate": 0.5}, "solve_rate 0.5 is not"),
        ({"n_total": 5}, "n_total is 5 but there are 4"),
    ],
)
def test_inconsistent_eval_results_are_refused(change, message):
    document = _eval_document([1, 0, 1, 1])
    document.update(change)
    with pytest.raises(InvalidEvalResult, match=message):
        parse_eval_result(json.dumps(document))


def test_eval_result_refuses_duplicate_seeds():
    document = _eval_document([1, 0])
    document["outcomes"][1]["seed"] = 0
    with pytest.raises(InvalidEvalResult, match="each seed once"):
        parse_eval_result(json.dumps(document))


def test_manifest_refuses_an_adapter_config_that_is_not_an_object(tmp_path):
    adapter = _write_adapter(tmp_path / "a")
    (adapter / "adapter_config.json").write_text("[32]")
    manifest = _manifest_for(adapter)
    with pytest.raises(InvalidManifest, match="must be a JSON object, got list"):
        verify_adapter_dir(manifest, adapter)


def test_lambda_eval_set_seeds_are_the_fixed_eval_set():
    from cluster_jobs.maze.eval_set import load_eval_set
    from mazeops.evalresult import EVAL_SET_SEEDS

    assert list(EVAL_SET_SEEDS) == list(load_eval_set().seeds)


@pytest.mark.parametrize("value", [b"true", b'"5"', b"5.0"])
def test_run_spec_integers_are_strict(value):
    with pytest.raises(InvalidRunSpec, match="total_steps: Input should be a valid integer"):
        parse_run_spec(b'{"base_model_id": "qwen3-vl-8b-sft", "total_steps": ' + value + b"}", "r1", BASE_MODELS)
