"""The SFT label-ceiling tool: lookup-table accuracies over what a policy could perceive."""

from __future__ import annotations

from collections import Counter

from cluster_jobs.maze.eval_set import training_seeds
from cluster_jobs.maze.generator import generate_maze
from research.sft_label_ceilings import ceilings, expert_turns


def turns(n: int = 60):
    return [turn for seed in training_seeds(n, size=7) for turn in expert_turns(generate_maze(7, seed))]


def test_each_maze_is_played_to_its_stop_along_the_shortest_path():
    maze = generate_maze(7, training_seeds(1, size=7)[0])
    played = expert_turns(maze)
    assert [answer for _, answer in played][-1] == "('stop', 'stop')"
    assert len(played) == len(maze.shortest_path())
    assert [turn[2] for turn, _ in played] == maze.shortest_path()  # the agent walks the path
    assert [turn[0] for turn, _ in played] == [False] * (len(played) - 1) + [True]


def test_on_target_alone_scores_the_stops_plus_the_commonest_move():
    sample = turns()
    moves = Counter(answer for turn, answer in sample if not turn[0])
    stops = sum(turn[0] for turn, _ in sample)
    assert ceilings(sample)["on target"] == (stops + moves.most_common(1)[0][1]) / len(sample)


def test_seeing_more_never_lowers_the_ceiling():
    result = ceilings(turns())
    assert result["on target"] <= result["on target + previous move"] <= result["on target + previous move + 4 walls"]
    assert result["on target + right/down walls"] <= result["on target + 4 walls"] <= 1.0
