"""The tiny Qwen3-VL: builds once, loads with the real loading code, generates deterministically."""

from __future__ import annotations

import pytest
import torch

from cluster_jobs.maze.env import MazeEpisode
from cluster_jobs.maze.generator import generate_maze
from cluster_jobs.maze.prompt import SYSTEM_PROMPT, observation_message
from cluster_jobs.models.loading import Qwen3VLImageProcessor, encode_conversations, load_base_model
from cluster_jobs.models.policy import VisionPolicy
from local_stack.cluster_standins.tiny_model import SPECIAL_TOKENS, build_tiny_qwen3_vl


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    return build_tiny_qwen3_vl(tmp_path_factory.mktemp("tiny") / "base")


def _chats(seeds):
    return [
        [
            {"role": "system", "content": SYSTEM_PROMPT},
            observation_message(MazeEpisode(generate_maze(9, s)).observation(), True),
        ]
        for s in seeds
    ]


def test_build_is_idempotent(base_dir):
    weights = base_dir / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    assert build_tiny_qwen3_vl(base_dir) == base_dir
    assert weights.stat().st_mtime_ns == stamp


def test_same_seed_same_weights_other_seed_other_weights(base_dir, tmp_path):
    again = build_tiny_qwen3_vl(tmp_path / "again", seed=0)
    other = build_tiny_qwen3_vl(tmp_path / "other", seed=1)
    assert (again / "model.safetensors").read_bytes() == (base_dir / "model.safetensors").read_bytes()
    assert (other / "model.safetensors").read_bytes() != (base_dir / "model.safetensors").read_bytes()


def test_loads_small_model_float32_on_cpu(base_dir):
    model, processor = load_base_model(base_dir, device="cpu")
    assert model.dtype == torch.float32 and not model.training
    assert type(model).__name__ == "Qwen3VLForConditionalGeneration"
    assert len(processor.tokenizer) <= 600 and model.config.text_config.vocab_size == len(processor.tokenizer)
    assert isinstance(processor, Qwen3VLImageProcessor)  # no torchvision here
    assert all(processor.tokenizer.convert_tokens_to_ids(t) != processor.tokenizer.unk_token_id for t in SPECIAL_TOKENS)
    assert model.config.image_token_id == processor.image_token_id
    assert sum(p.numel() for p in model.parameters()) < 1_000_000


def test_an_explicit_dtype_wins_over_the_devices_default(base_dir):
    model, _ = load_base_model(base_dir, device="cpu", dtype=torch.bfloat16)
    assert model.dtype == torch.bfloat16 and all(p.dtype == torch.bfloat16 for p in model.parameters())


def test_maze_image_gives_16_image_tokens_matching_the_vision_tower(base_dir):
    model, processor = load_base_model(base_dir, device="cpu")
    batch = encode_conversations(processor, _chats([0]))
    n_image_tokens = int((batch["input_ids"] == processor.image_token_id).sum())
    assert n_image_tokens == 16
    with torch.inference_mode():
        features = model.model.get_image_features(batch["pixel_values"], batch["image_grid_thw"])
    embeds = features.pooler_output if hasattr(features, "pooler_output") else features[0]
    assert sum(e.shape[0] for e in embeds) == n_image_tokens


def test_greedy_generation_is_deterministic(base_dir):
    policy = VisionPolicy.load(base_dir, device="cpu")
    chats = _chats([0, 1])
    first = policy.generate(chats, max_new_tokens=12)
    assert first == policy.generate(chats, max_new_tokens=12)
    assert len(first) == 2 and all(isinstance(answer, str) and answer for answer in first)


def test_image_and_vision_tokens_are_never_generated(base_dir):
    """Only the vision tokens get non-zero logits (one of each sign pair is positive); suppressed, token 0 wins."""
    policy = VisionPolicy.load(base_dir, device="cpu")
    tokenizer = policy.processor.tokenizer
    head = policy.model.lm_head.weight
    with torch.no_grad():
        direction = torch.randn(head.shape[1])
        head.zero_()
        head[tokenizer.convert_tokens_to_ids("<|image_pad|>")] = direction
        head[tokenizer.convert_tokens_to_ids("<|vision_start|>")] = -direction
    answers = policy.generate(_chats([0]), max_new_tokens=3)
    assert answers == [tokenizer.decode([0, 0, 0])]
