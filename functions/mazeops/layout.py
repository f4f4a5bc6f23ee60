"""The S3 key layout of the artifacts bucket (see docs/design.md), in one place.

Keys are built only from validated names, and incoming keys are parsed back with anchored
patterns, so no key outside this layout is ever produced or accepted.
"""

from __future__ import annotations

import re

from mazeops.names import InvalidName, adapter_name, validate_base_model_id, validate_run_id, validate_step

REQUEST_PREFIX = "requests/"
RUNS_PREFIX = "runs/"
SERVING_PREFIX = "serving/"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
MANIFEST_FILE = "manifest.json"

_REQUEST_KEY = re.compile(r"^requests/(?P<run_id>[^/]+)\.json$")
_MANIFEST_KEY = re.compile(r"^runs/(?P<run_id>[^/]+)/adapters/global_step_(?P<step>[1-9][0-9]{0,8})/manifest\.json$")


def run_spec_request_key(run_id: str) -> str:
    """Key whose upload starts a training run."""
    return f"{REQUEST_PREFIX}{validate_run_id(run_id)}.json"


def run_prefix(run_id: str) -> str:
    """Prefix of everything a run writes."""
    return f"{RUNS_PREFIX}{validate_run_id(run_id)}/"


def normalized_spec_key(run_id: str) -> str:
    """Key of the validated, normalized spec that the training job reads."""
    return f"{run_prefix(run_id)}spec.json"


def train_metrics_key(run_id: str) -> str:
    """Key of the training job's JSON-lines metrics (reward, in-training eval solve rate)."""
    return f"{run_prefix(run_id)}metrics/train.jsonl"


def adapter_prefix(run_id: str, step: int) -> str:
    """Prefix of one exported LoRA adapter (files + manifest)."""
    return f"{run_prefix(run_id)}adapters/global_step_{validate_step(step)}/"


def adapter_manifest_key(run_id: str, step: int) -> str:
    """Key of an adapter's manifest; written last, its upload starts an evaluation."""
    return f"{adapter_prefix(run_id, step)}{MANIFEST_FILE}"


def eval_result_key(run_id: str, step: int) -> str:
    """Key of one adapter's evaluation result on the fixed maze set."""
    return f"{run_prefix(run_id)}evals/global_step_{validate_step(step)}/result.json"


def serving_prefix(base_model_id: str) -> str:
    """Ray Serve LLM `dynamic_lora_loading_path` (below the bucket) for one base model."""
    return f"{SERVING_PREFIX}{validate_base_model_id(base_model_id)}/"


def serving_adapter_prefix(base_model_id: str, run_id: str, step: int) -> str:
    """Where a registered adapter's files live for Ray Serve to load them by name."""
    return f"{serving_prefix(base_model_id)}{adapter_name(run_id, step)}/"


def parse_request_key(key: str) -> str:
    """Return the run id named by a run spec key `requests/<run_id>.json`."""
    match = _REQUEST_KEY.fullmatch(key)
    if not match:
        raise InvalidName(f"not a run spec key: {key[:200]!r} (expected 'requests/<run_id>.json')")
    return validate_run_id(match["run_id"])


def parse_manifest_key(key: str) -> tuple[str, int]:
    """Return (run_id, step) named by an adapter manifest key."""
    match = _MANIFEST_KEY.fullmatch(key)
    if not match:
        raise InvalidName(
            f"not an adapter manifest key: {key[:200]!r} "
            "(expected 'runs/<run_id>/adapters/global_step_<N>/manifest.json')"
        )
    return validate_run_id(match["run_id"]), validate_step(int(match["step"]))
