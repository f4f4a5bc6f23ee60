"""The SkyRL GRPO job built from a run spec: exact argv, known config keys, refusals."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from cluster_jobs.train.skyrl_launch import (
    SKYRL_ENTRYPOINT_MODULE,
    LaunchConfigError,
    TrainPaths,
    build_skyrl_command,
    gpu_layout,
)
from mazeops.runspec import InvalidRunSpec, parse_run_spec

BASE_MODELS = {"qwen3-vl-8b-sft": "/shared/models/qwen3-vl-8b-sft"}
# Keys of SkyRL 0.4.0's config, extracted from the wheel (header of the file says how).
SKYRL_KEYS_FILE = Path(__file__).with_name("test_train_skyrl_config_keys.txt")

R = "/shared/maze-rl/maze-grpo-demo"
REFERENCE_OVERRIDES = [
    f"data.train_data=['{R}/data/train.jsonl']",
    f"data.val_data=['{R}/data/validation.jsonl']",
    "environment.env_class=maze2d",
    "trainer.policy.model.path=/shared/models/qwen3-vl-8b-sft",
    "trainer.policy.model.lora.rank=32",
    "trainer.policy.model.lora.alpha=64",
    "trainer.policy.model.lora.target_modules=all-linear",
    "trainer.policy.model.lora.exclude_modules=.*visual.*",
    f"trainer.policy.model.lora.lora_sync_path={R}/lora_sync",
    "trainer.algorithm.advantage_estimator=grpo",
    "trainer.algorithm.grpo_norm_by_std=true",
    "trainer.algorithm.use_kl_loss=false",
    "trainer.algorithm.kl_loss_coef=0.001",
    "trainer.algorithm.eps_clip_low=0.2",
    "trainer.algorithm.eps_clip_high=0.2",
    "trainer.algorithm.policy_loss_type=regular",
    "trainer.algorithm.clip_ratio_c=3.0",
    "trainer.algorithm.loss_reduction=token_mean",
    "trainer.algorithm.dynamic_sampling.type=null",
    "trainer.algorithm.dynamic_sampling.max_sample_batches=30",
    "trainer.policy.optimizer_config.lr=3.0e-05",
    "trainer.policy.optimizer_config.num_warmup_steps=0",
    "trainer.policy.optimizer_config.scheduler=constant_with_warmup",  # SkyRL's default, explicit
    "trainer.train_batch_size=32",
    "trainer.policy_mini_batch_size=16",
    "trainer.update_epochs_per_batch=1",
    "trainer.epochs=2",
    "trainer.max_training_steps=100",
    "trainer.seed=42",
    "trainer.strategy=fsdp",
    "trainer.placement.colocate_all=true",
    "trainer.placement.policy_num_nodes=3",
    "trainer.placement.policy_num_gpus_per_node=2",
    "trainer.placement.ref_num_nodes=3",
    "trainer.placement.ref_num_gpus_per_node=2",
    "generator.inference_engine.backend=vllm",
    "generator.inference_engine.num_engines=6",
    "generator.inference_engine.tensor_parallel_size=1",
    "generator.inference_engine.engine_init_kwargs.max_model_len=9216",
    "generator.vision_language_generator=true",
    "generator.batched=false",
    "generator.n_samples_per_prompt=8",
    "generator.max_turns=15",
    "generator.sampling_params.temperature=0.7",
    "generator.sampling_params.max_generate_length=1024",
    "generator.max_input_length=8192",
    "trainer.max_prompt_length=2048",
    "trainer.remove_microbatch_padding=false",
    "trainer.eval_interval=10",
    "trainer.eval_before_train=true",
    "trainer.ckpt_interval=20",
    "trainer.hf_save_interval=20",
    f"trainer.ckpt_path={R}/ckpts",
    f"trainer.export_path={R}/exports",
    "trainer.logger=console",
    "trainer.project_name=maze-rl-ops",
    "trainer.run_name=maze-grpo-demo",
]


def spec_of(**fields):
    document = {"base_model_id": "qwen3-vl-8b-sft", **fields}
    return parse_run_spec(json.dumps(document), "maze-grpo-demo", BASE_MODELS)


def skyrl_keys() -> tuple[set[str], tuple[str, ...]]:
    lines = [line for line in SKYRL_KEYS_FILE.read_text().splitlines() if line and not line.startswith("#")]
    exact = {line for line in lines if not line.endswith(".*")}
    open_prefixes = tuple(line[:-1] for line in lines if line.endswith(".*"))
    return exact, open_prefixes


def test_reference_spec_builds_the_exact_command():
    spec = spec_of()
    assert build_skyrl_command(spec, TrainPaths.for_run(spec)) == [
        sys.executable,
        "-m",
        SKYRL_ENTRYPOINT_MODULE,
        *REFERENCE_OVERRIDES,
    ]


def test_every_override_key_exists_in_skyrl_0_4_0():
    exact, open_prefixes = skyrl_keys()
    assert (
        "trainer.policy.model.lora.rank" in exact and "generator.inference_engine.engine_init_kwargs." in open_prefixes
    )
    spec = spec_of()
    keys = [arg.split("=", 1)[0] for arg in build_skyrl_command(spec, TrainPaths.for_run(spec))[3:]]
    unknown = [key for key in keys if key not in exact and not key.startswith(open_prefixes)]
    assert unknown == []
    assert len(keys) == len(set(keys))


def test_key_check_catches_a_typo():
    exact, open_prefixes = skyrl_keys()
    for key in ("trainer.policy.model.lora.ranks", "generator.vlm", "trainer.strategy.fsdp"):
        assert key not in exact and not key.startswith(open_prefixes)


def test_train_paths_live_under_the_shared_dir():
    spec = spec_of(shared_dir="/mnt/lustre")
    paths = TrainPaths.for_run(spec)
    assert paths.root == Path("/mnt/lustre/maze-rl/maze-grpo-demo")
    assert [p.name for p in (paths.data_dir, paths.ckpt_dir, paths.export_dir, paths.lora_sync_dir)] == [
        "data",
        "ckpts",
        "exports",
        "lora_sync",
    ]
    assert paths.metrics_file.parent == paths.export_dir


def test_spec_values_reach_the_command():
    spec = spec_of(
        total_steps=7,
        lora={"rank": 8, "alpha": 16, "target_modules": ["q_proj", "v_proj"]},
        learning_rate=1e-5,
        lr_warmup_steps=12,
        lr_scheduler="cosine",
        temperature=1.0,
        train_batch_size=4,
        policy_mini_batch_size=2,
        maze={"size": 11, "train_mazes": 10},
        num_gpus=16,
        gpus_per_node=8,
        use_kl_loss=True,
        kl_loss_coef=0.05,
        eps_clip_low=0.1,
        eps_clip_high=0.28,
        policy_loss_type="dual_clip",
        clip_ratio_c=2.5,
        loss_reduction="sequence_mean",
        grpo_norm_by_std=False,
        dynamic_sampling="filter",
        dynamic_sampling_max_batches=5,
        update_epochs_per_batch=3,
        seed=7,
    )
    argv = build_skyrl_command(spec, TrainPaths.for_run(spec))
    for expected in (
        "trainer.policy.model.lora.rank=8",
        "trainer.policy.model.lora.alpha=16",
        "trainer.policy.model.lora.target_modules=[q_proj,v_proj]",
        "trainer.policy.model.lora.exclude_modules=.*visual.*",
        "trainer.policy.optimizer_config.lr=1.0e-05",
        "trainer.policy.optimizer_config.num_warmup_steps=12",
        "trainer.policy.optimizer_config.scheduler=cosine",
        "generator.sampling_params.temperature=1.0",
        "trainer.epochs=18",  # 10 mazes // 4 = 2 batches per epoch, 7 steps of at most 5 batches
        "trainer.max_training_steps=7",
        "trainer.placement.policy_num_nodes=2",
        "trainer.placement.policy_num_gpus_per_node=8",
        "generator.inference_engine.num_engines=16",
        "trainer.algorithm.use_kl_loss=true",
        "trainer.algorithm.kl_loss_coef=0.05",
        "trainer.algorithm.eps_clip_low=0.1",
        "trainer.algorithm.eps_clip_high=0.28",
        "trainer.algorithm.policy_loss_type=dual_clip",
        "trainer.algorithm.clip_ratio_c=2.5",
        "trainer.algorithm.loss_reduction=sequence_mean",
        "trainer.algorithm.grpo_norm_by_std=false",
        "trainer.algorithm.dynamic_sampling.type=filter",
        "trainer.algorithm.dynamic_sampling.max_sample_batches=5",
        "trainer.update_epochs_per_batch=3",
        "trainer.seed=7",
    ):
        assert expected in argv


@pytest.mark.parametrize("name", ["constant_with_warmup", "cosine", "linear"])
def test_the_spec_names_skyrls_lr_scheduler(name):
    spec = spec_of(lr_scheduler=name)
    overrides = [arg for arg in build_skyrl_command(spec, TrainPaths.for_run(spec)) if ".scheduler=" in arg]
    assert overrides == [f"trainer.policy.optimizer_config.scheduler={name}"]


@pytest.mark.parametrize(
    ("num_gpus", "gpus_per_node", "layout"),
    [(1, 2, (1, 1)), (2, 2, (1, 2)), (6, 2, (3, 2)), (4, 8, (1, 4)), (8, 8, (1, 8)), (24, 8, (3, 8))],
)
def test_gpu_layout(num_gpus, gpus_per_node, layout):
    assert gpu_layout(num_gpus, gpus_per_node) == layout


def test_gpus_that_do_not_fill_whole_nodes_are_refused():
    spec = spec_of(num_gpus=12, gpus_per_node=8, train_batch_size=96, policy_mini_batch_size=24)
    with pytest.raises(LaunchConfigError, match="multiple of gpus_per_node 8"):
        build_skyrl_command(spec, TrainPaths.for_run(spec))


@pytest.mark.parametrize(
    ("fields", "shares"),
    [
        ({"train_batch_size": 64, "policy_mini_batch_size": 16}, "85 per GPU and each mini-batch's into 21"),
        ({"train_batch_size": 4, "policy_mini_batch_size": 1, "n_samples_per_prompt": 4}, "mini-batch's into 0"),
    ],
)
def test_batches_skyrl_would_refuse_on_the_gpus_are_refused_at_upload(fields, shares):
    with pytest.raises(InvalidRunSpec, match=f"{shares} per GPU .*positive multiple"):
        spec_of(**fields)
    spec_of(**fields, backend="tiny")  # the tiny backend has no such rule


@pytest.mark.parametrize("value", ["q_proj,v_proj", "q_proj", "", ".*"])
def test_target_modules_as_one_string_is_refused(value):
    with pytest.raises(InvalidRunSpec, match="target_modules must be"):
        spec_of(lora={"target_modules": value})


@pytest.mark.parametrize("value", [[], ["q_proj", "q_proj"], ["q proj"], ["a.b"], [1], ["x"] * 33])
def test_a_malformed_module_list_is_refused(value):
    with pytest.raises(InvalidRunSpec, match="target_modules"):
        spec_of(lora={"target_modules": value})


def test_fewer_mazes_than_a_batch_are_refused():
    spec = spec_of(maze={"size": 9, "train_mazes": 16})
    with pytest.raises(LaunchConfigError, match="train_mazes"):
        build_skyrl_command(spec, TrainPaths.for_run(spec))


def test_a_model_path_the_command_line_cannot_carry_is_refused():
    spec = parse_run_spec('{"base_model_id": "m"}', "r1", {"m": "/models/a model: [x]"})
    with pytest.raises(LaunchConfigError, match="base_model_path"):
        build_skyrl_command(spec, TrainPaths.for_run(spec))
