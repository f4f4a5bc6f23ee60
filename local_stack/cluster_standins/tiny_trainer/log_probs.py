"""Token log-probs of encoded chat-plus-answer sequences under the tiny Qwen3-VL, at the sampling temperature."""

from __future__ import annotations

import torch
from peft import PeftModel
from transformers import BatchFeature


def with_rope_positions(model: PeftModel, inputs: BatchFeature) -> BatchFeature:
    """``inputs`` with Qwen3-VL's multimodal rotary positions (``position_ids``) added, computed once.

    Without them every forward pass recomputes them, in Python, sequence by sequence (the model's
    ``get_rope_index``); a micro-batch runs through the model up to four times (sampling policy,
    reference, two update passes), so it is computed here once for all of them.
    """
    positions, _ = model.get_base_model().model.get_rope_index(
        inputs["input_ids"],
        mm_token_type_ids=inputs["mm_token_type_ids"],
        image_grid_thw=inputs.get("image_grid_thw"),
        attention_mask=inputs["attention_mask"],
    )
    return BatchFeature({**inputs, "position_ids": positions})


def token_log_probs(model: torch.nn.Module, inputs: BatchFeature, temperature: float) -> torch.Tensor:
    """``[batch, length - 1]``: the log-prob of token ``j + 1`` of each sequence under ``model`` at ``temperature``.

    The logits are divided by ``temperature`` first: the distribution the sampler drew from (and
    the one SkyRL's loss scores).
    """
    logits = model(**inputs.to(model.device)).logits[:, :-1].float() / temperature
    targets = inputs["input_ids"][:, 1:]
    return torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
