"""`mazeops-ops`: the argument parser, target selection and the one-line error convention (exit status 2)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from botocore.exceptions import BotoCoreError, ClientError

from mazeops.adapter_rows import AdapterNotFound
from mazeops.champion_rows import AdapterNotPromotable, ChampionChanged, NoPreviousChampion
from mazeops.evalresult import InvalidEvalResult
from mazeops.manifest import InvalidManifest
from mazeops.names import InvalidName
from mazeops.ray_jobs import InvalidRayAddress, RayJobError, RayJobNotFound, RayUnavailable
from mazeops.runspec import InvalidRunSpec
from mazeops.s3_objects import ObjectMissing, ObjectTooLarge
from mazeops.serve_client import ServeUnavailable, SmokeTestFailed
from opsctl import adapters, baseline, curve, executions, play, runs
from opsctl.errors import OpsError
from opsctl.target import LOCAL_STACK_FILE, resolve_target

PROG = "mazeops-ops"
EPILOG = """examples:
  mazeops-ops run start spec.json --run-id maze-grpo-1 --local --wait
  mazeops-ops run show maze-grpo-1 --stack maze-rl-ops --logs
  mazeops-ops executions --local --status FAILED
  mazeops-ops adapters leaderboard qwen3-vl-8b-sft --local
  mazeops-ops adapters promote qwen3-vl-8b-sft maze-grpo-1-step40 --local --yes
  mazeops-ops baseline evaluate qwen3-vl-8b-sft --local
  mazeops-ops curve --base qwen3-vl-8b-sft --local --out curve.png
  mazeops-ops play --champion --base-model qwen3-vl-8b-sft --seed 7 --local --out seed7.png

Every command takes --stack NAME (CloudFormation outputs, region from boto3) or --local
(.local-stack/stack.json); without either, env MAZEOPS_STACK names the stack.
Errors print one line on stderr and exit with status 2.
"""

# Failures the CLI reports as one line (exit 2) instead of a traceback.
REPORTED_ERRORS = (
    OpsError,
    InvalidName,
    InvalidRunSpec,
    InvalidEvalResult,
    InvalidManifest,
    AdapterNotFound,
    AdapterNotPromotable,
    ChampionChanged,
    NoPreviousChampion,
    InvalidRayAddress,
    RayUnavailable,
    RayJobError,
    RayJobNotFound,
    SmokeTestFailed,
    ObjectMissing,
    ObjectTooLarge,
    ServeUnavailable,
    ClientError,
    BotoCoreError,
)


def target_options() -> argparse.ArgumentParser:
    """The parent parser with `--stack` / `--local`, shared by every command."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("deployment")
    choice = group.add_mutually_exclusive_group()
    choice.add_argument("--stack", metavar="NAME", help="CloudFormation stack name (default: env MAZEOPS_STACK)")
    choice.add_argument("--local", action="store_true", help="the local stack described by .local-stack/stack.json")
    group.add_argument(
        "--local-state", type=Path, default=LOCAL_STACK_FILE, metavar="PATH", help="with --local: another stack.json"
    )
    return parent


def build_parser() -> argparse.ArgumentParser:
    """The full `mazeops-ops` parser."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Drive and watch the maze-rl-ops pipeline: "
        "runs, executions, adapters, baselines, champions, learning curves.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="{run,executions,adapters,baseline,curve,play}"
    )
    parents = [target_options()]
    for module in (runs, executions, adapters, baseline, curve, play):
        module.register(commands, parents)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit status."""
    args = build_parser().parse_args(argv)
    try:
        target = resolve_target(args.stack, args.local, args.local_state)
        return args.func(args, target)
    except REPORTED_ERRORS as error:
        message = " ".join(str(error).split())
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
