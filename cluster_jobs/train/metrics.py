"""Training metrics: one JSON line per logged step, appended to a local file, uploaded to S3.

Readers ignore keys they do not know (format: docs/design.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mazeops.layout import train_metrics_key

METRICS_FILE_NAME = "train_metrics.jsonl"
# Keys of SkyRL's logged metrics: the mean raw reward of the step's rollouts, and the mean of the
# maze env's per-episode "solved" metric over the evaluation rollouts.
SKYRL_REWARD_KEY = "reward/avg_raw_reward"
SKYRL_EVAL_SOLVED_KEY = "eval/all/environment/solved"


@dataclass(frozen=True)
class TrainMetric:
    """What the training job reports about one logged step; a field left None is left out of the line.

    Attributes:
        step: the training step (0: evaluation before training).
        reward_mean: mean reward of the step's sampled episodes (None only at step 0).
        eval_solve_rate: solve rate of the in-training evaluation, on steps that evaluated.
        solve_fraction: fraction of the step's sampled episodes that solved their maze.
        zero_variance_fraction: fraction of the step's groups (samples of one maze) whose rewards
            are all equal, so their advantages are 0 and they teach the policy nothing.
        loss: the optimized loss (clipped policy loss + KL coefficient x KL), mean over mini-batches.
        ratio_mean: mean importance ratio ``pi / pi_old`` over the answer tokens that were trained.
        ratio_max: the largest of those ratios.
        clip_fraction: fraction of those tokens whose ratio was clipped (no gradient).
        kl: the KL term to the reference policy (k3 estimate), mean over mini-batches; only with the
            KL loss on.
        sample_batches: batches of ``train_batch_size`` prompts the step played to fill its batch
            with groups whose rewards differ; only with dynamic sampling on. ``reward_mean``,
            ``solve_fraction`` and ``zero_variance_fraction`` then cover every episode played.
        lr: the learning rate of the step's first optimizer step (the run spec's ``lr_scheduler`` at that
            point); the tiny backend's steps only.
    """

    step: int
    reward_mean: float | None
    eval_solve_rate: float | None = None
    solve_fraction: float | None = None
    zero_variance_fraction: float | None = None
    loss: float | None = None
    ratio_mean: float | None = None
    ratio_max: float | None = None
    clip_fraction: float | None = None
    kl: float | None = None
    sample_batches: int | None = None
    lr: float | None = None

    def to_json(self) -> str:
        """One JSON line (no newline): ``step``, ``reward_mean``, then every other field that is not None."""
        record: dict[str, Any] = {"step": self.step, "reward_mean": self.reward_mean}
        for name, value in asdict(self).items():
            if name not in record and value is not None:
                record[name] = value
        return json.dumps(record)


def metric_from_skyrl_logs(step: int, logs: Mapping[str, Any]) -> TrainMetric | None:
    """The :class:`TrainMetric` in one SkyRL log payload, or None if it has neither reward nor eval."""
    reward = logs.get(SKYRL_REWARD_KEY)
    solved = logs.get(SKYRL_EVAL_SOLVED_KEY)
    if reward is None and solved is None:
        return None
    return TrainMetric(
        step=step,
        reward_mean=None if reward is None else float(reward),
        eval_solve_rate=None if solved is None else float(solved),
    )


def keep_metrics_through(path: Path, last_step: int) -> None:
    """Drop the lines of ``path`` (if it exists) for steps after ``last_step``: a resumed run logs them again."""
    if not path.is_file():
        return
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(line for line in lines if json.loads(line)["step"] <= last_step))


def append_metric(path: Path, metric: TrainMetric) -> None:
    """Append ``metric`` as one line to the JSON-lines file ``path`` (created with its parents)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:
        out.write(metric.to_json() + "\n")


class MetricsUploader:
    """Copies the local metrics file to ``runs/<run_id>/metrics/train.jsonl`` whenever it changed."""

    def __init__(self, path: Path, bucket: str, run_id: str, s3_client: Any) -> None:
        self.path = path
        self.bucket = bucket
        self.key = train_metrics_key(run_id)
        self.s3 = s3_client
        self._uploaded: bytes | None = None

    def upload_if_changed(self) -> bool:
        """Upload the complete lines of the file if they differ from the last upload; True if uploaded."""
        if not self.path.is_file():
            return False
        raw = self.path.read_bytes()
        complete = raw[: raw.rfind(b"\n") + 1]  # a line being appended right now waits for the next call
        if not complete or complete == self._uploaded:
            return False
        self.s3.put_object(Bucket=self.bucket, Key=self.key, Body=complete, ContentType="application/x-ndjson")
        self._uploaded = complete
        return True
