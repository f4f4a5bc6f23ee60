"""Where one tiny GRPO step spends its time: rollout, preparation, the update passes and a greedy evaluation.

Builds the tiny trainer from a run spec on this host (the GPU when one is visible) and times each phase of one step;
``--profile`` prints the costliest functions. Example::

    python -m research.grpo_step_time --base-model research/results/sft-m9-d4-body-r920-cpu/checkpoint --maze-size 9 \\
        --batch-mazes 16 --mini-batch-mazes 8 --also-pixels-on-host
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time
from pathlib import Path

import torch

from cluster_jobs.maze.eval_set import EvalSet, eval_set_for_size, training_seeds
from cluster_jobs.maze.generator import generate_maze
from local_stack.cluster_standins.tiny_model import LANGUAGE_MODEL_LORA_TARGETS, TINY_BASE_MODEL_ID
from local_stack.cluster_standins.tiny_trainer.batches import MICRO_BATCH_TURNS
from local_stack.cluster_standins.tiny_trainer.train import TORCH_THREADS
from local_stack.cluster_standins.tiny_trainer.trainer import TinyGRPO
from mazeops.runspec import parse_run_spec


def time_step(trainer: TinyGRPO, mazes: list, eval_set: EvalSet | None) -> dict[str, float]:
    """Seconds of one step's rollout and update (and of a greedy pass over ``eval_set`` if given), and its turns."""
    started = time.monotonic()
    episodes = trainer.rollout(mazes)
    timings = {"rollout": time.monotonic() - started, "turns": sum(episode.turns for episode in episodes)}
    started = time.monotonic()
    trainer.update(episodes)
    timings["update"] = time.monotonic() - started
    if eval_set is not None:
        started = time.monotonic()
        rate = trainer.solve_rate(eval_set)
        timings[f"held-out evaluation ({rate:.1%} solved)"] = time.monotonic() - started
    return timings


def main(argv: list[str] | None = None) -> int:
    """CLI entry (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-model", type=Path, required=True)
    parser.add_argument("--maze-size", type=int, default=9)
    parser.add_argument("--batch-mazes", type=int, default=16)
    parser.add_argument("--mini-batch-mazes", type=int, default=8)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--kl-coef", type=float, default=0.05)
    parser.add_argument("--evaluate", action="store_true", help="also time one greedy pass over the fixed 64")
    parser.add_argument(
        "--micro-batch-turns", type=int, nargs="*", help="time one step with each (default: the device's)"
    )
    parser.add_argument("--profile", action="store_true", help="print the 40 functions with the most cumulative time")
    parser.add_argument(
        "--also-pixels-on-host",
        action="store_true",
        help="time one more step with the images' pixels kept on the host instead of on the model's device",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(TORCH_THREADS)
    eval_set = eval_set_for_size(args.maze_size)
    document = {
        "base_model_id": TINY_BASE_MODEL_ID,
        "backend": "tiny",
        "shared_dir": "/tmp/grpo-step-time",
        "train_batch_size": args.batch_mazes,
        "policy_mini_batch_size": args.mini_batch_mazes,
        "n_samples_per_prompt": args.samples,
        "learning_rate": 1.5e-3,
        "update_epochs_per_batch": args.epochs,
        "lora": {"target_modules": LANGUAGE_MODEL_LORA_TARGETS},
        "max_turns": eval_set.max_turns,
        "seed": 0,
        "maze": {"size": args.maze_size},
        "use_kl_loss": True,
        "kl_loss_coef": args.kl_coef,
    }
    spec = parse_run_spec(json.dumps(document), "step-time", {TINY_BASE_MODEL_ID: str(args.base_model.resolve())})
    trainer = TinyGRPO(spec)
    seeds = training_seeds(spec.maze.train_mazes, size=spec.maze.size)
    mazes = [generate_maze(spec.maze.size, seed) for seed in seeds[: spec.train_batch_size]]
    device = trainer.model.device.type
    sizes = args.micro_batch_turns or [MICRO_BATCH_TURNS[device]]
    runs = [(size, False) for size in sizes] + ([(sizes[0], True)] if args.also_pixels_on_host else [])
    time_step(trainer, mazes[:1], None)  # untimed: no timed step pays for the first CUDA calls and kernel loads
    per_turn = []  # (micro-batch turns, where the pixels were, seconds a turn)
    for size, pixels_on_host in runs:
        trainer.micro_batch_turns = size
        if pixels_on_host:
            trainer.processor.image_processor.pixels_device = torch.device("cpu")
        pixels = "the host" if pixels_on_host else "the model's device"
        profiler = cProfile.Profile() if args.profile else None
        if profiler:
            profiler.enable()
        timings = time_step(trainer, mazes, eval_set if args.evaluate else None)
        if profiler:
            profiler.disable()
        turns = timings.pop("turns")
        total = timings["rollout"] + timings["update"]
        per_turn.append((size, pixels, total / turns))
        print(
            f"{device}, micro-batches of {size} turns, pixels on {pixels}, "
            f"{len(mazes)} mazes x {spec.n_samples_per_prompt} samples, {turns:.0f} turns:"
        )
        for name, seconds in timings.items():
            print(f"  {name}: {seconds:.1f} s")
        print(f"  step (rollout + update): {total:.1f} s, {1000 * total / turns:.1f} ms a turn")
        if profiler:
            pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(40)
    for size, pixels, seconds in per_turn[1:]:
        print(
            f"time a turn, micro-batches of {size} with pixels on {pixels} / the first: {seconds / per_turn[0][2]:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
