"""`executions`: the Step Functions executions of the training and evaluation state machines."""

from __future__ import annotations

import argparse
from typing import Any

from opsctl.commands import add_command
from opsctl.output import print_json, print_table
from opsctl.queries.executions import STATE_MACHINES, list_executions
from opsctl.target import Target

STATUSES = ("RUNNING", "SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED", "PENDING_REDRIVE")
COLUMNS = ("NAME", "STATE_MACHINE", "STATUS", "STARTED", "STOPPED")

EPILOG = """examples:
  mazeops-ops executions --local
  mazeops-ops executions --stack maze-rl-ops --state-machine evaluation --status FAILED
  mazeops-ops executions --local --status RUNNING --json
"""


def execution_rows(executions: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Table rows (COLUMNS) of executions."""
    return [(e["name"], e["state_machine"], e["status"], e["start_date"], e["stop_date"]) for e in executions]


def command(args: argparse.Namespace, target: Target) -> int:
    """Print the executions table."""
    machines = [args.state_machine] if args.state_machine else list(STATE_MACHINES)
    executions = list_executions(target, machines, args.status)
    if args.json:
        print_json(executions)
    else:
        print_table(COLUMNS, execution_rows(executions))
    return 0


def register(commands: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]) -> None:
    """Add the `executions` command."""
    parser = add_command(
        commands,
        "executions",
        command,
        parents,
        "list training and evaluation executions",
        EPILOG,
        description="List the executions of the training and evaluation state machines, newest first.",
    )
    parser.add_argument("--state-machine", choices=STATE_MACHINES, help="only this state machine")
    parser.add_argument("--status", choices=STATUSES, help="only executions in this status")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
