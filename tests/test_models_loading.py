"""encode_conversations: OpenAI-style chats with data-URI images -> left-padded Qwen3-VL inputs."""

from __future__ import annotations

import base64
import copy

import numpy as np
import pytest
import torch
from PIL import Image
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from cluster_jobs.maze.render import image_to_data_uri
from cluster_jobs.models import loading
from cluster_jobs.models.loading import InvalidConversation, decode_data_uri, encode_conversations, load_processor
from local_stack.cluster_standins.tiny_model import build_tiny_qwen3_vl

TOKENS_PER_IMAGE = 16  # a square picture is resized to 64 x 64 px: (64 / 8)^2 patches / 2^2 merged


@pytest.fixture(scope="module")
def processor(tmp_path_factory):
    return load_processor(build_tiny_qwen3_vl(tmp_path_factory.mktemp("tiny") / "base"))


def _image_part(color: str) -> dict:
    return {"type": "image_url", "image_url": {"url": image_to_data_uri(Image.new("RGB", (225, 225), color))}}


def _user(*parts: dict) -> dict:
    return {"role": "user", "content": list(parts)}


def _text(text: str) -> dict:
    return {"type": "text", "text": text}


def test_one_image(processor):
    chat = [{"role": "system", "content": "Solve the maze."}, _user(_image_part("white"), _text("Here is the maze."))]
    batch = encode_conversations(processor, [chat])
    ids = batch["input_ids"][0].tolist()
    assert ids.count(processor.image_token_id) == TOKENS_PER_IMAGE
    assert batch["image_grid_thw"].tolist() == [[1, 8, 8]]
    assert batch["pixel_values"].shape[0] == 64
    text = processor.tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system\nSolve the maze.<|im_end|>\n<|im_start|>user\n<|vision_start|>")
    assert text.endswith("<|vision_end|>Here is the maze.<|im_end|>\n<|im_start|>assistant\n")


def test_several_images_in_order_and_left_padding(processor):
    short = [_user(_image_part("red"), _text("a"))]
    long = [
        _user(_image_part("white"), _text("first")),
        {"role": "assistant", "content": "('move', 0)"},
        _user(_image_part("blue"), _text("second, with a longer text")),
    ]
    batch = encode_conversations(processor, [short, long])
    assert batch["image_grid_thw"].shape[0] == 3
    counts = (batch["input_ids"] == processor.image_token_id).sum(dim=1).tolist()
    assert counts == [TOKENS_PER_IMAGE, 2 * TOKENS_PER_IMAGE]
    mask = batch["attention_mask"]
    assert mask[1].all() and not mask[0].all()
    assert mask[0, 0] == 0 and mask[0, -1] == 1  # padding on the left
    # The red image is first in pixel_values: its patches differ from the white image's.
    first, second = batch["pixel_values"][:64], batch["pixel_values"][64:128]
    assert not first.equal(second)


def test_generation_prompt_is_optional(processor):
    chat = [_user(_text("hi")), {"role": "assistant", "content": "('stop', 'stop')"}]
    text = processor.tokenizer.decode(
        encode_conversations(processor, [chat], add_generation_prompt=False)["input_ids"][0]
    )
    assert text.endswith("('stop', 'stop')<|im_end|>\n")


@pytest.mark.parametrize(
    "conversations",
    [
        [],
        [[]],
        [[{"content": "no role"}]],
        [[{"role": "user", "content": 42}]],
        [[_user({"type": "audio", "audio": "x"})]],
        [[_user({"type": "image_url", "image_url": {"url": "https://example.com/maze.png"}})]],
        [[_user({"type": "image_url", "image_url": {"url": "data:image/png;base64,%%%"}})]],
        [
            [
                _user(
                    {
                        "type": "image_url",
                        "image_url": {"url": "data:image/png;base64," + base64.b64encode(b"not a png").decode()},
                    }
                )
            ]
        ],
    ],
    ids=["no-chats", "empty-chat", "no-role", "bad-content", "unknown-part", "http-url", "bad-base64", "not-an-image"],
)
def test_malformed_chats_are_refused_clearly(processor, conversations):
    with pytest.raises(InvalidConversation):
        encode_conversations(processor, conversations)


def test_decode_data_uri_round_trip():
    image = Image.new("RGB", (30, 20), (1, 2, 3))
    decoded = decode_data_uri(image_to_data_uri(image))
    assert decoded.size == (30, 20) and decoded.getpixel((0, 0)) == (1, 2, 3)


def _stock(processor):
    """The same processor with the parent PIL image processor (nothing cached)."""
    stock = copy.copy(processor)
    stock.image_processor = Qwen2VLImageProcessorPil(**processor.image_processor.to_dict())
    return stock


@pytest.mark.parametrize("colors", [["white"], ["white", "white", "red"], ["red", "blue", "red", "blue", "white"]])
def test_the_cached_image_processor_encodes_exactly_as_the_parent(processor, colors):
    """Repeated images are processed once but encode to the same tensors as the uncached processor, also on a second
    call."""
    chats = [[_user(_image_part(color), _text(f"turn {index}"))] for index, color in enumerate(colors)]
    expected = encode_conversations(_stock(processor), chats)
    for _ in range(2):
        batch = encode_conversations(processor, chats)
        assert batch.keys() == expected.keys()
        for key in expected:
            assert torch.equal(batch[key], expected[key]), key


def test_the_cached_image_processor_keeps_the_latest_image_objects(processor, monkeypatch):
    monkeypatch.setattr(loading, "IMAGE_CACHE_SIZE", 2)
    cached = loading.RepeatedImageProcessor(**processor.image_processor.to_dict())
    stock = Qwen2VLImageProcessorPil(**processor.image_processor.to_dict())
    white = Image.new("RGB", (64, 64), "white")
    dotted = white.copy()
    dotted.putpixel((10, 10), (0, 0, 0))
    red = Image.new("RGB", (64, 64), "red")
    for image in (white, dotted, white, red, dotted, white.copy()):
        got = cached([image], return_tensors="pt")
        assert torch.equal(got["pixel_values"], stock([image], return_tensors="pt")["pixel_values"])
    kept = [image for image, _, _ in cached._features.values()]
    assert len(kept) == 2 and kept[0] is dotted and kept[1] is not white  # the copy: the same pixels, another object


def test_the_cached_image_processor_passes_other_options_to_the_parent(processor):
    cached = loading.RepeatedImageProcessor(**processor.image_processor.to_dict())
    got = cached([Image.new("RGB", (64, 64), "white")], return_tensors="np")
    assert isinstance(got["pixel_values"], np.ndarray)
    assert not cached._features


def test_the_cached_image_processor_keeps_pixels_on_its_device_and_the_grid_on_the_host(processor):
    # "meta" stands in for the GPU here: tensors there have a device, a shape and a dtype, and no data.
    cached = loading.RepeatedImageProcessor(**processor.image_processor.to_dict())
    stock = Qwen2VLImageProcessorPil(**processor.image_processor.to_dict())
    white, red = Image.new("RGB", (64, 64), "white"), Image.new("RGB", (64, 64), "red")
    expected = stock([white, red, white], return_tensors="pt")
    cached([white], return_tensors="pt")  # kept on the host first
    cached.pixels_device = torch.device("meta")
    got = cached([white, red, white], return_tensors="pt")
    assert got["pixel_values"].device.type == "meta" and got["pixel_values"].shape == expected["pixel_values"].shape
    assert torch.equal(got["image_grid_thw"], expected["image_grid_thw"])  # on the host, where the rope index reads it
    cached.pixels_device = torch.device("cpu")  # entries kept elsewhere are processed again, not mixed
    assert torch.equal(
        cached([white, red], return_tensors="pt")["pixel_values"],
        stock([white, red], return_tensors="pt")["pixel_values"],
    )


def test_a_loaded_base_model_keeps_its_processors_image_pixels_on_its_device(tmp_path):
    model, processor = loading.load_base_model(build_tiny_qwen3_vl(tmp_path / "base"), device="meta")
    assert model.device.type == "meta" and processor.image_processor.pixels_device == model.device
    batch = encode_conversations(processor, [[_user(_image_part("white"), _text("hi"))]])
    assert batch["pixel_values"].device.type == "meta" and batch["input_ids"].device.type == "cpu"


def test_the_cached_image_processor_saves_its_configuration_without_its_cache(processor, tmp_path):
    cached = loading.RepeatedImageProcessor(**processor.image_processor.to_dict())
    cached([Image.new("RGB", (64, 64), "white")], return_tensors="pt")
    cached.save_pretrained(tmp_path)
    assert loading.RepeatedImageProcessor.from_pretrained(tmp_path).to_dict() == processor.image_processor.to_dict()
    assert len(cached._features) == 1 and cached.pixels_device == torch.device("cpu")  # still there after saving
