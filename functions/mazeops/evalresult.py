"""The evaluation result: per-maze outcomes of one adapter on the fixed 64-maze set."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mazeops.jsontext import parse_document
from mazeops.names import BASE_MODEL_ID_PATTERN, RUN_ID_PATTERN

EVAL_SCHEMA = "maze-eval/v1"
MAX_RESULT_BYTES = 1024 * 1024
# The seeds of the fixed evaluation set (cluster_jobs/maze/eval_set.json; a test keeps them equal).
EVAL_SET_SEEDS = tuple(range(64))


class InvalidEvalResult(ValueError):
    """The evaluation result is malformed or inconsistent."""


class MazeOutcome(BaseModel):
    """Outcome of one maze episode."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = Field(ge=0)
    solved: bool
    turns: int = Field(ge=0)
    error: str | None = Field(None, max_length=500)


class EvalResult(BaseModel):
    """Outcomes of one adapter on the fixed evaluation set."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_: Literal["maze-eval/v1"] = Field(EVAL_SCHEMA, alias="schema")
    run_id: str = Field(pattern=RUN_ID_PATTERN.pattern)
    step: int = Field(ge=1)
    adapter_name: str
    base_model_id: str = Field(pattern=BASE_MODEL_ID_PATTERN.pattern)
    eval_set_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    n_total: int = Field(ge=1)
    n_solved: int = Field(ge=0)
    solve_rate: float = Field(ge=0.0, le=1.0)
    outcomes: list[MazeOutcome]
    backend: str = Field(max_length=40)
    started_at: str = Field(max_length=40)
    finished_at: str = Field(max_length=40)

    @model_validator(mode="after")
    def _consistent(self) -> EvalResult:
        seeds = [outcome.seed for outcome in self.outcomes]
        if seeds != sorted(set(seeds)):
            raise ValueError("outcomes must be ordered by seed, each seed once")
        if len(self.outcomes) != self.n_total:
            raise ValueError(f"n_total is {self.n_total} but there are {len(self.outcomes)} outcomes")
        solved = sum(outcome.solved for outcome in self.outcomes)
        if solved != self.n_solved:
            raise ValueError(f"n_solved is {self.n_solved} but {solved} outcomes are solved")
        if abs(self.solve_rate - solved / self.n_total) > 1e-9:
            raise ValueError(f"solve_rate {self.solve_rate} is not n_solved / n_total")
        return self

    @classmethod
    def of_outcomes(cls, outcomes: list[MazeOutcome], **fields: Any) -> EvalResult:
        """The result of `outcomes` (ordered by seed) with its counts derived; `fields` are the others."""
        solved = sum(outcome.solved for outcome in outcomes)
        return cls(
            outcomes=outcomes, n_total=len(outcomes), n_solved=solved, solve_rate=solved / len(outcomes), **fields
        )

    @property
    def seeds(self) -> list[int]:
        """Seeds of the evaluated mazes, in order."""
        return [outcome.seed for outcome in self.outcomes]

    @property
    def outcome_bits(self) -> str:
        """Outcomes as a compact string of '1' (solved) and '0', ordered by seed."""
        return "".join("1" if outcome.solved else "0" for outcome in self.outcomes)

    def to_json(self) -> str:
        """JSON as written to S3."""
        return self.model_dump_json(by_alias=True, indent=1)


def parse_eval_result(raw: bytes | str) -> EvalResult:
    """Parse and validate an evaluation result; raise InvalidEvalResult with every problem listed."""
    return parse_document(raw, EvalResult, "evaluation result", MAX_RESULT_BYTES, InvalidEvalResult)
