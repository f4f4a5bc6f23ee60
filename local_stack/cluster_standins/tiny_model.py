"""A tiny Qwen3-VL with random weights, saved like a real checkpoint, for CPU tests and the local stack.

The real architecture at toy sizes with a 576-token tokenizer, so the loading, encoding, generation, LoRA and
evaluation code of Qwen3-VL-8B runs on it unchanged (docs/design.md). It answers nonsense.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    GenerationConfig,
    PreTrainedTokenizerFast,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
)
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
    Qwen2VLImageProcessorPil,
)
from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

from cluster_jobs.maze.env import MOVED_FEEDBACK, START_FEEDBACK, WALL_FEEDBACK
from cluster_jobs.maze.prompt import FIRST_TURN_TEXT, NEXT_TURN_TEXT, SYSTEM_PROMPT

TINY_BASE_MODEL_ID = "tiny-qwen3-vl"
# The tiny model's language-model projections: a LoRA there leaves the pretrained vision tower as it is.
LANGUAGE_MODEL_LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

PAD_TOKEN = "<|endoftext|>"
EOS_TOKEN = "<|im_end|>"
SPECIAL_TOKENS = (
    PAD_TOKEN,
    "<|im_start|>",
    EOS_TOKEN,
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
BPE_VOCAB_SIZE = 569  # 256 byte symbols + 313 merges; with SPECIAL_TOKENS 576 tokens
PATCH_SIZE = 8
MERGE_SIZE = 2
MIN_PIXELS = 32 * 32
MAX_PIXELS = 64 * 64
CELL_TOKEN_PX = PATCH_SIZE * MERGE_SIZE  # pixels a side of one merged image token
GENERATION_MAX_NEW_TOKENS = 24

# Texts the BPE merges are learnt from: the maze prompt, the feedback lines and the action format,
# so the prompts the tiny model reads stay short (about 220 tokens for the system prompt).
_BPE_CORPUS = (
    SYSTEM_PROMPT,
    FIRST_TURN_TEXT,
    NEXT_TURN_TEXT,
    START_FEEDBACK,
    MOVED_FEEDBACK,
    WALL_FEEDBACK,
    "<observation></observation><justification></justification><action>('move', 0)</action>",
    "('move', 1) ('move', 2) ('move', 3) ('stop', 'stop')",
)

# A Qwen-style chat template: image parts (type "image" or "image_url") become one vision block.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}"
    "{{- message['content'] -}}"
    "{%- else -%}"
    "{%- for part in message['content'] -%}"
    "{%- if part['type'] in ('image', 'image_url') -%}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif part['type'] == 'text' -%}"
    "{{- part['text'] -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- endif -%}"
)

# Files `save_pretrained` writes for the model and processor; all present means the build is complete.
_COMPLETE_MARKERS = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "chat_template.jinja",
    "preprocessor_config.json",
    "video_preprocessor_config.json",
)


@dataclass(frozen=True)
class TinyShape:
    """Sizes of the toy Qwen3-VL: text model width/depth, attention heads and the vision tower."""

    hidden: int = 64
    layers: int = 2
    heads: int = 2  # attention over ~450-token prompts is most of the CPU time
    kv_heads: int = 1
    head_dim: int = 16
    intermediate: int = 128
    vision_hidden: int = 32
    vision_depth: int = 1
    # Qwen3-VL-8B's 5e6 spreads 64 frequency pairs; over the 8 pairs of a 16-wide head it would leave
    # neighbouring maze columns 0.02 rad apart, so a toy model could not tell a cell from the next.
    rope_theta: float = 10.0

    def __post_init__(self) -> None:
        if self.head_dim % 4 or self.heads % self.kv_heads:
            raise ValueError(f"head_dim must be a multiple of 4 and heads of kv_heads: {self}")


DEFAULT_SHAPE = TinyShape()


def build_tiny_qwen3_vl(
    out_dir: Path, seed: int = 0, shape: TinyShape = DEFAULT_SHAPE, maze_size: int | None = None
) -> Path:
    """Save a loadable tiny Qwen3-VL (config, random weights, small byte-level BPE tokenizer, PIL image
    processor, chat template) to ``out_dir``; idempotent (skips if already complete).

    The same ``seed`` always gives the same weights; a complete build already in ``out_dir`` is
    returned as it is, whatever seed, shape or size made it (a trained checkpoint saved there too).
    ``maze_size`` (odd) sizes the image processor so one image token covers one cell of a maze of
    that size; None keeps the 64 x 64 default. Load it with
    :func:`cluster_jobs.models.loading.load_base_model`. Base model id used locally: ``"tiny-qwen3-vl"``.

    Returns:
        ``out_dir``.
    """
    out_dir = Path(out_dir)
    if all((out_dir / name).is_file() for name in _COMPLETE_MARKERS):
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = _build_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    if maze_size is None:
        min_pixels, max_pixels = MIN_PIXELS, MAX_PIXELS
    else:
        min_pixels = max_pixels = (maze_size * CELL_TOKEN_PX) ** 2
    image_processor = Qwen2VLImageProcessorPil(
        patch_size=PATCH_SIZE,
        merge_size=MERGE_SIZE,
        temporal_patch_size=2,
        min_pixels=min_pixels,
        max_pixels=max_pixels,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )
    video_processor = Qwen3VLVideoProcessor(patch_size=PATCH_SIZE, merge_size=MERGE_SIZE, temporal_patch_size=2)
    # A maze model gets one learnt position embedding per patch (2 x 2 patches per cell), not an
    # interpolation of the default 8 x 8 grid that blurs neighbouring cells together.
    position_grid = 8 if maze_size is None else 2 * maze_size
    config = _build_config(tokenizer, shape, position_grid)
    with torch.random.fork_rng():  # leave the caller's random state alone
        torch.manual_seed(seed)
        model = Qwen3VLForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(
        eos_token_id=[tokenizer.convert_tokens_to_ids(EOS_TOKEN), tokenizer.pad_token_id],
        pad_token_id=tokenizer.pad_token_id,
        max_new_tokens=GENERATION_MAX_NEW_TOKENS,
        do_sample=False,
    )
    # The processor's parts are saved one by one, as in a Hub checkpoint: Qwen3VLProcessor itself
    # cannot be built here because its video processor needs torchvision (see loading.load_processor).
    # The model's files come last: they mark the build complete.
    for part in (tokenizer, image_processor, video_processor):
        part.save_pretrained(out_dir)
    model.save_pretrained(out_dir)
    return out_dir


def _build_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE (GPT-2 / Qwen style) learnt from ``_BPE_CORPUS``, plus the Qwen special tokens."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB_SIZE,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_BPE_CORPUS, trainer)
    bpe.add_special_tokens(list(SPECIAL_TOKENS))
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        padding_side="left",
        model_max_length=32768,
    )


def _build_config(tokenizer: PreTrainedTokenizerFast, shape: TinyShape, position_grid: int) -> Qwen3VLConfig:
    """Toy sizes of the Qwen3-VL architecture (vision position embeddings on a ``position_grid`` square, interpolated
    to each image's patch grid); the special token ids come from ``tokenizer``."""
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS}
    # Interleaved M-RoPE (as Qwen3-VL): pair i rotates with height when i % 3 == 1, width when
    # i % 3 == 2, within each section; the sections sum to head_dim / 2.
    spatial = (shape.head_dim // 2 + 2) // 3
    return Qwen3VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": shape.hidden,
            "intermediate_size": shape.intermediate,
            "num_hidden_layers": shape.layers,
            "num_attention_heads": shape.heads,
            "num_key_value_heads": shape.kv_heads,
            "head_dim": shape.head_dim,
            "max_position_embeddings": 32768,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": shape.rope_theta,
                "mrope_section": [shape.head_dim // 2 - 2 * spatial, spatial, spatial],
                "mrope_interleaved": True,
            },
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config={
            "depth": shape.vision_depth,
            "hidden_size": shape.vision_hidden,
            "intermediate_size": 2 * shape.vision_hidden,
            "num_heads": 2,
            "patch_size": PATCH_SIZE,
            "spatial_merge_size": MERGE_SIZE,
            "temporal_patch_size": 2,
            "out_hidden_size": shape.hidden,
            "num_position_embeddings": position_grid**2,
            "deepstack_visual_indexes": [0],
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
