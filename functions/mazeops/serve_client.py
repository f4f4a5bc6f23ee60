"""Smoke test of a served adapter through the OpenAI-compatible endpoint (standard library only)."""

from __future__ import annotations

import base64
import http.client
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from importlib import resources

from mazeops import jsontext

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SMOKE_IMAGE_FILE = "smoke_maze.png"
SMOKE_PROMPT = (
    "This is a maze: the blue circle is the agent, the red square the target, grey cells are walls. "
    "Answer with your first move as ('move', d) with d 0 right, 1 up, 2 left, 3 down."
)
MAX_TOKENS = 16


class SmokeTestFailed(RuntimeError):
    """The endpoint answered, but not with a usable chat completion (unknown model/adapter, bad answer)."""


class ServeUnavailable(RuntimeError):
    """The serving endpoint could not be reached or failed (connection, timeout, HTTP 5xx)."""


@dataclass(frozen=True)
class SmokeResult:
    """What the served model answered, and how long the request took."""

    served_model_id: str
    latency_ms: int
    answer: str


def load_smoke_image() -> bytes:
    """The packaged maze picture (`mazeops/smoke_maze.png`) sent by the smoke test."""
    return resources.files("mazeops").joinpath(SMOKE_IMAGE_FILE).read_bytes()


def smoke_test(serve_url: str, model_id: str, image_png: bytes, timeout_s: float = 60) -> SmokeResult:
    """Ask `model_id` at `serve_url` (e.g. `http://serve:8000`) about the maze picture `image_png`."""
    if not image_png.startswith(PNG_SIGNATURE):
        raise ValueError("image_png must be a PNG file's bytes")
    image_uri = "data:image/png;base64," + base64.b64encode(image_png).decode("ascii")
    body = {
        "model": model_id,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": image_uri}},
                    {"type": "text", "text": SMOKE_PROMPT},
                ],
            }
        ],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
    }
    url = serve_url.rstrip("/") + "/v1/chat/completions"
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            raw = response.read()
    except urllib.error.HTTPError as error:
        detail = error.read(500).decode("utf-8", "replace").strip()
        if error.code >= 500:
            raise ServeUnavailable(f"{url} answered HTTP {error.code} for {model_id!r}: {detail}") from None
        raise SmokeTestFailed(f"{url} refused {model_id!r} with HTTP {error.code}: {detail}") from None
    except (urllib.error.URLError, http.client.HTTPException, TimeoutError, ConnectionError) as error:
        raise ServeUnavailable(f"cannot reach {url}: {getattr(error, 'reason', error)}") from None
    latency_ms = round((time.monotonic() - started) * 1000)
    served_model_id, answer = _parse_completion(raw, model_id)
    return SmokeResult(served_model_id=served_model_id, latency_ms=latency_ms, answer=answer)


def _parse_completion(raw: bytes, model_id: str) -> tuple[str, str]:
    """(model the endpoint says it used, or `model_id`; the first choice's message content)."""
    try:
        completion = jsontext.loads(raw)
    except jsontext.NotJson:
        raise SmokeTestFailed(f"{model_id!r}: answer is not JSON: {raw[:200]!r}") from None
    choices = completion.get("choices") if isinstance(completion, dict) else None
    if not isinstance(choices, list) or not choices:
        raise SmokeTestFailed(f"{model_id!r}: answer has no choices: {raw[:200]!r}")
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, str):
        raise SmokeTestFailed(f"{model_id!r}: first choice has no message content: {raw[:200]!r}")
    model = completion.get("model")
    return (model if isinstance(model, str) and model else model_id), content
