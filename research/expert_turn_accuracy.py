"""Teacher-forced exact answers of a policy on the expert's turns: held-out mazes against training mazes.

A training rate above the held-out one says the policy memorized; equal rates say it generalizes as far as it has
learned. Example::

    python -m research.expert_turn_accuracy --base-model research/results/sft-m9-d4-body-r920-cpu/checkpoint \\
        --maze-size 9
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import ProcessorMixin

from cluster_jobs.maze.eval_set import eval_set_for_size, training_seeds
from cluster_jobs.maze.generator import Maze, generate_maze
from cluster_jobs.models.policy import VisionPolicy
from cluster_jobs.rollout import turn_chats
from research.expert import expert_episodes
from research.sft import HISTORY_TURNS, answer_loss, collate, encode_sample

BATCH_TURNS = 32


@torch.no_grad()
def expert_turn_accuracy(
    model: torch.nn.Module, processor: ProcessorMixin, mazes: Sequence[Maze], max_turns: int
) -> tuple[int, int]:
    """``(right, turns)``: of the expert's turns on ``mazes``, how many ``model`` answers exactly, teacher-forced."""
    episodes, _ = expert_episodes(mazes, max_turns, HISTORY_TURNS)
    encoded = [
        encode_sample(processor, sample) for episode in episodes for sample in turn_chats(episode, HISTORY_TURNS)
    ]
    right = 0
    for start in range(0, len(encoded), BATCH_TURNS):
        inputs, mask = collate(encoded[start : start + BATCH_TURNS], processor.tokenizer.pad_token_id)
        _, exact = answer_loss(
            model, ({name: value.to(model.device) for name, value in inputs.items()}, mask.to(model.device))
        )
        right += int(exact.sum())
    return right, len(encoded)


def main(argv: list[str] | None = None) -> int:
    """CLI entry (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-model", type=Path, required=True)
    parser.add_argument("--maze-size", type=int, default=7)
    parser.add_argument("--mazes", type=int, default=64, help="training mazes to score (the first of the SFT data's)")
    args = parser.parse_args(argv)
    policy = VisionPolicy.load(args.base_model)
    policy.model.eval()
    eval_set = eval_set_for_size(args.maze_size)
    training = [generate_maze(args.maze_size, seed) for seed in training_seeds(args.mazes, size=args.maze_size)]
    for name, mazes in ((f"held-out ({eval_set.name})", eval_set.mazes), (f"training (first {args.mazes})", training)):
        right, turns = expert_turn_accuracy(policy.model, policy.processor, mazes, eval_set.max_turns)
        print(f"{name}: {right}/{turns} = {right / turns:.4f} expert turns answered exactly")
    return 0


if __name__ == "__main__":
    sys.exit(main())
