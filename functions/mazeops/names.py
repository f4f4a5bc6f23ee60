"""Validated names: run ids, adapter names, base model ids, and the names derived from them.

A hostile name is refused here, once, before it reaches a key, a job id or a served model id.
"""

from __future__ import annotations

import re

RUN_ID_PATTERN = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?$")
BASE_MODEL_ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
ADAPTER_NAME_PATTERN = re.compile(r"^(?P<run_id>[a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?)-step(?P<step>[1-9][0-9]{0,8})$")
CHAMPION_SORT_KEY = "#CHAMPION"
MAX_EVAL_ATTEMPT = 999
EVAL_JOB_ID_PATTERN = re.compile(r"^eval-(?P<adapter>.+?)(?:-a(?P<attempt>[2-9]|[1-9][0-9]{1,2}))?$")


class InvalidName(ValueError):
    """A name that does not match its pattern."""


def _check(kind: str, value: object, pattern: re.Pattern[str], rule: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        shown = repr(value)[:80]
        raise InvalidName(f"invalid {kind} {shown}: {rule}")
    return value


def validate_run_id(value: object) -> str:
    """Return `value` if it is a valid run id (1-40 chars of a-z, 0-9, '-', not starting/ending in '-')."""
    return _check(
        "run id", value, RUN_ID_PATTERN, "use 1-40 characters a-z 0-9 '-', starting and ending with a letter or digit"
    )


def validate_base_model_id(value: object) -> str:
    """Return `value` if it is a syntactically valid base model id (no ':' or '/')."""
    return _check(
        "base model id",
        value,
        BASE_MODEL_ID_PATTERN,
        "use 1-64 characters a-z 0-9 '.' '_' '-', starting with a letter or digit",
    )


def validate_step(value: object) -> int:
    """Return `value` if it is a positive global step number."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 10**9:
        raise InvalidName(f"invalid step {value!r}: must be an integer between 1 and 999999999")
    return value


def adapter_name(run_id: str, step: int) -> str:
    """The adapter name of `run_id` at global step `step`: `<run_id>-step<N>`."""
    return f"{validate_run_id(run_id)}-step{validate_step(step)}"


def parse_adapter_name(name: object) -> tuple[str, int]:
    """Split a valid adapter name into (run_id, step); raise InvalidName otherwise."""
    _check("adapter name", name, ADAPTER_NAME_PATTERN, "expected '<run_id>-step<N>'")
    match = ADAPTER_NAME_PATTERN.fullmatch(name)  # type: ignore[arg-type]
    assert match is not None
    return match["run_id"], int(match["step"])


def served_model_id(base_model_id: str, adapter: str) -> str:
    """The model id a client sends to the Ray Serve endpoint for `adapter` on `base_model_id`."""
    parse_adapter_name(adapter)
    return f"{validate_base_model_id(base_model_id)}:{adapter}"


def training_job_id(run_id: str) -> str:
    """Ray submission id (and Step Functions execution name) of a run's training job."""
    return f"train-{validate_run_id(run_id)}"


def validate_eval_attempt(value: object) -> int:
    """Return `value` if it is an adapter evaluation attempt number (1..999)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_EVAL_ATTEMPT:
        raise InvalidName(f"invalid evaluation attempt {value!r}: must be an integer between 1 and {MAX_EVAL_ATTEMPT}")
    return value


def eval_job_id(run_id: str, step: int, attempt: int = 1) -> str:
    """Ray submission id (and Step Functions execution name) of one adapter's evaluation.

    Attempt 1 is `eval-<run_id>-step<N>`; a re-evaluation (attempt 2..999) adds `-a<attempt>`.
    """
    name = f"eval-{adapter_name(run_id, step)}"
    return name if validate_eval_attempt(attempt) == 1 else f"{name}-a{attempt}"


def parse_eval_job_id(job_id: object) -> tuple[str, int, int]:
    """Split an evaluation's submission id `eval-<run_id>-step<N>[-a<attempt>]` into (run_id, step, attempt)."""
    match = EVAL_JOB_ID_PATTERN.fullmatch(job_id) if isinstance(job_id, str) else None
    if match is None or not ADAPTER_NAME_PATTERN.fullmatch(match["adapter"]):
        raise InvalidName(
            f"invalid evaluation job id {repr(job_id)[:80]}: expected 'eval-<run_id>-step<N>' or "
            "'eval-<run_id>-step<N>-a<attempt>' (attempt 2-999)"
        )
    run_id, step = parse_adapter_name(match["adapter"])
    return run_id, step, int(match["attempt"] or 1)


def parse_job_id(job_id: object) -> tuple[str, int | None]:
    """Split a Ray submission id (also the execution name) into (run_id, step); step is None for training.

    An evaluation's id may carry an attempt (`-a<attempt>`); `parse_eval_job_id` returns it.
    """
    if isinstance(job_id, str) and job_id.startswith("train-"):
        return validate_run_id(job_id.removeprefix("train-")), None
    if isinstance(job_id, str) and job_id.startswith("eval-"):
        run_id, step, _ = parse_eval_job_id(job_id)
        return run_id, step
    raise InvalidName(
        f"invalid job id {repr(job_id)[:80]}: expected 'train-<run_id>', 'eval-<run_id>-step<N>' "
        "or 'eval-<run_id>-step<N>-a<attempt>'"
    )
