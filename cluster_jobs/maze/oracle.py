"""A perfect maze player that sees only what the model sees: the rendered image in the chat.

It reads the grid back from the latest picture and answers the first move of a shortest path (or stop), so
playing it checks the rendering, the prompt messages and the environment together.
"""

from __future__ import annotations

import base64
import binascii
import io
from typing import Any, NamedTuple

from PIL import Image, ImageChops, UnidentifiedImageError

from cluster_jobs.maze.actions import DIRECTION_STEPS, STOP, Action
from cluster_jobs.maze.generator import Position, grid_distances
from cluster_jobs.maze.render import AGENT_RGB, PATH_RGB, TARGET_RGB, WALL_RGB

PNG_DATA_URI_PREFIX = "data:image/png;base64,"
# Largest squared RGB distance at which a pixel still counts as one of the palette colours.
MAX_COLOUR_DISTANCE = 40**2


class OracleError(ValueError):
    """The chat holds no maze image, or the image is not a maze picture the oracle can read."""


class MazeView(NamedTuple):
    """What a maze image shows: ``walls[row][col]`` (True for wall), the agent and the target ``(row, col)``."""

    walls: tuple[tuple[bool, ...], ...]
    agent: Position
    target: Position


def read_maze_image(image: Image.Image) -> MazeView:
    """Read the grid, the agent and the target back from a rendered maze picture.

    Raises:
        OracleError: if the image is not square, has no single red target cell, or has a cell
            whose centre is none of the palette colours, no agent or more than one.
    """
    rgb = image.convert("RGB")
    side = rgb.width
    if rgb.height != side:
        raise OracleError(f"a maze image is square, got {rgb.width}x{rgb.height}")
    target_box = _colour_box(rgb, TARGET_RGB)
    if target_box is None:
        raise OracleError("the image shows no red target square")
    left, top, right, bottom = target_box
    cell_px = right - left
    if cell_px < 1 or bottom - top != cell_px or side % cell_px or left % cell_px or top % cell_px:
        raise OracleError(f"the red target {target_box} is not one cell of a {side}-pixel grid")
    size = side // cell_px
    walls: list[tuple[bool, ...]] = []
    agents: list[Position] = []
    for row in range(size):
        cells = []
        for col in range(size):
            colour = _palette_colour(rgb.getpixel((col * cell_px + cell_px // 2, row * cell_px + cell_px // 2)))
            if colour is None:
                raise OracleError(f"cell {(row, col)} has a colour that is not part of a maze picture")
            if colour == AGENT_RGB:
                agents.append((row, col))
            cells.append(colour == WALL_RGB)
        walls.append(tuple(cells))
    if len(agents) != 1:
        raise OracleError(f"expected one blue agent disc, found {len(agents)}")
    return MazeView(walls=tuple(walls), agent=agents[0], target=(top // cell_px, left // cell_px))


def oracle_action(chat: list[dict[str, Any]]) -> Action:
    """The perfect next action for the latest maze image of ``chat`` (OpenAI-style messages).

    Raises:
        OracleError: if the chat holds no readable maze image or the target is unreachable.
    """
    view = chat_view(chat)
    if view.agent == view.target:
        return STOP
    return Action("move", _first_move(view))


def chat_view(chat: list[dict[str, Any]]) -> MazeView:
    """What the latest maze image of ``chat`` shows (see :func:`read_maze_image`).

    Raises:
        OracleError: if the chat holds no readable maze image.
    """
    return read_maze_image(_latest_image(chat))


def oracle_answer(chat: list[dict[str, Any]]) -> str:
    """:func:`oracle_action` as VisGym's SFT model answers it, e.g. ``<action>('move', 3)</action>``."""
    return f"<action>{oracle_action(chat).to_text()}</action>"


def _latest_image(chat: list[dict[str, Any]]) -> Image.Image:
    """Decode the last ``image_url`` part (a PNG data URI) of the chat's messages."""
    for message in reversed(chat):
        content = message.get("content")
        parts = content if isinstance(content, list) else []
        for part in reversed(parts):
            if isinstance(part, dict) and part.get("type") == "image_url":
                return _decode_png_data_uri(part.get("image_url", {}).get("url"))
    raise OracleError("the chat holds no image")


def _decode_png_data_uri(uri: object) -> Image.Image:
    """The image of a ``data:image/png;base64,...`` URI."""
    if not isinstance(uri, str) or not uri.startswith(PNG_DATA_URI_PREFIX):
        raise OracleError(f"expected a PNG data URI, got {str(uri)[:40]!r}")
    try:
        return Image.open(io.BytesIO(base64.b64decode(uri[len(PNG_DATA_URI_PREFIX) :], validate=True)))
    except (binascii.Error, UnidentifiedImageError, OSError) as error:
        raise OracleError(f"the image data URI holds no readable PNG: {error}") from None


def _colour_box(image: Image.Image, colour: tuple[int, int, int]) -> tuple[int, int, int, int] | None:
    """The bounding box ``(left, top, right, bottom)`` (right/bottom exclusive) of the pixels of exactly ``colour``."""
    difference = ImageChops.difference(image, Image.new("RGB", image.size, colour))
    exact = [band.point(lambda value: 255 if value == 0 else 0) for band in difference.split()]
    return ImageChops.multiply(ImageChops.multiply(exact[0], exact[1]), exact[2]).getbbox()


def _palette_colour(pixel: Any) -> tuple[int, int, int] | None:
    """The palette colour (wall, path, target, agent) nearest to ``pixel``, or None if none is near."""
    distance, colour = min(
        (sum((a - b) ** 2 for a, b in zip(pixel, candidate, strict=False)), candidate)
        for candidate in (WALL_RGB, PATH_RGB, TARGET_RGB, AGENT_RGB)
    )
    return colour if distance <= MAX_COLOUR_DISTANCE else None


def _first_move(view: MazeView) -> int:
    """The direction of a move that brings the agent one step closer to the target."""
    distance = grid_distances(view.walls, view.target)
    if view.agent not in distance:
        raise OracleError(f"the target {view.target} cannot be reached from the agent at {view.agent}")
    return closer_moves(distance, view.agent)[0]


def closer_moves(distance: dict[Position, int], cell: Position) -> list[int]:
    """The directions (action order) whose neighbour of ``cell`` is one move closer to the source of
    ``distance`` (a :func:`~cluster_jobs.maze.generator.grid_distances` map); none from the source itself."""
    return [
        direction
        for direction, (d_row, d_col) in DIRECTION_STEPS.items()
        if distance.get((cell[0] + d_row, cell[1] + d_col)) == distance[cell] - 1
    ]
