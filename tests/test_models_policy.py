"""VisionPolicy: PEFT adapters load with identical logits, misfits are refused, generation picks the adapter."""

from __future__ import annotations

import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from cluster_jobs.maze.env import MazeEpisode
from cluster_jobs.maze.generator import generate_maze
from cluster_jobs.maze.prompt import SYSTEM_PROMPT, observation_message
from cluster_jobs.models.loading import encode_conversations
from cluster_jobs.models.policy import AdapterIncompatible, VisionPolicy
from local_stack.cluster_standins.tiny_model import build_tiny_qwen3_vl
from tests.fixtures_models import make_tiny_adapter


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The tiny base, one good adapter (and its PEFT model in memory) and the root for variants."""
    root = tmp_path_factory.mktemp("policy")
    base_dir = build_tiny_qwen3_vl(root / "base")
    peft_model = make_tiny_adapter(base_dir, root / "good", rank=4, seed=1)
    return base_dir, root, peft_model


@pytest.fixture
def policy(models):
    return VisionPolicy.load(models[0], device="cpu")


def _chats(seeds=(0, 1)):
    return [
        [
            {"role": "system", "content": SYSTEM_PROMPT},
            observation_message(MazeEpisode(generate_maze(9, s)).observation(), True),
        ]
        for s in seeds
    ]


def _variant(root, name, change_weights):
    """A copy of the good adapter whose weights are rewritten by ``change_weights(dict) -> dict``."""
    target = root / name
    if not target.exists():
        shutil.copytree(root / "good", target)
        weights = load_file(str(target / "adapter_model.safetensors"))
        save_file(change_weights(weights), str(target / "adapter_model.safetensors"))
    return target


def test_reloaded_adapter_gives_the_peft_models_logits(models, policy):
    base_dir, root, peft_model = models
    batch = encode_conversations(policy.processor, _chats())
    with torch.inference_mode():
        base_logits = policy.model(**batch).logits
        expected = peft_model(**batch).logits
    policy.add_adapter("good", root / "good")
    assert policy.has_adapter("good")
    policy.model.set_adapter("good")
    with torch.inference_mode():
        logits = policy.model(**batch).logits
    assert torch.equal(logits, expected)
    assert not torch.allclose(logits, base_logits)  # the adapter really changes the model


def test_generate_uses_the_adapter_only_when_asked(models, policy):
    chats = _chats()
    base_answers = policy.generate(chats, max_new_tokens=8)
    policy.add_adapter("good", models[1] / "good")
    assert policy.generate(chats, max_new_tokens=8) == base_answers
    assert policy.generate(chats, adapter="good", max_new_tokens=8) != base_answers
    policy.remove_adapter("good")
    assert not policy.has_adapter("good")
    assert policy.generate(chats, max_new_tokens=8) == base_answers
    with pytest.raises(KeyError):
        policy.generate(chats, adapter="good")


def test_several_adapters_side_by_side(models, policy):
    base_dir, root, peft_model = models
    second = root / "second"
    second_peft = make_tiny_adapter(base_dir, second, rank=8, seed=5)
    policy.add_adapter("good", root / "good")
    policy.add_adapter("second", second)
    batch = encode_conversations(policy.processor, _chats())
    with torch.inference_mode():
        expected = {"good": peft_model(**batch).logits, "second": second_peft(**batch).logits}
    for name in ("second", "good", "second"):
        policy.model.set_adapter(name)
        with torch.inference_mode():
            assert torch.equal(policy.model(**batch).logits, expected[name])
    answers = {name: policy.generate(_chats(), adapter=name, max_new_tokens=6) for name in ("good", "second")}
    assert answers["good"] != answers["second"]
    policy.remove_adapter("good")
    assert policy.generate(_chats(), adapter="second", max_new_tokens=6) == answers["second"]


def test_sampling_is_reproducible_with_a_seed(policy):
    chats = _chats()
    first = policy.generate(chats, temperature=1.0, seed=7, max_new_tokens=8)
    assert policy.generate(chats, temperature=1.0, seed=7, max_new_tokens=8) == first
    assert policy.generate(chats, temperature=1.0, seed=8, max_new_tokens=8) != first


def test_adapter_whose_weights_have_another_rank_is_refused(models, policy):
    _, root, _ = models
    other_rank = root / "rank8-weights"
    make_tiny_adapter(models[0], other_rank, rank=8, seed=2)
    shutil.copy(root / "good" / "adapter_config.json", other_rank / "adapter_config.json")  # says r=4
    with pytest.raises(AdapterIncompatible, match="cannot be loaded"):
        policy.add_adapter("rank8", other_rank)
    assert not policy.has_adapter("rank8")


def test_adapter_for_another_hidden_size_is_refused(models, policy):
    halved = _variant(
        models[1],
        "hidden32",
        lambda w: {k: (v[:, :32] if "lora_A" in k else v[:32]).contiguous() for k, v in w.items()},
    )
    with pytest.raises(AdapterIncompatible):
        policy.add_adapter("hidden32", halved)


def test_adapter_with_missing_or_extra_weights_is_refused(models, policy):
    fewer = _variant(models[1], "fewer", lambda w: dict(list(w.items())[:10]))
    with pytest.raises(AdapterIncompatible, match="missing weights"):
        policy.add_adapter("fewer", fewer)
    extra = _variant(
        models[1],
        "extra",
        lambda w: (
            w | {"base_model.model.model.language_model.layers.9.self_attn.q_proj.lora_A.weight": torch.zeros(4, 64)}
        ),
    )
    with pytest.raises(AdapterIncompatible, match="unexpected weights"):
        policy.add_adapter("extra", extra)


def test_unreadable_or_missing_files_are_refused_and_the_policy_still_works(models, policy):
    root = models[1]
    truncated = root / "truncated"
    shutil.copytree(root / "good", truncated, dirs_exist_ok=True)
    data = (root / "good" / "adapter_model.safetensors").read_bytes()
    (truncated / "adapter_model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(AdapterIncompatible):
        policy.add_adapter("truncated", truncated)
    missing = root / "missing"
    missing.mkdir(exist_ok=True)
    shutil.copy(root / "good" / "adapter_config.json", missing / "adapter_config.json")
    with pytest.raises(AdapterIncompatible, match="adapter_model.safetensors is missing"):
        policy.add_adapter("missing", missing)
    not_json = root / "not-json"
    shutil.copytree(root / "good", not_json, dirs_exist_ok=True)
    (not_json / "adapter_config.json").write_text("{")
    with pytest.raises(AdapterIncompatible, match="not valid JSON"):
        policy.add_adapter("not-json", not_json)
    # A failed load leaves nothing behind: the good adapter loads under a refused name.
    policy.add_adapter("truncated", root / "good")
    assert policy.generate(_chats([0]), adapter="truncated", max_new_tokens=4)


def test_duplicate_and_unknown_names(models, policy):
    policy.add_adapter("good", models[1] / "good")
    with pytest.raises(ValueError, match="already loaded"):
        policy.add_adapter("good", models[1] / "good")
    with pytest.raises(KeyError):
        policy.remove_adapter("other")
