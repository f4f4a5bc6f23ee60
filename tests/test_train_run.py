"""The training Ray job's main against moto S3: dry runs, refusals, a tiny 2-step run end to end."""

from __future__ import annotations

import json
import shlex
import sys

import boto3
import pytest
from moto import mock_aws

from cluster_jobs.train import run
from cluster_jobs.train.skyrl_launch import TrainPaths, build_skyrl_command
from local_stack.cluster_standins.tiny_model import build_tiny_qwen3_vl
from mazeops.layout import adapter_manifest_key, adapter_prefix, normalized_spec_key, train_metrics_key
from mazeops.manifest import parse_manifest
from mazeops.runspec import parse_run_spec

BUCKET = "artifacts-test"


@pytest.fixture(scope="module")
def aws():
    with pytest.MonkeyPatch.context() as patch, mock_aws():
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")  # for the client run.main creates
        yield boto3.client("s3", region_name="us-east-1")  # one client: creating one takes ~1 s


@pytest.fixture
def s3(aws):
    aws.create_bucket(Bucket=BUCKET)
    yield aws
    for item in aws.list_objects_v2(Bucket=BUCKET).get("Contents", []):
        aws.delete_object(Bucket=BUCKET, Key=item["Key"])
    aws.delete_bucket(Bucket=BUCKET)


def put_spec(s3, run_id: str, base_models: dict[str, str], **fields) -> str:
    """Write the normalized spec as validate_run_spec does; return its s3:// URI."""
    spec = parse_run_spec(json.dumps(fields), run_id, base_models)
    body = json.dumps(spec.model_dump(mode="json"), sort_keys=True, indent=1)
    s3.put_object(Bucket=BUCKET, Key=normalized_spec_key(run_id), Body=body)
    return f"s3://{BUCKET}/{normalized_spec_key(run_id)}"


def test_skyrl_dry_run_prints_the_command(s3, capsys):
    base_models = {"qwen3-vl-8b-sft": "/shared/models/qwen3-vl-8b-sft"}
    uri = put_spec(s3, "maze-grpo-demo", base_models, base_model_id="qwen3-vl-8b-sft")
    assert run.main(["--spec", uri, "--bucket", BUCKET, "--dry-run"]) == 0
    spec = parse_run_spec('{"base_model_id": "qwen3-vl-8b-sft"}', "maze-grpo-demo", base_models)
    printed = capsys.readouterr().out.strip().splitlines()[-1]
    assert shlex.split(printed) == build_skyrl_command(spec, TrainPaths.for_run(spec))
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET, Prefix="runs/maze-grpo-demo/adapters/")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{not json", "not a valid normalized run spec"),
        (json.dumps({"run_id": "other-run", "base_model_id": "m", "base_model_path": "/m"}), "holds run 'other-run'"),
    ],
)
def test_bad_spec_exits_2_with_a_message(s3, caplog, body, message):
    s3.put_object(Bucket=BUCKET, Key=normalized_spec_key("run-a"), Body=body)
    assert run.main(["--spec", f"s3://{BUCKET}/runs/run-a/spec.json", "--bucket", BUCKET, "--dry-run"]) == 2
    assert message in caplog.text


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        (f"s3://{BUCKET}/runs/missing/spec.json", "cannot read"),
        ("s3://other-bucket/runs/run-a/spec.json", "--bucket is"),
        ("/local/spec.json", "must be s3://"),
    ],
)
def test_unreadable_spec_location_exits_2(s3, caplog, uri, message):
    assert run.main(["--spec", uri, "--bucket", BUCKET]) == 2
    assert message in caplog.text


def test_skyrl_spec_that_cannot_launch_exits_2(s3, caplog):
    layout = {"num_gpus": 12, "gpus_per_node": 8, "train_batch_size": 96, "policy_mini_batch_size": 24}
    uri = put_spec(s3, "run-a", {"m": "/models/m"}, base_model_id="m", **layout)
    assert run.main(["--spec", uri, "--bucket", BUCKET, "--dry-run"]) == 2
    assert "multiple of gpus_per_node 8" in caplog.text


def test_failing_skyrl_trainer_exits_1_after_the_final_upload(s3, caplog, capsys, tmp_path, monkeypatch):
    uri = put_spec(s3, "run-a", {"m": "/models/m"}, base_model_id="m", shared_dir=str(tmp_path))
    trainer = [sys.executable, "-c", "print('trainer up'); raise SystemExit(3)"]
    monkeypatch.setattr(run, "prepare_skyrl_data", lambda spec, paths: None)
    monkeypatch.setattr(run, "build_skyrl_command", lambda spec, paths: trainer)
    assert run.main(["--spec", uri, "--bucket", BUCKET, "--sync-interval-s", "0.05"]) == 1
    assert "trainer up" in capsys.readouterr().out
    assert "exited with status 3" in caplog.text
    assert "final upload pass" in caplog.text


@pytest.mark.slow
def test_tiny_run_uploads_adapters_manifests_and_metrics(s3, tmp_path):
    base_path = build_tiny_qwen3_vl(tmp_path / "models" / "tiny-qwen3-vl", maze_size=7)
    uri = put_spec(
        s3,
        "tiny-run",
        {"tiny-qwen3-vl": str(base_path)},
        base_model_id="tiny-qwen3-vl",
        backend="tiny",
        total_steps=2,
        lora={"rank": 8, "alpha": 16},
        eval_interval=10,  # no held-out play in 2 steps: 64 mazes x 17 turns of a random model is slow
        ckpt_interval=1,
        learning_rate=1e-3,
        train_batch_size=2,
        policy_mini_batch_size=1,
        n_samples_per_prompt=2,
        max_turns=2,
        maze={"size": 7, "train_mazes": 4},
        shared_dir=str(tmp_path / "shared"),
    )
    assert run.main(["--spec", uri, "--bucket", BUCKET, "--sync-interval-s", "0.2"]) == 0

    for step in (1, 2):
        manifest = parse_manifest(
            s3.get_object(Bucket=BUCKET, Key=adapter_manifest_key("tiny-run", step))["Body"].read()
        )
        assert (manifest.adapter_name, manifest.base_model_id) == (f"tiny-run-step{step}", "tiny-qwen3-vl")
        assert (manifest.lora_rank, manifest.lora_alpha) == (8, 16)
        weights = s3.get_object(Bucket=BUCKET, Key=adapter_prefix("tiny-run", step) + "adapter_model.safetensors")
        assert manifest.files["adapter_model.safetensors"].size == weights["ContentLength"]
    lines = s3.get_object(Bucket=BUCKET, Key=train_metrics_key("tiny-run"))["Body"].read().decode().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["step"] for r in records] == [1, 2]
    assert not any("eval_solve_rate" in r for r in records)
    assert all(0.0 <= r["reward_mean"] <= 1.0 for r in records)
    root = tmp_path / "shared" / "maze-rl" / "tiny-run"
    assert (root / "ckpts" / "latest_ckpt_global_step.txt").read_text() == "2\n"


def test_skyrl_data_holds_the_training_mazes_from_the_specs_seed_offset(tmp_path):
    from cluster_jobs.maze.eval_set import training_seeds

    spec = parse_run_spec(
        json.dumps(
            {
                "base_model_id": "qwen3-vl-8b-sft",
                "shared_dir": str(tmp_path),
                "maze": {"size": 9, "train_mazes": 3, "seed_offset": 1_100_000},
            }
        ),
        "offset-run",
        {"qwen3-vl-8b-sft": "/shared/models/qwen3-vl-8b-sft"},
    )
    paths = TrainPaths.for_run(spec)
    run.prepare_skyrl_data(spec, paths)
    rows = [json.loads(line) for line in paths.train_data.read_text().splitlines()]
    assert [row["seed"] for row in rows] == training_seeds(3, offset=1_100_000, size=9)
    assert len(paths.val_data.read_text().splitlines()) == 64


def test_skyrl_training_rows_carry_the_specs_turn_cost_and_the_eval_rows_do_not(tmp_path):
    spec = parse_run_spec(
        json.dumps(
            {
                "base_model_id": "qwen3-vl-8b-sft",
                "shared_dir": str(tmp_path),
                "max_turns": 31,
                "turn_cost": 0.02,
                "maze": {"train_mazes": 2},
            }
        ),
        "cost-run",
        {"qwen3-vl-8b-sft": "/shared/models/qwen3-vl-8b-sft"},
    )
    paths = TrainPaths.for_run(spec)
    run.prepare_skyrl_data(spec, paths)
    assert [json.loads(line)["turn_cost"] for line in paths.train_data.read_text().splitlines()] == [0.02, 0.02]
    assert not any("turn_cost" in json.loads(line) for line in paths.val_data.read_text().splitlines())
