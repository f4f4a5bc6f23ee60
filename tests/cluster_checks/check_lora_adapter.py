"""The LoRA adapter SkyRL 0.4.0's FSDP worker would write for launch overrides, on a tiny random Qwen3-VL.

Request on stdin: ``{"model_dir": dir with a Qwen3-VL config.json, "out_dir": dir, "cases": {name: [overrides]}}``.
For each case the overrides go through SkyRL's loader and ``validate_cfg``; the loaded
``trainer.policy.model.lora`` then builds PEFT's ``LoraConfig`` exactly as skyrl 0.4.0
skyrl/backends/skyrl_train/workers/model_wrapper.py ``HFModelWrapper.__init__`` does (that module imports
flash-attn, so it cannot be imported on a CPU), on the model class it picks for a config with a vision config
(``AutoModelForImageTextToText``, built from the config: LoRA placement depends on the module tree only). The
adapter is collected with SkyRL's ``collect_lora_params`` and saved as the worker's ``_save_lora_adapters_and_sync``
saves it for vLLM (``adapter_model.safetensors`` and ``adapter_config.json``). Prints
``{name: {"ok", "error", "adapter_dir", "wrapped_modules"}}``.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import skyrl_py311  # noqa: F401 (before skyrl)
import torch
from check_io import describe, read_request, write_result
from peft import LoraConfig, TaskType, get_peft_model
from peft.tuners.lora import LoraLayer
from safetensors.torch import save_file
from skyrl.backends.skyrl_train.distributed.fsdp_utils import collect_lora_params
from skyrl.train.config import SkyRLTrainConfig
from skyrl.train.utils import validate_cfg
from transformers import AutoConfig, AutoModelForImageTextToText


def build_adapter(overrides: list[str], model_dir: Path, out_dir: Path) -> dict:
    """Apply the loaded LoRA config to a fresh tiny model and save the adapter to ``out_dir``."""
    cfg = SkyRLTrainConfig.from_cli_overrides(overrides)
    validate_cfg(cfg)
    lora = cfg.trainer.policy.model.lora
    torch.manual_seed(cfg.trainer.seed)
    model = AutoModelForImageTextToText.from_config(AutoConfig.from_pretrained(model_dir))
    model.enable_input_require_grads()
    lora_config = LoraConfig(
        task_type=TaskType.CAUSAL_LM,
        r=lora.rank,
        lora_alpha=lora.alpha,
        target_modules=lora.target_modules,
        exclude_modules=lora.exclude_modules,
        lora_dropout=lora.dropout,
        bias="none",
        init_lora_weights=True if lora.init_method == "kaiming" else lora.init_method,
    )
    peft_model = get_peft_model(model, lora_config)
    wrapped = sorted(name for name, module in peft_model.named_modules() if isinstance(module, LoraLayer))

    params = collect_lora_params(module=peft_model)
    peft_config = asdict(peft_model.peft_config["default"])
    peft_config["task_type"] = peft_config["task_type"].value
    peft_config["peft_type"] = peft_config["peft_type"].value
    peft_config["target_modules"] = list(peft_config["target_modules"])
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(params, str(out_dir / "adapter_model.safetensors"))
    (out_dir / "adapter_config.json").write_text(json.dumps(peft_config, ensure_ascii=False, indent=4))
    return {"ok": True, "adapter_dir": str(out_dir), "wrapped_modules": wrapped}


def main() -> None:
    request = read_request()
    model_dir, out_dir = Path(request["model_dir"]), Path(request["out_dir"])
    results = {}
    for name, overrides in request["cases"].items():
        try:
            results[name] = build_adapter(overrides, model_dir, out_dir / name)
        except Exception as error:  # the library's own refusal, reported to the test
            results[name] = {"ok": False, "error": describe(error)}
    write_result(results)


if __name__ == "__main__":
    main()
