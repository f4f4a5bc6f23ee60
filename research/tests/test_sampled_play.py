"""How sampled episodes end, and the kinds of GRPO groups they make: tables, and one real rollout."""

from __future__ import annotations

import pytest

from cluster_jobs.maze.eval_set import NoEvalSet, eval_set_for_size, training_seeds
from cluster_jobs.rollout import Episode
from local_stack.pipeline import BASE_MODEL_DIR
from research.sampled_play import PROGRESS_EVERY, ending, group_kinds, main, mazes_to_play, progress, report


@pytest.mark.parametrize(
    "path, expected",
    [
        (["R", "D", "xR", "xR", "xR"], "stuck"),
        (["D", "R", "L", "R", "L", "R", "L"], "oscillating"),
        (["U", "D", "U", "D", "U", "D"], "oscillating"),
        (["R", "L", "R", "L", "R", "R"], "wandering"),  # the last turn breaks the alternation
        (["R", "R", "R", "R", "R", "R"], "wandering"),  # one direction is not an oscillation
        (["R", "D", "R", "D", "R", "D"], "wandering"),  # alternating, but not opposite moves
        (["xR", "xD", "xR"], "wandering"),  # into walls, but not one move into one wall
        (["R", "L"], "wandering"),  # too short to call
        (["?", "?", "?"], "wandering"),
    ],
)
def test_endings(path, expected):
    assert ending(path) == expected


def test_groups_are_counted_by_kind():
    solved = [True, True, False, False, True, False, True, True]
    assert group_kinds(solved, 2) == {"all solved": 2, "all failed": 1, "mixed": 1}


def test_the_report_counts_groups_extra_turns_endings_and_wall_turns():
    paths = [["R", "D", "S"], ["R", "xU", "D", "R", "S"], ["xR", "xR", "xR"], ["R", "L", "R", "L", "R", "L"]]
    solved = [True, True, False, False]
    assert report(paths, solved, [2, 2, 2, 2], samples=2) == [
        "solved: 2 of 4 sampled episodes (0.500)",
        "groups: 0 mixed, 1 all solved, 1 all failed",
        "solved at least once: 1 of 2 mazes (pass@2)",
        "solved episodes: median 1.0 turns (moves, or moves into walls) over the shortest path, 1 of 2 on it",
        "failures end: 1 stuck, 1 oscillating, 0 wandering",
        "failures' turns into a wall: 3 of 9 (0.33)",
    ]


def test_pass_at_k_counts_every_maze_that_one_sample_solved():
    lines = report(
        [["R", "S"], ["xR"], ["xR"], ["xR"], ["R", "S"], ["R", "S"]],
        [True, False, False, False, True, True],
        [1] * 6,
        samples=2,
    )
    assert lines[2] == "solved at least once: 2 of 3 mazes (pass@2)"


def test_a_rollout_of_the_shipped_start_reports_every_episode(capsys, one_torch_thread):
    assert (
        main(
            [
                "--base-model",
                str(BASE_MODEL_DIR),
                "--maze-size",
                "7",
                "--mazes",
                "2",
                "--samples",
                "2",
                "--max-turns",
                "3",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("solved: ") and " of 4 sampled episodes" in lines[1]
    assert lines[2].startswith("groups: ") and sum(int(part.split()[0]) for part in lines[2][8:].split(", ")) == 2


def test_the_mazes_played_are_training_mazes_unless_held_out_ones_are_asked_for():
    training = mazes_to_play(7, 3, held_out=False)
    held_out = mazes_to_play(7, 3, held_out=True)
    assert [maze.seed for maze in training] == training_seeds(3, size=7)
    assert held_out == list(eval_set_for_size(7).mazes[:3])
    assert not {maze.to_text() for maze in training} & {maze.to_text() for maze in eval_set_for_size(7).mazes}
    assert len(mazes_to_play(9, 64, held_out=True)) == 64


@pytest.mark.parametrize(
    "size, count, held_out, error",
    [
        (7, 0, False, "at least 1"),
        (7, -2, True, "at least 1"),
        (7, 65, True, "has 64"),
        (11, 1, True, "no fixed evaluation set for 11x11"),
    ],
)
def test_a_maze_count_or_size_that_cannot_be_played_is_refused(size, count, held_out, error):
    with pytest.raises(NoEvalSet if size == 11 else ValueError, match=error):
        mazes_to_play(size, count, held_out)


def test_the_cli_refuses_more_held_out_mazes_than_the_set_holds(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--base-model", str(BASE_MODEL_DIR), "--maze-size", "7", "--mazes", "65", "--held-out"])
    assert exit_info.value.code == 2
    assert "the held-out set of size 7 has 64" in capsys.readouterr().err


def test_a_held_out_rollout_says_so(capsys, one_torch_thread):
    assert (
        main(
            [
                "--base-model",
                str(BASE_MODEL_DIR),
                "--maze-size",
                "7",
                "--mazes",
                "1",
                "--samples",
                "2",
                "--max-turns",
                "2",
                "--held-out",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert "1 held-out mazes x 2 samples" in lines[0]
    assert " of 2 sampled episodes" in lines[1]


def test_progress_prints_the_solved_count_every_few_turns(capsys):
    episodes = [
        Episode(seed=1, solved=True, turns=3, error=None, reward=1.0, messages=[]),
        Episode(seed=2, solved=False, turns=PROGRESS_EVERY, error=None, reward=0.0, messages=[]),
    ]
    progress(PROGRESS_EVERY - 1, episodes)
    assert capsys.readouterr().err == ""
    progress(PROGRESS_EVERY, episodes)
    assert capsys.readouterr().err == f"turn {PROGRESS_EVERY}: 1 of 2 solved so far\n"
