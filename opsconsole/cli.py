"""`python -m opsconsole` / `mazeops-console`: the read-only ops console of a deployment, in a browser.

It takes the ops CLI's deployment options (`--stack NAME`, `--local`, env MAZEOPS_STACK) and reads
the same AWS APIs, Ray Jobs API and serve URL. It listens on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence

from opsconsole.server import ConsoleServer
from opsctl.cli import REPORTED_ERRORS, target_options
from opsctl.target import resolve_target

PROG = "mazeops-console"
DEFAULT_PORT = 8321
EPILOG = """examples:
  mazeops-console --local                   # while `make local` (or the local stack) runs
  mazeops-console --stack maze-rl-ops --port 9000
  python -m opsconsole --local

Then open the printed URL. Pages: executions (with each one's history and state machine graph),
runs (Ray job status, live log tail, learning curve), registry (baseline, champion, decisions,
McNemar evidence, lineage, the 64-maze grid of challenger against champion, a model's path on one maze).
"""


def build_parser() -> argparse.ArgumentParser:
    """The `mazeops-console` parser."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Serve the read-only ops console of a deployment on 127.0.0.1.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[target_options()],
    )
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port on 127.0.0.1 (default {DEFAULT_PORT}; 0: any free port)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Serve until interrupted; errors choosing the deployment or the port print one line and exit 2."""
    args = build_parser().parse_args(argv)
    try:
        target = resolve_target(args.stack, args.local, args.local_state)
        server = ConsoleServer(target, args.port)
    except REPORTED_ERRORS as error:
        print(f"{PROG}: error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"{PROG}: error: cannot listen on 127.0.0.1:{args.port}: {error.strerror or error}", file=sys.stderr)
        return 2
    print(f"ops console of stack {target.stack_name} at {server.url} (read-only; Ctrl-C to stop)", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    return 0
