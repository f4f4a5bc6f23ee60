"""What the training job hands SkyRL 0.4.0, PEFT 0.18.1 and vLLM 0.30.0 is accepted by the released code.

The launch overrides are built here from run specs; the scripts of tests/cluster_checks/ run them through the real
libraries in the tool venv `.venv-skyrl` (`make tools`; requirements-skyrl.lock): SkyRL's loader and validator,
PEFT on a tiny random Qwen3-VL with the loaded LoRA settings, and SkyRL's VLM generator playing the maze env.
The adapter's tensors are judged by vLLM 0.30.0's LoRA rules for Qwen3-VL, read from the cluster lock's vllm
wheel (tests/cluster_wheels.py). What needs GPUs or a Ray cluster (Ray start, the placement group, model
loading, vLLM itself) is left to the cluster.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cluster_wheels import locked_versions, normalize, unpacked_wheel
from safetensors import safe_open

from cluster_jobs.maze.dataset import write_training_dataset
from cluster_jobs.maze.generator import generate_maze
from cluster_jobs.train.skyrl_launch import LORA_EXCLUDE_MODULES, TrainPaths, skyrl_overrides
from mazeops.runspec import NormalizedRunSpec, parse_run_spec
from tests.cluster_checks.vllm_lora_rules import problems, read_rules

ROOT = Path(__file__).resolve().parents[1]
TOOL_PYTHON = ROOT / ".venv-skyrl" / "bin" / "python"
CHECKS = ROOT / "tests" / "cluster_checks"
TINY_MODEL = ROOT / "local_stack" / "cluster_standins" / "models" / "tiny-qwen3-vl-maze7"
BASE_MODELS = {"qwen3-vl-8b-sft": "/shared/models/qwen3-vl-8b-sft"}
TARGETS = "trainer.policy.model.lora.target_modules="
TEXT_PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
LANGUAGE_MODEL_KEY_PREFIX = "base_model.model.model.language_model."  # PEFT wrapper + Qwen3VLModel.language_model

# Run-spec variants (fields over the defaults) that each reach a different part of the launch overrides.
SPEC_VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "lora_listed": {"lora": {"target_modules": ["q_proj", "v_proj"]}},
    "lora_text_projections": {"lora": {"rank": 16, "alpha": 32, "target_modules": TEXT_PROJECTIONS}},
    "dynamic_sampling_filter": {"dynamic_sampling": "filter", "dynamic_sampling_max_batches": 5},
    "dual_clip": {"policy_loss_type": "dual_clip", "clip_ratio_c": 5.0},
    "sequence_mean": {"loss_reduction": "sequence_mean"},
    "cosine_with_warmup": {"lr_scheduler": "cosine", "lr_warmup_steps": 10, "learning_rate": 1e-5},
    "linear_schedule": {"lr_scheduler": "linear"},
    "kl_loss": {"use_kl_loss": True, "kl_loss_coef": 0.01},
    "dr_grpo": {"grpo_norm_by_std": False},
    "turn_cost": {"turn_cost": 0.02, "max_turns": 31},
    "two_update_epochs": {"update_epochs_per_batch": 2},
    "batch_96_mini_24": {"train_batch_size": 96, "policy_mini_batch_size": 24},
    "one_gpu": {"num_gpus": 1},
    "one_node": {"num_gpus": 2},
    "two_nodes_of_8": {"num_gpus": 16, "gpus_per_node": 8},
}


def spec_of(variant: dict[str, Any]) -> NormalizedRunSpec:
    """A run spec with ``variant``'s fields, parsed as an uploaded spec is (InvalidRunSpec if refused)."""
    return parse_run_spec(json.dumps({"base_model_id": "qwen3-vl-8b-sft", **variant}), "maze-grpo-demo", BASE_MODELS)


def overrides_of(spec: NormalizedRunSpec) -> list[str]:
    """The launch's SkyRL overrides for ``spec``."""
    return skyrl_overrides(spec, TrainPaths.for_run(spec))


def with_targets(overrides: list[str], value: str) -> list[str]:
    """``overrides`` with the LoRA target_modules override replaced by ``value``."""
    return [TARGETS + value if item.startswith(TARGETS) else item for item in overrides]


def tool_python() -> Path:
    """The tool venv's interpreter; outside CI a missing tool venv skips (CI must have it: `make test` builds it)."""
    if not TOOL_PYTHON.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{TOOL_PYTHON} is missing: `make tools` should have installed it")
        pytest.skip(f"{TOOL_PYTHON} is missing: run `make tools`")
    return TOOL_PYTHON


def run_check(script: str, request: dict[str, Any], timeout: int = 180) -> dict[str, Any]:
    """Run ``tests/cluster_checks/<script>`` in the tool venv with ``request`` on stdin; return its JSON result."""
    done = subprocess.run(
        [str(tool_python()), str(CHECKS / script)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"},
    )
    if done.returncode != 0 or not done.stdout.strip():
        pytest.fail(f"{script} exited {done.returncode}:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def assert_loaded_like_spec(loaded: dict[str, Any], spec: NormalizedRunSpec) -> None:
    """SkyRL's loaded config carries the spec's values, with their types."""
    lora = loaded["lora"]
    assert (lora["rank"], lora["alpha"]) == (spec.lora.rank, spec.lora.alpha)
    if isinstance(spec.lora.target_modules, list):
        assert lora["target_modules"] == spec.lora.target_modules, (
            f"target_modules must reach PEFT as the list {spec.lora.target_modules}, got {lora['target_modules']!r}"
        )
    else:
        assert lora["target_modules"] == "all-linear"
    assert lora["exclude_modules"] == LORA_EXCLUDE_MODULES == ".*visual.*"
    placement = loaded["placement"]
    assert placement["policy_num_nodes"] * placement["policy_num_gpus_per_node"] == spec.num_gpus
    assert placement["policy_num_gpus_per_node"] <= spec.gpus_per_node
    assert placement["num_engines"] == spec.num_gpus
    assert loaded["algorithm"] == {
        "policy_loss_type": spec.policy_loss_type,
        "loss_reduction": spec.loss_reduction,
        "grpo_norm_by_std": spec.grpo_norm_by_std,
        "use_kl_loss": spec.use_kl_loss,
        "dynamic_sampling": spec.dynamic_sampling,
    }
    assert loaded["optimizer"] == {
        "lr": pytest.approx(spec.learning_rate),
        "scheduler": spec.lr_scheduler,
        "num_warmup_steps": spec.lr_warmup_steps,
    }
    assert (loaded["env_class"], loaded["vision_language_generator"]) == ("maze2d", True)


# --- 1. the launch overrides, through SkyRL's loader and validator ---

PLANTED = {
    "misspelled_key": lambda o: [*o, "trainer.policy.model.lora.target_module=[q_proj,v_proj]"],
    "targets_as_one_string": lambda o: with_targets(o, "q_proj,v_proj"),
    "unknown_policy_loss": lambda o: [*o, "trainer.algorithm.policy_loss_type=dual_clipp"],
    "engines_not_matching_gpus": lambda o: [*o, "generator.inference_engine.num_engines=5"],
}


@pytest.fixture(scope="module")
def config_results() -> dict[str, Any]:
    """Every spec variant's overrides and the planted bad ones, checked in one run of the tool venv."""
    cases = {name: overrides_of(spec_of(variant)) for name, variant in SPEC_VARIANTS.items()}
    listed = cases["lora_listed"]
    cases |= {f"planted:{name}": plant(listed) for name, plant in PLANTED.items()}
    return run_check("check_skyrl_config.py", {"cases": cases})


@pytest.mark.parametrize("name", SPEC_VARIANTS)
def test_each_run_spec_variant_is_accepted_by_skyrl(config_results: dict[str, Any], name: str) -> None:
    result = config_results[name]
    if not result["ok"]:
        pytest.fail(f"SkyRL 0.4.0 refuses the launch overrides of {name}: {result['error']}")
    assert_loaded_like_spec(result["loaded"], spec_of(SPEC_VARIANTS[name]))


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("misspelled_key", "Invalid fields {'target_module'} for SkyRLLoraConfig"),
        ("unknown_policy_loss", "invalid policy_loss_type: dual_clipp"),
        ("engines_not_matching_gpus", "num_policy_gpus (6) and num_rollout_gpus (5) must be the same"),
    ],
)
def test_a_planted_bad_override_is_refused_with_skyrls_message(
    config_results: dict[str, Any], name: str, message: str
) -> None:
    result = config_results[f"planted:{name}"]
    assert not result["ok"], f"SkyRL accepted the planted {name}"
    assert message in result["error"]


def test_target_modules_as_one_string_fails_the_loaded_config_check(config_results: dict[str, Any]) -> None:
    result = config_results["planted:targets_as_one_string"]
    assert result["ok"] and result["loaded"]["lora"]["target_modules"] == "q_proj,v_proj"  # SkyRL takes any str
    with pytest.raises(AssertionError, match="must reach PEFT as the list"):
        assert_loaded_like_spec(result["loaded"], spec_of(SPEC_VARIANTS["lora_listed"]))


# --- 2. the adapter PEFT 0.18.1 builds from the loaded LoRA settings, judged by vLLM 0.30.0's rules ---


@pytest.fixture(scope="module")
def vllm_rules() -> Any:
    """vLLM 0.30.0's LoRA rules for Qwen3-VL, from the cluster lock's wheel (`make tools` downloads it)."""
    try:
        return read_rules(unpacked_wheel("vllm"))
    except FileNotFoundError as missing:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(missing))


@pytest.fixture(scope="module")
def adapters(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Adapters for the default and listed specs, without the exclusion, and with a comma-separated string."""
    default = overrides_of(spec_of(SPEC_VARIANTS["default"]))
    cases = {
        "default": default,
        "lora_listed": overrides_of(spec_of(SPEC_VARIANTS["lora_listed"])),
        "without_exclusion": [item for item in default if "lora.exclude_modules=" not in item],
        "targets_as_one_string": with_targets(default, "q_proj,v_proj"),
    }
    request = {"model_dir": str(TINY_MODEL), "out_dir": str(tmp_path_factory.mktemp("adapters")), "cases": cases}
    return run_check("check_lora_adapter.py", request)


def adapter_keys(result: dict[str, Any]) -> list[str]:
    if not result["ok"]:
        pytest.fail(f"SkyRL/PEFT could not build the adapter: {result['error']}")
    with safe_open(str(Path(result["adapter_dir"]) / "adapter_model.safetensors"), framework="pt") as adapter:
        return list(adapter.keys())


def test_vllm_rules_are_read_from_the_wheel(vllm_rules: Any) -> None:
    assert vllm_rules.language_model == "language_model"
    assert vllm_rules.tower_model == ("visual.",) and "visual.merger" in vllm_rules.connector
    assert vllm_rules.prefix_renames["model.language_model."] == "language_model.model."
    assert vllm_rules.expected_text_modules == frozenset(TEXT_PROJECTIONS)
    assert vllm_rules.tower_lora_needs_flag  # SkyRL's engines never set enable_tower_connector_lora


@pytest.mark.parametrize(("name", "modules"), [("default", TEXT_PROJECTIONS), ("lora_listed", ["q_proj", "v_proj"])])
def test_the_adapter_covers_exactly_the_language_model_modules_vllm_loads(
    adapters: dict[str, Any], vllm_rules: Any, name: str, modules: list[str]
) -> None:
    keys = adapter_keys(adapters[name])
    assert keys and not [key for key in keys if "visual" in key]
    assert all(key.startswith(LANGUAGE_MODEL_KEY_PREFIX) for key in keys)
    assert {key.rsplit(".", 3)[-3] for key in keys} == set(modules)
    assert problems(keys, vllm_rules) == []
    config = json.loads((Path(adapters[name]["adapter_dir"]) / "adapter_config.json").read_text())
    assert config["exclude_modules"] == ".*visual.*" and config["r"] == 32


def test_without_the_exclusion_peft_puts_lora_on_the_vision_tower(adapters: dict[str, Any], vllm_rules: Any) -> None:
    wrapped = adapters["without_exclusion"]["wrapped_modules"]
    assert "base_model.model.model.visual.blocks.0.attn.qkv" in wrapped
    assert "base_model.model.model.visual.merger.linear_fc1" in wrapped
    found = problems(adapter_keys(adapters["without_exclusion"]), vllm_rules)
    assert found and all("outside the language model" in problem for problem in found)
    assert any("visual.blocks.0.attn.qkv" in problem for problem in found)


def test_target_modules_as_one_string_reaching_peft_fails(adapters: dict[str, Any]) -> None:
    result = adapters["targets_as_one_string"]
    assert not result["ok"]
    assert "No modules were targeted for adaptation" in result["error"]


# --- 3. SkyRL's VLM generator plays the maze env ---


def test_skyrls_vlm_generator_plays_the_maze_env_to_its_reward(tmp_path: Path) -> None:
    spec = spec_of({"turn_cost": 0.02, "max_turns": 31, "n_samples_per_prompt": 2})
    data = tmp_path / "train.jsonl"
    write_training_dataset(data, n=2, size=spec.maze.size, max_turns=spec.max_turns, turn_cost=spec.turn_cost)
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    request = {"overrides": overrides_of(spec), "tokenizer_dir": str(TINY_MODEL), "rows": rows}
    result = run_check("check_vlm_generator.py", request)
    if not result["ok"]:
        pytest.fail(f"SkyRL's VLM generator failed on the maze env: {result['error']}")

    turns = [len(generate_maze(spec.maze.size, row["seed"]).shortest_path()) for row in rows for _ in range(2)]
    # A solved episode's reward with a turn cost (tests/test_maze_skyrl_env.py): the path's moves, then stop.
    expected = [0.8 * (1 - spec.turn_cost * n) + 0.2 for n in turns]
    assert [sum(rewards) for rewards in result["rewards"]] == pytest.approx(expected)
    assert [sum(1 for r in rewards if r) for rewards in result["rewards"]] == [1, 1, 1, 1]  # on the last token only
    assert result["stop_reasons"] == ["stop"] * 4
    assert result["env_metrics"] == [{"turns": n, "solved": True, "format_score": 1.0} for n in turns]
    assert result["turns"] == sum(turns)


# --- the tool venv holds the cluster's releases ---


def test_the_tool_venv_has_the_cluster_locks_versions() -> None:
    listing = "import json, importlib.metadata as m; print(json.dumps({d.name: d.version for d in m.distributions()}))"
    done = subprocess.run([str(tool_python()), "-c", listing], capture_output=True, text=True, check=True, timeout=60)
    installed = {normalize(name): re.sub(r"\+.*", "", version) for name, version in json.loads(done.stdout).items()}
    cluster = {name: versions[0] for name, versions in locked_versions().items()}
    for name in ("skyrl", "skyrl-gym", "peft", "transformers", "ray", "torch", "omegaconf", "pydantic"):
        assert installed[name] == cluster[name], f"{name}: tool venv {installed[name]}, cluster {cluster[name]}"
    # networkx 3.7 (the cluster's) needs Python >= 3.12 (torch's, not read by the checks); pip and setuptools are
    # the installer's own.
    differing = {n for n in installed.keys() & cluster.keys() if installed[n] != cluster[n]}
    differing -= {"networkx", "pip", "setuptools"}
    assert not differing, {n: (installed[n], cluster[n]) for n in sorted(differing)}
