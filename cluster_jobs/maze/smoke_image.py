"""Write ``functions/mazeops/smoke_maze.png``: eval maze seed 0 at its start, as the model sees it.

Lambda has no Pillow, so the PNG is generated here once and checked in.
Usage: ``python -m cluster_jobs.maze.smoke_image``
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from cluster_jobs.maze.eval_set import load_eval_set
from cluster_jobs.maze.render import render_maze

SMOKE_IMAGE_PATH = Path(__file__).resolve().parents[2] / "functions" / "mazeops" / "smoke_maze.png"


def smoke_image() -> Image.Image:
    """The render of eval maze seed 0 with the agent at its start."""
    maze = next(maze for maze in load_eval_set().mazes if maze.seed == 0)
    return render_maze(maze, maze.start)


def main() -> None:
    """Write the smoke image to ``SMOKE_IMAGE_PATH``."""
    smoke_image().save(SMOKE_IMAGE_PATH, format="PNG")
    print(f"wrote {SMOKE_IMAGE_PATH}")


if __name__ == "__main__":
    main()
