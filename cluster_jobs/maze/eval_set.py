"""The fixed held-out evaluation set (``eval_set.json``) and the seeds training may use.

``eval_set.json`` holds ``{"name", "size", "seeds", "sha256"}``: 64 mazes of size 9 with seeds
0..63. ``sha256`` is the hex SHA-256 of the canonical grids, ``"\\n\\n".join(maze.to_text())`` over
the mazes in the file's seed order, ASCII encoded. :func:`load_eval_set` regenerates the mazes and
refuses to return a set whose grids no longer hash to the recorded value (a changed generator,
size or seed list).

Training uses :func:`training_seeds`: seeds from ``offset`` (default 1,000,000) upward, far from the
eval seeds, skipping any seed whose grid happens to equal an eval maze (a 9x9 maze has about 10^5
possible grids, so a few thousand training mazes can hit one by chance).

Regenerate the file (only when the set is meant to change): ``python -m cluster_jobs.maze.eval_set --write``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cluster_jobs.maze.generator import Maze, MazeError, generate_maze

DEFAULT_PATH = Path(__file__).with_name("eval_set.json")
EVAL_SET_NAME = "maze-eval-64"
EVAL_SET_SIZE = 9
EVAL_SET_SEEDS = tuple(range(64))
TRAINING_SEED_OFFSET = 1_000_000


class EvalSetError(ValueError):
    """The eval set file is missing fields or has fields of the wrong type."""


class EvalSetMismatch(EvalSetError):
    """The regenerated eval mazes do not hash to the sha256 recorded in the eval set file."""


@dataclass(frozen=True)
class EvalSet:
    """The fixed evaluation mazes, in seed order."""

    name: str
    size: int
    seeds: tuple[int, ...]
    sha256: str
    mazes: tuple[Maze, ...]


def mazes_sha256(mazes: Sequence[Maze]) -> str:
    """The hex SHA-256 of the mazes' canonical grids, joined by blank lines, in the given order."""
    return hashlib.sha256("\n\n".join(maze.to_text() for maze in mazes).encode("ascii")).hexdigest()


def load_eval_set(path: Path | str = DEFAULT_PATH) -> EvalSet:
    """Read the eval set file, regenerate its mazes and check their hash.

    Raises:
        EvalSetError: if the file is not a JSON object with the expected fields.
        EvalSetMismatch: if the regenerated mazes do not match the recorded ``sha256``.
    """
    try:
        spec = json.loads(Path(path).read_text())
        name, size, seeds, recorded = spec["name"], spec["size"], spec["seeds"], spec["sha256"]
    except (OSError, ValueError, TypeError, KeyError) as error:
        raise EvalSetError(f"cannot read eval set {path}: {error!r}") from error
    if not (
        isinstance(name, str)
        and isinstance(size, int)
        and isinstance(seeds, list)
        and seeds
        and all(isinstance(seed, int) for seed in seeds)
        and isinstance(recorded, str)
    ):
        raise EvalSetError(f"eval set {path} needs a str name, int size, non-empty int seeds and str sha256")
    try:
        mazes = tuple(generate_maze(size, seed) for seed in seeds)
    except MazeError as error:
        raise EvalSetError(f"eval set {path}: {error}") from error
    actual = mazes_sha256(mazes)
    if actual != recorded:
        raise EvalSetMismatch(
            f"eval set {path}: regenerated mazes hash to {actual}, the file records {recorded}; "
            "the generator, size or seeds changed"
        )
    return EvalSet(name=name, size=size, seeds=tuple(seeds), sha256=recorded, mazes=mazes)


def training_seeds(n: int, offset: int = TRAINING_SEED_OFFSET, size: int = EVAL_SET_SIZE) -> list[int]:
    """``n`` seeds for training mazes of ``size``: ``offset, offset + 1, ...``, skipping any seed
    whose maze grid equals one of the eval mazes.

    Raises:
        ValueError: if ``n`` is negative or ``offset`` is not above the largest eval seed.
    """
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be an int >= 0, got {n!r}")
    eval_set = load_eval_set()
    if offset <= max(eval_set.seeds):
        raise ValueError(f"training seed offset {offset} must be above the largest eval seed {max(eval_set.seeds)}")
    eval_grids = {maze.to_text() for maze in eval_set.mazes}
    seeds: list[int] = []
    seed = offset
    while len(seeds) < n:
        if generate_maze(size, seed).to_text() not in eval_grids:
            seeds.append(seed)
        seed += 1
    return seeds


def write_eval_set(path: Path | str = DEFAULT_PATH) -> None:
    """Write the eval set file for ``EVAL_SET_NAME`` / ``EVAL_SET_SIZE`` / ``EVAL_SET_SEEDS``."""
    mazes = [generate_maze(EVAL_SET_SIZE, seed) for seed in EVAL_SET_SEEDS]
    spec = {
        "name": EVAL_SET_NAME,
        "size": EVAL_SET_SIZE,
        "seeds": list(EVAL_SET_SEEDS),
        "sha256": mazes_sha256(mazes),
    }
    Path(path).write_text(json.dumps(spec, indent=2) + "\n")


def main(argv: Sequence[str] | None = None) -> None:
    """CLI: ``--write`` regenerates ``eval_set.json``."""
    parser = argparse.ArgumentParser(description="The fixed maze evaluation set.")
    parser.add_argument("--write", action="store_true", help=f"regenerate {DEFAULT_PATH.name}")
    args = parser.parse_args(argv)
    if args.write:
        write_eval_set()
        print(f"wrote {DEFAULT_PATH}")
    else:
        eval_set = load_eval_set()
        print(f"{eval_set.name}: {len(eval_set.mazes)} mazes of size {eval_set.size}, sha256 {eval_set.sha256}")


if __name__ == "__main__":
    main()
