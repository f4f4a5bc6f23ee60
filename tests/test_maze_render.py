"""Rendering: colours at known pixels, data URIs, the checked-in smoke image."""

import base64
import io

import pytest
from PIL import Image

from cluster_jobs.maze.generator import MazeError, generate_maze
from cluster_jobs.maze.render import (
    AGENT_RGB,
    PATH_RGB,
    TARGET_RGB,
    WALL_RGB,
    image_to_data_uri,
    render_maze,
)
from cluster_jobs.maze.smoke_image import SMOKE_IMAGE_PATH, smoke_image


def _centre(pos, cell_px=25):
    return (pos[1] * cell_px + cell_px // 2, pos[0] * cell_px + cell_px // 2)


def test_colours_at_known_pixels():
    maze = generate_maze(9, 0)  # row 1 is open from (1, 1) to (1, 7); (2, 1) is a wall
    image = render_maze(maze, maze.start)
    assert image.mode == "RGB" and image.size == (225, 225)
    assert image.getpixel((0, 0)) == WALL_RGB
    assert image.getpixel(_centre((2, 1))) == WALL_RGB
    assert image.getpixel(_centre((1, 3))) == PATH_RGB
    assert image.getpixel(_centre(maze.start)) == AGENT_RGB
    assert image.getpixel((25 + 1, 25 + 1)) == PATH_RGB  # the disc's cell corner stays white
    assert image.getpixel(_centre(maze.target)) == TARGET_RGB
    assert image.getpixel((7 * 25, 7 * 25)) == TARGET_RGB  # the target fills its whole cell
    assert image.getpixel((8 * 25 - 1, 8 * 25 - 1)) == TARGET_RGB


def test_agent_moves_and_is_drawn_over_the_target():
    maze = generate_maze(9, 0)
    image = render_maze(maze, maze.target)
    assert image.getpixel(_centre(maze.target)) == AGENT_RGB
    assert image.getpixel((7 * 25 + 1, 7 * 25 + 1)) == TARGET_RGB
    assert image.getpixel(_centre(maze.start)) == PATH_RGB


def test_cell_size_scales_the_image():
    maze = generate_maze(5, 1)
    image = render_maze(maze, maze.start, cell_px=10)
    assert image.size == (50, 50)
    assert image.getpixel((15, 15)) == AGENT_RGB


@pytest.mark.parametrize("agent", [(0, 0), (-1, 1), (1, 9), (2, 1)])
def test_agent_must_stand_on_an_open_cell(agent):
    maze = generate_maze(9, 0)
    with pytest.raises(MazeError, match="agent"):
        render_maze(maze, agent)


@pytest.mark.parametrize("cell_px", [0, 3, 101, 2.5])
def test_cell_px_is_validated(cell_px):
    maze = generate_maze(9, 0)
    with pytest.raises(MazeError, match="cell_px"):
        render_maze(maze, maze.start, cell_px=cell_px)


def test_data_uri_round_trips_to_the_same_pixels():
    maze = generate_maze(9, 5)
    image = render_maze(maze, maze.start)
    uri = image_to_data_uri(image)
    prefix = "data:image/png;base64,"
    assert uri.startswith(prefix)
    decoded = Image.open(io.BytesIO(base64.b64decode(uri[len(prefix) :], validate=True)))
    assert decoded.format == "PNG"
    assert decoded.convert("RGB").tobytes() == image.tobytes()


def test_checked_in_smoke_image_equals_a_fresh_render():
    fresh = smoke_image()
    maze = generate_maze(9, 0)
    assert fresh.tobytes() == render_maze(maze, maze.start).tobytes()
    with Image.open(SMOKE_IMAGE_PATH) as stored:
        assert stored.format == "PNG" and stored.size == fresh.size
        assert stored.convert("RGB").tobytes() == fresh.tobytes()
