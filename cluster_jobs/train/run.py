"""The training Ray job of one run: the backend, the checkpoint sync and the metrics upload (docs/design.md).

    python -m cluster_jobs.train.run --spec s3://<bucket>/runs/<run_id>/spec.json --bucket <bucket> [--dry-run]

Exit status 0 when training and the final upload succeeded, 1 when either failed, 2 for a bad spec or arguments.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import ValidationError

from cluster_jobs.sync.checkpoint_sync import CheckpointSync
from cluster_jobs.train.metrics import MetricsUploader
from cluster_jobs.train.skyrl_launch import LaunchConfigError, TrainPaths, build_skyrl_command
from mazeops.errors import describe_validation_error
from mazeops.layout import normalized_spec_key
from mazeops.runspec import InvalidRunSpec, NormalizedRunSpec

logger = logging.getLogger("cluster_jobs.train.run")  # not __name__: "__main__" under python -m

DEFAULT_SYNC_INTERVAL_S = 30.0


class TrainingFailed(RuntimeError):
    """The backend did not finish its run."""


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/key`` -> ``(bucket, key)``.

    Raises:
        InvalidRunSpec: if ``uri`` is not an ``s3://`` URI with a bucket and a key.
    """
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    if not uri.startswith("s3://") or not bucket or not key:
        raise InvalidRunSpec(f"--spec must be s3://<bucket>/<key>, got {uri[:200]!r}")
    return bucket, key


def load_spec(s3: Any, uri: str, bucket: str) -> NormalizedRunSpec:
    """Read and validate the normalized spec at ``uri``, which must be ``s3://<bucket>/runs/<run_id>/spec.json``.

    Raises:
        InvalidRunSpec: wrong location, unreadable or invalid spec.
    """
    spec_bucket, key = parse_s3_uri(uri)
    if spec_bucket != bucket:
        raise InvalidRunSpec(f"the spec is in bucket {spec_bucket!r} but --bucket is {bucket!r}")
    try:
        raw = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as error:
        raise InvalidRunSpec(f"cannot read {uri}: {error.response.get('Error', {}).get('Code', error)}") from None
    try:
        spec = NormalizedRunSpec.model_validate_json(raw)
    except ValidationError as error:
        raise InvalidRunSpec(f"{uri} is not a valid normalized run spec: {describe_validation_error(error)}") from None
    if key != normalized_spec_key(spec.run_id):
        raise InvalidRunSpec(f"{uri} holds run {spec.run_id!r}, whose spec key is {normalized_spec_key(spec.run_id)!r}")
    return spec


def run_skyrl(command: Sequence[str]) -> None:
    """Run the SkyRL trainer, streaming its output line by line into this job's log.

    Raises:
        TrainingFailed: if it exits with a non-zero status.
    """
    logger.info("starting SkyRL: %s", shlex.join(command))
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1) as process:
        assert process.stdout is not None
        for line in process.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
    if process.returncode != 0:
        raise TrainingFailed(f"the SkyRL trainer exited with status {process.returncode}")


def prepare_skyrl_data(spec: NormalizedRunSpec, paths: TrainPaths) -> None:
    """Write SkyRL's training and validation prompt datasets (training mazes, the 64 eval mazes)."""
    from cluster_jobs.maze.dataset import write_eval_dataset, write_training_dataset

    rows = write_training_dataset(
        paths.train_data,
        spec.maze.train_mazes,
        spec.maze.size,
        seed_offset=spec.maze.seed_offset,
        max_turns=spec.max_turns,
        turn_cost=spec.turn_cost,
    )
    write_eval_dataset(paths.val_data, size=spec.maze.size)
    logger.info("wrote %d training mazes to %s and the eval mazes to %s", rows, paths.train_data, paths.val_data)


def _repeat(stop: threading.Event, interval_s: float, action: Callable[[], object], what: str) -> None:
    """Call ``action`` every ``interval_s`` seconds until ``stop`` is set; errors are logged, not raised."""
    while not stop.wait(interval_s):
        try:
            action()
        except Exception:  # a background upload must outlive a transient error
            logger.exception("%s failed; retrying in %.0f s", what, interval_s)


def train(
    spec: NormalizedRunSpec, bucket: str, s3: Any, sync_interval_s: float, skyrl_command: list[str] | None
) -> None:
    """Prepare, run the backend (SkyRL's ``skyrl_command``, or tiny when None) with the uploads in
    the background, then upload what is left.

    Raises:
        TrainingFailed: the backend failed (the final uploads still ran).
        Exception: from the final uploads (S3 errors, a conflicting manifest).
    """
    paths = TrainPaths.for_run(spec)
    paths.make_dirs()
    sync = CheckpointSync(paths.export_dir, bucket, spec.run_id, spec.base_model_id, s3)
    metrics = MetricsUploader(paths.metrics_file, bucket, spec.run_id, s3)
    stop = threading.Event()
    threads = [
        threading.Thread(target=sync.watch, args=(stop, sync_interval_s), name="checkpoint-sync", daemon=True),
        threading.Thread(
            target=_repeat, args=(stop, sync_interval_s, metrics.upload_if_changed, "metrics upload"), daemon=True
        ),
    ]
    for thread in threads:
        thread.start()
    failure: Exception | None = None
    try:
        if skyrl_command is not None:
            prepare_skyrl_data(spec, paths)
            run_skyrl(skyrl_command)
        else:  # backend "tiny": the local stand-in for SkyRL, imported only when a spec asks for it
            from local_stack.cluster_standins.tiny_trainer.train import train_tiny_grpo

            train_tiny_grpo(spec, paths)
    except Exception as error:  # reported after the final uploads, which must run regardless
        failure = error
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    logger.info("backend finished%s; final upload pass", "" if failure is None else " with an error")
    uploaded = sync.sync_once(writer_done=True)
    metrics.upload_if_changed()
    logger.info("final pass uploaded steps %s; metrics at s3://%s/%s", uploaded or "none", bucket, metrics.key)
    if isinstance(failure, TrainingFailed):
        raise failure
    if failure is not None:
        raise TrainingFailed(f"the {spec.backend} backend failed: {type(failure).__name__}: {failure}") from failure


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m cluster_jobs.train.run", description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, help="s3://<bucket>/runs/<run_id>/spec.json")
    parser.add_argument("--bucket", required=True, help="artifacts bucket (adapters, manifests, metrics)")
    parser.add_argument("--dry-run", action="store_true", help="print the backend's command and exit")
    parser.add_argument(
        "--sync-interval-s", type=float, default=DEFAULT_SYNC_INTERVAL_S, help="seconds between uploads"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("cluster_jobs").setLevel(logging.INFO)  # progress of the sync and the backend too
    s3 = boto3.client("s3")
    try:
        spec = load_spec(s3, args.spec, args.bucket)
        paths = TrainPaths.for_run(spec)
        skyrl_command = build_skyrl_command(spec, paths) if spec.backend == "skyrl" else None
    except (InvalidRunSpec, LaunchConfigError) as error:
        logger.error("%s", error)
        return 2
    except BotoCoreError as error:  # S3 unreachable, no credentials
        logger.error("cannot read the spec: %s", error)
        return 1
    logger.info(
        "run %s: backend %s, %d steps, base model %s", spec.run_id, spec.backend, spec.total_steps, spec.base_model_id
    )
    if args.dry_run:
        if skyrl_command is not None:
            print(shlex.join(skyrl_command))
        else:
            print(f"tiny CPU GRPO in this process: {spec.total_steps} steps in {paths.root}")
        return 0
    try:
        train(spec, args.bucket, s3, args.sync_interval_s, skyrl_command)
    except (TrainingFailed, ClientError, BotoCoreError, RuntimeError, ValueError, OSError) as error:
        logger.error("training run %s failed: %s", spec.run_id, error)
        return 1
    logger.info("training run %s succeeded", spec.run_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
