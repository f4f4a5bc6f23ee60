"""An image-reading BFS oracle plays both fixed eval sets through the real rollout, prompt, renderer, parser and env.

The oracle's ``generate`` reads only the chats ``run_episodes`` sends: it decodes the latest PNG,
finds the agent, target and walls, and answers in VisGym's format. Every maze of each set is
solved within the set's own turn budget; the recipe's 15 training turns are not enough for 9x9.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from cluster_jobs.maze.actions import DIRECTION_STEPS, STOP, Action, parse_action
from cluster_jobs.maze.env import DEFAULT_MAX_TURNS
from cluster_jobs.maze.eval_set import eval_set_for_size, eval_turn_budget
from cluster_jobs.maze.generator import generate_maze
from cluster_jobs.maze.oracle import OracleError, oracle_action, oracle_answer, read_maze_image
from cluster_jobs.maze.prompt import SYSTEM_PROMPT
from cluster_jobs.maze.render import TARGET_RGB, WALL_RGB, image_to_data_uri, render_maze
from cluster_jobs.rollout import run_episodes


def tagged_oracle(chats: list[list[dict]]) -> list[str]:
    """Answers like the SFT model: ``<action>('move', d)</action>``."""
    return [oracle_answer(chat) for chat in chats]


def bare_oracle(chats: list[list[dict]]) -> list[str]:
    """Answers as bare tuples: ``('move', d)``."""
    return [oracle_action(chat).to_text() for chat in chats]


def image_chat(image: Image.Image) -> list[dict]:
    """A chat whose one user message holds ``image``."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": image_to_data_uri(image)}}]},
    ]


@pytest.mark.parametrize("size", [7, 9])
@pytest.mark.parametrize("generate", [tagged_oracle, bare_oracle])
def test_the_oracle_solves_every_maze_of_each_eval_set_within_its_budget(size, generate):
    eval_set = eval_set_for_size(size)
    episodes = run_episodes(generate, eval_set.mazes, eval_set.max_turns, history_turns=1)
    assert sum(e.solved for e in episodes) == 64
    assert all(e.error is None and e.reward == pytest.approx(1.0) for e in episodes)
    assert [e.turns for e in episodes] == [m.shortest_path_length() + 1 for m in eval_set.mazes]
    assert max(e.turns for e in episodes) <= eval_set.max_turns == eval_turn_budget(size)


def test_the_recipes_fifteen_turns_cannot_solve_every_9x9_eval_maze():
    eval_set = eval_set_for_size(9)
    episodes = run_episodes(tagged_oracle, eval_set.mazes, DEFAULT_MAX_TURNS, history_turns=0)
    solved = [e.solved for e in episodes]
    assert solved == [m.shortest_path_length() + 1 <= DEFAULT_MAX_TURNS for m in eval_set.mazes]
    assert sum(solved) == 49


def test_the_oracle_reads_only_the_latest_image():
    maze = generate_maze(9, 0)  # from (1, 1) only right is open; at the target, stop
    chat = image_chat(render_maze(maze, maze.start)) + image_chat(render_maze(maze, maze.target))[1:]
    assert oracle_action(chat) == STOP
    assert oracle_answer(chat[:2]) == "<action>('move', 0)</action>"
    assert parse_action(oracle_answer(chat[:2])) == Action("move", 0)


@settings(max_examples=60, deadline=None)
@given(
    size=st.sampled_from([5, 7, 9, 11, 15]),
    seed=st.integers(min_value=0, max_value=2**32),
    cell_px=st.integers(min_value=4, max_value=40),
    agent_index=st.integers(min_value=0),
)
def test_reading_a_rendered_maze_gives_back_its_grid_agent_and_target(size, seed, cell_px, agent_index):
    maze = generate_maze(size, seed)
    open_cells = [(r, c) for r in range(size) for c in range(size) if not maze.walls[r][c]]
    agent = open_cells[agent_index % len(open_cells)]
    view = read_maze_image(render_maze(maze, agent, cell_px=cell_px))
    assert (view.walls, view.agent, view.target) == (maze.walls, agent, maze.target)
    action = oracle_action(image_chat(render_maze(maze, agent, cell_px=cell_px)))
    if agent == maze.target:
        assert action == STOP
    else:
        d_row, d_col = DIRECTION_STEPS[action.arg]
        nxt = (agent[0] + d_row, agent[1] + d_col)
        assert not maze.is_wall(nxt)
        assert _distance(maze, nxt) == _distance(maze, agent) - 1


def _distance(maze, cell):
    """Moves from ``cell`` to the target, by the generator's own BFS."""
    moved = type(maze)(size=maze.size, walls=maze.walls, start=cell, target=maze.target, seed=maze.seed)
    return moved.shortest_path_length()


def _no_target() -> Image.Image:
    return Image.new("RGB", (225, 225), WALL_RGB)


def _not_square() -> Image.Image:
    return Image.new("RGB", (225, 200), WALL_RGB)


def _two_agents() -> Image.Image:
    image = render_maze(generate_maze(9, 0), (1, 1))
    image.paste(image.crop((25, 25, 50, 50)), (50, 25))  # the agent's cell copied onto the open cell (1, 2)
    return image


def _odd_colour() -> Image.Image:
    image = render_maze(generate_maze(9, 0), (1, 1))
    image.paste((0, 200, 0), (0, 0, 25, 25))
    return image


def _walled_in_target() -> Image.Image:
    image = render_maze(generate_maze(9, 0), (1, 1))
    for row, col in ((6, 7), (7, 6)):  # the target (7, 7)'s only open neighbours lie among these
        image.paste(WALL_RGB, (col * 25, row * 25, col * 25 + 25, row * 25 + 25))
    return image


def _target_off_grid() -> Image.Image:
    image = Image.new("RGB", (225, 225), WALL_RGB)
    image.paste(TARGET_RGB, (10, 10, 35, 35))
    return image


BAD_CHATS = {
    "no image": ([{"role": "user", "content": "hello"}], "no image"),
    "not png": (
        [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AA=="}}]}],
        "PNG data URI",
    ),
    "not base64": (
        [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@"}}]}],
        "no readable PNG",
    ),
    "no target": (image_chat(_no_target()), "no red target"),
    "not square": (image_chat(_not_square()), "square"),
    "two agents": (image_chat(_two_agents()), "one blue agent"),
    "odd colour": (image_chat(_odd_colour()), "not part of a maze picture"),
    "target off grid": (image_chat(_target_off_grid()), "not one cell"),
    "walled-in target": (image_chat(_walled_in_target()), "cannot be reached"),
}


@pytest.mark.parametrize("case", list(BAD_CHATS))
def test_unreadable_chats_raise_oracle_error(case):
    chat, message = BAD_CHATS[case]
    with pytest.raises(OracleError, match=message):
        oracle_action(chat)
