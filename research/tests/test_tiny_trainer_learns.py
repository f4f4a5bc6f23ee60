"""GRPO from the shipped SFT start really learns: the sampled solve rate of the mazes it trains on rises.

The product suite proves learning end to end (tests/test_e2e_local.py requires McNemar's test to promote the adapter
`make local`'s run trains). This finer check: on the CPU from fixed seeds, two training mazes the SFT start solves
about 60% of the time, 32 samples each before and after 8 GRPO steps with the local run's setting
(`local_stack.pipeline.tiny_run_spec`). It printed 38/64 before and 56/64 after; the bound sits well under that rise.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from cluster_jobs.maze.eval_set import eval_set_for_size, training_seeds
from cluster_jobs.maze.generator import Maze, generate_maze
from local_stack.cluster_standins.tiny_trainer.trainer import TinyGRPO
from local_stack.pipeline import BASE_MODEL_DIR, BASE_MODEL_ID, MAZE_SIZE, tiny_run_spec
from mazeops.runspec import parse_run_spec

pytestmark = pytest.mark.slow

STEPS = 8
SAMPLES = 32  # per maze, for the before/after measurement
MEASURE_SEED = 12345
TRAINING_MAZES = (1, 3)  # indices into the first training seeds: middling for the SFT start


def sampled_solves(trainer: TinyGRPO, mazes: list[Maze]) -> int:
    """Solved episodes of SAMPLES samples per maze at the run's temperature, from a fixed seed."""
    state = torch.get_rng_state()
    torch.manual_seed(MEASURE_SEED)
    episodes = trainer.rollout([maze for maze in mazes for _ in range(SAMPLES // trainer.spec.n_samples_per_prompt)])
    torch.set_rng_state(state)  # the training's own random stream goes on as if nothing was measured
    return sum(episode.solved for episode in episodes)


def test_grpo_raises_the_sampled_solve_rate_of_its_training_mazes(tmp_path: Path, one_torch_thread: None) -> None:
    seeds = training_seeds(max(TRAINING_MAZES) + 1, size=MAZE_SIZE)
    mazes = [generate_maze(MAZE_SIZE, seeds[index]) for index in TRAINING_MAZES]
    document = tiny_run_spec(STEPS, STEPS, tmp_path) | {
        "train_batch_size": len(mazes),
        "policy_mini_batch_size": len(mazes),
    }
    spec = parse_run_spec(json.dumps(document), "learns", {BASE_MODEL_ID: str(BASE_MODEL_DIR)})
    assert spec.max_turns == eval_set_for_size(MAZE_SIZE).max_turns

    trainer = TinyGRPO(spec)
    before = sampled_solves(trainer, mazes)
    rewards = []
    for _ in range(STEPS):
        episodes = trainer.rollout(mazes)
        trainer.update(episodes)
        rewards.append(sum(episode.reward for episode in episodes) / len(episodes))
    after = sampled_solves(trainer, mazes)

    total = SAMPLES * len(mazes)
    print(
        f"sampled solves on the 2 training mazes: {before}/{total} before, {after}/{total} after {STEPS} steps; "
        f"training reward per step {[round(reward, 2) for reward in rewards]}"
    )
    assert before <= 0.75 * total  # the start leaves room
    assert after >= before + 0.15 * total
