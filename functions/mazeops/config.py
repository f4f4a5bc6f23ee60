"""Lambda configuration, read from the environment at each invocation (never at import)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any


class ConfigError(RuntimeError):
    """A required setting is missing or malformed."""


@dataclass(frozen=True)
class RunCaps:
    """This stage's caps on training runs (template parameters MaxGpusPerRun, MaxStepsPerRun, MaxActiveRuns, in
    validate_run_spec's environment); None: no cap (a variable that is absent or empty)."""

    max_gpus_per_run: int | None = None
    max_steps_per_run: int | None = None
    max_active_runs: int | None = None


@dataclass(frozen=True)
class Config:
    """Settings every handler may need; each handler uses a few."""

    artifacts_bucket: str
    runs_table: str
    registry_table: str
    idempotency_table: str
    topic_arn: str
    ray_address: str
    serve_url: str
    base_models: dict[str, str]
    min_solve_rate: float
    mcnemar_alpha: float
    eval_backend: str
    training_state_machine_arn: str
    evaluation_state_machine_arn: str
    scheduled_run_spec_key: str
    ray_runtime_env: dict[str, Any] | None = None
    eval_set_sha256: str = ""
    run_caps: RunCaps = RunCaps()
    # The cluster watch (watch_cluster): notify once the Ray head has been unreachable this long; retry an evaluation
    # that failed for an infrastructure reason after this backoff (doubling), at most this many attempts in all.
    cluster_unreachable_minutes: float = 15.0
    eval_retry_backoff_seconds: float = 300.0
    eval_retry_max_attempts: int = 3

    def required(self, name: str) -> str:
        """The setting `name` (a field of this class); raise ConfigError naming its variable if it is empty."""
        value = getattr(self, name)
        if not value:
            raise ConfigError(f"{name.upper()} is not set")
        return value


def _base_models(raw: str) -> dict[str, str]:
    try:
        value = json.loads(raw or "{}")
    except json.JSONDecodeError as error:
        raise ConfigError(f"BASE_MODELS is not JSON: {error}") from None
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ConfigError("BASE_MODELS must be a JSON object mapping base model id to model path")
    return value


def _float(name: str, default: str) -> float:
    raw = os.environ.get(name, default)
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None


def _cap(name: str) -> int | None:
    """A cap variable: None when absent or empty, else a positive integer (ConfigError otherwise)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(f"{name} must be a positive integer, got {raw[:40]!r}")
    return int(raw)


def load_run_caps() -> RunCaps:
    """The run caps from MAX_GPUS_PER_RUN, MAX_STEPS_PER_RUN and MAX_ACTIVE_RUNS."""
    return RunCaps(
        max_gpus_per_run=_cap("MAX_GPUS_PER_RUN"),
        max_steps_per_run=_cap("MAX_STEPS_PER_RUN"),
        max_active_runs=_cap("MAX_ACTIVE_RUNS"),
    )


def parse_runtime_env(raw: str) -> dict[str, Any] | None:
    """A RAY_RUNTIME_ENV value: None when empty, else a JSON object (ConfigError otherwise)."""
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as error:
        raise ConfigError(f"RAY_RUNTIME_ENV is not JSON: {error}") from None
    if not isinstance(value, dict):
        raise ConfigError("RAY_RUNTIME_ENV must be a JSON object (a Ray runtime_env)")
    return value


def load() -> Config:
    """Read the configuration from the environment; missing optional settings are empty."""
    env = os.environ.get
    return Config(
        artifacts_bucket=env("ARTIFACTS_BUCKET", ""),
        runs_table=env("RUNS_TABLE", ""),
        registry_table=env("REGISTRY_TABLE", ""),
        idempotency_table=env("IDEMPOTENCY_TABLE", ""),
        topic_arn=env("TOPIC_ARN", ""),
        ray_address=env("RAY_ADDRESS", "").rstrip("/"),
        serve_url=env("SERVE_URL", "").rstrip("/"),
        base_models=_base_models(env("BASE_MODELS", "{}")),
        min_solve_rate=_float("MIN_SOLVE_RATE", "0.5"),
        mcnemar_alpha=_float("MCNEMAR_ALPHA", "0.05"),
        eval_backend=env("EVAL_BACKEND", "vllm"),
        training_state_machine_arn=env("TRAINING_STATE_MACHINE_ARN", ""),
        evaluation_state_machine_arn=env("EVALUATION_STATE_MACHINE_ARN", ""),
        scheduled_run_spec_key=env("SCHEDULED_RUN_SPEC_KEY", ""),
        ray_runtime_env=parse_runtime_env(env("RAY_RUNTIME_ENV", "")),
        eval_set_sha256=env("EVAL_SET_SHA256", ""),
        run_caps=load_run_caps(),
        cluster_unreachable_minutes=_float("CLUSTER_UNREACHABLE_MINUTES", "15"),
        eval_retry_backoff_seconds=_float("EVAL_RETRY_BACKOFF_SECONDS", "300"),
        eval_retry_max_attempts=_cap("EVAL_RETRY_MAX_ATTEMPTS") or 3,
    )
