"""OpenAI-compatible smoke test client against a fake serving endpoint."""

from __future__ import annotations

import base64
import io
import json
import time

import pytest
from mazeops_testing import FakeHttpServer, answer, closed_port_url
from PIL import Image

from mazeops.serve_client import PNG_SIGNATURE, ServeUnavailable, SmokeTestFailed, load_smoke_image, smoke_test

MODEL = "qwen3-vl-8b-sft:run1-step20"
PATH = ("POST", "/v1/chat/completions")


def png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (9, 9), "white").save(buffer, format="PNG")
    return buffer.getvalue()


def completion(content: object = "('move', 0)", model: str = MODEL) -> dict:
    return {
        "id": "cmpl-1",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
    }


def test_success_sends_the_image_and_returns_the_answer() -> None:
    image = png()
    with FakeHttpServer({PATH: answer(200, completion())}) as server:
        result = smoke_test(server.url + "/", MODEL, image)
    assert (result.served_model_id, result.answer) == (MODEL, "('move', 0)")
    assert result.latency_ms >= 0
    sent = json.loads(server.requests[0][3])
    assert sent["model"] == MODEL and sent["temperature"] == 0 and sent["max_tokens"] <= 32
    parts = sent["messages"][0]["content"]
    image_part = next(part for part in parts if part["type"] == "image_url")
    assert base64.b64decode(image_part["image_url"]["url"].removeprefix("data:image/png;base64,")) == image
    assert any(part["type"] == "text" and part["text"] for part in parts)


@pytest.mark.parametrize(
    "status, body, error, message",
    [
        (404, {"error": {"message": "The model `x:y` does not exist."}}, SmokeTestFailed, "HTTP 404.*does not exist"),
        (400, b"bad adapter", SmokeTestFailed, "HTTP 400"),
        (500, b"engine dead", ServeUnavailable, "HTTP 500"),
        (503, b"", ServeUnavailable, "HTTP 503"),
        (200, b"not json", SmokeTestFailed, "not JSON"),
        (200, {"choices": []}, SmokeTestFailed, "no choices"),
        (200, {"object": "error"}, SmokeTestFailed, "no choices"),
        (200, completion(content=None), SmokeTestFailed, "no message content"),
        (200, [1, 2], SmokeTestFailed, "no choices"),
    ],
)
def test_failures(status: int, body: object, error: type, message: str) -> None:
    with FakeHttpServer({PATH: answer(status, body)}) as server, pytest.raises(error, match=message):
        smoke_test(server.url, MODEL, png())


def test_connection_refused_and_timeout_are_unavailable() -> None:
    with pytest.raises(ServeUnavailable, match="cannot reach"):
        smoke_test(closed_port_url(), MODEL, png(), timeout_s=2)

    def slow(_body: bytes):
        time.sleep(1.0)
        return 200, completion()

    with FakeHttpServer({PATH: slow}) as server, pytest.raises(ServeUnavailable, match="cannot reach"):
        smoke_test(server.url, MODEL, png(), timeout_s=0.2)


def test_refuses_bytes_that_are_not_a_png() -> None:
    with pytest.raises(ValueError, match="PNG"):
        smoke_test("http://127.0.0.1:1", MODEL, b"GIF89a")


def test_the_packaged_smoke_image_is_a_png() -> None:
    image = load_smoke_image()
    assert image.startswith(PNG_SIGNATURE)
    assert Image.open(io.BytesIO(image)).size[0] > 0
