"""Generation backends of the evaluation: base model + one LoRA adapter (none for a baseline), greedy, batched.

* ``transformers``: :class:`cluster_jobs.models.policy.VisionPolicy` (PEFT); any host, CPU included.
* ``vllm``: ``vllm.LLM`` with LoRA enabled and a ``LoRARequest``; GPU nodes of the cluster only
  (vLLM is not installed elsewhere; it is imported when this backend is built, never at import).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safetensors import safe_open
from transformers import GenerationConfig

from cluster_jobs.evaluate.artifacts import EvaluationRefused
from cluster_jobs.models.policy import AdapterIncompatible, VisionPolicy
from cluster_jobs.rollout import Generate

BACKENDS = ("vllm", "transformers")
# Answer budget when the base model's generation_config.json sets none: the SFT model writes
# <observation>, <justification> and <action> blocks every turn.
DEFAULT_MAX_NEW_TOKENS = 512
# vLLM's LoRAConfig accepts only these values of max_lora_rank.
VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)
# The module of Qwen3-VL's vision tower and its mergers (transformers' `Qwen3VLModel.visual`). vLLM 0.30.0 loads
# LoRA there only with `enable_tower_connector_lora` (vllm/lora/model_manager.py), which neither SkyRL's engines
# nor Ray Serve LLM set, so it would silently run an adapter's language half only.
VISION_TOWER_MODULE = "visual"


@dataclass(frozen=True)
class Lora:
    """The LoRA adapter an evaluation applies: its name, the directory of its verified files and its rank."""

    name: str
    directory: Path
    rank: int


def answer_budget(base_model_path: str | Path) -> int:
    """``max_new_tokens`` from the base model's ``generation_config.json``, else ``DEFAULT_MAX_NEW_TOKENS``."""
    try:
        config = GenerationConfig.from_pretrained(base_model_path)
    except OSError:
        return DEFAULT_MAX_NEW_TOKENS
    return config.max_new_tokens or DEFAULT_MAX_NEW_TOKENS


def transformers_generate(base_model_path: str | Path, lora: Lora | None, max_new_tokens: int) -> Generate:
    """Greedy generation with ``VisionPolicy`` and ``lora`` loaded through PEFT (None: the base model as it is).

    Raises:
        EvaluationRefused: if the adapter does not fit the base model (shapes, modules, unreadable weights).
    """
    policy = VisionPolicy.load(base_model_path)
    if lora is not None:
        try:
            policy.add_adapter(lora.name, lora.directory)
        except AdapterIncompatible as error:
            raise EvaluationRefused(str(error)) from None
    adapter = lora.name if lora is not None else None

    def generate(chats: list[list[dict]]) -> list[str]:
        return policy.generate(chats, adapter=adapter, max_new_tokens=max_new_tokens, temperature=0.0)

    return generate


def refuse_tower_lora(lora: Lora) -> None:
    """Refuse an adapter with LoRA weights on the vision tower, which vLLM would drop: its score would not be
    the trained policy's (training keeps LoRA off the tower: `cluster_jobs.train.skyrl_launch.LORA_EXCLUDE_MODULES`).

    Raises:
        EvaluationRefused: if any weight of the adapter lies under the vision tower.
    """
    with safe_open(lora.directory / "adapter_model.safetensors", framework="numpy") as weights:
        names = weights.keys()  # a safetensors file handle is not iterable
    tower = [name for name in names if VISION_TOWER_MODULE in name.split(".")]
    if tower:
        raise EvaluationRefused(
            f"adapter {lora.name} has {len(tower)} LoRA weights on the vision tower (e.g. {tower[0]}), which vLLM does "
            "not load: train with LoRA off the tower (exclude_modules) so rollouts, evaluation and serving run it"
        )


def vllm_engine_args(base_model_path: str | Path, lora_rank: int | None, images_per_prompt: int) -> dict[str, Any]:
    """Keyword arguments of ``vllm.LLM`` for one LoRA adapter of rank ``lora_rank`` (None: no LoRA) on
    ``base_model_path``.

    Raises:
        EvaluationRefused: if ``lora_rank`` exceeds the largest rank vLLM supports.
    """
    if lora_rank is None:
        return {"model": str(base_model_path), "limit_mm_per_prompt": {"image": images_per_prompt}}
    max_rank = next((rank for rank in VLLM_LORA_RANKS if rank >= lora_rank), None)
    if max_rank is None:
        raise EvaluationRefused(f"LoRA rank {lora_rank} is above vLLM's largest max_lora_rank {VLLM_LORA_RANKS[-1]}")
    return {
        "model": str(base_model_path),
        "enable_lora": True,
        "max_lora_rank": max_rank,
        "max_loras": 1,
        "limit_mm_per_prompt": {"image": images_per_prompt},
    }


def vllm_generate(
    base_model_path: str | Path, lora: Lora | None, images_per_prompt: int, max_new_tokens: int
) -> Generate:
    """Greedy batched chat generation with vLLM and ``lora`` as a ``LoRARequest`` (None: the base model as it is).

    Raises:
        EvaluationRefused: see :func:`refuse_tower_lora`.

    Only the cluster runs this (vLLM needs its GPUs); tests check it against a stand-in ``vllm`` module.
    """
    from vllm import LLM, SamplingParams
    from vllm.lora.request import LoRARequest

    if lora is not None:
        refuse_tower_lora(lora)

    llm = LLM(**vllm_engine_args(base_model_path, lora.rank if lora is not None else None, images_per_prompt))
    sampling = SamplingParams(temperature=0.0, max_tokens=max_new_tokens)
    request = LoRARequest(lora.name, 1, str(lora.directory)) if lora is not None else None

    def generate(chats: list[list[dict]]) -> list[str]:
        outputs = llm.chat(chats, sampling_params=sampling, lora_request=request, use_tqdm=False)
        return [output.outputs[0].text for output in outputs]

    return generate
