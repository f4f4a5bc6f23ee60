"""Render a maze as the RGB picture VisGym's ``maze_2d`` shows the model.

Each grid cell is ``cell_px`` pixels square (25 in VisGym): grey walls, white paths, the target as a
red square filling its cell, and the agent as a blue disc of radius ``cell_px / 4`` centred in its
cell (drawn over the target when the agent stands on it).
"""

from __future__ import annotations

import base64
import io

from PIL import Image, ImageDraw

from cluster_jobs.maze.generator import Maze, MazeError, Position

WALL_RGB = (169, 169, 169)
PATH_RGB = (255, 255, 255)
TARGET_RGB = (255, 0, 0)
AGENT_RGB = (0, 0, 255)
DEFAULT_CELL_PX = 25


def render_maze(maze: Maze, agent: Position, cell_px: int = DEFAULT_CELL_PX) -> Image.Image:
    """Draw ``maze`` with the agent at ``agent`` (row, col); returns an RGB image of side ``size * cell_px``.

    Raises:
        MazeError: if ``agent`` is not an open cell of the maze or ``cell_px`` is not an int in [4, 100].
    """
    if not isinstance(cell_px, int) or not 4 <= cell_px <= 100:
        raise MazeError(f"cell_px must be an int between 4 and 100, got {cell_px!r}")
    if maze.is_wall(agent):
        raise MazeError(f"agent position {agent} is not an open cell of the maze")
    side = maze.size * cell_px
    image = Image.new("RGB", (side, side), PATH_RGB)
    draw = ImageDraw.Draw(image)
    for row, cells in enumerate(maze.walls):
        for col, wall in enumerate(cells):
            if wall:
                draw.rectangle(_cell_box(row, col, cell_px), fill=WALL_RGB)
    draw.rectangle(_cell_box(*maze.target, cell_px), fill=TARGET_RGB)
    centre_x = (agent[1] + 0.5) * cell_px
    centre_y = (agent[0] + 0.5) * cell_px
    radius = cell_px / 4
    draw.ellipse((centre_x - radius, centre_y - radius, centre_x + radius, centre_y + radius), fill=AGENT_RGB)
    return image


def image_to_data_uri(image: Image.Image) -> str:
    """Encode ``image`` as a PNG data URI (``data:image/png;base64,...``), as OpenAI image_url parts take."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _cell_box(row: int, col: int, cell_px: int) -> tuple[int, int, int, int]:
    """The inclusive pixel box (x0, y0, x1, y1) of grid cell (row, col)."""
    x0, y0 = col * cell_px, row * cell_px
    return (x0, y0, x0 + cell_px - 1, y0 + cell_px - 1)
