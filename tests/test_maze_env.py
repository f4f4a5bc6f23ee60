"""Episode rules (VisGym maze_2d) and scripted agents on the fixed eval set."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster_jobs.maze.actions import DIRECTION_STEPS, STOP, Action
from cluster_jobs.maze.env import (
    MOVED_FEEDBACK,
    START_FEEDBACK,
    WALL_FEEDBACK,
    EpisodeFinishedError,
    MazeEpisode,
)
from cluster_jobs.maze.eval_set import eval_set_for_size, eval_turn_budget
from cluster_jobs.maze.generator import generate_maze
from cluster_jobs.maze.render import AGENT_RGB

MAZE = generate_maze(9, 0)  # from (1, 1): right is open, up / left / down are walls
THERE_AND_BACK = ["('move', 0)", "('move', 2)"]  # right, then left: two turns that end where they began


def oracle_answers(maze):
    """The BFS path as answers, then stop."""
    path = maze.shortest_path()
    direction_of = {step: d for d, step in DIRECTION_STEPS.items()}
    moves = [direction_of[(b[0] - a[0], b[1] - a[1])] for a, b in zip(path, path[1:], strict=False)]
    return [Action("move", d).to_text() for d in moves] + [STOP.to_text()]


def play(maze, answers, max_turns, turn_cost=0.0):
    episode = MazeEpisode(maze, max_turns=max_turns, turn_cost=turn_cost)
    result = None
    for answer in answers:
        result = episode.step(answer)
        if result.done:
            break
    return episode, result


def test_initial_observation():
    episode = MazeEpisode(MAZE)
    obs = episode.observation()
    assert obs.text == START_FEEDBACK
    assert obs.image.getpixel((37, 37)) == AGENT_RGB
    assert episode.turns == 0 and not episode.done and not episode.solved


def test_move_into_open_cell():
    episode = MazeEpisode(MAZE)
    result = episode.step("('move', 0)")
    assert episode.agent == (1, 2)
    assert result.observation.text == MOVED_FEEDBACK
    assert result.observation.image.getpixel((62, 37)) == AGENT_RGB
    assert (result.reward, result.done) == (0.0, False)
    assert result.info["format_ok"] and result.info["action"] == "('move', 0)"
    assert result.info["agent"] == (1, 2) and result.info["turns"] == 1


@pytest.mark.parametrize("direction", [1, 2, 3])
def test_wall_bump_does_not_move(direction):
    episode = MazeEpisode(MAZE)
    result = episode.step(f"('move', {direction})")
    assert episode.agent == MAZE.start
    assert result.observation.text == "Cannot move into a wall." == WALL_FEEDBACK
    assert result.info["format_ok"] and not result.done and episode.turns == 1


def test_malformed_turn_counts_and_reports_the_error():
    episode = MazeEpisode(MAZE)
    result = episode.step("('move', 7)")
    assert episode.turns == 1 and episode.agent == MAZE.start and not result.done
    assert result.reward == 0.0
    assert not result.info["format_ok"] and result.info["action"] is None
    assert "direction must be 0, 1, 2 or 3" in result.info["error"]
    assert result.info["error"] in result.observation.text


def test_stop_on_target_solves_with_full_reward():
    episode, result = play(MAZE, oracle_answers(MAZE), max_turns=15)
    assert result.done and episode.solved
    assert result.info["task_reward"] == 1.0 and result.info["format_score"] == 1.0
    assert result.reward == pytest.approx(1.0)
    assert episode.turns == MAZE.shortest_path_length() + 1


def test_stop_off_target_ends_with_format_reward_only():
    episode = MazeEpisode(MAZE)
    episode.step("('move', 0)")
    episode.step("nonsense")
    result = episode.step("<action>('stop', 'stop')</action>")
    assert result.done and not episode.solved
    assert result.info["task_reward"] == 0.0
    assert result.info["format_score"] == pytest.approx(2 / 3)
    assert result.reward == pytest.approx(0.2 * 2 / 3)


def test_mixed_format_on_a_solved_episode():
    answers = oracle_answers(MAZE)
    episode, result = play(MAZE, ["garbage"] + answers, max_turns=15)
    assert episode.solved and episode.turns == len(answers) + 1
    assert result.reward == pytest.approx(0.8 + 0.2 * len(answers) / (len(answers) + 1))


def test_max_turns_ends_the_episode_without_task_reward():
    episode, result = play(MAZE, THERE_AND_BACK * 10, max_turns=5)
    assert result.done and episode.turns == 5 and not episode.solved
    assert result.info["truncated"] and result.info["task_reward"] == 0.0
    assert result.reward == pytest.approx(0.2)
    with pytest.raises(EpisodeFinishedError, match="ended after 5 turns"):
        episode.step("('stop', 'stop')")


def test_reaching_the_target_without_stop_is_not_a_solve():
    answers = oracle_answers(MAZE)[:-1]
    episode, result = play(MAZE, answers + ["('move', 0)"] * 3, max_turns=len(answers) + 1)
    assert episode.agent == MAZE.target and result.done and not episode.solved
    assert result.info["task_reward"] == 0.0


def test_stop_on_the_last_turn_still_counts():
    answers = oracle_answers(MAZE)
    episode, result = play(MAZE, answers, max_turns=len(answers))
    assert episode.solved and not result.info["truncated"] and result.reward == pytest.approx(1.0)


def test_a_turn_cost_charges_a_solved_episode_for_each_turn():
    answers = oracle_answers(MAZE)
    shortest, short_result = play(MAZE, answers, max_turns=31, turn_cost=0.02)
    longer, long_result = play(MAZE, THERE_AND_BACK + answers, max_turns=31, turn_cost=0.02)  # the same solve
    assert shortest.solved and longer.solved and longer.turns == shortest.turns + 2
    assert short_result.info["task_reward"] == pytest.approx(1 - 0.02 * shortest.turns)
    assert short_result.reward == pytest.approx(0.8 * (1 - 0.02 * shortest.turns) + 0.2)
    assert short_result.reward - long_result.reward == pytest.approx(0.8 * 0.02 * 2)


def test_a_turn_cost_leaves_unsolved_episodes_and_the_default_reward_alone():
    _, truncated = play(MAZE, THERE_AND_BACK * 10, max_turns=5, turn_cost=0.1)
    assert truncated.info["truncated"] and truncated.reward == pytest.approx(0.2)
    _, solved = play(MAZE, oracle_answers(MAZE), max_turns=31)
    assert solved.info["task_reward"] == 1.0


@settings(max_examples=50, deadline=None)
@given(turn_cost=st.floats(0, 1 / 31, exclude_max=True), detour=st.integers(0, 6))
def test_with_any_allowed_turn_cost_a_solve_beats_a_failure_and_a_longer_solve_earns_less(turn_cost, detour):
    answers = oracle_answers(MAZE)
    _, solved = play(MAZE, THERE_AND_BACK * detour + answers, max_turns=31, turn_cost=turn_cost)
    _, shortest = play(MAZE, answers, max_turns=31, turn_cost=turn_cost)
    _, failed = play(MAZE, THERE_AND_BACK * 16, max_turns=31, turn_cost=turn_cost)  # 32 answers: out of turns
    assert failed.reward < solved.reward <= shortest.reward


@pytest.mark.parametrize("turn_cost", [-0.01, 0.1, 1 / 31, float("nan"), float("inf"), "0.01", True])
def test_turn_cost_is_validated(turn_cost):
    with pytest.raises(ValueError, match="turn_cost"):
        MazeEpisode(MAZE, max_turns=31, turn_cost=turn_cost)


@pytest.mark.parametrize("max_turns", [0, -1, 1.5, True])
def test_max_turns_is_validated(max_turns):
    with pytest.raises(ValueError, match="max_turns"):
        MazeEpisode(MAZE, max_turns=max_turns)


@pytest.mark.parametrize("size", [7, 9])
def test_oracle_solves_every_eval_maze_within_the_sets_budget(size):
    eval_set = eval_set_for_size(size)
    for maze in eval_set.mazes:
        episode, result = play(maze, oracle_answers(maze), max_turns=eval_set.max_turns)
        assert episode.solved and result.reward == pytest.approx(1.0), maze.seed


@pytest.mark.parametrize(("size", "budget"), [(5, 7), (7, 17), (9, 31), (11, 49)])
def test_eval_budget_is_the_longest_simple_corner_path_plus_stop(size, budget):
    assert eval_turn_budget(size) == budget


def test_the_7x7_budget_is_tight():
    """3x3 rooms: some mazes snake through every room, so their shortest path needs the whole budget."""
    longest = max(generate_maze(7, seed).shortest_path_length() for seed in range(2000))
    assert longest + 1 == eval_turn_budget(7)


@settings(max_examples=200, deadline=None)
@given(size=st.sampled_from([5, 7, 9, 11, 13]), seed=st.integers(min_value=0, max_value=2**40))
def test_every_generated_maze_fits_the_eval_budget(size, seed):
    assert generate_maze(size, seed).shortest_path_length() + 1 <= eval_turn_budget(size)


@pytest.mark.parametrize("size", [7, 9])
def test_stop_only_and_random_agents_fail_the_eval_set(size):
    rng = random.Random(1234)
    eval_set = eval_set_for_size(size)
    turns = eval_set.max_turns
    stop_only = [play(m, [STOP.to_text()], max_turns=turns)[0].solved for m in eval_set.mazes]
    random_moves = [
        play(m, [f"('move', {rng.randrange(4)})" for _ in range(turns - 1)] + [STOP.to_text()], max_turns=turns)[
            0
        ].solved
        for m in eval_set.mazes
    ]
    assert not any(stop_only)
    assert sum(random_moves) <= 2
