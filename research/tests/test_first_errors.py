"""The first-error report: where play first leaves the oracle's path, the kind of move, and the policy's odds."""

from __future__ import annotations

import pytest

from cluster_jobs.maze.actions import DIRECTION_STEPS, STOP, Action
from cluster_jobs.maze.eval_set import eval_set_for_size
from cluster_jobs.maze.oracle import chat_view, oracle_action, oracle_answer
from cluster_jobs.rollout import run_episodes, turn_chats
from research.first_errors import (
    ACTIONS,
    FirstError,
    compact,
    ends_stuck,
    first_error,
    path_summary,
    played_path,
    summary,
)

MAZES = eval_set_for_size(7).mazes[:8]


def even_odds(chat, answer):
    return {action: 1 / len(ACTIONS) for action in ACTIONS}


def play(answer_for) -> list:
    return run_episodes(lambda chats: [answer_for(chat) for chat in chats], MAZES, max_turns=17, history_turns=1)


def test_the_oracle_makes_no_error():
    assert all(first_error(episode, even_odds) is None for episode in play(oracle_answer))


@pytest.mark.parametrize("direction", range(4))
def test_a_fixed_move_errs_where_the_oracle_first_disagrees_and_knows_if_it_hit_a_wall(direction):
    for episode in play(lambda chat: Action("move", direction).to_text()):
        error = first_error(episode, even_odds)  # never None: play that never stops cannot follow the oracle
        assert error.chosen == Action("move", direction) and error.oracle != error.chosen
        assert error.p_oracle == pytest.approx(0.2) and error.p_chosen == pytest.approx(0.2)
        chats = [chat for chat, _ in turn_chats(episode, 1)]  # what the policy saw at each turn
        view = chat_view(chats[error.turn - 1])
        row, col = view.agent[0] + DIRECTION_STEPS[direction][0], view.agent[1] + DIRECTION_STEPS[direction][1]
        assert error.into_wall == (not (0 <= row < 7 and 0 <= col < 7) or view.walls[row][col])
        assert error.oracle == oracle_action(chats[error.turn - 1])


def test_an_unparsable_answer_is_an_error_without_a_chosen_action():
    [episode] = run_episodes(lambda chats: ["no idea"] * len(chats), MAZES[:1], max_turns=2, history_turns=1)
    error = first_error(episode, even_odds)
    assert (error.turn, error.chosen, error.p_chosen, error.into_wall) == (1, None, None, False)


def test_the_summary_counts_kinds_and_close_calls():
    down, right = Action("move", 3), Action("move", 0)
    errors = [
        FirstError(seed=0, turn=1, chosen=down, oracle=right, into_wall=False, p_oracle=0.45, p_chosen=0.55),
        FirstError(seed=1, turn=3, chosen=down, oracle=right, into_wall=True, p_oracle=0.1, p_chosen=0.8),
        FirstError(seed=2, turn=2, chosen=None, oracle=STOP, into_wall=False, p_oracle=0.5, p_chosen=None),
    ]
    kinds, pairs, odds = summary(errors)
    assert kinds == "first errors: 1 legal, wrong branch, 1 into a wall, 1 unparsable"
    assert pairs.startswith("chosen -> oracle: ('move', 3) -> ('move', 0): 2")
    assert odds == "p(oracle) at the first error: median 0.45, 2 of 3 at 0.3 or more (close calls)"
    assert summary([]) == ["no failed maze"]


def test_the_played_path_marks_moves_bumps_stops_and_unparsable_answers():
    maze = MAZES[0]
    # from the start corner, up and left are walls; the shortest path's first step is not
    step = tuple(b - a for a, b in zip(maze.start, maze.shortest_path()[1], strict=False))
    first = next(direction for direction, delta in DIRECTION_STEPS.items() if delta == step)
    script = iter(
        ["('move', 1)", "<action>('move', 2)</action>", "no idea", Action("move", first).to_text(), STOP.to_text()]
    )
    [episode] = run_episodes(lambda chats: [next(script)], [maze], max_turns=5)
    assert played_path(episode, maze) == ["xU", "xL", "?", "RULD"[first], "S"]


def test_a_path_ends_stuck_when_its_last_turns_bump_the_same_wall():
    assert ends_stuck(["R", "D", "xR", "xR", "xR"]) and ends_stuck(["xD"] * 3)
    assert not ends_stuck(["R", "xR", "xR"]) and not ends_stuck(["xR", "xD", "xR"]) and not ends_stuck(["R", "R", "R"])
    assert compact(["R", "R", "D", "xR", "xR", "xR", "xR"]) == "R R D xR*4"
    lines = path_summary([["R", "D", "S"], ["R", "xR", "xR", "xR"], ["L", "U", "xL"]], [False, True, True])
    assert lines == [
        "failures ending stuck (one move into one wall for the last 3+ turns): 1 of 2",
        "moves made up or left: 2 of 5",
    ]


def test_greedy_oracle_play_follows_the_shortest_path():
    for episode, maze in zip(play(oracle_answer), MAZES, strict=False):
        path = played_path(episode, maze)
        assert (
            path[-1] == "S"
            and len(path) == maze.shortest_path_length() + 1
            and not any(t.startswith("x") for t in path)
        )
