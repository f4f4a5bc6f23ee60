"""The baseline: a base model's own evaluation (no adapter) on one fixed evaluation set.

Its names (registry sort key, Ray submission id, result key) and its result document.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mazeops.evalresult import MAX_RESULT_BYTES, InvalidEvalResult, MazeOutcome
from mazeops.jsontext import parse_document
from mazeops.names import BASE_MODEL_ID_PATTERN, InvalidName, validate_base_model_id

BASELINE = "#BASELINE"
BASELINE_SCHEMA = "maze-baseline/v1"
BASELINES_PREFIX = "baselines/"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_JOB_ID = re.compile(
    r"^baseline-(?P<base>[a-z0-9][a-z0-9._-]{0,63})-(?P<sha>[0-9a-f]{12})-a(?P<attempt>[1-9][0-9]{0,5})$"
)
_RESULT_KEY = re.compile(
    r"^baselines/(?P<base>[^/]+)/(?P<sha>[0-9a-f]{64})/attempt_(?P<attempt>[1-9][0-9]{0,5})/result\.json$"
)
MAX_ATTEMPT = 999_999


def validate_eval_set_sha256(value: object) -> str:
    """Return `value` if it is a hex sha256 (the identity of an evaluation set)."""
    if not isinstance(value, str) or not _SHA256.fullmatch(value):
        raise InvalidName(f"invalid evaluation set sha256 {repr(value)[:80]}: expected 64 hex digits")
    return value


def validate_attempt(value: object) -> int:
    """Return `value` if it is a baseline attempt number (1..999999)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_ATTEMPT:
        raise InvalidName(f"invalid baseline attempt {value!r}: must be an integer between 1 and {MAX_ATTEMPT}")
    return value


def baseline_sort_key(eval_set_sha256: str) -> str:
    """Registry sort key of the baseline on one evaluation set."""
    return f"{BASELINE}#{validate_eval_set_sha256(eval_set_sha256)}"


def baseline_job_id(base_model_id: str, eval_set_sha256: str, attempt: int) -> str:
    """Ray submission id of one attempt at evaluating the baseline."""
    sha = validate_eval_set_sha256(eval_set_sha256)
    return f"baseline-{validate_base_model_id(base_model_id)}-{sha[:12]}-a{validate_attempt(attempt)}"


def is_baseline_job_id(job_id: object) -> bool:
    """True for a Ray submission id made by `baseline_job_id`."""
    return isinstance(job_id, str) and _JOB_ID.fullmatch(job_id) is not None


def baseline_result_key(base_model_id: str, eval_set_sha256: str, attempt: int) -> str:
    """Key of the result one attempt at evaluating the baseline writes."""
    sha = validate_eval_set_sha256(eval_set_sha256)
    base = validate_base_model_id(base_model_id)
    return f"{BASELINES_PREFIX}{base}/{sha}/attempt_{validate_attempt(attempt)}/result.json"


def parse_baseline_result_key(key: str) -> tuple[str, str, int]:
    """Return (base_model_id, eval_set_sha256, attempt) named by a baseline result key."""
    match = _RESULT_KEY.fullmatch(key)
    if not match:
        raise InvalidName(
            f"not a baseline result key: {key[:200]!r} "
            "(expected 'baselines/<base_model_id>/<eval_set_sha256>/attempt_<N>/result.json')"
        )
    return validate_base_model_id(match["base"]), match["sha"], int(match["attempt"])


class BaselineResult(BaseModel):
    """Outcomes of a base model with no adapter on one fixed evaluation set (written by the evaluation job)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_: Literal["maze-baseline/v1"] = Field(BASELINE_SCHEMA, alias="schema")
    base_model_id: str = Field(pattern=BASE_MODEL_ID_PATTERN.pattern)
    eval_set_name: str = Field(min_length=1, max_length=100)
    eval_set_sha256: str = Field(pattern=_SHA256.pattern)
    outcomes: list[MazeOutcome] = Field(min_length=1)
    backend: str = Field(max_length=40)
    started_at: str = Field(max_length=40)
    finished_at: str = Field(max_length=40)

    @model_validator(mode="after")
    def _ordered(self) -> BaselineResult:
        if self.seeds != sorted(set(self.seeds)):
            raise ValueError("outcomes must be ordered by seed, each seed once")
        return self

    @property
    def seeds(self) -> list[int]:
        """Seeds of the evaluated mazes, in order."""
        return [outcome.seed for outcome in self.outcomes]

    @property
    def n_total(self) -> int:
        """Number of mazes played."""
        return len(self.outcomes)

    @property
    def n_solved(self) -> int:
        """Number of mazes solved."""
        return sum(outcome.solved for outcome in self.outcomes)

    @property
    def solve_rate(self) -> float:
        """Fraction of the mazes solved."""
        return self.n_solved / self.n_total

    @property
    def outcome_bits(self) -> str:
        """Outcomes as a string of '1' (solved) and '0', ordered by seed."""
        return "".join("1" if outcome.solved else "0" for outcome in self.outcomes)

    def to_json(self) -> str:
        """JSON as written to S3."""
        return self.model_dump_json(by_alias=True, indent=1)


def parse_baseline_result(raw: bytes | str) -> BaselineResult:
    """Parse and validate a baseline result; raise InvalidEvalResult with every problem listed."""
    return parse_document(raw, BaselineResult, "baseline result", MAX_RESULT_BYTES, InvalidEvalResult)
