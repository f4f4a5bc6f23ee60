"""The adapter manifest: written last by the checkpoint sync, read by everything after it.

It names the adapter, its base model and LoRA shape, and pins each adapter file by size and
sha256, so a half-uploaded, swapped or corrupted adapter is caught before it is evaluated or
served.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mazeops.jsontext import parse_document
from mazeops.layout import ADAPTER_FILES
from mazeops.names import BASE_MODEL_ID_PATTERN, RUN_ID_PATTERN, adapter_name

MANIFEST_SCHEMA = "maze-adapter/v1"
MAX_MANIFEST_BYTES = 64 * 1024


class InvalidManifest(ValueError):
    """The manifest is malformed or disagrees with the adapter it describes."""


class FileDigest(BaseModel):
    """Size and sha256 of one adapter file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=1)


class AdapterManifest(BaseModel):
    """One exported LoRA adapter of one run at one global step."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_: Literal["maze-adapter/v1"] = Field(MANIFEST_SCHEMA, alias="schema")
    run_id: str = Field(pattern=RUN_ID_PATTERN.pattern)
    step: int = Field(ge=1, lt=10**9)
    adapter_name: str
    base_model_id: str = Field(pattern=BASE_MODEL_ID_PATTERN.pattern)
    lora_rank: int = Field(ge=1, le=256)
    lora_alpha: int = Field(ge=1, le=1024)
    files: dict[str, FileDigest]
    created_at: str = Field(max_length=40)

    @model_validator(mode="after")
    def _consistent(self) -> AdapterManifest:
        expected = adapter_name(self.run_id, self.step)
        if self.adapter_name != expected:
            raise ValueError(f"adapter_name {self.adapter_name!r} must be {expected!r}")
        if set(self.files) != set(ADAPTER_FILES):
            raise ValueError(f"files must be exactly {sorted(ADAPTER_FILES)}, got {sorted(self.files)}")
        return self

    def to_json(self) -> str:
        """Canonical JSON (sorted keys) as written to S3."""
        return json.dumps(self.model_dump(by_alias=True), sort_keys=True, indent=1)


def parse_manifest(raw: bytes | str) -> AdapterManifest:
    """Parse and validate a manifest document; raise InvalidManifest with every problem listed."""
    return parse_document(raw, AdapterManifest, "adapter manifest", MAX_MANIFEST_BYTES, InvalidManifest)


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def digest_adapter_dir(adapter_dir: Path) -> dict[str, FileDigest]:
    """Digests of the adapter files in a local directory (raises InvalidManifest if one is missing)."""
    digests = {}
    for name in ADAPTER_FILES:
        path = adapter_dir / name
        if not path.is_file():
            raise InvalidManifest(f"adapter file missing: {path}")
        digests[name] = FileDigest(sha256=sha256_file(path), size=path.stat().st_size)
    return digests


def verify_adapter_dir(manifest: AdapterManifest, adapter_dir: Path) -> None:
    """Check local adapter files against the manifest: sizes, hashes and the LoRA config's rank/alpha."""
    actual = digest_adapter_dir(adapter_dir)
    for name, expected in manifest.files.items():
        if actual[name] != expected:
            raise InvalidManifest(
                f"{name} does not match the manifest: size {actual[name].size} sha256 {actual[name].sha256[:12]}... "
                f"expected size {expected.size} sha256 {expected.sha256[:12]}..."
            )
    try:
        config = json.loads((adapter_dir / "adapter_config.json").read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InvalidManifest(f"adapter_config.json is not valid JSON: {error}") from None
    if not isinstance(config, dict):
        raise InvalidManifest(f"adapter_config.json must be a JSON object, got {type(config).__name__}")
    if config.get("r") != manifest.lora_rank:
        raise InvalidManifest(
            f"adapter_config.json has rank {config.get('r')!r}; the manifest says {manifest.lora_rank}"
        )
    if config.get("lora_alpha") != manifest.lora_alpha:
        raise InvalidManifest(
            f"adapter_config.json has lora_alpha {config.get('lora_alpha')!r}; the manifest says {manifest.lora_alpha}"
        )
