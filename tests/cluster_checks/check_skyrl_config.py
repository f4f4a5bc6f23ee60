"""SkyRL 0.4.0's own loader and validator on launch overrides: ``{"cases": {name: [key=value, ...]}}`` on stdin.

For each case: ``SkyRLTrainConfig.from_cli_overrides`` (with the dataclasses' ``__post_init__`` checks), then
``skyrl.train.utils.validate_cfg`` whole (for ``trainer.strategy=fsdp`` none of it needs a GPU or Ray: its GPU
probes are on the Megatron path, and the policy-loss registries stay local while Ray is not initialised), then
the colocation asserts that ``RayPPOTrainer.build_models`` makes before it places any worker. Prints
``{name: {"ok": bool, "error": str, "loaded": {...}}}``.
"""

from __future__ import annotations

import skyrl_py311  # noqa: F401 (before skyrl)
from check_io import describe, read_request, write_result
from skyrl.train.config import SkyRLTrainConfig
from skyrl.train.utils import validate_cfg


def check_colocated_gpus(cfg: SkyRLTrainConfig) -> None:
    """The GPU-count asserts of skyrl 0.4.0 skyrl/train/trainer.py ``build_models`` under ``colocate_all``.

    They run on the cluster only after Ray, the placement group and the datasets are up; validate_cfg does not
    make them (it compares policy and ref placement only when ``colocate_all`` is off).
    """
    placement = cfg.trainer.placement
    if not placement.colocate_all:
        return
    engines = cfg.generator.inference_engine
    policy = placement.policy_num_gpus_per_node * placement.policy_num_nodes
    rollout = (
        engines.num_engines * engines.tensor_parallel_size * engines.pipeline_parallel_size * engines.data_parallel_size
    )
    assert policy == rollout, "num_policy_gpus and num_rollout_gpus must be the same when colocating all models"
    algorithm = cfg.trainer.algorithm
    if algorithm.use_kl_loss or algorithm.use_kl_in_reward:
        ref = placement.ref_num_gpus_per_node * placement.ref_num_nodes
        assert policy == ref, (
            "num_policy_gpus and num_ref_gpus must be the same when colocating policy and ref model "
            f"(policy {placement.policy_num_nodes}x{placement.policy_num_gpus_per_node}, "
            f"ref {placement.ref_num_nodes}x{placement.ref_num_gpus_per_node})"
        )


def loaded_values(cfg: SkyRLTrainConfig) -> dict:
    """The loaded values the launch sets, as the trainer will read them."""
    trainer, generator = cfg.trainer, cfg.generator
    lora = trainer.policy.model.lora
    return {
        "lora": {
            "rank": lora.rank,
            "alpha": lora.alpha,
            "target_modules": lora.target_modules,
            "exclude_modules": lora.exclude_modules,
        },
        "placement": {
            "policy_num_nodes": trainer.placement.policy_num_nodes,
            "policy_num_gpus_per_node": trainer.placement.policy_num_gpus_per_node,
            "num_engines": generator.inference_engine.num_engines,
        },
        "algorithm": {
            "policy_loss_type": trainer.algorithm.policy_loss_type,
            "loss_reduction": trainer.algorithm.loss_reduction,
            "grpo_norm_by_std": trainer.algorithm.grpo_norm_by_std,
            "use_kl_loss": trainer.algorithm.use_kl_loss,
            "dynamic_sampling": trainer.algorithm.dynamic_sampling.type,
        },
        "optimizer": {
            "lr": trainer.policy.optimizer_config.lr,
            "scheduler": trainer.policy.optimizer_config.scheduler,
            "num_warmup_steps": trainer.policy.optimizer_config.num_warmup_steps,
        },
        "env_class": cfg.environment.env_class,
        "vision_language_generator": generator.vision_language_generator,
    }


def check(overrides: list[str]) -> dict:
    """Load, validate and describe one override list."""
    try:
        cfg = SkyRLTrainConfig.from_cli_overrides(overrides)
        validate_cfg(cfg)
        check_colocated_gpus(cfg)
    except Exception as error:  # the library's own refusal, reported to the test
        return {"ok": False, "error": describe(error)}
    return {"ok": True, "loaded": loaded_values(cfg)}


def main() -> None:
    cases = read_request()["cases"]
    write_result({name: check(overrides) for name, overrides in cases.items()})


if __name__ == "__main__":
    main()
