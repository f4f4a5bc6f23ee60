"""Evaluate one adapter: fetch and verify it, play the 64 eval mazes of its run's maze size greedily, write the result to S3.

Every check on the adapter and the arguments runs before any model is loaded, and the result is
written only after the last maze is played, so a refused or failed evaluation writes nothing.
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
    check_base_model,
    check_output_location,
    fetch_adapter,
    parse_s3_uri,
)
from cluster_jobs.evaluate.backends import BACKENDS, answer_budget, transformers_generate, vllm_generate
from cluster_jobs.evaluate.maze_set import eval_set_for_run
from cluster_jobs.rollout import Episode, run_episodes
from mazeops.evalresult import EvalResult, MazeOutcome

HISTORY_TURNS = 1  # earlier observation/answer pairs in each prompt, so at most 2 images per prompt


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
    if backend not in BACKENDS:
        raise EvaluationRefused(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    manifest_location, output = parse_s3_uri(manifest_uri), parse_s3_uri(output_uri)
    check_output_location(manifest_location, output)
    s3 = s3 or boto3.client("s3")
    with tempfile.TemporaryDirectory(prefix="eval-adapter-") as tmp:
        adapter_dir = Path(tmp) / "adapter"
        manifest = fetch_adapter(s3, manifest_location, adapter_dir)
        eval_set = eval_set_for_run(s3, manifest_location.bucket, manifest.run_id, log)
        check_base_model(adapter_dir, base_model_path, manifest.base_model_id)
        max_new_tokens = answer_budget(base_model_path)
        log(
            f"evaluating {manifest.adapter_name} on {eval_set.name} ({len(eval_set.mazes)} mazes of {eval_set.size}x{eval_set.size}, "
            f"{eval_set.max_turns} turns) with {backend} ({max_new_tokens} tokens per answer)"
        )
        if backend == "vllm":
            generate = vllm_generate(
                base_model_path, manifest.adapter_name, adapter_dir, manifest.lora_rank, HISTORY_TURNS + 1, max_new_tokens
            )
        else:
            generate = transformers_generate(base_model_path, manifest.adapter_name, adapter_dir, max_new_tokens)
        started_at, clock = _utc_now(), time.monotonic()
        episodes = run_episodes(
            generate,
            eval_set.mazes,
            eval_set.max_turns,
            history_turns=HISTORY_TURNS,
            on_turn=_progress(log, eval_set.max_turns),
        )
    outcomes = sorted(
        (MazeOutcome(seed=e.seed, solved=e.solved, turns=e.turns, error=e.error) for e in episodes),
        key=lambda outcome: outcome.seed,
    )
    n_solved = sum(outcome.solved for outcome in outcomes)
    result = EvalResult(
        run_id=manifest.run_id,
        step=manifest.step,
        adapter_name=manifest.adapter_name,
        base_model_id=manifest.base_model_id,
        eval_set_sha256=eval_set.sha256,
        n_total=len(outcomes),
        n_solved=n_solved,
        solve_rate=n_solved / len(outcomes),
        outcomes=outcomes,
        backend=backend,
        started_at=started_at,
        finished_at=_utc_now(),
    )
    s3.put_object(
        Bucket=output.bucket, Key=output.key, Body=result.to_json().encode(), ContentType="application/json"
    )
    log(
        f"{manifest.adapter_name}: solved {n_solved}/{len(outcomes)} mazes (solve rate {result.solve_rate:.3f}) "
        f"in {time.monotonic() - clock:.1f} s with {backend}; result at {output.uri}"
    )
    return result


def _progress(log: Callable[[str], None], max_turns: int) -> Callable[[int, list[Episode]], None]:
    """A ``run_episodes`` turn callback logging the turn (of ``max_turns``), how many mazes answered in it, and how many are solved."""

    def on_turn(turn: int, episodes: list[Episode]) -> None:
        answered = sum(episode.turns == turn for episode in episodes)
        solved = sum(episode.solved for episode in episodes)
        log(f"turn {turn}/{max_turns}: {answered} mazes answered, {solved}/{len(episodes)} solved so far")

    return on_turn


def _utc_now() -> str:
    """The current UTC time as ``2026-12-02T16:00:00Z``."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
