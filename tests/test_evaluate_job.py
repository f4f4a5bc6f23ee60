"""The evaluation job end to end against moto S3: a real PEFT adapter on the tiny model, refusals, CLI, vLLM wiring."""

from __future__ import annotations

import json
import shutil
import sys
import types

import boto3
import pytest
from moto import mock_aws
from safetensors.torch import load_file, save_file

from cluster_jobs.evaluate import run
from cluster_jobs.evaluate.artifacts import EvaluationRefused
from cluster_jobs.evaluate.job import evaluate_adapter
from cluster_jobs.maze.eval_set import eval_set_for_size, load_eval_set
from local_stack.cluster_standins.tiny_model import build_tiny_qwen3_vl
from mazeops.evalresult import parse_eval_result
from mazeops.layout import adapter_prefix, eval_result_key, normalized_spec_key
from mazeops.runspec import parse_run_spec
from tests.fixtures_models import make_tiny_adapter, upload_adapter

BUCKET = "eval-job-test"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny base, a good adapter, one with truncated weights and one for another hidden size."""
    root = tmp_path_factory.mktemp("eval-job")
    base_dir = build_tiny_qwen3_vl(root / "base")
    good = root / "good"
    make_tiny_adapter(base_dir, good, rank=4, seed=1)
    truncated = root / "truncated"
    shutil.copytree(good, truncated)
    data = (good / "adapter_model.safetensors").read_bytes()
    (truncated / "adapter_model.safetensors").write_bytes(data[: len(data) // 2])
    narrow = root / "narrow"
    shutil.copytree(good, narrow)
    weights = load_file(str(good / "adapter_model.safetensors"))
    halved = {k: (v[:, :32] if "lora_A" in k else v[:32]).contiguous() for k, v in weights.items()}
    save_file(halved, str(narrow / "adapter_model.safetensors"))
    tower = root / "tower"
    make_tiny_adapter(base_dir, tower, rank=4, seed=2, target_modules="all-linear")  # LoRA on `visual.*` too
    return base_dir, {"good": good, "truncated": truncated, "narrow": narrow, "tower": tower}


@pytest.fixture
def s3(monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        client = boto3.client("s3")
        client.create_bucket(Bucket=BUCKET)
        yield client


def _uris(manifest_key: str, run_id: str, step: int) -> tuple[str, str]:
    return f"s3://{BUCKET}/{manifest_key}", f"s3://{BUCKET}/{eval_result_key(run_id, step)}"


def _written(s3, run_id: str, step: int) -> bool:
    return s3.list_objects_v2(Bucket=BUCKET, Prefix=f"runs/{run_id}/evals/").get("KeyCount", 0) > 0


@pytest.mark.slow
def test_transformers_evaluation_end_to_end(s3, tiny, one_torch_thread):
    base_dir, adapters = tiny
    manifest_uri, output_uri = _uris(upload_adapter(s3, BUCKET, "run-a", 20, adapters["good"]), "run-a", 20)
    lines: list[str] = []
    result = evaluate_adapter(manifest_uri, base_dir, "transformers", output_uri, s3=s3, log=lines.append)
    eval_set = load_eval_set()  # run-a has no spec in the bucket: the default 9x9 set
    written = parse_eval_result(s3.get_object(Bucket=BUCKET, Key=eval_result_key("run-a", 20))["Body"].read())
    assert written == result
    assert (result.run_id, result.step, result.adapter_name, result.base_model_id) == (
        "run-a",
        20,
        "run-a-step20",
        "tiny-qwen3-vl",
    )
    assert result.backend == "transformers" and result.eval_set_sha256 == eval_set.sha256
    assert result.seeds == list(eval_set.seeds) and result.n_total == 64
    assert result.n_solved == sum(o.solved for o in result.outcomes)
    # The random tiny model never answers a valid stop on the target.
    assert all(1 <= o.turns <= eval_set.max_turns for o in result.outcomes)
    turn_lines = [line for line in lines if line.startswith("turn ")]
    assert turn_lines[0].startswith(f"turn 1/{eval_set.max_turns}: 64 mazes answered")
    assert len(turn_lines) == max(o.turns for o in result.outcomes)
    assert lines[-1].startswith(f"run-a-step20: solved {result.n_solved}/64 mazes") and output_uri in lines[-1]


def _break_hash(s3, adapters):
    key = upload_adapter(s3, BUCKET, "run-a", 3, adapters["good"])
    weights = bytearray((adapters["good"] / "adapter_model.safetensors").read_bytes())
    weights[-1] ^= 0xFF
    s3.put_object(Bucket=BUCKET, Key=adapter_prefix("run-a", 3) + "adapter_model.safetensors", Body=bytes(weights))
    return key


def _drop_weights(s3, adapters):
    key = upload_adapter(s3, BUCKET, "run-a", 3, adapters["good"])
    s3.delete_object(Bucket=BUCKET, Key=adapter_prefix("run-a", 3) + "adapter_model.safetensors")
    return key


def _other_base(s3, adapters):
    other = adapters["good"].parent / "trained-elsewhere"
    if not other.exists():
        shutil.copytree(adapters["good"], other)
        config = json.loads((other / "adapter_config.json").read_text())
        config["base_model_name_or_path"] = "Qwen/Qwen3-VL-8B-Instruct"
        (other / "adapter_config.json").write_text(json.dumps(config))
    return upload_adapter(s3, BUCKET, "run-a", 3, other)


# case -> (upload the broken adapter for run-a step 3 and return its manifest key, expected error text)
BROKEN = {
    "hash-mismatch": (_break_hash, "adapter_model.safetensors does not match the manifest"),
    "truncated-safetensors": (
        lambda s3, a: upload_adapter(s3, BUCKET, "run-a", 3, a["truncated"]),
        "adapter 'run-a-step3' cannot be loaded",
    ),
    "rank-mismatch": (
        lambda s3, a: upload_adapter(s3, BUCKET, "run-a", 3, a["good"], manifest_fields={"lora_rank": 8}),
        "adapter_config.json has rank 4; the manifest says 8",
    ),
    "wrong-base-shape": (
        lambda s3, a: upload_adapter(s3, BUCKET, "run-a", 3, a["narrow"]),
        "adapter 'run-a-step3' cannot be loaded",
    ),
    "missing-file": (_drop_weights, "adapter file missing"),
    "manifest-of-another-step": (
        lambda s3, a: upload_adapter(
            s3, BUCKET, "run-a", 3, a["good"], manifest_fields={"step": 4, "adapter_name": "run-a-step4"}
        ),
        "is for run 'run-a' step 4, but its key names run 'run-a' step 3",
    ),
    "other-base-model": (_other_base, "was trained on base model 'Qwen/Qwen3-VL-8B-Instruct'"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_broken_adapter_exits_2_with_one_line_and_writes_nothing(s3, tiny, capsys, case):
    base_dir, adapters = tiny
    upload, message = BROKEN[case]
    manifest_uri, output_uri = _uris(upload(s3, adapters), "run-a", 3)
    argv = [
        "--manifest",
        manifest_uri,
        "--base-model-path",
        str(base_dir),
        "--backend",
        "transformers",
        "--output",
        output_uri,
    ]
    assert run.main(argv) == 2
    lines = capsys.readouterr().err.splitlines()  # model loading may log before the refusal
    assert [line for line in lines if line.startswith("evaluation refused: ")] == lines[-1:]
    assert message in lines[-1]
    assert not _written(s3, "run-a", 3)


def test_cli_refuses_an_output_key_of_another_step(s3, tiny, capsys):
    base_dir, adapters = tiny
    manifest_uri, _ = _uris(upload_adapter(s3, BUCKET, "run-a", 5, adapters["good"]), "run-a", 5)
    _, other_output = _uris("unused", "run-a", 6)
    argv = [
        "--manifest",
        manifest_uri,
        "--base-model-path",
        str(base_dir),
        "--backend",
        "vllm",
        "--output",
        other_output,
    ]
    assert run.main(argv) == 2
    assert "is not the result key of this adapter" in capsys.readouterr().err
    assert not _written(s3, "run-a", 6)


class _FakeVllm:
    """Stand-ins for vllm.LLM, SamplingParams and LoRARequest that record how they are used."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.engine_kwargs: dict = {}
        self.chat_calls: list[dict] = []
        fake = self

        class LLM:
            def __init__(self, **kwargs):
                fake.engine_kwargs = kwargs

            def chat(self, messages, sampling_params=None, lora_request=None, use_tqdm=True):
                fake.chat_calls.append({"messages": messages, "sampling": sampling_params, "lora": lora_request})
                return [types.SimpleNamespace(outputs=[types.SimpleNamespace(text=fake.answer)]) for _ in messages]

        def sampling_params(**kwargs):
            return dict(kwargs)

        def lora_request(name, int_id, path):
            return (name, int_id, path)

        self.modules = {
            "vllm": types.SimpleNamespace(LLM=LLM, SamplingParams=sampling_params),
            "vllm.lora": types.SimpleNamespace(),
            "vllm.lora.request": types.SimpleNamespace(LoRARequest=lora_request),
        }


@pytest.fixture
def fake_vllm(monkeypatch):
    """A stand-in `vllm` whose model stops at once, in place of the real one for this test."""
    fake = _FakeVllm(answer="<action>('stop', 'stop')</action>")
    for name, module in fake.modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    return fake


def test_vllm_backend_wiring_with_a_stand_in_vllm(s3, tiny, fake_vllm):
    base_dir, adapters = tiny
    fake = fake_vllm
    manifest_uri, output_uri = _uris(upload_adapter(s3, BUCKET, "run-v", 7, adapters["good"]), "run-v", 7)
    result = evaluate_adapter(manifest_uri, base_dir, "vllm", output_uri, s3=s3, log=lambda line: None)
    assert fake.engine_kwargs == {
        "model": str(base_dir),
        "enable_lora": True,
        "max_lora_rank": 8,
        "max_loras": 1,
        # the whole conversation, as SkyRL's VLM generator shows it: an image per turn of the 9x9 set's 31
        "limit_mm_per_prompt": {"image": 31},
    }
    (call,) = fake.chat_calls  # every maze stops on turn 1: one batched call
    assert len(call["messages"]) == 64 and call["messages"][0][0]["role"] == "system"
    assert call["sampling"] == {"temperature": 0.0, "max_tokens": 24}
    name, int_id, path = call["lora"]
    assert (name, int_id) == ("run-v-step7", 1) and path.endswith("adapter")
    assert (
        result.backend == "vllm"
        and result.n_solved == 0
        and all(o.turns == 1 and o.error is None for o in result.outcomes)
    )
    assert _written(s3, "run-v", 7)


def test_vllm_refuses_an_adapter_with_lora_on_the_vision_tower(s3, tiny, fake_vllm):
    base_dir, adapters = tiny
    fake = fake_vllm
    manifest_uri, output_uri = _uris(upload_adapter(s3, BUCKET, "run-t", 3, adapters["tower"]), "run-t", 3)
    with pytest.raises(EvaluationRefused, match=r"LoRA weights on the vision tower \(e\.g\. .*\.visual\."):
        evaluate_adapter(manifest_uri, base_dir, "vllm", output_uri, s3=s3, log=lambda line: None)
    assert fake.chat_calls == [] and fake.engine_kwargs == {}
    assert not _written(s3, "run-t", 3)


def _put_spec(s3, run_id: str, size: int) -> None:
    """The run's normalized spec, as validate_run_spec writes it, for mazes of ``size``."""
    spec = parse_run_spec(
        json.dumps({"base_model_id": "tiny-qwen3-vl", "maze": {"size": size}}), run_id, {"tiny-qwen3-vl": "/m"}
    )
    s3.put_object(Bucket=BUCKET, Key=normalized_spec_key(run_id), Body=spec.model_dump_json())


def _stand_in_vllm(monkeypatch, answer: str) -> _FakeVllm:
    fake = _FakeVllm(answer=answer)
    for name, module in fake.modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    return fake


@pytest.mark.parametrize("size", [7, 9])
def test_a_run_is_evaluated_on_the_set_of_its_maze_size_with_that_sets_budget(s3, tiny, monkeypatch, size):
    base_dir, adapters = tiny
    fake = _stand_in_vllm(monkeypatch, answer="('move', 0)")  # never stops: every maze uses the whole budget
    _put_spec(s3, "run-s", size)
    manifest_uri, output_uri = _uris(upload_adapter(s3, BUCKET, "run-s", 4, adapters["good"]), "run-s", 4)
    lines: list[str] = []
    result = evaluate_adapter(manifest_uri, base_dir, "vllm", output_uri, s3=s3, log=lines.append)
    eval_set = eval_set_for_size(size)
    assert (result.eval_set_sha256, result.seeds, result.n_solved) == (eval_set.sha256, list(eval_set.seeds), 0)
    assert len(fake.chat_calls) == eval_set.max_turns
    assert all(o.turns == eval_set.max_turns for o in result.outcomes)
    assert f"on {eval_set.name} (64 mazes of {size}x{size}, {eval_set.max_turns} turns)" in lines[0]
    assert [line for line in lines if line.startswith("turn ")][-1].startswith(
        f"turn {eval_set.max_turns}/{eval_set.max_turns}:"
    )


def test_a_run_of_a_size_without_an_eval_set_exits_2_and_writes_nothing(s3, tiny, monkeypatch, capsys):
    base_dir, adapters = tiny
    fake = _stand_in_vllm(monkeypatch, answer="('stop', 'stop')")
    _put_spec(s3, "run-s", 11)
    manifest_uri, output_uri = _uris(upload_adapter(s3, BUCKET, "run-s", 4, adapters["good"]), "run-s", 4)
    argv = ["--manifest", manifest_uri, "--base-model-path", str(base_dir), "--backend", "vllm", "--output", output_uri]
    assert run.main(argv) == 2
    assert (
        "evaluation refused: run run-s trained on 11x11 mazes: there is no fixed evaluation set"
        in capsys.readouterr().err
    )
    assert fake.engine_kwargs == {} and not _written(s3, "run-s", 4)
