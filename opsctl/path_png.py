"""A picture of one played maze: the maze as the model saw it, the agent's path over it, a title above."""

from __future__ import annotations

from collections.abc import Sequence

from PIL import Image, ImageDraw, ImageFont

from cluster_jobs.maze.generator import Maze, Position
from cluster_jobs.maze.render import render_maze

PATH_RGB = (0, 170, 0)
TITLE_RGB = (0, 0, 0)
BACKGROUND_RGB = (255, 255, 255)
PLAY_CELL_PX = 48
TITLE_FONT_PX = 14
TITLE_MARGIN_PX = 6
LINE_SPACING_PX = 4


def draw_path(maze: Maze, positions: Sequence[Position], title: str, cell_px: int = PLAY_CELL_PX) -> Image.Image:
    """The maze with the agent's visited cells `positions` (start first, last cell last) and `title` above it.

    Raises:
        ValueError: `positions` is empty or has a cell that is a wall or outside the maze.
        MazeError: `cell_px` is not an int in [4, 100] (from `render_maze`).
    """
    if not positions:
        raise ValueError("positions must hold at least the start cell")
    walls = [position for position in positions if maze.is_wall(position)]
    if walls:
        raise ValueError(f"positions must be open cells of the maze; {walls[0]} is not")
    board = render_maze(maze, positions[-1], cell_px)
    draw = ImageDraw.Draw(board)
    centres = [((col + 0.5) * cell_px, (row + 0.5) * cell_px) for row, col in positions]
    if len(centres) > 1:
        draw.line(centres, fill=PATH_RGB, width=max(2, cell_px // 8), joint="curve")
    radius = cell_px / 6
    for x, y in centres:
        draw.ellipse((x - radius, y - radius, x + radius, y + radius), fill=PATH_RGB)

    font = ImageFont.load_default(size=TITLE_FONT_PX)
    lines = wrap_title(title, font, board.width - 2 * TITLE_MARGIN_PX)
    line_px = TITLE_FONT_PX + LINE_SPACING_PX
    band_px = 2 * TITLE_MARGIN_PX + line_px * len(lines)
    picture = Image.new("RGB", (board.width, band_px + board.height), BACKGROUND_RGB)
    text = ImageDraw.Draw(picture)
    for index, line in enumerate(lines):
        text.text((TITLE_MARGIN_PX, TITLE_MARGIN_PX + index * line_px), line, fill=TITLE_RGB, font=font)
    picture.paste(board, (0, band_px))
    return picture


def wrap_title(title: str, font: ImageFont.FreeTypeFont | ImageFont.ImageFont, width_px: int) -> list[str]:
    """`title` split into lines at most `width_px` wide: at its newlines, between words, inside over-long words."""
    lines: list[str] = []
    for paragraph in title.splitlines() or [""]:
        line = ""
        for word in paragraph.split():
            candidate = f"{line} {word}" if line else word
            if font.getlength(candidate) <= width_px:
                line = candidate
                continue
            if line:
                lines.append(line)
            line = ""
            for char in word:
                if line and font.getlength(line + char) > width_px:
                    lines.append(line)
                    line = ""
                line += char
        lines.append(line)
    return lines
