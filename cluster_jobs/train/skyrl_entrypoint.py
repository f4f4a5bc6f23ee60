"""SkyRL's GRPO experiment with the maze env: ``python -m cluster_jobs.train.skyrl_entrypoint key=value ...``.

Cluster only (SkyRL 0.4.0, GPUs); ``skyrl`` is imported inside the functions so this module imports anywhere.
It adds a trainer callback that appends each logged step's metrics to ``<trainer.export_path>/train_metrics.jsonl``.
"""

from __future__ import annotations

import multiprocessing
import sys
from pathlib import Path
from typing import Any

import ray

from cluster_jobs.train.metrics import METRICS_FILE_NAME, append_metric, metric_from_skyrl_logs


def record_skyrl_logs(metrics_file: Path, step: int, logs: dict[str, Any]) -> None:
    """Append the reward / eval solve rate of one SkyRL log payload to ``metrics_file`` (if it has any)."""
    metric = metric_from_skyrl_logs(step, logs)
    if metric is not None:
        append_metric(metrics_file, metric)


@ray.remote(num_cpus=1)
def run_experiment(cfg: Any) -> None:
    """Register ``maze2d`` in this worker, then run SkyRL's PPO/GRPO experiment with the metrics callback."""
    from skyrl.train.entrypoints.main_base import BasePPOExp
    from skyrl.train.utils.callbacks import TrainingCallback

    from cluster_jobs.maze.skyrl_env import register_maze_env

    metrics_file = Path(cfg.trainer.export_path) / METRICS_FILE_NAME

    class MetricsFileCallback(TrainingCallback):
        def on_log(self, trainer: Any, callback_input: Any, control: Any) -> None:
            record_skyrl_logs(metrics_file, callback_input.global_step, callback_input.logs or {})

    class MazeExperiment(BasePPOExp):
        def get_trainer(self, *args: Any, **kwargs: Any) -> Any:
            trainer = super().get_trainer(*args, **kwargs)
            trainer.add_callback(MetricsFileCallback())
            return trainer

    register_maze_env()
    MazeExperiment(cfg).run()


def main(argv: list[str] | None = None) -> None:
    """Parse and validate SkyRL overrides (``argv``, default ``sys.argv[1:]``), start Ray, run the experiment."""
    from skyrl.train.config import SkyRLTrainConfig
    from skyrl.train.utils import validate_cfg
    from skyrl.train.utils.utils import initialize_ray

    # As SkyRL's entrypoints: Ray and forked workers do not mix.
    multiprocessing.set_start_method("spawn", force=True)
    cfg = SkyRLTrainConfig.from_cli_overrides(sys.argv[1:] if argv is None else argv)
    validate_cfg(cfg)
    initialize_ray(cfg)
    ray.get(run_experiment.remote(cfg))


if __name__ == "__main__":
    main()
