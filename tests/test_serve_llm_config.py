"""The Ray Serve LLM config for the cluster: exact content, and field names checked against installed Ray 2.60.

`ray.serve.llm` itself cannot be imported here (it needs the cluster's packages), so the LLMConfig
field names are read from the installed source with `ast`; the deployment and Serve config parts
are validated with Ray's own (importable) schemas.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import ray
import yaml
from cluster_wheels import unpacked_wheel
from ray.llm._internal.common.placement import PlacementGroupConfig
from ray.serve._private.config import DeploymentConfig
from ray.serve.schema import ServeDeploySchema
from ray.util.accelerators import accelerators

from cluster_jobs.maze.eval_set import eval_set_for_size
from cluster_jobs.serve.llm_app import (
    SUPPORTED_MAX_LORA_RANKS,
    ServeConfigError,
    build_llm_config,
    build_serve_config,
    main,
    serving_lora_path,
)
from mazeops.names import InvalidName

BASE = "qwen3-vl-8b-sft"
LORA_PATH = "s3://artifacts-bucket/serving/qwen3-vl-8b-sft"
LLM_CONFIG_SOURCE = Path(ray.__file__).parent / "llm/_internal/serve/core/configs/llm_config.py"

EXPECTED_LLM_CONFIG = {
    "model_loading_config": {"model_id": BASE, "model_source": "/shared/models/qwen3-vl-8b-sft"},
    "accelerator_type": "RTX-PRO-6000",
    "lora_config": {"dynamic_lora_loading_path": LORA_PATH, "max_num_adapters_per_replica": 4},
    "engine_kwargs": {
        "enable_lora": True,
        "max_lora_rank": 32,
        "max_loras": 4,
        "limit_mm_per_prompt": {"image": 31, "video": 0},
        "max_model_len": 32768,
    },
    "placement_group_config": {"bundles": [{"GPU": 1, "serve_gpu": 1}]},
    "deployment_config": {"num_replicas": 1},
}


def _pydantic_fields(class_name: str) -> set[str]:
    """Annotated field names of a class in Ray's installed llm_config.py."""
    tree = ast.parse(LLM_CONFIG_SOURCE.read_text())
    (node,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name]
    return {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and not s.target.id.startswith("_")}


def test_llm_config_is_exact():
    config = build_llm_config(BASE, "/shared/models/qwen3-vl-8b-sft", serving_lora_path("artifacts-bucket", BASE))
    assert config == EXPECTED_LLM_CONFIG


def test_llm_config_field_names_exist_in_installed_ray():
    config = build_llm_config(BASE, "/shared/models/qwen3-vl-8b-sft", LORA_PATH)
    assert set(config) <= _pydantic_fields("LLMConfig")
    assert set(config["lora_config"]) <= _pydantic_fields("LoraConfig")
    assert set(config["model_loading_config"]) <= _pydantic_fields("ModelLoadingConfig")
    DeploymentConfig(**config["deployment_config"])  # raises on an unknown or invalid option
    # The model LLMConfig validates placement_group_config with (ray/llm/_internal/serve/engines/vllm/vllm_models.py).
    PlacementGroupConfig(**config["placement_group_config"])
    with pytest.raises(ValueError, match="must be a number"):
        PlacementGroupConfig(bundles=[{"GPU": 1, "serve_gpu": "one"}])


def _engine_args_fields() -> dict[str, str]:
    """Field name -> annotation source of vLLM's EngineArgs in the cluster lock's vLLM wheel."""
    source = (unpacked_wheel("vllm") / "vllm" / "engine" / "arg_utils.py").read_text()
    (node,) = [n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "EngineArgs"]
    return {s.target.id: ast.unparse(s.annotation) for s in node.body if isinstance(s, ast.AnnAssign)}


def test_engine_kwargs_are_arguments_of_the_locked_vllm():
    """Ray Serve LLM hands engine_kwargs to vLLM 0.30.0's EngineArgs; the rank must be one vLLM's LoRA config takes."""
    fields = _engine_args_fields()
    config = build_llm_config(BASE, "/shared/models/qwen3-vl-8b-sft", LORA_PATH)
    assert set(config["engine_kwargs"]) <= set(fields)
    assert fields["max_lora_rank"] == "MaxLoRARanks"
    ranks = (unpacked_wheel("vllm") / "vllm" / "config" / "lora.py").read_text()
    assert f"MaxLoRARanks = Literal[{', '.join(map(str, SUPPORTED_MAX_LORA_RANKS))}]" in ranks
    # vLLM has tower LoRA, off by default; the config leaves it off because adapters never carry it.
    assert "enable_tower_connector_lora" in fields and "enable_tower_connector_lora" not in config["engine_kwargs"]


def test_serving_is_sized_for_the_whole_conversation_on_the_reference_gpu():
    assert EXPECTED_LLM_CONFIG["accelerator_type"] == accelerators.NVIDIA_RTX_PRO_6000
    assert EXPECTED_LLM_CONFIG["engine_kwargs"]["limit_mm_per_prompt"]["image"] == eval_set_for_size(9).max_turns
    # No tower LoRA: adapters are trained without it (skyrl_launch.LORA_EXCLUDE_MODULES), and vLLM would drop it.
    assert "enable_tower_connector_lora" not in EXPECTED_LLM_CONFIG["engine_kwargs"]


def test_settings_flow_into_lora_and_engine():
    config = build_llm_config(
        BASE, "s3://models/qwen", LORA_PATH + "/", 8, max_lora_rank=64, accelerator_type="L40S", replicas=2
    )
    assert config["lora_config"] == {"dynamic_lora_loading_path": LORA_PATH, "max_num_adapters_per_replica": 8}
    assert config["engine_kwargs"]["max_loras"] == 8
    assert config["engine_kwargs"]["max_lora_rank"] == 64
    assert config["accelerator_type"] == "L40S"
    assert config["deployment_config"] == {"num_replicas": 2}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"lora_path": "s3://bkt/serving/other-model"}, "lora_path must be"),
        ({"lora_path": "/local/serving/qwen3-vl-8b-sft"}, "lora_path must be"),
        ({"model_source": ""}, "model_source"),
        ({"max_adapters_per_replica": 0}, "max_adapters_per_replica"),
        ({"max_lora_rank": 24}, "max_lora_rank"),
        ({"accelerator_type": "H1000"}, "accelerator type"),
        ({"replicas": 0}, "replicas"),
    ],
)
def test_bad_settings_are_refused(kwargs, message):
    arguments = {"base_model_id": BASE, "model_source": "/shared/m", "lora_path": LORA_PATH} | kwargs
    with pytest.raises(ServeConfigError, match=message):
        build_llm_config(**arguments)


def test_hostile_base_model_id_is_refused():
    with pytest.raises(InvalidName):
        build_llm_config("../etc", "/shared/m", "s3://bkt/serving/../etc")


def test_cli_writes_a_valid_serve_config(tmp_path):
    out = tmp_path / "serve_config.yaml"
    argv = ["--write-config", str(out), "--base-model-id", BASE, "--model-source", "/shared/models/qwen3-vl-8b-sft"]
    assert main(argv + ["--bucket", "artifacts-bucket"]) == 0
    document = yaml.safe_load(out.read_text())
    assert document == {
        "proxy_location": "EveryNode",
        "http_options": {"host": "0.0.0.0", "port": 8000},
        "applications": [
            {
                "name": "maze-llm",
                "route_prefix": "/",
                "import_path": "ray.serve.llm:build_openai_app",
                "args": {"llm_configs": [EXPECTED_LLM_CONFIG]},
            }
        ],
    }
    assert document == build_serve_config(EXPECTED_LLM_CONFIG)
    ServeDeploySchema.model_validate(document)


def test_cli_reports_bad_settings(tmp_path, capsys):
    out = tmp_path / "serve_config.yaml"
    argv = ["--write-config", str(out), "--base-model-id", BASE, "--model-source", "/shared/m", "--bucket", "bkt"]
    assert main(argv + ["--max-lora-rank", "7"]) == 2
    assert "max_lora_rank" in capsys.readouterr().err
    assert not out.exists()
