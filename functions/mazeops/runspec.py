"""The run spec: what a person uploads to `requests/<run_id>.json` to start a GRPO run.

Defaults are the reference run's (Qwen3-VL-8B SFT, GRPO, LoRA rank 32, eval every 10 steps,
checkpoint + Hugging Face adapter every 20 steps). Unknown fields are refused, so a typo never
silently falls back to a default.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator, model_validator

from mazeops import jsontext
from mazeops.errors import describe_validation_error
from mazeops.names import BASE_MODEL_ID_PATTERN, RUN_ID_PATTERN

MAX_SPEC_BYTES = 64 * 1024

# The lr schedules a run spec may name: names that both SkyRL's `trainer.policy.optimizer_config.scheduler`
# and the tiny backend's `transformers.get_scheduler` take, with no arguments beyond the warmup and the
# run's optimizer steps (which both pass).
LrScheduler = Literal["constant_with_warmup", "cosine", "linear"]

# The reference GPU node, ml.g7e.12xlarge, has two NVIDIA RTX PRO 6000 Blackwell GPUs; the reference cluster has
# three of them (cluster/raycluster.yaml's GPU worker group).
DEFAULT_GPUS_PER_NODE = 2
DEFAULT_NUM_GPUS = 6

# A module name PEFT matches exactly (a suffix of the module path), e.g. `q_proj`.
LoraModuleName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")]


class InvalidRunSpec(ValueError):
    """The run spec is not valid JSON, breaks the schema, or names something unknown."""


class _Strict(BaseModel):
    # strict: `true` or `"5"` is not an integer here (JSON numbers still fill float fields)
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class LoraSpec(_Strict):
    """LoRA adapter shape."""

    rank: int = Field(32, ge=1, le=256)
    alpha: int = Field(64, ge=1, le=1024)
    # `all-linear` or a list of module names. PEFT reads a string other than `all-linear` as a regex, so
    # `"q_proj,v_proj"` would match nothing on the cluster: a comma-separated string is refused, not split.
    target_modules: Literal["all-linear"] | list[LoraModuleName] = Field("all-linear")

    @field_validator("target_modules", mode="before")
    @classmethod
    def _list_or_all_linear(cls, value: Any) -> Any:
        if isinstance(value, str) and value != "all-linear":
            raise ValueError(
                'target_modules must be "all-linear" or a list of module names, e.g. ["q_proj", "v_proj"] '
                f"(got the string {value[:80]!r})"
            )
        if isinstance(value, list) and not 1 <= len(value) <= 32:
            raise ValueError(f"target_modules must list 1 to 32 module names, got {len(value)}")
        if isinstance(value, list) and len(set(map(str, value))) != len(value):
            raise ValueError("target_modules lists a module twice")
        return value


class MazeSpec(_Strict):
    """Training mazes (the evaluation set is fixed and not configurable here)."""

    size: int = Field(9, ge=5, le=31)
    train_mazes: int = Field(2048, ge=1, le=1_000_000)
    # The first training maze's seed (eval seeds are 0-63). The SFT starts train on the mazes from
    # 1,000,000 on; GRPO can play mazes past them (e.g. 1,100,000) instead of the ones its start was trained on.
    seed_offset: int = Field(1_000_000, ge=64, le=2_000_000_000)

    @field_validator("size")
    @classmethod
    def _odd(cls, size: int) -> int:
        if size % 2 == 0:
            raise ValueError("maze size must be odd (walls and cells alternate)")
        return size


class CollapseGuard(_Strict):
    """Stop a run whose held-out solve rate has collapsed: its `consecutive_evals` latest evaluations are each more
    than `below_baseline_points` percentage points below the baseline's, or below `below_best_fraction` of the run's
    best so far. Either arm may be None (off), not both."""

    # 10 points of 64 mazes is about 6 mazes: more than one evaluation's noise at the reference's solve rates.
    below_baseline_points: float | None = Field(10.0, gt=0, le=100)
    below_best_fraction: float | None = Field(0.5, gt=0, lt=1)
    # Two in a row: one unlucky evaluation never stops a run.
    consecutive_evals: int = Field(2, ge=1, le=20)

    @model_validator(mode="after")
    def _one_arm(self) -> CollapseGuard:
        if self.below_baseline_points is None and self.below_best_fraction is None:
            raise ValueError(
                "a collapse guard needs below_baseline_points or below_best_fraction; to turn it off, set collapse null"
            )
        return self


class GuardSpec(_Strict):
    """When the pipeline stops a run by itself (mazeops.guards); None turns a guard off. See docs/operations.md."""

    collapse: CollapseGuard | None = CollapseGuard()
    # No new adapter for this long while the Ray job is RUNNING. The reference run saves one every 20 steps.
    stall_minutes: int | None = Field(360, ge=1, le=7 * 24 * 60)
    # GPUs x hours since the run became RUNNING. 500 is about 3.5 days of the reference 6 GPUs: half of what the
    # 7-day execution timeout would let a run spend.
    gpu_hours: float | None = Field(500.0, gt=0, le=1_000_000)


class RunSpec(_Strict):
    """A validated GRPO run request."""

    run_name: str | None = Field(None, pattern=RUN_ID_PATTERN.pattern)
    base_model_id: str = Field(pattern=BASE_MODEL_ID_PATTERN.pattern)
    backend: Literal["skyrl", "tiny"] = "skyrl"
    total_steps: int = Field(100, ge=1, le=100_000)
    lora: LoraSpec = LoraSpec()
    eval_interval: int = Field(10, ge=1)
    ckpt_interval: int = Field(20, ge=1)
    # 3e-5 suits LoRA rank 32 (SkyRL's Qwen3-VL-8B LoRA GRPO example, examples/train/geometry3k/
    # run_geometry3k_lora.sh in skyrl 0.4.0's repository); 1e-6 is a full fine-tune's value.
    learning_rate: float = Field(3e-5, gt=0, le=1e-2)
    # Optimizer steps over which the lr rises linearly from 0 (SkyRL's
    # `trainer.policy.optimizer_config.num_warmup_steps`).
    lr_warmup_steps: int = Field(0, ge=0, le=100_000)
    # The lr after the warmup (SkyRL's `trainer.policy.optimizer_config.scheduler`): `constant_with_warmup`
    # (SkyRL's default) holds `learning_rate`; `cosine` and `linear` decay it to 0 at the run's last
    # optimizer step (total_steps x train_batch_size / policy_mini_batch_size x update_epochs_per_batch).
    lr_scheduler: LrScheduler = "constant_with_warmup"
    train_batch_size: int = Field(32, ge=1, le=4096)
    policy_mini_batch_size: int = Field(16, ge=1, le=4096)
    # Passes over each step's rollouts, one optimizer step per mini-batch each (SkyRL's
    # `trainer.update_epochs_per_batch`); later passes see earlier changes through the clipped ratio.
    update_epochs_per_batch: int = Field(1, ge=1, le=16)
    n_samples_per_prompt: int = Field(8, ge=2, le=64)
    temperature: float = Field(0.7, gt=0, le=2.0)
    # GRPO's clipped policy loss and KL term, as SkyRL's `trainer.algorithm` (its defaults, but the
    # KL loss is off as in the reference recipe).
    eps_clip_low: float = Field(0.2, gt=0, lt=1)
    eps_clip_high: float = Field(0.2, gt=0, le=10)
    # `dual_clip` caps a negative advantage's loss at clip_ratio_c x |A| (SkyRL's
    # `trainer.algorithm.policy_loss_type` and `clip_ratio_c`, its defaults `regular` and 3.0).
    policy_loss_type: Literal["regular", "dual_clip"] = "regular"
    clip_ratio_c: float = Field(3.0, gt=1, le=100)
    # How the policy loss averages its tokens (SkyRL's `trainer.algorithm.loss_reduction`, default
    # `token_mean`): `token_mean` weighs every answer token of a mini-batch alike, so a long episode
    # (a 61-turn failure) counts several times a short one; `sequence_mean` averages each episode's
    # tokens first (an episode is one multi-turn sequence in SkyRL), then the episodes.
    loss_reduction: Literal["token_mean", "sequence_mean"] = "token_mean"
    # GRPO's advantage divides each reward's distance from its group's mean by the group's std (SkyRL's
    # `trainer.algorithm.grpo_norm_by_std`, default true); false leaves it in reward units (Dr. GRPO), so
    # a group weighs by how far apart its rewards are: a maze solved half the time more than one solved 7 of 8.
    grpo_norm_by_std: bool = True
    # DAPO's dynamic sampling (SkyRL's `trainer.algorithm.dynamic_sampling.type` and
    # `.max_sample_batches`): with `filter`, a step keeps only the groups whose rewards differ (the
    # others have no advantage to learn from) and plays further batches of `train_batch_size` prompts
    # until it has `train_batch_size` such groups; after `dynamic_sampling_max_batches` batches
    # without enough, the run stops with an error. `null` (the default) trains on every group.
    dynamic_sampling: Literal["filter"] | None = None
    dynamic_sampling_max_batches: int = Field(30, ge=1, le=1000)
    use_kl_loss: bool = False
    kl_loss_coef: float = Field(0.001, ge=0, le=10)
    max_turns: int = Field(15, ge=1, le=100)
    # A training reward option (the maze env's `turn_cost`): a solved episode earns a task reward of
    # `1 - turn_cost * turns` instead of 1.0, so within a GRPO group the shorter solution has the larger
    # advantage. 0 (the default) is VisGym's reward; `turn_cost * max_turns` must stay below 1, so a
    # solved episode always earns more than an unsolved one. Evaluation never charges turns.
    turn_cost: float = Field(0.0, ge=0, allow_inf_nan=False)
    # Seeds the run's random numbers (the LoRA's initial weights, sampling): SkyRL's `trainer.seed`,
    # its default 42. The same spec and seed repeat a tiny CPU run exactly.
    seed: int = Field(42, ge=0, le=2**31 - 1)
    maze: MazeSpec = MazeSpec()
    # GPUs the colocated trainer and its vLLM engines share, on nodes of `gpus_per_node` each.
    num_gpus: int = Field(DEFAULT_NUM_GPUS, ge=1, le=1024)
    gpus_per_node: int = Field(DEFAULT_GPUS_PER_NODE, ge=1, le=16)
    shared_dir: str = Field("/shared", pattern=r"^/[A-Za-z0-9_./-]{0,200}$")
    guard: GuardSpec = GuardSpec()

    @model_validator(mode="after")
    def _consistent(self) -> RunSpec:
        if self.policy_mini_batch_size > self.train_batch_size:
            raise ValueError("policy_mini_batch_size must not exceed train_batch_size")
        if self.train_batch_size % self.policy_mini_batch_size:
            raise ValueError("train_batch_size must be a multiple of policy_mini_batch_size")
        if ".." in self.shared_dir.split("/"):
            raise ValueError("shared_dir must not contain '..'")
        if self.backend == "skyrl":
            _check_skyrl_batches(self)
        if self.turn_cost * self.max_turns >= 1:
            raise ValueError(
                "turn_cost * max_turns must be below 1 (a solved episode must earn more than an unsolved one), "
                f"got {self.turn_cost} * {self.max_turns}"
            )
        return self


def _check_skyrl_batches(spec: RunSpec) -> None:
    """SkyRL 0.4.0's batch rule (skyrl/train/utils/utils.py `validate_batch_sizes`), checked here so that a run it
    would refuse at start on the cluster is refused at upload: each GPU's share of a step's sequences
    (`train_batch_size x n_samples_per_prompt // num_gpus`, integer division) must be a multiple of its share of a
    mini-batch's (`policy_mini_batch_size x n_samples_per_prompt // num_gpus`), and that share at least 1."""
    per_gpu_mini = spec.policy_mini_batch_size * spec.n_samples_per_prompt // spec.num_gpus
    per_gpu_step = spec.train_batch_size * spec.n_samples_per_prompt // spec.num_gpus
    if per_gpu_mini < 1 or per_gpu_step % per_gpu_mini:
        raise ValueError(
            f"SkyRL splits each step's {spec.train_batch_size} x {spec.n_samples_per_prompt} sequences into "
            f"{per_gpu_step} per GPU and each mini-batch's into {per_gpu_mini} per GPU (num_gpus {spec.num_gpus}); "
            "the first must be a positive multiple of the second: choose train_batch_size, policy_mini_batch_size "
            "and num_gpus so that it is"
        )


class NormalizedRunSpec(RunSpec):
    """The spec as the training job reads it: with its run id and the resolved base model path."""

    run_id: str = Field(pattern=RUN_ID_PATTERN.pattern)
    base_model_path: str = Field(min_length=1, max_length=1024)


def parse_run_spec(raw: bytes | str, run_id: str, base_models: dict[str, str]) -> NormalizedRunSpec:
    """Parse and validate a run spec uploaded as `requests/<run_id>.json`.

    Raises InvalidRunSpec with every problem listed (oversized, not JSON, schema errors,
    run_name differing from the key's run id, unknown base model).
    """
    if len(raw) > MAX_SPEC_BYTES:
        raise InvalidRunSpec(f"run spec is {len(raw)} bytes; the limit is {MAX_SPEC_BYTES}")
    try:
        document = jsontext.loads(raw)
    except jsontext.NotJson as error:
        raise InvalidRunSpec(f"run spec is not valid JSON: {error}") from None
    if not isinstance(document, dict):
        raise InvalidRunSpec(f"run spec must be a JSON object, got {type(document).__name__}")
    try:
        spec = RunSpec.model_validate(document)
    except ValidationError as error:
        raise InvalidRunSpec(f"run spec is invalid: {describe_validation_error(error)}") from None
    if spec.run_name is not None and spec.run_name != run_id:
        raise InvalidRunSpec(f"run_name {spec.run_name!r} differs from the key's run id {run_id!r}")
    if spec.base_model_id not in base_models:
        known = ", ".join(sorted(base_models)) or "none configured"
        raise InvalidRunSpec(f"unknown base model {spec.base_model_id!r}; known: {known}")
    return NormalizedRunSpec(
        **spec.model_dump(exclude={"run_name"}),
        run_name=run_id,
        run_id=run_id,
        base_model_path=base_models[spec.base_model_id],
    )
