"""The trainer's files in SkyRL's layouts: adapter exports, and checkpoints to resume from."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import torch
from peft import PeftModel, set_peft_model_state_dict
from safetensors.torch import load_file

from cluster_jobs.models.policy import ADAPTER_WEIGHTS_FILE

LATEST_CKPT_FILE = "latest_ckpt_global_step.txt"
TRAINER_STATE_FILE = "trainer_state.pt"
LORA_ADAPTER_DIR = "lora_adapter"  # the adapter inside a checkpoint's policy/ folder


def save_export(model: PeftModel, export_dir: Path, step: int) -> Path:
    """Save the adapter to ``export_dir/global_step_<step>/policy/``: written aside, then renamed into place."""
    final = export_dir / f"global_step_{step}"
    staging = Path(tempfile.mkdtemp(prefix=f".tmp-global_step_{step}-", dir=export_dir))
    model.save_pretrained(staging / "policy")
    if final.exists():
        shutil.rmtree(final)
    staging.rename(final)
    return final / "policy"


def checkpoint_policy_dir(ckpt_dir: Path, step: int) -> Path:
    """The ``policy/`` folder of step ``step``'s checkpoint in ``ckpt_dir``: the adapter in ``LORA_ADAPTER_DIR``,
    the rest of the trainer's state in ``TRAINER_STATE_FILE``."""
    return ckpt_dir / f"global_step_{step}" / "policy"


def latest_checkpoint(ckpt_dir: Path) -> int | None:
    """The step ``ckpt_dir``'s ``latest_ckpt_global_step.txt`` names, None when there is none."""
    latest = ckpt_dir / LATEST_CKPT_FILE
    return int(latest.read_text()) if latest.is_file() else None


def save_checkpoint(
    ckpt_dir: Path,
    step: int,
    model: PeftModel,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    batches_drawn: int,
) -> None:
    """Save the adapter as SkyRL's checkpoint layout does, and beside it what :func:`restore_checkpoint` needs
    (the optimizer's and the lr schedule's state, torch's random state, the batches of training mazes played);
    then record it as the latest checkpoint."""
    policy_dir = checkpoint_policy_dir(ckpt_dir, step)
    model.save_pretrained(policy_dir / LORA_ADAPTER_DIR)
    state = {
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "rng": torch.get_rng_state(),
        "batches_drawn": batches_drawn,
    }
    torch.save(state, policy_dir / TRAINER_STATE_FILE)
    (ckpt_dir / LATEST_CKPT_FILE).write_text(f"{step}\n")


def restore_checkpoint(
    ckpt_dir: Path,
    step: int,
    model: PeftModel,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LambdaLR,
    learning_rate: float,
) -> int:
    """Load into ``model``, ``optimizer``, ``scheduler`` and torch's random state what :func:`save_checkpoint`
    saved at ``step``; return the batches of training mazes played by then.

    The lr is ``learning_rate`` and the schedule's shape ``scheduler``'s, whatever the checkpoint's run had, at the
    checkpoint's position in the schedule.
    """
    policy_dir = checkpoint_policy_dir(ckpt_dir, step)
    weights = load_file(policy_dir / LORA_ADAPTER_DIR / ADAPTER_WEIGHTS_FILE, device=str(model.device))
    set_peft_model_state_dict(model, weights)
    # map_location: a checkpoint saved on a GPU resumes on the CPU too (the optimizer moves its state to the
    # parameters' device when loading it)
    state = torch.load(policy_dir / TRAINER_STATE_FILE, map_location="cpu", weights_only=True)
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    # Both state dicts carry the lr they were saved with; the given one wins, so that a run started from another
    # run's checkpoint under a new lr trains at its own (the schedule's position stays the checkpoint's). The
    # schedule's shape stays the caller's too: transformers' schedules are LambdaLRs whose lambdas are partials, and
    # LambdaLR saves only a lambda's `__dict__` (a partial's is empty), so `lr_lambdas` are the caller's (its
    # scheduler, warmup and optimizer steps), read at the checkpoint's position.
    scheduler.base_lrs = [learning_rate] * len(optimizer.param_groups)
    for group, factor in zip(optimizer.param_groups, scheduler.lr_lambdas, strict=True):
        group["initial_lr"], group["lr"] = learning_rate, learning_rate * factor(scheduler.last_epoch)
    torch.set_rng_state(state["rng"])
    return int(state["batches_drawn"])
