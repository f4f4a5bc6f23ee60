"""The vision-language policy: a base model plus named PEFT LoRA adapters, with batched chat generation.

Used by the evaluation job (transformers backend), the tiny training backend and the local serving
app. Adapters are loaded through transformers' PEFT integration, so the model stays a plain
transformers model and several adapters can sit side by side; ``generate`` picks one or none.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from safetensors import SafetensorError
from transformers import PreTrainedModel, ProcessorMixin

from cluster_jobs.models.loading import encode_conversations, load_base_model

ADAPTER_CONFIG_FILE = "adapter_config.json"
ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"
# Tokens the model must never generate: they would stand for images that do not exist.
_SUPPRESSED_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")


class AdapterIncompatible(ValueError):
    """An adapter cannot be applied to this base model (missing or unreadable files, other shapes or modules)."""


class VisionPolicy:
    """A Qwen3-VL model and its processor, answering batches of OpenAI-style chats."""

    def __init__(self, model: PreTrainedModel, processor: ProcessorMixin) -> None:
        self.model = model
        self.processor = processor
        tokenizer = processor.tokenizer
        self._suppress_tokens = [
            token_id
            for token_id in tokenizer.convert_tokens_to_ids(list(_SUPPRESSED_TOKENS))
            if token_id is not None and token_id != tokenizer.unk_token_id
        ]
        self._adapters: set[str] = set()

    @classmethod
    def load(
        cls, base_model_path: str | Path, device: str | None = None, dtype: torch.dtype | None = None
    ) -> VisionPolicy:
        """Load the base model and processor from ``base_model_path`` (see :func:`load_base_model`)."""
        return cls(*load_base_model(base_model_path, device, dtype))

    def add_adapter(self, name: str, adapter_dir: Path) -> None:
        """Load the PEFT LoRA adapter saved in ``adapter_dir`` under ``name`` (frozen, for inference).

        Every tensor in the adapter file must land on a LoRA weight of this base model with the
        same shape, and every LoRA weight the adapter config creates must be in the file.

        Raises:
            AdapterIncompatible: files missing or unreadable, or weights that do not fit this base model.
            ValueError: ``name`` is empty or already loaded.
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"adapter name must be a non-empty string, got {name!r}")
        if name in self._adapters:
            raise ValueError(f"adapter {name!r} is already loaded")
        adapter_dir = Path(adapter_dir)
        for file_name in (ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE):
            if not (adapter_dir / file_name).is_file():
                raise AdapterIncompatible(f"adapter {name!r}: {file_name} is missing in {adapter_dir}")
        try:
            config = json.loads((adapter_dir / ADAPTER_CONFIG_FILE).read_text())
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise AdapterIncompatible(f"adapter {name!r}: {ADAPTER_CONFIG_FILE} is not valid JSON: {error}") from None
        if not isinstance(config, dict) or config.get("peft_type") != "LORA":
            raise AdapterIncompatible(f"adapter {name!r}: {ADAPTER_CONFIG_FILE} does not describe a PEFT LoRA adapter")
        try:
            info = self.model.load_adapter(str(adapter_dir), adapter_name=name)
        except (SafetensorError, RuntimeError, ValueError, OSError) as error:
            self._discard(name)
            raise AdapterIncompatible(f"adapter {name!r} cannot be loaded: {_first_line(error)}") from None
        # transformers reports the LoRA weights of every loaded adapter as missing; keep this one's.
        missing = [key for key in info.missing_keys if f".{name}." in key]
        problems = {
            "unexpected weights": sorted(info.unexpected_keys),
            "missing weights": sorted(missing),
            "weights of another shape": sorted(str(key) for key in info.mismatched_keys),
        }
        problems = {kind: keys for kind, keys in problems.items() if keys}
        if problems:
            self._discard(name)
            details = "; ".join(f"{kind}: {len(keys)} (e.g. {keys[0]})" for kind, keys in problems.items())
            raise AdapterIncompatible(f"adapter {name!r} does not fit this base model: {details}")
        self._adapters.add(name)

    def has_adapter(self, name: str) -> bool:
        """True when an adapter named ``name`` is loaded."""
        return name in self._adapters

    def remove_adapter(self, name: str) -> None:
        """Unload the adapter ``name``.

        Raises:
            KeyError: if no adapter of that name is loaded.
        """
        if name not in self._adapters:
            raise KeyError(f"no adapter named {name!r} is loaded")
        self._adapters.remove(name)
        self.model.delete_adapter(name)

    @torch.inference_mode()
    def generate(
        self,
        conversations: list[list[dict]],
        adapter: str | None = None,
        max_new_tokens: int = 24,
        temperature: float = 0.0,
        seed: int | None = None,
    ) -> list[str]:
        """Answer each chat (OpenAI-style messages, see :func:`encode_conversations`) in one batch.

        ``temperature`` 0 decodes greedily (deterministic); above 0 samples from the whole
        distribution at that temperature (no top-k / top-p), reproducibly when ``seed`` is given.
        ``adapter`` None answers with the base model. Image and vision special tokens are never
        generated.

        Raises:
            KeyError: if ``adapter`` is not loaded.
            ValueError: for a negative temperature or a non-positive ``max_new_tokens``.
            cluster_jobs.models.loading.InvalidConversation: for a malformed chat.
        """
        if adapter is not None and adapter not in self._adapters:
            raise KeyError(f"no adapter named {adapter!r} is loaded")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        inputs = encode_conversations(self.processor, conversations).to(self.model.device)
        if temperature > 0:
            sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
        else:
            sampling = {"do_sample": False}
        if seed is not None:
            torch.manual_seed(seed)
        with self._selected(adapter):
            output = self.model.generate(
                **inputs,
                max_new_tokens=max_new_tokens,
                suppress_tokens=self._suppress_tokens,
                pad_token_id=self.processor.tokenizer.pad_token_id,
                **sampling,
            )
        answers = output[:, inputs["input_ids"].shape[1] :]
        return self.processor.batch_decode(answers, skip_special_tokens=True)

    @contextmanager
    def _selected(self, adapter: str | None) -> Iterator[None]:
        """Make ``adapter`` (or the bare base model, for None) the one used inside the block."""
        if not self._adapters:
            yield
            return
        if adapter is None:
            self.model.disable_adapters()
            try:
                yield
            finally:
                self.model.enable_adapters()
            return
        self.model.set_adapter(adapter)
        yield

    def _discard(self, name: str) -> None:
        """Remove whatever a failed load of ``name`` left in the model."""
        if name in getattr(self.model, "peft_config", {}):
            self.model.delete_adapter(name)


def _first_line(error: BaseException) -> str:
    """The first line of an exception's message, for one-line errors."""
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:300]
