"""The evaluation job's baseline mode: the base model alone, no adapter, on the eval set of a challenger."""

from __future__ import annotations

import sys
import types

import boto3
import pytest
from moto import mock_aws

from cluster_jobs.evaluate import run
from cluster_jobs.evaluate.artifacts import EvaluationRefused
from cluster_jobs.evaluate.backends import transformers_generate, vllm_engine_args
from cluster_jobs.evaluate.job import evaluate_base_model
from cluster_jobs.maze.eval_set import eval_set_for_size
from cluster_jobs.models.policy import VisionPolicy
from local_stack.cluster_standins.tiny_model import build_tiny_qwen3_vl
from mazeops.baseline import baseline_result_key, parse_baseline_result

BUCKET = "baseline-job-test"
BASE = "tiny-qwen3-vl"
SET_7 = eval_set_for_size(7)


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    return build_tiny_qwen3_vl(tmp_path_factory.mktemp("baseline") / "base")


@pytest.fixture
def s3(monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        client = boto3.client("s3")
        client.create_bucket(Bucket=BUCKET)
        yield client


@pytest.fixture
def vllm(monkeypatch):
    """A stand-in vllm module recording the engine arguments and each batched chat call; every answer stops."""
    calls: dict = {"engine": None, "chats": []}

    class LLM:
        def __init__(self, **kwargs):
            calls["engine"] = kwargs

        def chat(self, messages, sampling_params=None, lora_request=None, use_tqdm=True):
            calls["chats"].append({"n": len(messages), "lora": lora_request})
            return [types.SimpleNamespace(outputs=[types.SimpleNamespace(text="('stop', 'stop')")]) for _ in messages]

    modules = {
        "vllm": types.SimpleNamespace(LLM=LLM, SamplingParams=lambda **kwargs: kwargs),
        "vllm.lora": types.SimpleNamespace(),
        "vllm.lora.request": types.SimpleNamespace(LoRARequest=lambda *args: pytest.fail("no LoRA for a baseline")),
    }
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    return calls


def output_uri(base: str = BASE, sha: str = SET_7.sha256, attempt: int = 1) -> str:
    return f"s3://{BUCKET}/{baseline_result_key(base, sha, attempt)}"


def written(s3) -> list[str]:
    return [item["Key"] for item in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])]


def test_the_base_model_alone_plays_the_set_named_by_its_sha256(s3, base_dir, vllm):
    lines: list[str] = []
    result = evaluate_base_model(BASE, SET_7.sha256, base_dir, "vllm", output_uri(), s3=s3, log=lines.append)
    # the whole conversation, as SkyRL's VLM generator shows it: an image per turn of the 7x7 set's budget
    assert vllm["engine"] == {"model": str(base_dir), "limit_mm_per_prompt": {"image": SET_7.max_turns}}
    assert vllm["chats"] == [{"n": 64, "lora": None}]  # every maze stops on turn 1: one batched call, no LoRA
    assert (result.base_model_id, result.eval_set_name, result.eval_set_sha256) == (BASE, SET_7.name, SET_7.sha256)
    assert result.seeds == list(SET_7.seeds) and result.n_solved == 0 and result.backend == "vllm"
    stored = s3.get_object(Bucket=BUCKET, Key=baseline_result_key(BASE, SET_7.sha256, 1))["Body"].read()
    assert parse_baseline_result(stored) == result
    assert lines[0].startswith(f"evaluating base model {BASE} (no adapter) on {SET_7.name} (64 mazes of 7x7, 17 turns)")
    assert lines[-1].startswith(f"baseline {BASE}: solved 0/64 mazes in ") and output_uri() in lines[-1]


def test_the_cli_runs_the_baseline_mode(s3, base_dir, vllm, capsys):
    argv = [
        "--base-model-id",
        BASE,
        "--eval-set-sha256",
        SET_7.sha256,
        "--base-model-path",
        str(base_dir),
        "--backend",
        "vllm",
        "--output",
        output_uri(attempt=3),
    ]
    assert run.main(argv) == 0
    assert written(s3) == [baseline_result_key(BASE, SET_7.sha256, 3)]
    assert "baseline tiny-qwen3-vl: solved 0/64 mazes" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("sha", "output", "message"),
    [
        ("0" * 64, output_uri(sha="0" * 64), "no fixed evaluation set has sha256 '" + "0" * 64),
        (SET_7.sha256, output_uri(base="other-model"), "is the result of the baseline of other-model"),
        (SET_7.sha256, output_uri(sha="1" * 64), "on 111111111111..., not of"),
        (SET_7.sha256, f"s3://{BUCKET}/runs/r1/evals/global_step_1/result.json", "not a baseline result key"),
        (
            SET_7.sha256,
            f"s3://{BUCKET}/baselines/{BASE}/{SET_7.sha256}/attempt_0/result.json",
            "not a baseline result key",
        ),
    ],
    ids=["unknown-eval-set", "another-base-model", "another-eval-set", "an-adapter-result-key", "attempt-0"],
)
def test_refusals_write_nothing_and_load_no_model(s3, base_dir, vllm, sha, output, message):
    with pytest.raises(EvaluationRefused, match=message.replace(".", r"\.").replace("(", r"\(")):
        evaluate_base_model(BASE, sha, base_dir, "vllm", output, s3=s3, log=lambda line: None)
    assert written(s3) == [] and vllm["engine"] is None


@pytest.mark.parametrize(
    "argv",
    [
        ["--base-model-id", BASE, "--backend", "vllm"],  # no --eval-set-sha256
        [
            "--manifest",
            "s3://b/runs/r/adapters/global_step_1/manifest.json",
            "--eval-set-sha256",
            "0" * 64,
            "--backend",
            "vllm",
        ],
        ["--manifest", "s3://b/m.json", "--base-model-id", BASE, "--eval-set-sha256", "0" * 64, "--backend", "vllm"],
        ["--backend", "vllm"],  # neither an adapter nor a base model
    ],
    ids=["sha-missing", "sha-with-manifest", "both-targets", "no-target"],
)
def test_cli_argument_combinations_are_refused_with_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        run.main([*argv, "--base-model-path", "/m", "--output", output_uri()])
    assert exited.value.code == 2 and "error:" in capsys.readouterr().err


def test_transformers_backend_generates_with_no_adapter(base_dir, monkeypatch):
    asked: list[object] = []
    monkeypatch.setattr(
        VisionPolicy, "generate", lambda self, chats, adapter, **kwargs: asked.append(adapter) or ["x"] * len(chats)
    )
    monkeypatch.setattr(VisionPolicy, "add_adapter", lambda *args: pytest.fail("no adapter for a baseline"))
    generate = transformers_generate(base_dir, None, max_new_tokens=8)
    assert generate([[{"role": "user", "content": "hi"}]]) == ["x"] and asked == [None]


def test_vllm_engine_without_lora_asks_for_no_lora_slots():
    assert vllm_engine_args("/m", lora_rank=None, images_per_prompt=2) == {
        "model": "/m",
        "limit_mm_per_prompt": {"image": 2},
    }


@pytest.mark.slow
def test_transformers_baseline_end_to_end_on_the_tiny_model(s3, base_dir, one_torch_thread):
    lines: list[str] = []
    result = evaluate_base_model(BASE, SET_7.sha256, base_dir, "transformers", output_uri(), s3=s3, log=lines.append)
    assert result.seeds == list(SET_7.seeds) and result.backend == "transformers"
    assert all(1 <= outcome.turns <= SET_7.max_turns for outcome in result.outcomes)
    assert (
        parse_baseline_result(
            s3.get_object(Bucket=BUCKET, Key=baseline_result_key(BASE, SET_7.sha256, 1))["Body"].read()
        )
        == result
    )
    assert lines[-1].startswith(f"baseline {BASE}: solved {result.n_solved}/64 mazes")
