"""Training metrics lines: from SkyRL log payloads, appended locally, uploaded to S3."""

from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws

from cluster_jobs.train.metrics import MetricsUploader, TrainMetric, append_metric, metric_from_skyrl_logs
from cluster_jobs.train.skyrl_entrypoint import record_skyrl_logs


def test_skyrl_training_step_with_eval():
    logs = {"reward/avg_raw_reward": 0.25, "eval/all/environment/solved": 0.5, "policy/loss": 1.0}
    assert metric_from_skyrl_logs(10, logs) == TrainMetric(step=10, reward_mean=0.25, eval_solve_rate=0.5)


def test_skyrl_eval_before_training_has_no_reward():
    metric = metric_from_skyrl_logs(0, {"eval/all/environment/solved": 0.125, "eval/all/avg_score": 0.3})
    assert json.loads(metric.to_json()) == {"step": 0, "reward_mean": None, "eval_solve_rate": 0.125}


def test_skyrl_payload_without_reward_or_eval_is_ignored():
    assert metric_from_skyrl_logs(3, {"timing/step": 1.0}) is None


def test_eval_solve_rate_is_left_out_when_not_evaluated():
    assert json.loads(TrainMetric(step=3, reward_mean=0.5).to_json()) == {"step": 3, "reward_mean": 0.5}


def test_grpo_statistics_follow_reward_and_eval_when_set():
    metric = TrainMetric(
        step=4,
        reward_mean=0.5,
        solve_fraction=0.25,
        zero_variance_fraction=0.5,
        loss=-0.1,
        ratio_mean=1.0,
        ratio_max=1.2,
        clip_fraction=0.0,
    )
    line = metric.to_json()
    assert list(json.loads(line)) == [
        "step",
        "reward_mean",
        "solve_fraction",
        "zero_variance_fraction",
        "loss",
        "ratio_mean",
        "ratio_max",
        "clip_fraction",
    ]  # no eval this step, no KL term: left out; a clip fraction of 0 is kept
    assert json.loads(line)["clip_fraction"] == 0.0


def test_entrypoint_callback_appends_lines(tmp_path):
    path = tmp_path / "exports" / "train_metrics.jsonl"
    record_skyrl_logs(path, 1, {"reward/avg_raw_reward": 0.1})
    record_skyrl_logs(path, 2, {"timing/step": 3.0})
    record_skyrl_logs(path, 3, {"reward/avg_raw_reward": 0.2, "eval/all/environment/solved": 1.0})
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == [
        {"step": 1, "reward_mean": 0.1},
        {"step": 3, "reward_mean": 0.2, "eval_solve_rate": 1.0},
    ]


@pytest.fixture
def s3():
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="artifacts-test")
        yield client


def test_uploader_puts_complete_lines_only_when_changed(tmp_path, s3):
    path = tmp_path / "train_metrics.jsonl"
    uploader = MetricsUploader(path, "artifacts-test", "run-a", s3)
    assert uploader.upload_if_changed() is False  # no file yet

    append_metric(path, TrainMetric(step=1, reward_mean=0.5))
    with path.open("a") as out:
        out.write('{"step": 2, "rew')  # a line being written
    assert uploader.upload_if_changed() is True
    body = s3.get_object(Bucket="artifacts-test", Key="runs/run-a/metrics/train.jsonl")["Body"].read()
    assert body == b'{"step": 1, "reward_mean": 0.5}\n'
    assert uploader.upload_if_changed() is False

    with path.open("a") as out:
        out.write('ard_mean": 0.75}\n')
    assert uploader.upload_if_changed() is True
    body = s3.get_object(Bucket="artifacts-test", Key="runs/run-a/metrics/train.jsonl")["Body"].read()
    assert [json.loads(line)["step"] for line in body.splitlines()] == [1, 2]
