"""How far one GRPO optimizer step moves a start's policy, by learning rate: to pick an lr for a new model shape.

One rollout and one mini-batch of it in GRPO's loss, then ``--steps`` AdamW steps from the same first LoRA for each lr,
each reported as the mean k3 KL from the sampling policy and the largest importance ratio. Example::

    python -m research.grpo_step_size --base-model research/results/sft-m9-d4-body-r920-cpu/checkpoint --maze-size 9 \\
        --lr 1.5e-3 5e-4 2.5e-4
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from transformers import get_scheduler

from cluster_jobs.maze.eval_set import eval_set_for_size, training_seeds
from cluster_jobs.maze.generator import generate_maze
from local_stack.cluster_standins.tiny_model import LANGUAGE_MODEL_LORA_TARGETS, TINY_BASE_MODEL_ID
from local_stack.cluster_standins.tiny_trainer.batches import MiniBatch
from local_stack.cluster_standins.tiny_trainer.grpo_loss import group_advantages, importance_ratio, k3_kl
from local_stack.cluster_standins.tiny_trainer.log_probs import token_log_probs
from local_stack.cluster_standins.tiny_trainer.train import TORCH_THREADS
from local_stack.cluster_standins.tiny_trainer.trainer import TinyGRPO, episode_rewards
from mazeops.runspec import parse_run_spec


@torch.no_grad()
def distance_moved(trainer: TinyGRPO, batch: MiniBatch) -> tuple[float, float]:
    """The mean k3 KL of ``trainer``'s policy from the sampling one over ``batch``'s answer tokens, and the largest
    ratio."""
    kls, ratios = [], []
    for micro in batch.micro_batches:
        log_probs = token_log_probs(trainer.model, micro.inputs, trainer.spec.temperature)
        kls.append(k3_kl(log_probs, micro.old_log_probs)[micro.mask])
        ratios.append(importance_ratio(log_probs, micro.old_log_probs)[micro.mask])
    return torch.cat(kls).mean().item(), torch.cat(ratios).max().item()


def main(argv: list[str] | None = None) -> int:
    """CLI entry (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-model", type=Path, required=True)
    parser.add_argument("--maze-size", type=int, default=9)
    parser.add_argument("--mazes", type=int, default=2)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--lr", type=float, nargs="+", required=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(TORCH_THREADS)
    document = {
        "base_model_id": TINY_BASE_MODEL_ID,
        "backend": "tiny",
        "shared_dir": "/tmp/grpo-step-size",
        "total_steps": 1,
        "train_batch_size": args.mazes,
        "policy_mini_batch_size": args.mazes,
        "n_samples_per_prompt": args.samples,
        "learning_rate": args.lr[0],
        "temperature": 1.0,
        "lora": {"target_modules": LANGUAGE_MODEL_LORA_TARGETS},
        "max_turns": eval_set_for_size(args.maze_size).max_turns,
        "maze": {"size": args.maze_size, "train_mazes": 2000},
        "seed": 0,
        "use_kl_loss": True,
        "kl_loss_coef": 0.05,
        "policy_loss_type": "dual_clip",
        "clip_ratio_c": 3.0,
    }
    spec = parse_run_spec(json.dumps(document), "grpo-step-size", {TINY_BASE_MODEL_ID: str(args.base_model.resolve())})
    trainer = TinyGRPO(spec)
    started = time.monotonic()
    mazes = [generate_maze(args.maze_size, seed) for seed in training_seeds(args.mazes, size=args.maze_size)]
    episodes = trainer.rollout(mazes)
    batch = trainer.prepare(episodes, group_advantages(episode_rewards(episodes), args.samples).tolist())
    print(
        f"{args.base_model}: {sum(e.solved for e in episodes)} of {len(episodes)} sampled episodes solved, "
        f"{batch.turns} turns, {batch.tokens} answer tokens ({time.monotonic() - started:.0f} s)",
        flush=True,
    )
    first_lora = [parameter.detach().clone() for parameter in trainer.trainable]
    for lr in args.lr:
        with torch.no_grad():
            for parameter, first in zip(trainer.trainable, first_lora, strict=True):
                parameter.copy_(first)
        trainer.optimizer = torch.optim.AdamW(trainer.trainable, lr=lr)
        trainer.scheduler = get_scheduler("constant", trainer.optimizer)
        moved = []
        for _ in range(args.steps):
            trainer.model.train()
            trainer.train_mini_batch(batch)
            trainer.model.eval()
            moved.append(distance_moved(trainer, batch))
        print(
            f"lr {lr:g}: KL / ratio_max after optimizer steps 1-{args.steps}: "
            + "  ".join(f"{kl:.4f} / {ratio:.1f}" for kl, ratio in moved),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
