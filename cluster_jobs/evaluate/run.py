"""CLI of the evaluation Ray job (built by the ``submit_ray_job`` Lambda): an adapter by its manifest, or a
baseline (the base model alone on one fixed evaluation set).

Exit codes: 0 evaluated and written; 2 refused (broken adapter or bad arguments; one line on stderr, nothing
written); anything else is a failure of the job itself. Arguments: docs/design.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from cluster_jobs.evaluate.artifacts import EvaluationRefused
from cluster_jobs.evaluate.backends import BACKENDS
from cluster_jobs.evaluate.job import evaluate_adapter, evaluate_base_model

EXIT_REFUSED = 2


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the arguments, run :func:`evaluate_adapter` (or :func:`evaluate_base_model`) and return the exit code."""
    parser = argparse.ArgumentParser(
        description="Evaluate one LoRA adapter, or the base model alone, on a fixed 64-maze set."
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--manifest", help="s3:// URI of the adapter's manifest.json")
    target.add_argument("--base-model-id", help="evaluate this base model with no adapter (its baseline)")
    parser.add_argument("--eval-set-sha256", help="with --base-model-id: sha256 of the fixed evaluation set to play")
    parser.add_argument("--base-model-path", required=True, help="base model checkpoint directory")
    parser.add_argument("--backend", required=True, choices=BACKENDS)
    parser.add_argument("--output", required=True, help="s3:// URI of the result.json to write")
    args = parser.parse_args(argv)
    if (args.base_model_id is None) != (args.eval_set_sha256 is None):
        parser.error("--eval-set-sha256 goes with --base-model-id, and only with it")
    try:
        if args.base_model_id is not None:
            evaluate_base_model(
                args.base_model_id, args.eval_set_sha256, args.base_model_path, args.backend, args.output, log=_print
            )
        else:
            evaluate_adapter(args.manifest, args.base_model_path, args.backend, args.output, log=_print)
    except EvaluationRefused as error:
        print(f"evaluation refused: {' '.join(str(error).split())}", file=sys.stderr, flush=True)
        return EXIT_REFUSED
    return 0


def _print(line: str) -> None:
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
