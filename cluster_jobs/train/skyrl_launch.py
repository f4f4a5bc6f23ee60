"""The exact SkyRL GRPO job a run spec asks for: run directories and the command line.

``build_skyrl_command`` turns a spec into the argv of ``cluster_jobs.train.skyrl_entrypoint`` with SkyRL 0.4.0
config overrides; only the cluster runs it (locally ``run --dry-run`` prints it).
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from cluster_jobs.maze.env import ENV_CLASS
from cluster_jobs.train.metrics import METRICS_FILE_NAME
from mazeops.runspec import NormalizedRunSpec

SKYRL_ENTRYPOINT_MODULE = "cluster_jobs.train.skyrl_entrypoint"
PROJECT_NAME = "maze-rl-ops"

# PEFT regex of the modules that never get LoRA: Qwen3-VL's vision tower and its mergers (`model.visual.*`).
# SkyRL 0.4.0's vLLM engines never set vLLM's `enable_tower_connector_lora`, and vLLM 0.30.0 loads LoRA on the
# language model only without it (vllm/lora/model_manager.py), so LoRA on the tower would be trained but never
# used by rollouts, evaluation or Ray Serve: all four must run the same policy.
LORA_EXCLUDE_MODULES = ".*visual.*"
# Token budgets of the upstream VisGym recipe: the dataset prompt is a short ticket, each turn's
# input (system prompt + history + image tokens) stays under MAX_INPUT_LENGTH, and vLLM's context
# fits one full turn.
MAX_PROMPT_LENGTH = 2048
MAX_INPUT_LENGTH = 8192
MAX_GENERATE_LENGTH = 1024
MAX_MODEL_LEN = MAX_INPUT_LENGTH + MAX_GENERATE_LENGTH

# Characters that pass through OmegaConf's command-line parsing as a plain string.
_SAFE_VALUE = re.compile(r"^[A-Za-z0-9_./:@+-]{1,1024}$")


class LaunchConfigError(ValueError):
    """The run spec cannot be turned into a valid SkyRL job (GPU layout, dataset size, a path)."""


@dataclass(frozen=True)
class TrainPaths:
    """A run's directories on the shared file system (every Ray node sees the same paths)."""

    root: Path
    data_dir: Path
    ckpt_dir: Path
    export_dir: Path
    lora_sync_dir: Path

    @classmethod
    def for_run(cls, spec: NormalizedRunSpec) -> TrainPaths:
        """``<spec.shared_dir>/maze-rl/<run_id>/{data,ckpts,exports,lora_sync}``."""
        root = Path(spec.shared_dir) / "maze-rl" / spec.run_id
        return cls(
            root=root,
            data_dir=root / "data",
            ckpt_dir=root / "ckpts",
            export_dir=root / "exports",
            lora_sync_dir=root / "lora_sync",
        )

    @property
    def train_data(self) -> Path:
        """SkyRL ``data.train_data``: one row per training maze."""
        return self.data_dir / "train.jsonl"

    @property
    def val_data(self) -> Path:
        """SkyRL ``data.val_data``: the 64 fixed eval mazes, for in-training evaluation."""
        return self.data_dir / "validation.jsonl"

    @property
    def metrics_file(self) -> Path:
        """JSON lines the backend appends per logged step (the training job uploads them)."""
        return self.export_dir / METRICS_FILE_NAME

    def make_dirs(self) -> None:
        """Create the run's directories (idempotent)."""
        for directory in (self.data_dir, self.ckpt_dir, self.export_dir, self.lora_sync_dir):
            directory.mkdir(parents=True, exist_ok=True)


def gpu_layout(num_gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """``(nodes, gpus_per_node)`` for ``num_gpus`` GPUs: one partial node, or whole nodes.

    Raises:
        LaunchConfigError: if ``num_gpus`` spans several nodes but is not a multiple of ``gpus_per_node``.
    """
    if num_gpus <= gpus_per_node:
        return 1, num_gpus
    if num_gpus % gpus_per_node:
        raise LaunchConfigError(
            f"num_gpus {num_gpus} spans several nodes, so it must be a multiple of gpus_per_node {gpus_per_node}"
        )
    return num_gpus // gpus_per_node, gpus_per_node


def epochs_for(spec: NormalizedRunSpec) -> int:
    """Dataset passes needed for ``spec.total_steps`` steps (SkyRL stops at ``max_training_steps``).

    With ``dynamic_sampling: filter`` a step may draw up to ``dynamic_sampling_max_batches`` batches
    from the dataset, so the passes cover that many per step: SkyRL's trainer ends when its epochs
    run out, whatever ``max_training_steps`` says.

    Raises:
        LaunchConfigError: if there are fewer training mazes than one training batch.
    """
    batches_per_epoch = spec.maze.train_mazes // spec.train_batch_size
    if batches_per_epoch < 1:
        raise LaunchConfigError(
            f"maze.train_mazes ({spec.maze.train_mazes}) must be at least train_batch_size ({spec.train_batch_size})"
        )
    batches_per_step = spec.dynamic_sampling_max_batches if spec.dynamic_sampling else 1
    return math.ceil(spec.total_steps * batches_per_step / batches_per_epoch)


def _safe(name: str, value: str) -> str:
    if not _SAFE_VALUE.fullmatch(value):
        raise LaunchConfigError(
            f"{name} {value[:80]!r} has characters SkyRL's command line cannot carry; use A-Z a-z 0-9 _ . / : @ + -"
        )
    return value


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _float(value: float) -> str:
    """A float that YAML 1.1 (OmegaConf) reads back as a float: ``1e-06`` -> ``1.0e-06``."""
    text = repr(float(value))
    mantissa, _, exponent = text.partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    return f"{mantissa}e{exponent}" if exponent else mantissa


def lora_target_modules(spec: NormalizedRunSpec) -> str:
    """The override value of ``spec.lora.target_modules``: ``all-linear``, or a list such as ``[q_proj,v_proj]``.

    OmegaConf's command line reads ``[a,b]`` as a list, which reaches PEFT as a list of exact names.
    """
    modules = spec.lora.target_modules
    return modules if isinstance(modules, str) else "[" + ",".join(modules) + "]"


def skyrl_overrides(spec: NormalizedRunSpec, paths: TrainPaths) -> list[str]:
    """The SkyRL 0.4.0 ``key=value`` overrides for ``spec`` (order is stable, for review and tests).

    Raises:
        LaunchConfigError: see :func:`gpu_layout`, :func:`epochs_for`, and for a base model path or
            directory that SkyRL's command line cannot carry.
    """
    nodes, gpus_per_node = gpu_layout(spec.num_gpus, spec.gpus_per_node)
    epochs = epochs_for(spec)
    model_path = _safe("base_model_path", spec.base_model_path)
    _safe("run directory", str(paths.root))
    return [
        # data
        f"data.train_data=['{paths.train_data}']",
        f"data.val_data=['{paths.val_data}']",
        f"environment.env_class={ENV_CLASS}",
        # policy model and LoRA
        f"trainer.policy.model.path={model_path}",
        f"trainer.policy.model.lora.rank={spec.lora.rank}",
        f"trainer.policy.model.lora.alpha={spec.lora.alpha}",
        f"trainer.policy.model.lora.target_modules={lora_target_modules(spec)}",
        f"trainer.policy.model.lora.exclude_modules={LORA_EXCLUDE_MODULES}",
        f"trainer.policy.model.lora.lora_sync_path={paths.lora_sync_dir}",
        # algorithm
        "trainer.algorithm.advantage_estimator=grpo",
        f"trainer.algorithm.grpo_norm_by_std={_bool(spec.grpo_norm_by_std)}",
        f"trainer.algorithm.use_kl_loss={_bool(spec.use_kl_loss)}",
        f"trainer.algorithm.kl_loss_coef={_float(spec.kl_loss_coef)}",
        f"trainer.algorithm.eps_clip_low={_float(spec.eps_clip_low)}",
        f"trainer.algorithm.eps_clip_high={_float(spec.eps_clip_high)}",
        f"trainer.algorithm.policy_loss_type={spec.policy_loss_type}",
        f"trainer.algorithm.clip_ratio_c={_float(spec.clip_ratio_c)}",
        f"trainer.algorithm.loss_reduction={spec.loss_reduction}",
        f"trainer.algorithm.dynamic_sampling.type={spec.dynamic_sampling or 'null'}",
        f"trainer.algorithm.dynamic_sampling.max_sample_batches={spec.dynamic_sampling_max_batches}",
        f"trainer.policy.optimizer_config.lr={_float(spec.learning_rate)}",
        f"trainer.policy.optimizer_config.num_warmup_steps={spec.lr_warmup_steps}",
        f"trainer.policy.optimizer_config.scheduler={spec.lr_scheduler}",
        f"trainer.train_batch_size={spec.train_batch_size}",
        f"trainer.policy_mini_batch_size={spec.policy_mini_batch_size}",
        f"trainer.update_epochs_per_batch={spec.update_epochs_per_batch}",
        f"trainer.epochs={epochs}",
        f"trainer.max_training_steps={spec.total_steps}",
        f"trainer.seed={spec.seed}",
        # placement: FSDP policy and vLLM engines share every GPU
        "trainer.strategy=fsdp",
        "trainer.placement.colocate_all=true",
        f"trainer.placement.policy_num_nodes={nodes}",
        f"trainer.placement.policy_num_gpus_per_node={gpus_per_node}",
        # With colocate_all SkyRL puts the reference model (KL loss) on the policy's GPUs and asserts that their
        # counts match (skyrl/train/trainer.py `build_models`); its default is 1 x 1.
        f"trainer.placement.ref_num_nodes={nodes}",
        f"trainer.placement.ref_num_gpus_per_node={gpus_per_node}",
        "generator.inference_engine.backend=vllm",
        f"generator.inference_engine.num_engines={spec.num_gpus}",
        "generator.inference_engine.tensor_parallel_size=1",
        f"generator.inference_engine.engine_init_kwargs.max_model_len={MAX_MODEL_LEN}",
        # multi-turn VLM rollouts
        "generator.vision_language_generator=true",
        "generator.batched=false",
        f"generator.n_samples_per_prompt={spec.n_samples_per_prompt}",
        f"generator.max_turns={spec.max_turns}",
        f"generator.sampling_params.temperature={_float(spec.temperature)}",
        f"generator.sampling_params.max_generate_length={MAX_GENERATE_LENGTH}",
        f"generator.max_input_length={MAX_INPUT_LENGTH}",
        f"trainer.max_prompt_length={MAX_PROMPT_LENGTH}",
        "trainer.remove_microbatch_padding=false",
        # evaluation, checkpoints, exports
        f"trainer.eval_interval={spec.eval_interval}",
        "trainer.eval_before_train=true",
        f"trainer.ckpt_interval={spec.ckpt_interval}",
        f"trainer.hf_save_interval={spec.ckpt_interval}",
        f"trainer.ckpt_path={paths.ckpt_dir}",
        f"trainer.export_path={paths.export_dir}",
        # logging
        "trainer.logger=console",
        f"trainer.project_name={PROJECT_NAME}",
        f"trainer.run_name={spec.run_id}",
    ]


def build_skyrl_command(spec: NormalizedRunSpec, paths: TrainPaths) -> list[str]:
    """The argv of the SkyRL GRPO job for ``spec``: this interpreter, ``-m``, our entrypoint, overrides.

    Raises:
        LaunchConfigError: when the spec cannot be expressed as a valid SkyRL job.
    """
    return [sys.executable, "-m", SKYRL_ENTRYPOINT_MODULE, *skyrl_overrides(spec, paths)]
