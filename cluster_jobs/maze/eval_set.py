"""The fixed held-out evaluation sets, one per maze size (hashed with their turn budget), and the seeds training
may use (never an eval grid). Formats: docs/design.md.

Regenerate the files (only when a set is meant to change): ``python -m cluster_jobs.maze.eval_set --write``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cluster_jobs.maze.generator import Maze, MazeError, generate_maze, validate_size

EVAL_SET_SIZE = 9  # the default size: the reference run's mazes
EVAL_SET_SEEDS = tuple(range(64))
# size -> (name, file next to this module) of each fixed evaluation set.
EVAL_SETS: dict[int, tuple[str, str]] = {
    9: ("maze-eval-64", "eval_set.json"),
    7: ("maze-eval-64-7x7", "eval_set_7x7.json"),
}
DEFAULT_PATH = Path(__file__).with_name(EVAL_SETS[EVAL_SET_SIZE][1])
TRAINING_SEED_OFFSET = 1_000_000


class EvalSetError(ValueError):
    """An eval set file is unreadable, is missing fields or has fields of the wrong type."""


class EvalSetMismatch(EvalSetError):
    """The regenerated eval mazes and budget do not hash to the sha256 recorded in the eval set file."""


class NoEvalSet(EvalSetError):
    """There is no fixed evaluation set for the requested maze size."""


@dataclass(frozen=True)
class EvalSet:
    """The fixed evaluation mazes, in seed order, and the turn budget they are played with."""

    name: str
    size: int
    max_turns: int
    seeds: tuple[int, ...]
    sha256: str
    mazes: tuple[Maze, ...]


def eval_turn_budget(size: int) -> int:
    """The evaluation turn budget for mazes of ``size``: ``2 * (rooms - 1) + 1`` with ``rooms = ((size - 1) / 2) ** 2``.

    The rooms form a spanning tree, so the path from corner to corner visits at most every room
    once: at most ``rooms - 1`` room-to-room steps of two moves each, plus the final stop. Any maze
    of ``size`` is solvable within it (the bound can be reached with an odd number of rooms per side).

    Raises:
        MazeError: if ``size`` is not a valid maze size.
    """
    validate_size(size)
    rooms = ((size - 1) // 2) ** 2
    return 2 * (rooms - 1) + 1


def eval_set_sha256(mazes: Sequence[Maze], max_turns: int) -> str:
    """The hex SHA-256 of the set's canonical text: each maze's grid, then ``max_turns <n>``, joined by blank lines."""
    text = "\n\n".join([*(maze.to_text() for maze in mazes), f"max_turns {max_turns}"])
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def load_eval_set(path: Path | str = DEFAULT_PATH) -> EvalSet:
    """Read an eval set file (default: the 9x9 set), regenerate its mazes and check their hash.

    Raises:
        EvalSetError: if the file is not a JSON object with the expected fields.
        EvalSetMismatch: if the regenerated mazes and budget do not match the recorded ``sha256``.
    """
    try:
        spec = json.loads(Path(path).read_text())
        name, size, max_turns = spec["name"], spec["size"], spec["max_turns"]
        seeds, recorded = spec["seeds"], spec["sha256"]
    except (OSError, ValueError, TypeError, KeyError) as error:
        raise EvalSetError(f"cannot read eval set {path}: {error!r}") from error
    if not (
        isinstance(name, str)
        and isinstance(size, int)
        and _is_positive_int(max_turns)
        and isinstance(seeds, list)
        and seeds
        and all(isinstance(seed, int) for seed in seeds)
        and isinstance(recorded, str)
    ):
        raise EvalSetError(
            f"eval set {path} needs a str name, int size, positive int max_turns, non-empty int seeds and str sha256"
        )
    try:
        mazes = tuple(generate_maze(size, seed) for seed in seeds)
    except MazeError as error:
        raise EvalSetError(f"eval set {path}: {error}") from error
    actual = eval_set_sha256(mazes, max_turns)
    if actual != recorded:
        raise EvalSetMismatch(
            f"eval set {path}: regenerated mazes and budget hash to {actual}, the file records {recorded}; "
            "the generator, size, seeds or max_turns changed"
        )
    return EvalSet(name=name, size=size, max_turns=max_turns, seeds=tuple(seeds), sha256=recorded, mazes=mazes)


def eval_set_path(size: int) -> Path:
    """The file of the fixed evaluation set for mazes of ``size``.

    Raises:
        NoEvalSet: if there is no fixed set of that size.
    """
    if size not in EVAL_SETS:
        sizes = ", ".join(f"{s}x{s}" for s in sorted(EVAL_SETS))
        raise NoEvalSet(f"there is no fixed evaluation set for {size}x{size} mazes; sets exist for {sizes}")
    return Path(__file__).with_name(EVAL_SETS[size][1])


def eval_set_for_size(size: int) -> EvalSet:
    """Load and check the fixed evaluation set for mazes of ``size``.

    Raises:
        NoEvalSet: if there is no fixed set of that size.
        EvalSetError: if its file is broken or holds mazes of another size.
    """
    path = eval_set_path(size)
    eval_set = load_eval_set(path)
    if eval_set.size != size:
        raise EvalSetError(f"eval set {path} holds {eval_set.size}x{eval_set.size} mazes, not {size}x{size}")
    return eval_set


def training_seeds(n: int, offset: int = TRAINING_SEED_OFFSET, size: int = EVAL_SET_SIZE) -> list[int]:
    """``n`` seeds for training mazes of ``size``: ``offset, offset + 1, ...``, skipping any seed
    whose maze grid equals one of the mazes of the eval set of ``size`` (none skipped for sizes
    without an eval set). Different training seeds may share a grid.

    Raises:
        ValueError: if ``n`` is negative or ``offset`` is not above the largest eval seed.
    """
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be an int >= 0, got {n!r}")
    if offset <= max(EVAL_SET_SEEDS):
        raise ValueError(f"training seed offset {offset} must be above the largest eval seed {max(EVAL_SET_SEEDS)}")
    eval_grids = {maze.to_text() for maze in eval_set_for_size(size).mazes} if size in EVAL_SETS else set()
    seeds: list[int] = []
    seed = offset
    while len(seeds) < n:
        if generate_maze(size, seed).to_text() not in eval_grids:
            seeds.append(seed)
        seed += 1
    return seeds


def write_eval_set(size: int, path: Path | str | None = None) -> None:
    """Write the eval set file of ``size`` (to its own file unless ``path`` is given): its name, ``size``,
    :func:`eval_turn_budget`, ``EVAL_SET_SEEDS`` and the sha256.

    Raises:
        NoEvalSet: if no fixed set is defined for ``size`` in ``EVAL_SETS``.
    """
    target = Path(path) if path is not None else eval_set_path(size)
    max_turns = eval_turn_budget(size)
    mazes = [generate_maze(size, seed) for seed in EVAL_SET_SEEDS]
    spec = {
        "name": EVAL_SETS[size][0],
        "size": size,
        "max_turns": max_turns,
        "seeds": list(EVAL_SET_SEEDS),
        "sha256": eval_set_sha256(mazes, max_turns),
    }
    target.write_text(json.dumps(spec, indent=2) + "\n")


def main(argv: Sequence[str] | None = None) -> None:
    """CLI: ``--write`` regenerates every eval set file; without it, each set is loaded, checked and summarized."""
    parser = argparse.ArgumentParser(description="The fixed maze evaluation sets.")
    parser.add_argument("--write", action="store_true", help="regenerate every eval set file")
    args = parser.parse_args(argv)
    for size in sorted(EVAL_SETS):
        if args.write:
            write_eval_set(size)
            print(f"wrote {eval_set_path(size)}")
        else:
            eval_set = eval_set_for_size(size)
            print(
                f"{eval_set.name}: {len(eval_set.mazes)} mazes of size {eval_set.size}, "
                f"{eval_set.max_turns} turns, sha256 {eval_set.sha256}"
            )


def _is_positive_int(value: object) -> bool:
    """True for an int (not a bool) >= 1."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


if __name__ == "__main__":
    main()
