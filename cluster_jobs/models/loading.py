"""Load a Qwen3-VL base model and its processor, and turn OpenAI-style chats into model inputs.

The same code loads Qwen3-VL-8B on a GPU node and the tiny test model on a CPU
(:mod:`local_stack.cluster_standins.tiny_model`).
"""

from __future__ import annotations

import base64
import binascii
import functools
import io
import re
from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch
from PIL import Image, UnidentifiedImageError
from transformers import (
    AutoModelForImageTextToText,
    AutoProcessor,
    AutoTokenizer,
    BatchFeature,
    PreTrainedModel,
    ProcessorMixin,
    Qwen3VLProcessor,
)
from transformers.image_utils import make_flat_list_of_images
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from transformers.utils import is_torchvision_available

_DATA_URI = re.compile(r"data:image/(?P<format>[a-z0-9.+-]+);base64,(?P<payload>.*)", re.DOTALL | re.IGNORECASE)
MAX_IMAGE_PIXELS = 4096 * 4096
# Distinct images whose features RepeatedImageProcessor keeps: a 9x9 training step shows about 240,
# and one entry of the tiny model's 144x144 input is 0.5 MB.
IMAGE_CACHE_SIZE = 512


class InvalidConversation(ValueError):
    """A chat is not a list of OpenAI-style messages with text and data-URI image parts."""


class Qwen3VLImageProcessor(Qwen3VLProcessor):
    """Qwen3VLProcessor for images and text only, for hosts without torchvision.

    Qwen3-VL's video processor needs torchvision, which the CPU torch wheels here cannot import;
    leaving the video processor out of ``__init__``'s signature drops it from the processor's parts.
    """

    def __init__(
        self, image_processor: Any = None, tokenizer: Any = None, chat_template: str | None = None, **kwargs: Any
    ):
        super().__init__(image_processor, tokenizer, None, chat_template=chat_template, **kwargs)


class RepeatedImageProcessor(Qwen2VLImageProcessorPil):
    """The PIL Qwen2-VL image processor, processing each image object once.

    Multi-turn maze chats show the same few observation images again and again: every turn repeats
    the previous turn's image as history, the samples of a group visit the same cells, and the
    update encodes the rollout's turns once more (measured: 1668 images, 60 distinct, in 32
    episodes on 4 9x9 mazes). :func:`encode_conversations` decodes each distinct data URI once
    (:func:`_decoded`), so a repeated image is the same object, and this processor keeps the
    features of the latest ``IMAGE_CACHE_SIZE`` image objects it processed. An entry holds its
    image, so no other image can take its ``id`` while it is kept. The output equals the parent's.

    The kept ``pixel_values`` live on ``pixels_device`` (:func:`load_base_model` sets the model's), so
    that a batch's pixels are gathered where the model reads them. They are the bulk of a batch
    (256 chats of two 9x9 observations: 163k patches x 384 floats, 250 MB): gathered on the host,
    every batch allocates and fills them anew, and then copies them to the GPU.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pixels_device = torch.device("cpu")
        self._features: OrderedDict[int, tuple[Image.Image, torch.Tensor, torch.Tensor]] = OrderedDict()

    def to_dict(self) -> dict[str, Any]:
        """The parent's configuration, without the cache and the pixels' device (runtime state: neither is
        saved with a processor, nor copied into one built from this configuration). Set aside while the
        parent deep-copies the attributes: the cache may hold hundreds of MB of pixels."""
        runtime = {key: self.__dict__.pop(key) for key in ("_features", "pixels_device")}
        try:
            return super().to_dict()
        finally:
            self.__dict__.update(runtime)

    def __call__(self, images: Any, **kwargs: Any) -> BatchFeature:
        """The parent's ``pixel_values`` (on ``pixels_device``) and ``image_grid_thw`` for ``images``, each
        image object processed once.

        Calls with options other than ``return_tensors="pt"`` (what the processor passes) go to the parent.
        """
        if kwargs != {"return_tensors": "pt"}:
            return super().__call__(images, **kwargs)
        features = [self._image_features(image) for image in make_flat_list_of_images(images)]
        return BatchFeature(
            {
                "pixel_values": torch.cat([pixels for pixels, _ in features]),
                "image_grid_thw": torch.cat([grid for _, grid in features]),
            }
        )

    def _image_features(self, image: Image.Image) -> tuple[torch.Tensor, torch.Tensor]:
        entry = self._features.get(id(image))
        if entry is None or entry[0] is not image or entry[1].device != self.pixels_device:
            processed = super().__call__([image], return_tensors="pt")
            entry = (image, processed["pixel_values"].to(self.pixels_device), processed["image_grid_thw"])
            self._features[id(image)] = entry
            if len(self._features) > IMAGE_CACHE_SIZE:
                self._features.popitem(last=False)
        self._features.move_to_end(id(image))
        return entry[1], entry[2]


def default_device() -> str:
    """``"cuda"`` when a GPU is visible, else ``"cpu"``."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def load_processor(path: str | Path) -> ProcessorMixin:
    """The checkpoint's processor (``AutoProcessor``).

    Without torchvision (CPU hosts), Qwen3-VL's video processor and the torchvision image processor
    cannot load; the image-only processor with the PIL image processor (:class:`RepeatedImageProcessor`),
    read from the same ``preprocessor_config.json``, takes their place.
    """
    if is_torchvision_available():
        return AutoProcessor.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    return Qwen3VLImageProcessor(
        image_processor=RepeatedImageProcessor.from_pretrained(path),
        tokenizer=tokenizer,
        chat_template=tokenizer.chat_template,
    )


def load_base_model(
    path: str | Path, device: str | None = None, dtype: torch.dtype | None = None
) -> tuple[PreTrainedModel, ProcessorMixin]:
    """Load a Hugging Face image-text-to-text checkpoint (Qwen3-VL) and its processor for inference.

    Weights are ``dtype``, by default bfloat16 on a GPU and float32 on a CPU; the model is in eval mode on ``device``
    (default: :func:`default_device`), where the processor's cached image pixels are kept too
    (:class:`RepeatedImageProcessor`).
    """
    device = device or default_device()
    dtype = dtype or (torch.float32 if device == "cpu" else torch.bfloat16)
    model = AutoModelForImageTextToText.from_pretrained(path, dtype=dtype).to(device).eval()
    processor = load_processor(path)
    if isinstance(processor.image_processor, RepeatedImageProcessor):
        processor.image_processor.pixels_device = model.device
    return model, processor


def decode_data_uri(uri: str) -> Image.Image:
    """Decode a base64 image data URI (``data:image/png;base64,...``) into an RGB PIL image.

    Raises:
        InvalidConversation: if ``uri`` is not a base64 image data URI of a readable image.
    """
    match = _DATA_URI.fullmatch(uri) if isinstance(uri, str) else None
    if match is None:
        raise InvalidConversation(
            f"image url must be a base64 data URI 'data:image/<format>;base64,...', got {str(uri)[:40]!r}"
        )
    try:
        raw = base64.b64decode(match["payload"], validate=True)
        image = Image.open(io.BytesIO(raw))
        if image.width * image.height > MAX_IMAGE_PIXELS:
            raise InvalidConversation(f"image is {image.width}x{image.height}; the limit is {MAX_IMAGE_PIXELS} pixels")
        return image.convert("RGB")
    except (binascii.Error, UnidentifiedImageError, OSError) as error:
        raise InvalidConversation(f"image data URI does not hold a readable image: {error}") from None


@functools.lru_cache(maxsize=IMAGE_CACHE_SIZE)
def _decoded(uri: str) -> Image.Image:
    """:func:`decode_data_uri`, one image object per distinct URI among the latest ``IMAGE_CACHE_SIZE``.

    The images it returns are shared: only read them (the processor does).
    """
    return decode_data_uri(uri)


def encode_conversations(
    processor: ProcessorMixin, conversations: list[list[dict]], add_generation_prompt: bool = True
) -> BatchFeature:
    """OpenAI-style chat messages (content parts {"type": "text"} / {"type": "image_url", "image_url": {"url":
    data-URI}}) -> padded model inputs (left padding), images decoded from the data URIs.

    Message content may also be a plain string. Returns the processor's tensors (``input_ids``,
    ``attention_mask``, ``mm_token_type_ids`` and, when there are images, ``pixel_values`` and
    ``image_grid_thw``).

    Raises:
        InvalidConversation: if a message, content part or image is malformed.
    """
    if not isinstance(conversations, list) or not conversations:
        raise InvalidConversation("conversations must be a non-empty list of chats")
    chats: list[list[dict]] = []
    images: list[Image.Image] = []
    for index, conversation in enumerate(conversations):
        chat, chat_images = _template_chat(conversation, index)
        chats.append(chat)
        images.extend(chat_images)
    texts = processor.apply_chat_template(chats, tokenize=False, add_generation_prompt=add_generation_prompt)
    return processor(text=texts, images=images or None, padding=True, padding_side="left", return_tensors="pt")


def _template_chat(conversation: Any, index: int) -> tuple[list[dict], list[Image.Image]]:
    """The chat with each image part replaced by a ``{"type": "image"}`` placeholder, and its images in order."""
    if not isinstance(conversation, list) or not conversation:
        raise InvalidConversation(f"conversation {index} must be a non-empty list of messages")
    chat: list[dict] = []
    images: list[Image.Image] = []
    for message in conversation:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise InvalidConversation(f"conversation {index}: every message needs a 'role' string")
        content = message.get("content")
        if isinstance(content, str):
            chat.append({"role": message["role"], "content": content})
            continue
        if not isinstance(content, list):
            raise InvalidConversation(f"conversation {index}: content must be a string or a list of parts")
        parts: list[dict] = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text" and isinstance(part.get("text"), str):
                parts.append({"type": "text", "text": part["text"]})
            elif kind == "image_url" and isinstance(part.get("image_url"), dict):
                url = part["image_url"].get("url")
                images.append(_decoded(url) if isinstance(url, str) else decode_data_uri(url))
                parts.append({"type": "image"})
            else:
                raise InvalidConversation(
                    f"conversation {index}: content parts must be {{'type': 'text', 'text': ...}} or "
                    f"{{'type': 'image_url', 'image_url': {{'url': ...}}}}, got {str(part)[:80]}"
                )
        chat.append({"role": message["role"], "content": parts})
    return chat, images


def answer_token_ids(tokenizer: Any, answer: str) -> list[int]:
    """The tokens :func:`encode_answered_chats` appends to a prompt for ``answer``: the answer tokenized
    on its own, then the end-of-turn (EOS) token."""
    return tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]


def encode_answered_chats(
    processor: ProcessorMixin, chats: list[list[dict]], answers: list[str]
) -> tuple[BatchFeature, torch.Tensor]:
    """Each chat's generation prompt followed by its assistant ``answer``'s tokens and the end-of-turn
    (EOS) token, as one left-padded batch, and the mask of those answer and end-of-turn tokens.

    The answer is tokenized on its own and appended to the prompt's tokens, as a sampler appends
    what it generates: tokenizing chat and answer as one text could merge tokens across the
    boundary (whatever bytes a model answers). The system prompt, earlier turns, image tokens and
    padding are not marked. ``mask[i, j]`` refers to ``input_ids[i, j]``.

    Raises:
        InvalidConversation: for a malformed chat.
        ValueError: if the chats and answers differ in number.
    """
    if len(chats) != len(answers):
        raise ValueError(f"{len(chats)} chats but {len(answers)} answers")
    prompts = encode_conversations(processor, chats, add_generation_prompt=True)
    tokenizer = processor.tokenizer
    answer_ids = [answer_token_ids(tokenizer, answer) for answer in answers]
    # Every per-token row (input_ids, attention_mask, mm_token_type_ids, ...) is unpadded, extended
    # (answer tokens: text, attended) and left-padded again to the new width.
    rows = {key: value for key, value in prompts.items() if key not in ("pixel_values", "image_grid_thw")}
    kept = prompts["attention_mask"].bool()
    lengths = [int(row.sum()) + len(ids) for row, ids in zip(kept, answer_ids, strict=False)]
    width = max(lengths)
    inputs = {}
    for key, value in rows.items():
        pad = tokenizer.pad_token_id if key == "input_ids" else 0
        out = torch.full((len(chats), width), pad, dtype=value.dtype)
        for row, ids in enumerate(answer_ids):
            if key == "input_ids":
                added = torch.tensor(ids, dtype=value.dtype)
            else:  # attended (attention_mask 1), text (token type 0)
                added = torch.full((len(ids),), int(key == "attention_mask"), dtype=value.dtype)
            out[row, width - lengths[row] :] = torch.cat([value[row][kept[row]], added])
        inputs[key] = out
    mask = torch.zeros((len(chats), width), dtype=torch.bool)
    for row, ids in enumerate(answer_ids):
        mask[row, width - len(ids) :] = True
    extra = {key: prompts[key] for key in ("pixel_values", "image_grid_thw") if key in prompts}
    return BatchFeature({**inputs, **extra}), mask
