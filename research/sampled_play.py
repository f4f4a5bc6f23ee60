"""How a policy's sampled episodes go on GRPO's training mazes (``--held-out``: on the fixed held-out set).

The solve fraction, the groups all solved, all failed or mixed, pass@samples, turns beyond the shortest path, and how
the failures end (stuck, oscillating, wandering). Example::

    python -m research.sampled_play --base-model research/results/sft-m9-d4-body-r920-cpu/checkpoint --maze-size 9 \\
        --held-out --temperature 0.7
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import torch

from cluster_jobs.maze.eval_set import eval_set_for_size, training_seeds
from cluster_jobs.maze.generator import Maze, generate_maze
from cluster_jobs.models.policy import VisionPolicy
from cluster_jobs.rollout import Episode, run_episodes
from local_stack.cluster_standins.tiny_trainer.batches import HISTORY_TURNS
from research.first_errors import ends_stuck, played_path

PROGRESS_EVERY = 10  # turns between progress lines on stderr
OSCILLATION_TURNS = 6  # a failure "oscillates" when its last 6 turns alternate two opposite moves
OPPOSITE = {"R": "L", "L": "R", "U": "D", "D": "U"}


def ending(path: Sequence[str]) -> str:
    """How a failed episode's path ends: ``stuck``, ``oscillating`` or ``wandering``."""
    if ends_stuck(path):
        return "stuck"
    tail = list(path[-OSCILLATION_TURNS:])
    if (
        len(tail) == OSCILLATION_TURNS
        and OPPOSITE.get(tail[0]) == tail[1]
        and tail == tail[:2] * (OSCILLATION_TURNS // 2)
    ):
        return "oscillating"
    return "wandering"


def group_kinds(solved: Sequence[bool], samples: int) -> Counter:
    """Groups of ``samples`` consecutive episodes by kind: ``all solved``, ``all failed`` or ``mixed``."""
    kinds = Counter()
    for start in range(0, len(solved), samples):
        count = sum(solved[start : start + samples])
        kinds["all solved" if count == samples else "all failed" if count == 0 else "mixed"] += 1
    return kinds


def report(paths: Sequence[list[str]], solved: Sequence[bool], shortest: Sequence[int], samples: int) -> list[str]:
    """Report lines for episodes (grouped by maze, ``samples`` each) with their played ``paths`` and mazes'
    ``shortest`` path lengths."""
    failures = [path for path, ok in zip(paths, solved, strict=False) if not ok]
    groups = group_kinds(solved, samples)
    lines = [
        f"solved: {sum(solved)} of {len(solved)} sampled episodes ({sum(solved) / len(solved):.3f})",
        "groups: " + ", ".join(f"{groups[kind]} {kind}" for kind in ("mixed", "all solved", "all failed")),
        f"solved at least once: {groups['mixed'] + groups['all solved']} of {groups.total()} mazes (pass@{samples})",
    ]
    extra = [
        sum(turn != "S" for turn in path) - length
        for path, ok, length in zip(paths, solved, shortest, strict=False)
        if ok
    ]
    if extra:
        lines.append(
            f"solved episodes: median {statistics.median(extra)} turns (moves, or moves into walls) over the shortest "
            f"path, {sum(e == 0 for e in extra)} of {len(extra)} on it"
        )
    if failures:
        endings = Counter(ending(path) for path in failures)
        bumps = sum(turn.startswith("x") for path in failures for turn in path)
        turns = sum(len(path) for path in failures)
        lines.append(
            "failures end: " + ", ".join(f"{endings[kind]} {kind}" for kind in ("stuck", "oscillating", "wandering"))
        )
        lines.append(f"failures' turns into a wall: {bumps} of {turns} ({bumps / turns:.2f})")
    return lines


def mazes_to_play(size: int, count: int, held_out: bool) -> list[Maze]:
    """The first ``count`` training mazes of ``size``, or with ``held_out`` the first ``count`` of the fixed held-out
    set.

    Raises:
        ValueError: if ``count`` is not positive, or is more than the held-out set holds.
        NoEvalSet: with ``held_out``, if there is no fixed set of that size.
    """
    if count < 1:
        raise ValueError(f"--mazes must be at least 1, got {count}")
    if not held_out:
        return [generate_maze(size, seed) for seed in training_seeds(count, size=size)]
    mazes = eval_set_for_size(size).mazes
    if count > len(mazes):
        raise ValueError(f"--mazes {count}: the held-out set of size {size} has {len(mazes)}")
    return list(mazes[:count])


def progress(turn: int, episodes: Sequence[Episode]) -> None:
    """Every ``PROGRESS_EVERY`` turns, how many episodes have solved their maze so far (on stderr: a run cut
    short by a time limit still shows how far it got)."""
    if turn % PROGRESS_EVERY == 0:
        print(
            f"turn {turn}: {sum(e.solved for e in episodes)} of {len(episodes)} solved so far",
            file=sys.stderr,
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    """CLI entry (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-model", type=Path, required=True)
    parser.add_argument("--adapter", type=Path, help="a PEFT LoRA adapter directory to play with")
    parser.add_argument("--maze-size", type=int, default=9)
    parser.add_argument("--mazes", type=int, default=16, help="the first N training mazes (or held-out ones)")
    parser.add_argument(
        "--held-out", action="store_true", help="play the fixed held-out mazes instead of training mazes"
    )
    parser.add_argument("--samples", type=int, default=8, help="episodes per maze (a GRPO group)")
    parser.add_argument("--max-turns", type=int, default=61)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0, help="torch's seed for sampling")
    args = parser.parse_args(argv)
    try:
        mazes = mazes_to_play(args.maze_size, args.mazes, args.held_out)
    except ValueError as error:  # NoEvalSet is one
        parser.error(str(error))
    torch.manual_seed(args.seed)
    policy = VisionPolicy.load(args.base_model)
    if args.adapter is not None:
        from peft import PeftModel

        policy = VisionPolicy(PeftModel.from_pretrained(policy.model, args.adapter), policy.processor)
    played = [maze for maze in mazes for _ in range(args.samples)]
    episodes = run_episodes(
        lambda chats: policy.generate(chats, temperature=args.temperature),
        played,
        args.max_turns,
        history_turns=HISTORY_TURNS,
        on_turn=progress,
    )
    paths = [played_path(episode, maze) for episode, maze in zip(episodes, played, strict=False)]
    policy_name = f"{args.base_model} + {args.adapter}" if args.adapter else str(args.base_model)
    kind = "held-out" if args.held_out else "training"
    print(
        f"{policy_name}: {args.mazes} {kind} mazes x {args.samples} samples, "
        f"temperature {args.temperature}, {args.max_turns} turns"
    )
    for line in report(
        paths, [e.solved for e in episodes], [maze.shortest_path_length() for maze in played], args.samples
    ):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
