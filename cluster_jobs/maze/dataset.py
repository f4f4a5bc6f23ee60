"""Prompt datasets for SkyRL (``data.train_data`` / ``data.val_data``) as JSON Lines, one maze episode a row.

The row's prompt is a short text ticket that ``MazeEnv.init`` replaces; its other columns reach the env as extras
(docs/design.md).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from cluster_jobs.maze.env import DEFAULT_MAX_TURNS, ENV_CLASS
from cluster_jobs.maze.eval_set import EVAL_SET_SIZE, TRAINING_SEED_OFFSET, eval_set_for_size, training_seeds
from cluster_jobs.maze.generator import validate_size
from cluster_jobs.maze.prompt import SYSTEM_PROMPT


def write_prompt_dataset(
    path: Path | str, seeds: Sequence[int], size: int, max_turns: int = DEFAULT_MAX_TURNS, turn_cost: float = 0.0
) -> int:
    """Write one row per seed to the ``.jsonl`` file ``path`` (parents created); returns the row count.
    A non-zero ``turn_cost`` (the env's reward option) goes into every row's extras.

    Raises:
        ValueError: if ``path`` does not end in ``.jsonl``, ``size`` is invalid or ``max_turns`` < 1.
    """
    path = Path(path)
    if path.suffix != ".jsonl":
        raise ValueError(f"dataset path must end in .jsonl, got {path}")
    validate_size(size)
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, got {max_turns}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as out:
        for seed in seeds:
            row = {
                "prompt": [
                    {"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": f"Solve maze {seed} ({size}x{size})."},
                ],
                "env_class": ENV_CLASS,
                "seed": seed,
                "size": size,
                "max_turns": max_turns,
            }
            if turn_cost:
                row["turn_cost"] = turn_cost
            out.write(json.dumps(row) + "\n")
    return len(seeds)


def write_training_dataset(
    path: Path | str,
    n: int,
    size: int,
    seed_offset: int = TRAINING_SEED_OFFSET,
    max_turns: int = DEFAULT_MAX_TURNS,
    turn_cost: float = 0.0,
) -> int:
    """Write ``n`` training rows with :func:`~cluster_jobs.maze.eval_set.training_seeds` (never eval mazes)."""
    return write_prompt_dataset(path, training_seeds(n, offset=seed_offset, size=size), size, max_turns, turn_cost)


def write_eval_dataset(path: Path | str, size: int = EVAL_SET_SIZE, max_turns: int | None = None) -> int:
    """Write the 64 fixed eval mazes of ``size`` as rows (for SkyRL's in-training ``data.val_data``), with the
    eval set's own turn budget unless ``max_turns`` overrides it.

    Raises:
        NoEvalSet: if there is no fixed evaluation set of ``size``.
    """
    eval_set = eval_set_for_size(size)
    turns = eval_set.max_turns if max_turns is None else max_turns
    return write_prompt_dataset(path, eval_set.seeds, eval_set.size, turns)
