"""Evaluate one adapter: fetch and verify it, play the eval mazes of its run's maze size greedily, write the
result to S3; or a baseline, the base model alone on a challenger's evaluation set.

Every check runs before any model is loaded, and the result is written only after the last maze is played.
"""

from __future__ import annotations

import datetime
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3

from cluster_jobs.evaluate.artifacts import (
    EvaluationRefused,
    S3Location,
    check_base_model,
    check_baseline_output,
    check_output_location,
    fetch_adapter,
    parse_s3_uri,
)
from cluster_jobs.evaluate.backends import BACKENDS, Lora, answer_budget, transformers_generate, vllm_generate
from cluster_jobs.evaluate.maze_set import eval_set_by_sha256, eval_set_for_run
from cluster_jobs.maze.eval_set import EvalSet
from cluster_jobs.rollout import HISTORY_TURNS_BY_ENGINE, Episode, run_episodes
from mazeops.baseline import BaselineResult
from mazeops.evalresult import EvalResult, MazeOutcome


def evaluate_adapter(
    manifest_uri: str,
    base_model_path: str | Path,
    backend: str,
    output_uri: str,
    s3: Any | None = None,
    log: Callable[[str], None] = print,
) -> EvalResult:
    """Evaluate the adapter of ``manifest_uri`` on the fixed eval set of its run's maze size, with that set's turn
    budget (:func:`~cluster_jobs.evaluate.maze_set.eval_set_for_run`), and write the result to ``output_uri``.

    Args:
        manifest_uri: ``s3://<bucket>/runs/<run_id>/adapters/global_step_<N>/manifest.json``.
        base_model_path: the base model checkpoint directory (or Hub id for vLLM).
        backend: ``"vllm"`` (cluster GPUs) or ``"transformers"`` (anywhere).
        output_uri: ``s3://<bucket>/runs/<run_id>/evals/global_step_<N>/result.json``.
        s3: a boto3 S3 client (default: ``boto3.client("s3")``, which honours ``AWS_ENDPOINT_URL``).
        log: receives the progress lines and the final summary line.

    Raises:
        EvaluationRefused: the adapter or the arguments are unusable; nothing was written.
    """
    _check_backend(backend)
    manifest_location, output = parse_s3_uri(manifest_uri), parse_s3_uri(output_uri)
    check_output_location(manifest_location, output)
    s3 = s3 or boto3.client("s3")
    with tempfile.TemporaryDirectory(prefix="eval-adapter-") as tmp:
        adapter_dir = Path(tmp) / "adapter"
        manifest = fetch_adapter(s3, manifest_location, adapter_dir)
        eval_set = eval_set_for_run(s3, manifest_location.bucket, manifest.run_id, log)
        check_base_model(adapter_dir, base_model_path, manifest.base_model_id)
        lora = Lora(manifest.adapter_name, adapter_dir, manifest.lora_rank)
        outcomes, started_at, clock = _play(base_model_path, backend, lora, eval_set, manifest.adapter_name, log)
    result = EvalResult.of_outcomes(
        outcomes,
        run_id=manifest.run_id,
        step=manifest.step,
        adapter_name=manifest.adapter_name,
        base_model_id=manifest.base_model_id,
        eval_set_sha256=eval_set.sha256,
        backend=backend,
        started_at=started_at,
        finished_at=_utc_now(),
    )
    _write(
        s3,
        output,
        result.to_json(),
        f"{manifest.adapter_name}: solved {result.n_solved}/{result.n_total} mazes",
        clock,
        backend,
        log,
    )
    return result


def evaluate_base_model(
    base_model_id: str,
    eval_set_sha256: str,
    base_model_path: str | Path,
    backend: str,
    output_uri: str,
    s3: Any | None = None,
    log: Callable[[str], None] = print,
) -> BaselineResult:
    """Evaluate the baseline: the base model as it is, no adapter, on the fixed eval set of sha256
    ``eval_set_sha256``.

    Args:
        base_model_id: the project's id of the base model (``qwen3-vl-8b-sft``).
        eval_set_sha256: the evaluation set to play, as a challenger's result records it.
        base_model_path: the base model checkpoint directory (or Hub id for vLLM).
        backend: ``"vllm"`` (cluster GPUs) or ``"transformers"`` (anywhere).
        output_uri: ``s3://<bucket>/baselines/<base_model_id>/<eval_set_sha256>/attempt_<N>/result.json``.
        s3: a boto3 S3 client (default: ``boto3.client("s3")``).
        log: receives the progress lines and the final summary line.

    Raises:
        EvaluationRefused: the arguments are unusable (no such evaluation set, an output key of
            another baseline); nothing was written.
    """
    _check_backend(backend)
    output = parse_s3_uri(output_uri)
    check_baseline_output(output, base_model_id, eval_set_sha256)
    eval_set = eval_set_by_sha256(eval_set_sha256)
    s3 = s3 or boto3.client("s3")
    label = f"base model {base_model_id} (no adapter)"
    outcomes, started_at, clock = _play(base_model_path, backend, None, eval_set, label, log)
    result = BaselineResult(
        base_model_id=base_model_id,
        eval_set_name=eval_set.name,
        eval_set_sha256=eval_set.sha256,
        outcomes=outcomes,
        backend=backend,
        started_at=started_at,
        finished_at=_utc_now(),
    )
    _write(
        s3,
        output,
        result.to_json(),
        f"baseline {base_model_id}: solved {result.n_solved}/{result.n_total} mazes",
        clock,
        backend,
        log,
    )
    return result


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise EvaluationRefused(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")


def _play(
    base_model_path: str | Path,
    backend: str,
    lora: Lora | None,
    eval_set: EvalSet,
    label: str,
    log: Callable[[str], None],
) -> tuple[list[MazeOutcome], str, float]:
    """Play ``eval_set`` greedily with the base model and ``lora``: (outcomes by seed, start time, start clock)."""
    max_new_tokens = answer_budget(base_model_path)
    log(
        f"evaluating {label} on {eval_set.name} ({len(eval_set.mazes)} mazes of {eval_set.size}x{eval_set.size}, "
        f"{eval_set.max_turns} turns) with {backend} ({max_new_tokens} tokens per answer)"
    )
    history_turns = HISTORY_TURNS_BY_ENGINE[backend]
    if backend == "vllm":
        images = eval_set.max_turns if history_turns is None else history_turns + 1
        generate = vllm_generate(base_model_path, lora, images, max_new_tokens)
    else:
        generate = transformers_generate(base_model_path, lora, max_new_tokens)
    started_at, clock = _utc_now(), time.monotonic()
    episodes = run_episodes(
        generate,
        eval_set.mazes,
        eval_set.max_turns,
        history_turns=history_turns,
        on_turn=_progress(log, eval_set.max_turns),
    )
    outcomes = sorted(
        (MazeOutcome(seed=e.seed, solved=e.solved, turns=e.turns, error=e.error) for e in episodes),
        key=lambda outcome: outcome.seed,
    )
    return outcomes, started_at, clock


def _write(
    s3: Any, output: S3Location, body: str, summary: str, clock: float, backend: str, log: Callable[[str], None]
) -> None:
    """Write the result document, then log ``summary`` with the time taken since ``clock``."""
    s3.put_object(Bucket=output.bucket, Key=output.key, Body=body.encode(), ContentType="application/json")
    log(f"{summary} in {time.monotonic() - clock:.1f} s with {backend}; result at {output.uri}")


def _progress(log: Callable[[str], None], max_turns: int) -> Callable[[int, list[Episode]], None]:
    """A ``run_episodes`` turn callback logging the turn (of ``max_turns``), how many mazes answered in it, and
    how many are solved."""

    def on_turn(turn: int, episodes: list[Episode]) -> None:
        answered = sum(episode.turns == turn for episode in episodes)
        solved = sum(episode.solved for episode in episodes)
        log(f"turn {turn}/{max_turns}: {answered} mazes answered, {solved}/{len(episodes)} solved so far")

    return on_turn


def _utc_now() -> str:
    """The current UTC time as ``2026-12-02T16:00:00Z``."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
