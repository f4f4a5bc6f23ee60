"""The Ray Serve LLM application that serves the base model and its LoRA adapters on HyperPod (vLLM on GPUs).

This module only builds the configuration (it never imports vLLM or ``ray.serve.llm``), so it runs anywhere; the
local pipeline serves the same OpenAI-compatible interface with ``local_stack.cluster_standins.serve_app``.
Usage: ``python -m cluster_jobs.serve.llm_app --write-config serve_config.yaml ...``, then ``serve deploy``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml
from ray.util.accelerators import accelerators

from cluster_jobs.maze.eval_set import EVAL_SETS, eval_turn_budget
from mazeops.jobs import SERVE_GPU_RESOURCE
from mazeops.layout import serving_prefix
from mazeops.names import validate_base_model_id

APP_NAME = "maze-llm"
APP_IMPORT_PATH = "ray.serve.llm:build_openai_app"
SUPPORTED_MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's accepted `max_lora_rank` values
_ACCELERATOR_TYPES = {
    value for name, value in vars(accelerators).items() if not name.startswith("_") and isinstance(value, str)
}
# The reference GPU: NVIDIA RTX PRO 6000 Blackwell (ml.g7e.12xlarge), "RTX-PRO-6000" in Ray 2.60.
DEFAULT_ACCELERATOR_TYPE = accelerators.NVIDIA_RTX_PRO_6000
# A client shows the model the whole conversation, as SkyRL's VLM generator does (cluster_jobs.rollout): one image
# per turn, up to the longest evaluation budget of the project's sets (31 turns on 9x9).
MAX_IMAGES_PER_PROMPT = max(eval_turn_budget(size) for size in EVAL_SETS)
# Context for that conversation: 31 turns of image (a few hundred tokens at most for a 225 px maze), feedback and
# answer, well within what the reference GPU's 96 GB hold for Qwen3-VL-8B's KV cache.
MAX_MODEL_LEN = 32768


class ServeConfigError(ValueError):
    """A serving setting is out of range or inconsistent."""


def serving_lora_path(bucket: str, base_model_id: str) -> str:
    """Ray Serve LLM `dynamic_lora_loading_path` of one base model: `s3://<bucket>/serving/<base_model_id>`."""
    if not bucket or "/" in bucket:
        raise ServeConfigError(f"invalid bucket name {bucket!r}")
    return f"s3://{bucket}/{serving_prefix(base_model_id).rstrip('/')}"


def build_llm_config(
    base_model_id: str,
    model_source: str,
    lora_path: str,
    max_adapters_per_replica: int = 4,
    *,
    max_lora_rank: int = 32,
    max_images_per_prompt: int = MAX_IMAGES_PER_PROMPT,
    max_model_len: int = MAX_MODEL_LEN,
    accelerator_type: str = DEFAULT_ACCELERATOR_TYPE,
    replicas: int = 1,
) -> dict[str, Any]:
    """One Ray Serve LLM `LLMConfig` (as a plain dict) for `base_model_id` with dynamic LoRA loading.

    Each replica is one vLLM engine on one GPU whose placement bundle also asks for one `SERVE_GPU_RESOURCE`, which
    only the cluster's `gpu-serve` worker group has: replicas never hold a GPU the colocated trainer needs. Their
    number is fixed (`replicas`), so they hold their GPUs from deployment on and no scale-up ever waits for training.

    Args:
        base_model_id: the served id of the base model; adapters are `<base_model_id>:<adapter_name>`.
        model_source: base model weights: a path on the cluster, an `s3://` URI or a Hugging Face id.
        lora_path: `s3://<bucket>/serving/<base_model_id>` (see `serving_lora_path`).
        max_adapters_per_replica: adapters kept loaded per replica (also vLLM's `max_loras`).
        max_lora_rank: largest LoRA rank served (the reference run trains rank 32).
        max_images_per_prompt: vLLM `limit_mm_per_prompt` for images (one per turn of the whole conversation).
        accelerator_type: a Ray accelerator type, e.g. "RTX-PRO-6000", "H100", "L40S"; it must be the
            `gpu-serve` group's, which Ray reads off the GPU (`ray.io/accelerator-type`).
        replicas: Serve replicas, one `gpu-serve` GPU each.

    Raises:
        ServeConfigError: a setting is out of range or the LoRA path is not this base model's serving prefix.
        mazeops.names.InvalidName: `base_model_id` is not a valid base model id.
    """
    validate_base_model_id(base_model_id)
    if not model_source:
        raise ServeConfigError("model_source must be a path, an s3:// URI or a Hugging Face model id")
    expected_suffix = "/" + serving_prefix(base_model_id).rstrip("/")
    if not lora_path.startswith("s3://") or not lora_path.rstrip("/").endswith(expected_suffix):
        raise ServeConfigError(f"lora_path must be s3://<bucket>{expected_suffix}, got {lora_path!r}")
    if max_lora_rank not in SUPPORTED_MAX_LORA_RANKS:
        raise ServeConfigError(f"max_lora_rank must be one of {SUPPORTED_MAX_LORA_RANKS}, got {max_lora_rank}")
    if accelerator_type not in _ACCELERATOR_TYPES:
        raise ServeConfigError(f"unknown Ray accelerator type {accelerator_type!r}")
    for name, value in (
        ("max_adapters_per_replica", max_adapters_per_replica),
        ("max_images_per_prompt", max_images_per_prompt),
        ("max_model_len", max_model_len),
        ("replicas", replicas),
    ):
        if value < 1:
            raise ServeConfigError(f"{name} must be at least 1, got {value}")
    return {
        "model_loading_config": {"model_id": base_model_id, "model_source": model_source},
        "accelerator_type": accelerator_type,
        "lora_config": {
            "dynamic_lora_loading_path": lora_path.rstrip("/"),
            "max_num_adapters_per_replica": max_adapters_per_replica,
        },
        "engine_kwargs": {
            "enable_lora": True,
            "max_lora_rank": max_lora_rank,
            "max_loras": max_adapters_per_replica,
            "limit_mm_per_prompt": {"image": max_images_per_prompt, "video": 0},
            "max_model_len": max_model_len,
        },
        "placement_group_config": {"bundles": [{"GPU": 1, SERVE_GPU_RESOURCE: 1}]},
        "deployment_config": {"num_replicas": replicas},
    }


def build_serve_config(llm_config: dict[str, Any], http_port: int = 8000) -> dict[str, Any]:
    """A Serve config file (for `serve deploy` / `serve run`) with one OpenAI-compatible application at '/'."""
    return {
        "proxy_location": "EveryNode",
        "http_options": {"host": "0.0.0.0", "port": http_port},
        "applications": [
            {
                "name": APP_NAME,
                "route_prefix": "/",
                "import_path": APP_IMPORT_PATH,
                "args": {"llm_configs": [llm_config]},
            }
        ],
    }


def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Write the Ray Serve LLM config (dynamic LoRA) for the HyperPod cluster."
    )
    parser.add_argument("--write-config", type=Path, required=True, help="output YAML file")
    parser.add_argument("--base-model-id", required=True)
    parser.add_argument("--model-source", required=True, help="base model path on the cluster, s3:// URI or HF id")
    parser.add_argument("--bucket", required=True, help="artifacts bucket holding serving/<base_model_id>/")
    parser.add_argument("--max-adapters-per-replica", type=int, default=4)
    parser.add_argument("--max-lora-rank", type=int, default=32)
    parser.add_argument("--accelerator-type", default=DEFAULT_ACCELERATOR_TYPE)
    parser.add_argument("--replicas", type=int, default=1, help="one gpu-serve GPU each")
    parser.add_argument("--http-port", type=int, default=8000)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Write the Serve config named by `--write-config`; print the error and return 2 on bad settings."""
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    try:
        llm_config = build_llm_config(
            args.base_model_id,
            args.model_source,
            serving_lora_path(args.bucket, args.base_model_id),
            args.max_adapters_per_replica,
            max_lora_rank=args.max_lora_rank,
            accelerator_type=args.accelerator_type,
            replicas=args.replicas,
        )
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    args.write_config.write_text(yaml.safe_dump(build_serve_config(llm_config, args.http_port), sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
