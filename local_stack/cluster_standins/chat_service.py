"""OpenAI-compatible chat completions over a ``VisionPolicy``, with LoRA adapters loaded on demand.

The request logic of the local serving app (``serve_app`` wraps it): ``<base_model_id>:<adapter_name>`` loads an
adapter from the S3 serving prefix into a per-replica LRU; answers are ``(http_status, json_body)`` with OpenAI's
error bodies (docs/design.md).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cluster_jobs.models.loading import InvalidConversation, encode_conversations
from cluster_jobs.models.policy import AdapterIncompatible, VisionPolicy
from local_stack.cluster_standins.adapter_store import AdapterNotFound, S3AdapterStore
from mazeops.errors import describe_validation_error
from mazeops.names import InvalidName, parse_adapter_name

MAX_COMPLETION_TOKENS = 512
MAX_IMAGE_URL_CHARS = 8_000_000
MAX_REQUEST_BYTES = 16 * 1024 * 1024  # a whole request: two maze images and their text fit many times over
OWNED_BY = "maze-rl-ops"


class _Part(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class TextPart(_Part):
    """A text content part."""

    type: Literal["text"]
    text: str


class ImageUrl(_Part):
    """An image given inline as a base64 data URI (decoded by the policy; the server fetches no URLs)."""

    url: str = Field(max_length=MAX_IMAGE_URL_CHARS)


class ImagePart(_Part):
    """An image content part."""

    type: Literal["image_url"]
    image_url: ImageUrl


class ChatMessage(_Part):
    """One chat message: text, or a list of text and image parts."""

    role: Literal["system", "user", "assistant"]
    content: str | list[Annotated[TextPart | ImagePart, Field(discriminator="type")]]


class ChatCompletionRequest(_Part):
    """The subset of OpenAI's chat completion request this server honours (other fields are ignored)."""

    model: str = Field(min_length=1, max_length=200)
    messages: list[ChatMessage] = Field(min_length=1, max_length=64)
    max_tokens: int = Field(16, ge=1, le=MAX_COMPLETION_TOKENS)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    seed: int | None = Field(None, ge=0, lt=2**63)
    n: Literal[1] = 1
    stream: Literal[False] = False


class ChatRequestError(Exception):
    """A request that gets an OpenAI error answer instead of a completion."""

    def __init__(self, status: int, message: str, error_type: str, code: str | None = None, param: str | None = None):
        super().__init__(message)
        self.status = status
        self.body = {"error": {"message": message, "type": error_type, "param": param, "code": code}}


class OpenAIChatService:
    """`GET /v1/models` and `POST /v1/chat/completions` for one base model and its served adapters."""

    def __init__(
        self, base_model_id: str, policy: VisionPolicy, adapter_store: S3AdapterStore, max_loaded_adapters: int = 4
    ) -> None:
        if max_loaded_adapters < 1:
            raise ValueError(f"max_loaded_adapters must be at least 1, got {max_loaded_adapters}")
        self.base_model_id = base_model_id
        self.policy = policy
        self.adapter_store = adapter_store
        self.max_loaded_adapters = max_loaded_adapters
        self._loaded: OrderedDict[str, None] = OrderedDict()  # least recently used first
        self._lock = threading.Lock()  # the policy's adapters and generation are not thread-safe

    @property
    def loaded_adapters(self) -> list[str]:
        """Adapters loaded in the policy now, least recently used first."""
        return list(self._loaded)

    def list_models(self) -> tuple[int, dict[str, Any]]:
        """The base model and every adapter now in the serving prefix, as OpenAI model cards."""
        created = int(time.time())
        ids = [self.base_model_id] + [f"{self.base_model_id}:{name}" for name in self.adapter_store.list()]
        cards = [{"id": model_id, "object": "model", "created": created, "owned_by": OWNED_BY} for model_id in ids]
        return 200, {"object": "list", "data": cards}

    def handle_chat(self, body: bytes | str | object) -> tuple[int, dict[str, Any]]:
        """Answer a chat completion request with `(status, json)`; `body` is the raw JSON text or the parsed object."""
        try:
            return 200, self._complete(body)
        except ChatRequestError as error:
            return error.status, error.body

    def _complete(self, body: bytes | str | object) -> dict[str, Any]:
        if isinstance(body, (bytes, str)) and len(body) > MAX_REQUEST_BYTES:
            raise ChatRequestError(
                400, f"request is {len(body)} bytes; the limit is {MAX_REQUEST_BYTES}", "invalid_request_error"
            )
        try:
            if isinstance(body, (bytes, str)):
                request = ChatCompletionRequest.model_validate_json(body)
            else:
                request = ChatCompletionRequest.model_validate(body)
        except ValidationError as error:
            raise ChatRequestError(
                400, f"invalid request: {describe_validation_error(error)}", "invalid_request_error"
            ) from None
        adapter = self._adapter_of(request.model)
        conversation = [message.model_dump(exclude_none=True) for message in request.messages]
        with self._lock:
            if adapter is not None:
                self._ensure_loaded(adapter)
            try:
                text = self.policy.generate(
                    [conversation],
                    adapter=adapter,
                    max_new_tokens=request.max_tokens,
                    temperature=request.temperature,
                    seed=request.seed,
                )[0]
            except InvalidConversation as error:
                raise ChatRequestError(
                    400, f"invalid messages: {error}", "invalid_request_error", param="messages"
                ) from None
        # The policy returns text, not token ids: the prompt is counted exactly by encoding it again; the
        # completion is estimated by tokenizing the answer (at most max_tokens were generated).
        prompt_tokens = int(encode_conversations(self.policy.processor, [conversation])["input_ids"].shape[-1])
        answer_tokens = len(self.policy.processor.tokenizer(text, add_special_tokens=False)["input_ids"])
        completion_tokens = min(answer_tokens, request.max_tokens)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "length" if completion_tokens == request.max_tokens else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    def _adapter_of(self, model: str) -> str | None:
        """The adapter named by `model` (None for the base model); refuses other bases and bad names."""
        base, separator, adapter = model.partition(":")
        if base != self.base_model_id:
            raise ChatRequestError(
                404, f"the model {model!r} does not exist", "invalid_request_error", "model_not_found", "model"
            )
        if not separator:
            return None
        try:
            parse_adapter_name(adapter)
        except InvalidName as error:
            raise ChatRequestError(400, str(error), "invalid_request_error", "invalid_model", "model") from None
        return adapter

    def _ensure_loaded(self, adapter: str) -> None:
        """Load `adapter` into the policy unless it is loaded; evict the least recently used one if full."""
        if adapter in self._loaded:
            self._loaded.move_to_end(adapter)
            return
        try:
            adapter_dir = self.adapter_store.fetch(adapter)
        except AdapterNotFound as error:
            raise ChatRequestError(404, str(error), "invalid_request_error", "model_not_found", "model") from None
        if len(self._loaded) >= self.max_loaded_adapters:
            evicted, _ = self._loaded.popitem(last=False)
            self.policy.remove_adapter(evicted)
        try:
            self.policy.add_adapter(adapter, adapter_dir)
        except AdapterIncompatible as error:
            self.adapter_store.discard(adapter)  # a fixed upload is fetched on the next request
            raise ChatRequestError(
                400,
                f"{error} (base model {self.base_model_id!r})",
                "invalid_request_error",
                "adapter_load_failed",
                "model",
            ) from None
        self._loaded[adapter] = None
