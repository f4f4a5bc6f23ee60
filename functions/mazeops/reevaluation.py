"""Evaluating an adapter again: attempt 2 on, as an evaluation execution of its own name.

Attempt N >= 2 of an adapter's evaluation is the execution (and Ray job) `eval-<run_id>-step<N>-a<attempt>`
with the input start_execution gives a manifest upload, plus the attempt. Its CheckAdapter re-opens the
registry row (`AdapterRows.reopen`) only from REEVALUABLE_STATUSES, so a champion, a registered adapter or
an evaluation in flight is never touched; the refusal is checked here first, to say why before starting.
"""

from __future__ import annotations

import json
from typing import Any

from mazeops.adapter_rows import REEVALUABLE_STATUSES, AdapterNotReevaluable, AdapterRecord
from mazeops.layout import adapter_manifest_key
from mazeops.names import MAX_EVAL_ATTEMPT, eval_job_id

_REFUSALS = {
    "CHAMPION": "is the champion: it is not evaluated again while it serves",
    "REGISTERED": "is being registered for serving (REGISTERED): its promotion is under way",
    "EVALUATING": "is being evaluated now (EVALUATING)",
}


class ReevaluationAlreadyStarted(RuntimeError):
    """The execution of the adapter's next evaluation attempt exists already."""


def next_attempt(record: AdapterRecord) -> int:
    """The attempt number of the adapter's next evaluation: one more than its last (1 when never re-evaluated)."""
    return (record.eval_attempts or 1) + 1


def reevaluation_refusal(record: AdapterRecord) -> str | None:
    """Why the adapter cannot be evaluated again now (completing "<adapter> ..."), or None when it can."""
    if record.status in _REFUSALS:
        return _REFUSALS[record.status]
    if record.status not in REEVALUABLE_STATUSES:
        return f"is {record.status}; only an adapter in {', '.join(REEVALUABLE_STATUSES)} is evaluated again"
    if next_attempt(record) > MAX_EVAL_ATTEMPT:
        return f"has had all {MAX_EVAL_ATTEMPT} evaluation attempts"
    return None


def reevaluation_input(bucket: str, record: AdapterRecord, attempt: int) -> dict[str, Any]:
    """The evaluation execution's input for `attempt`: start_execution's for the adapter's manifest, plus it."""
    return {
        "bucket": bucket,
        "key": adapter_manifest_key(record.run_id, record.step),
        "run_id": record.run_id,
        "step": record.step,
        "attempt": attempt,
    }


def start_reevaluation(
    sfn_client: Any, evaluation_state_machine_arn: str, bucket: str, record: AdapterRecord
) -> tuple[str, str]:
    """Start the adapter's next evaluation attempt; return (execution name, execution ARN).

    Raises AdapterNotReevaluable when `reevaluation_refusal` refuses, and ReevaluationAlreadyStarted when the
    attempt's execution exists (running or ended: Step Functions never reuses a name).
    """
    refusal = reevaluation_refusal(record)
    if refusal is not None:
        raise AdapterNotReevaluable(f"{record.base_model_id}:{record.adapter_name} {refusal}")
    attempt = next_attempt(record)
    name = eval_job_id(record.run_id, record.step, attempt)
    execution_arn = evaluation_state_machine_arn.replace(":stateMachine:", ":execution:", 1) + f":{name}"
    try:
        existing = sfn_client.describe_execution(executionArn=execution_arn)
    except sfn_client.exceptions.ExecutionDoesNotExist:
        existing = None
    if existing is not None:
        raise ReevaluationAlreadyStarted(_already_started(name, existing["status"]))
    try:
        answer = sfn_client.start_execution(
            stateMachineArn=evaluation_state_machine_arn,
            name=name,
            input=json.dumps(reevaluation_input(bucket, record, attempt)),
        )
    except sfn_client.exceptions.ExecutionAlreadyExists:
        raise ReevaluationAlreadyStarted(_already_started(name, "started meanwhile")) from None
    return name, answer["executionArn"]


def _already_started(name: str, status: str) -> str:
    return f"evaluation attempt execution {name} exists already ({status}); a name is never reused"
