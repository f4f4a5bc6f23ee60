"""The tiny backend's training loop: GRPO steps of a run spec, metrics, exports and checkpoints, resuming."""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Sequence

import torch

from cluster_jobs.maze.eval_set import eval_set_for_size, training_seeds
from cluster_jobs.rollout import Episode
from cluster_jobs.train.metrics import TrainMetric, append_metric, keep_metrics_through
from cluster_jobs.train.skyrl_launch import TrainPaths
from local_stack.cluster_standins.tiny_model import TINY_BASE_MODEL_ID
from local_stack.cluster_standins.tiny_trainer.checkpoints import latest_checkpoint, save_export
from local_stack.cluster_standins.tiny_trainer.grpo_loss import zero_variance_groups
from local_stack.cluster_standins.tiny_trainer.trainer import TinyBackendError, TinyGRPO, episode_rewards
from local_stack.cluster_standins.tiny_trainer.update import MiniBatchStats
from mazeops.runspec import NormalizedRunSpec

logger = logging.getLogger(__name__)

# The toy matrices gain nothing from more threads, and on a busy 2-core host OpenMP threads spend
# most of their time waiting on each other.
TORCH_THREADS = 1


def step_metric(
    step: int,
    episodes: Sequence[Episode],
    group_size: int,
    stats: Sequence[MiniBatchStats],
    eval_solve_rate: float | None,
    sample_batches: int | None = None,
    lr: float | None = None,
) -> TrainMetric:
    """The :class:`TrainMetric` of one step from the episodes it played (groups of ``group_size``), its
    mini-batch stats, (with dynamic sampling) how many batches it played, and the lr it started at."""
    rewards = episode_rewards(episodes)
    tokens = sum(stat.tokens for stat in stats)
    kls = [stat.kl for stat in stats if stat.kl is not None]
    return TrainMetric(
        step=step,
        reward_mean=statistics.fmean(episode.reward for episode in episodes),
        eval_solve_rate=eval_solve_rate,
        solve_fraction=statistics.fmean(episode.solved for episode in episodes),
        zero_variance_fraction=zero_variance_groups(rewards, group_size).double().mean().item(),
        loss=statistics.fmean(stat.loss for stat in stats),
        ratio_mean=sum(stat.ratio_sum for stat in stats) / tokens if tokens else None,
        ratio_max=max((stat.ratio_max for stat in stats if stat.ratio_max is not None), default=None),
        clip_fraction=sum(stat.clipped for stat in stats) / tokens if tokens else None,
        kl=statistics.fmean(kls) if kls else None,
        sample_batches=sample_batches,
        lr=lr,
    )


def train_tiny_grpo(
    spec: NormalizedRunSpec, paths: TrainPaths, stop_after_s: float | None = None, dtype: torch.dtype | None = None
) -> list[TrainMetric]:
    """Run GRPO for ``spec`` in ``paths`` (docs/design.md), after the latest checkpoint there if there is one;
    return the metrics this call logged. ``dtype`` is the base model's (default: bfloat16 on a GPU, float32 on a
    CPU).

    With ``stop_after_s``, the call ends after the first step that finishes more than that many
    seconds after it began, with a checkpoint of that step (no export unless one is due), so that a
    later call resumes there: one long run in several time-limited jobs.

    Raises:
        TinyBackendError: if the spec's base model is not the tiny Qwen3-VL, or there is no checkpoint of it.
        NonFiniteUpdateError: if an update's loss or gradient is NaN or infinite (nothing is stepped
            or checkpointed; the latest checkpoint is the last good state).
        DynamicSamplingExhausted: see :meth:`TinyGRPO.sample_step` (nothing is trained on that step).
    """
    if spec.base_model_id != TINY_BASE_MODEL_ID:
        raise TinyBackendError(f"the tiny backend trains only {TINY_BASE_MODEL_ID!r}, not {spec.base_model_id!r}")
    threads = torch.get_num_threads()
    torch.set_num_threads(TORCH_THREADS)
    try:
        return _train(spec, paths, stop_after_s, dtype)
    finally:
        torch.set_num_threads(threads)


def _train(
    spec: NormalizedRunSpec, paths: TrainPaths, stop_after_s: float | None, dtype: torch.dtype | None
) -> list[TrainMetric]:
    began = time.monotonic()
    paths.make_dirs()
    trainer = TinyGRPO(spec, dtype)
    seeds = training_seeds(spec.maze.train_mazes, offset=spec.maze.seed_offset, size=spec.maze.size)
    eval_set = eval_set_for_size(spec.maze.size)
    logger.info(
        "tiny GRPO: %d steps of %d mazes x %d samples, LoRA r=%d alpha=%d, clip %.2f/%.2f%s, KL %s, %s, advantages %s",
        spec.total_steps,
        spec.train_batch_size,
        spec.n_samples_per_prompt,
        spec.lora.rank,
        spec.lora.alpha,
        spec.eps_clip_low,
        spec.eps_clip_high,
        f" (dual clip {spec.clip_ratio_c})" if spec.policy_loss_type == "dual_clip" else "",
        f"x {spec.kl_loss_coef}" if spec.use_kl_loss else "off",
        spec.loss_reduction,
        "over the group's std" if spec.grpo_norm_by_std else "in reward units (no std)",
    )
    resumed = latest_checkpoint(paths.ckpt_dir)
    if resumed is not None:
        trainer.restore(paths.ckpt_dir, resumed)
        keep_metrics_through(paths.metrics_file, resumed)
        logger.info("resumed after the checkpoint of step %d", resumed)
    metrics = []
    for step in range((resumed or 0) + 1, spec.total_steps + 1):
        started = time.monotonic()
        trained, played = trainer.sample_step(seeds)
        lr = trainer.optimizer.param_groups[0]["lr"]  # where the schedule stands as the step's update begins
        stats = trainer.update(trained)
        solve_rate = trainer.solve_rate(eval_set) if step % spec.eval_interval == 0 else None
        batches = len(played) // (spec.train_batch_size * spec.n_samples_per_prompt) if spec.dynamic_sampling else None
        metric = step_metric(step, played, spec.n_samples_per_prompt, stats, solve_rate, batches, lr)
        append_metric(paths.metrics_file, metric)
        metrics.append(metric)
        logger.info("step %d/%d (%.1f s): %s", step, spec.total_steps, time.monotonic() - started, metric.to_json())
        out_of_time = stop_after_s is not None and time.monotonic() - began > stop_after_s
        export_due = step % spec.ckpt_interval == 0 or step == spec.total_steps
        if export_due or out_of_time:
            trainer.save_checkpoint(paths.ckpt_dir, step)
        if export_due:
            logger.info("step %d: adapter exported to %s", step, save_export(trainer.model, paths.export_dir, step))
        if out_of_time and step < spec.total_steps:
            logger.info(
                "stopping after step %d (%.0f s, the limit is %.0f s); a later call resumes",
                step,
                time.monotonic() - began,
                stop_after_s,
            )
            break
    return metrics
