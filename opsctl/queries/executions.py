"""The Step Functions executions of a deployment's two state machines, their histories and definitions."""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError

from mazeops.names import InvalidName, parse_job_id
from opsctl.target import Target

STATE_MACHINES = ("training", "evaluation")


def execution_arn(state_machine_arn: str, name: str) -> str:
    """The ARN of execution `name` of a standard state machine."""
    prefix, _, machine = state_machine_arn.rpartition(":stateMachine:")
    return f"{prefix}:execution:{machine}:{name}"


def list_executions(target: Target, machines: list[str], status: str | None = None) -> list[dict[str, Any]]:
    """Executions of the named state machines (`training`, `evaluation`), newest first."""
    client = target.client("stepfunctions")
    rows: list[dict[str, Any]] = []
    for machine in machines:
        arguments: dict[str, Any] = {"stateMachineArn": target.state_machines[machine]}
        if status:
            arguments["statusFilter"] = status
        for page in client.get_paginator("list_executions").paginate(**arguments):
            rows += [
                {
                    "name": execution["name"],
                    "state_machine": machine,
                    "status": execution["status"],
                    "start_date": execution.get("startDate"),
                    "stop_date": execution.get("stopDate"),
                    "execution_arn": execution["executionArn"],
                }
                for execution in page["executions"]
            ]
    rows.sort(key=lambda row: row["start_date"], reverse=True)
    return rows


def describe_execution(target: Target, arn: str) -> dict[str, Any] | None:
    """`describe_execution` of `arn`, or None when there is no such execution."""
    client = target.client("stepfunctions")
    try:
        return client.describe_execution(executionArn=arn)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ExecutionDoesNotExist":
            return None
        raise


def state_machine_definition(target: Target, machine: str) -> dict[str, Any]:
    """The ASL definition (parsed) of state machine `machine` (`training` or `evaluation`), as deployed."""
    described = target.client("stepfunctions").describe_state_machine(stateMachineArn=target.state_machines[machine])
    return json.loads(described["definition"])


def execution_history(target: Target, arn: str) -> list[dict[str, Any]]:
    """Every history event of execution `arn`, oldest first (`get_execution_history`, all pages)."""
    pages = target.client("stepfunctions").get_paginator("get_execution_history").paginate(executionArn=arn)
    return [event for page in pages for event in page["events"]]


def execution_run(name: str) -> tuple[str | None, int | None]:
    """(run id, step) named by an execution name `train-<run>` or `eval-<run>-step<N>`; (None, None) for others."""
    try:
        return parse_job_id(name)
    except InvalidName:
        return None, None


def run_executions(target: Target, run_id: str) -> list[dict[str, Any]]:
    """The training and evaluation executions of one run, oldest first."""
    executions = [e for e in list_executions(target, list(STATE_MACHINES)) if execution_run(e["name"])[0] == run_id]
    executions.reverse()
    return executions
