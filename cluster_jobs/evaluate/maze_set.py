"""Which fixed evaluation set an adapter is played on: the one of the maze size its run trained on.

The size comes from the run's normalized spec in the manifest's bucket; without one, the default 9x9 set.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from cluster_jobs.evaluate.artifacts import EvaluationRefused
from cluster_jobs.maze.eval_set import EVAL_SET_SIZE, EVAL_SETS, EvalSet, NoEvalSet, eval_set_for_size
from mazeops.errors import describe_validation_error
from mazeops.layout import normalized_spec_key
from mazeops.runspec import MAX_SPEC_BYTES, NormalizedRunSpec
from mazeops.s3_objects import ObjectMissing, ObjectTooLarge, read_limited


def eval_set_for_run(s3: Any, bucket: str, run_id: str, log: Callable[[str], None]) -> EvalSet:
    """The fixed evaluation set for the maze size of run ``run_id`` (the 9x9 set when the run has no spec).

    Raises:
        EvaluationRefused: if the run's spec is unreadable, invalid or names another run, or there
            is no fixed evaluation set of the run's maze size.
    """
    key = normalized_spec_key(run_id)
    try:
        raw = read_limited(s3, bucket, key, MAX_SPEC_BYTES)
    except ObjectMissing:
        log(f"run {run_id} has no spec at s3://{bucket}/{key}; using the default {EVAL_SET_SIZE}x{EVAL_SET_SIZE} set")
        return eval_set_for_size(EVAL_SET_SIZE)
    except ObjectTooLarge as error:
        raise EvaluationRefused(str(error)) from None
    try:
        spec = NormalizedRunSpec.model_validate_json(raw)
    except ValidationError as error:
        raise EvaluationRefused(
            f"s3://{bucket}/{key} is not a valid normalized run spec: {describe_validation_error(error)}"
        ) from None
    if spec.run_id != run_id:
        raise EvaluationRefused(f"s3://{bucket}/{key} holds the spec of run {spec.run_id!r}, not {run_id!r}")
    try:
        return eval_set_for_size(spec.maze.size)
    except NoEvalSet as error:
        raise EvaluationRefused(f"run {run_id} trained on {spec.maze.size}x{spec.maze.size} mazes: {error}") from None


def eval_set_by_sha256(eval_set_sha256: str) -> EvalSet:
    """The fixed evaluation set whose sha256 is ``eval_set_sha256``: a baseline is played on the set its challenger was.

    Raises:
        EvaluationRefused: if no fixed evaluation set has that sha256.
    """
    sets = [eval_set_for_size(size) for size in sorted(EVAL_SETS)]
    for eval_set in sets:
        if eval_set.sha256 == eval_set_sha256:
            return eval_set
    known = ", ".join(f"{eval_set.name} ({eval_set.sha256[:12]}...)" for eval_set in sets)
    raise EvaluationRefused(f"no fixed evaluation set has sha256 {eval_set_sha256[:64]!r}; the sets are {known}")
