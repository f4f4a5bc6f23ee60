"""Stop a run for a guard (mazeops.guards): the same path as an operator's stop, with the guard's reason.

The run row is marked STOPPED first (only a RUNNING run), so no adapter of the run is promoted from then on
(mazeops.runs.PROMOTABLE_RUN_STATUSES); then its training execution is stopped with error `RunGuard` and the reason as
cause. The execution status-change rule then runs stop_ray_job, which stops the Ray job and keeps the STOPPED row, and
ExecutionEndedUnfinishedRule notifies the topic with the cause, as for an operator's stop.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger

from mazeops.guards import GuardVerdict
from mazeops.runs import RunsTable

# The StopExecution error of a guard's stop; its cause is the verdict's reason.
GUARD_STOP_ERROR = "RunGuard"
# StopExecution's limits (https://docs.aws.amazon.com/step-functions/latest/apireference/API_StopExecution.html).
MAX_STOP_CAUSE_CHARS = 32_768

logger = Logger(child=True)


def stop_run(runs: RunsTable, sfn: Any, run_id: str, verdict: GuardVerdict) -> bool:
    """Stop run `run_id` for `verdict`; True if this call marked it STOPPED, False if it was not RUNNING.

    A run already STOPPED (by an earlier attempt that failed before stopping the execution) has its execution stopped
    again, so a retried stop completes; its row keeps the first verdict.
    """
    marked = runs.mark_stopped(run_id, verdict)
    run = runs.get_run(run_id)
    if run is None or run.status != "STOPPED":
        logger.info("Run is not RUNNING; the guard stops nothing", extra={"run_id": run_id, "guard": verdict.guard})
        return False
    execution_arn = run.execution_arn
    try:
        sfn.stop_execution(
            executionArn=execution_arn, error=GUARD_STOP_ERROR, cause=verdict.reason[:MAX_STOP_CAUSE_CHARS]
        )
    except sfn.exceptions.ExecutionDoesNotExist:
        logger.warning("The run's training execution does not exist", extra={"execution_arn": execution_arn})
    logger.warning(
        "Run stopped by its guard", extra={"run_id": run_id, "guard": verdict.guard, "reason": verdict.reason}
    )
    return marked
