"""Settle one attempt at evaluating a baseline once its Ray job has ended: READY with its outcomes, or FAILED."""

from __future__ import annotations

from typing import Any

from mazeops.baseline import baseline_result_key, parse_baseline_result
from mazeops.baseline_rows import BaselineRecord
from mazeops.evalresult import EVAL_SET_SEEDS, MAX_RESULT_BYTES, InvalidEvalResult
from mazeops.registry import Registry
from mazeops.s3_objects import ObjectMissing, ObjectTooLarge, read_limited

LOGS_TAIL_CHARS = 1000


def settle_baseline(
    s3: Any,
    registry: Registry,
    bucket: str,
    claimed: BaselineRecord,
    job_status: str,
    job_message: str | None = None,
    logs_tail: str | None = None,
) -> BaselineRecord:
    """Record how the attempt `claimed` ended (its Ray job ended `job_status`); return the baseline row after it."""
    base, sha, attempt = claimed.base_model_id, claimed.eval_set_sha256, claimed.attempt
    if job_status != "SUCCEEDED":
        tail = (logs_tail or "")[-LOGS_TAIL_CHARS:]
        error = f"Ray job {claimed.job_id} ended {job_status}: {job_message or 'no message'} | log tail: {tail}"
        return registry.fail_baseline(base, sha, attempt, error)
    key = baseline_result_key(base, sha, attempt)
    try:
        result = parse_baseline_result(read_limited(s3, bucket, key, MAX_RESULT_BYTES))
        if (result.base_model_id, result.eval_set_sha256) != (base, sha):
            raise InvalidEvalResult(
                f"it is the evaluation of {result.base_model_id} on {result.eval_set_sha256[:12]}..., "
                f"not of {base} on {sha[:12]}..."
            )
        if tuple(result.seeds) != EVAL_SET_SEEDS:
            raise InvalidEvalResult(
                f"it covers {result.n_total} mazes (seeds {result.seeds[:3]}...), "
                f"not the {len(EVAL_SET_SEEDS)} mazes of a fixed evaluation set"
            )
    except (ObjectMissing, ObjectTooLarge) as error:
        return registry.fail_baseline(base, sha, attempt, f"baseline result: {error}")
    except InvalidEvalResult as error:
        return registry.fail_baseline(base, sha, attempt, f"s3://{bucket}/{key}: {error}")
    return registry.record_baseline(result, attempt)


def unavailable_reason(record: BaselineRecord | None, base_model_id: str, eval_set_sha256: str) -> str:
    """Why the baseline of `base_model_id` on `eval_set_sha256` cannot be compared with (it is not READY)."""
    where = f"baseline of {base_model_id} on evaluation set {eval_set_sha256[:12]}..."
    if record is None:
        return f"no {where} is recorded"
    error = record.error or "no error recorded"
    return f"{where} is {record.status} (attempt {record.attempt}, Ray job {record.job_id}): {error}"
