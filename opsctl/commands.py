"""The one shape of every `mazeops-ops` command: a group of sub-commands, or a command running `func(args, target)`."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

FORMATTER = argparse.RawDescriptionHelpFormatter


def add_group(
    commands: argparse._SubParsersAction,
    name: str,
    help: str,
    description: str,
    epilog: str,
    subcommands: Sequence[str],
) -> argparse._SubParsersAction:
    """Add the command group `name` (one of `subcommands` is required) and return where its sub-commands go."""
    group = commands.add_parser(name, help=help, description=description, epilog=epilog, formatter_class=FORMATTER)
    return group.add_subparsers(dest=f"{name}_command", required=True, metavar="{" + ",".join(subcommands) + "}")


def add_command(
    commands: argparse._SubParsersAction,
    name: str,
    func: Callable[..., int],
    parents: Sequence[argparse.ArgumentParser],
    help: str,
    epilog: str,
    description: str | None = None,
) -> argparse.ArgumentParser:
    """Add the command `name`, run as `func(args, target)`; its description is `func`'s docstring unless given."""
    parser = commands.add_parser(
        name,
        parents=list(parents),
        help=help,
        description=description or func.__doc__,
        epilog=epilog,
        formatter_class=FORMATTER,
    )
    parser.set_defaults(func=func)
    return parser
