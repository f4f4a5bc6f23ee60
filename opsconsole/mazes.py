"""The console's maze pictures: thumbnails of a fixed evaluation set, the champion/challenger grid, a played path.

A grid tile is coloured by its pair of outcomes; McNemar's discordant pairs (`b`, `c`) stand out.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from functools import lru_cache

from PIL import Image

from cluster_jobs.maze.eval_set import EVAL_SETS, EvalSet, eval_set_for_size
from cluster_jobs.maze.render import render_maze
from mazeops.evalresult import MazeOutcome
from opsctl.path_png import draw_path
from opsctl.play import eval_maze, outcome_text, play_maze

THUMBNAIL_CELL_PX = 8
# tile kind -> (label, letter shown on the tile)
KINDS = {
    "both": ("solved by both", ""),
    "challenger": ("only the challenger solved it (b)", "b"),
    "champion": ("only the champion solved it (c)", "c"),
    "neither": ("solved by neither", ""),
}


@dataclass(frozen=True)
class Tile:
    """One maze of the grid: its seed, thumbnail (PNG data URI), both outcomes and the tile kind (a key of KINDS)."""

    seed: int
    thumbnail: str
    challenger: MazeOutcome
    champion: MazeOutcome
    kind: str


@dataclass(frozen=True)
class PlayedPath:
    """One maze played by a served model: the path picture (PNG data URI), the outcome line and every turn's lines."""

    picture: str
    outcome: str
    turns: list[str]


def png_data_uri(image: Image.Image) -> str:
    """`image` as a PNG data URI, for an `<img src>`."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


@lru_cache(maxsize=1)
def eval_sets() -> dict[str, EvalSet]:
    """Every fixed evaluation set, by sha256 (the identity results carry)."""
    return {eval_set.sha256: eval_set for eval_set in (eval_set_for_size(size) for size in sorted(EVAL_SETS))}


@lru_cache(maxsize=len(EVAL_SETS))
def thumbnails(sha256: str) -> tuple[str, ...]:
    """Thumbnails (PNG data URIs) of the mazes of the evaluation set `sha256`, in seed order."""
    return tuple(png_data_uri(render_maze(maze, maze.start, THUMBNAIL_CELL_PX)) for maze in eval_sets()[sha256].mazes)


def tile_kind(challenger_solved: bool, champion_solved: bool) -> str:
    """The KINDS key of a pair of outcomes."""
    if challenger_solved == champion_solved:
        return "both" if challenger_solved else "neither"
    return "challenger" if challenger_solved else "champion"


def grid(sha256: str, challenger: list[MazeOutcome], champion: list[MazeOutcome]) -> list[Tile]:
    """The tiles of the evaluation set `sha256`: both models' outcomes paired by seed (seeds both played, set order)."""
    pictures = dict(zip(eval_sets()[sha256].seeds, thumbnails(sha256), strict=True))
    theirs = {outcome.seed: outcome for outcome in champion}
    return [
        Tile(mine.seed, pictures[mine.seed], mine, theirs[mine.seed], tile_kind(mine.solved, theirs[mine.seed].solved))
        for mine in challenger
        if mine.seed in theirs and mine.seed in pictures
    ]


@lru_cache(maxsize=64)
def play_path(serve_url: str, model_id: str, sha256: str, seed: int, history: int | None) -> PlayedPath:
    """Play maze `seed` of the evaluation set `sha256` with `model_id` at `serve_url` (greedy, the set's turn budget,
    `history` earlier turns in each prompt as the evaluation does: `opsctl.play.history_turns`).

    Greedy answers make a replay identical, so a played path is kept (the 64 latest).

    Raises:
        OpsError: no such seed in the set, or the endpoint refused the model (from `opsctl.play`).
        ServeUnavailable: the endpoint cannot be reached or failed.
    """
    eval_set = eval_sets()[sha256]
    maze = eval_maze(eval_set, seed)
    lines: list[str] = []
    episode, positions = play_maze(serve_url, model_id, maze, eval_set.max_turns, history, echo=lines.append)
    outcome = outcome_text(episode, maze.shortest_path_length())
    picture = draw_path(maze, positions, f"{model_id}\nseed {seed}, size {maze.size}: {outcome}")
    return PlayedPath(png_data_uri(picture), outcome, lines)
