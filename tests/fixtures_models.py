"""Test helpers for model code: a tiny PEFT LoRA adapter on the tiny Qwen3-VL, its upload to S3, and
a stand-in model that always predicts the next token.

Reusable from any test module: ``from tests.fixtures_models import make_tiny_adapter, upload_adapter``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForImageTextToText

from mazeops.layout import ADAPTER_FILES, adapter_manifest_key, adapter_prefix
from mazeops.manifest import AdapterManifest, digest_adapter_dir
from mazeops.names import adapter_name

DEFAULT_TARGET_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def make_tiny_adapter(
    base_dir: Path,
    out_dir: Path,
    rank: int = 4,
    seed: int = 0,
    alpha: int | None = None,
    target_modules: list[str] | str = DEFAULT_TARGET_MODULES,
) -> PeftModel:
    """Save a LoRA adapter for the model in ``base_dir`` (e.g. the tiny Qwen3-VL) to ``out_dir``.

    The LoRA weights are random (``init_lora_weights=False``, seeded by ``seed``), so the adapter
    visibly changes the model's outputs. ``alpha`` defaults to ``2 * rank``. ``out_dir`` gets
    ``adapter_config.json`` and ``adapter_model.safetensors`` (PEFT's ``save_pretrained``), whose
    ``base_model_name_or_path`` is ``str(base_dir)``.

    Returns:
        The PEFT model in memory (eval mode), to compare against a reloaded adapter.
    """
    base = AutoModelForImageTextToText.from_pretrained(base_dir, dtype=torch.float32)
    config = LoraConfig(
        r=rank,
        lora_alpha=alpha if alpha is not None else 2 * rank,
        target_modules=target_modules,
        init_lora_weights=False,
    )
    torch.manual_seed(seed)
    model = get_peft_model(base, config).eval()
    model.save_pretrained(out_dir)
    return model


def upload_adapter(
    s3: Any,
    bucket: str,
    run_id: str,
    step: int,
    adapter_dir: Path,
    base_model_id: str = "tiny-qwen3-vl",
    manifest_fields: dict[str, Any] | None = None,
) -> str:
    """Upload the adapter files of ``adapter_dir`` and then their manifest, as the checkpoint sync does.

    The manifest's digests, rank and alpha are those of the local files; ``manifest_fields``
    overrides any manifest field (to build inconsistent manifests). Returns the manifest key.
    """
    config = json.loads((adapter_dir / ADAPTER_FILES[0]).read_text())
    manifest = {
        "run_id": run_id,
        "step": step,
        "adapter_name": adapter_name(run_id, step),
        "base_model_id": base_model_id,
        "lora_rank": config["r"],
        "lora_alpha": config["lora_alpha"],
        "files": digest_adapter_dir(adapter_dir),
        "created_at": "2026-12-02T16:00:00Z",
    } | (manifest_fields or {})
    for name in ADAPTER_FILES:
        s3.upload_file(str(adapter_dir / name), bucket, adapter_prefix(run_id, step) + name)
    key = adapter_manifest_key(run_id, step)
    s3.put_object(Bucket=bucket, Key=key, Body=AdapterManifest(**manifest).to_json().encode())
    return key


class PerfectNextToken(torch.nn.Module):
    """A model whose logits put all mass on the true next token of its input (teacher-forced perfect)."""

    device = torch.device("cpu")

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab

    def forward(self, input_ids: torch.Tensor, **_: Any) -> Any:
        logits = torch.full((*input_ids.shape, self.vocab), -1e4)
        logits[:, :-1].scatter_(-1, input_ids[:, 1:, None], 1e4)
        return type("Out", (), {"logits": logits})()


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """As many intra-op torch threads as the tiny backend runs with (one, `tiny_trainer.train.TORCH_THREADS`): on a
    busy 2-core host, spinning OpenMP threads make the tiny model several times slower."""
    import torch

    from local_stack.cluster_standins.tiny_trainer.train import TORCH_THREADS

    threads = torch.get_num_threads()
    torch.set_num_threads(TORCH_THREADS)
    yield
    torch.set_num_threads(threads)
