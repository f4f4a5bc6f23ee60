"""run_episodes: lock-step multi-turn play with a scripted oracle, garbage answers and history windows."""

from __future__ import annotations

import pytest

from cluster_jobs.maze.actions import DIRECTION_STEPS
from cluster_jobs.maze.eval_set import load_eval_set
from cluster_jobs.maze.generator import Maze, generate_maze
from cluster_jobs.maze.prompt import SYSTEM_PROMPT
from cluster_jobs.rollout import HISTORY_TURNS_BY_ENGINE, Episode, GenerateError, run_episodes

_DIRECTION_OF_STEP = {step: direction for direction, step in DIRECTION_STEPS.items()}


def _oracle_moves(maze: Maze) -> list[str]:
    """The BFS shortest path as answers, then stop."""
    path = maze.shortest_path()
    moves = [
        f"<action>('move', {_DIRECTION_OF_STEP[(b[0] - a[0], b[1] - a[1])]})</action>"
        for a, b in zip(path, path[1:], strict=False)
    ]
    return moves + ["('stop', 'stop')"]


def _lockstep(scripts: list[list[str]]):
    """A generate that answers the i-th unfinished maze with its script's next line."""
    cursors = [0] * len(scripts)
    done = [False] * len(scripts)
    calls: list[list[list[dict]]] = []

    def generate(chats: list[list[dict]]) -> list[str]:
        calls.append(chats)
        active = [i for i, finished in enumerate(done) if not finished]
        assert len(active) == len(chats)
        answers = []
        for i in active:
            script = scripts[i]
            answer = script[min(cursors[i], len(script) - 1)]
            cursors[i] += 1
            if answer == "('stop', 'stop')":
                done[i] = True
            answers.append(answer)
        return answers

    generate.calls = calls
    generate.done = done
    return generate


def test_oracle_solves_every_eval_maze_in_path_length_plus_one_turns():
    mazes = list(load_eval_set().mazes)
    episodes = run_episodes(_lockstep([_oracle_moves(m) for m in mazes]), mazes, max_turns=40)
    assert [e.seed for e in episodes] == [m.seed for m in mazes]
    assert all(e.solved and e.error is None and e.reward == pytest.approx(1.0) for e in episodes)
    assert [e.turns for e in episodes] == [m.shortest_path_length() + 1 for m in mazes]


def test_oracle_within_15_turns_solves_the_short_mazes_only():
    mazes = list(load_eval_set().mazes[:16])
    episodes = run_episodes(_lockstep([_oracle_moves(m) for m in mazes]), mazes, max_turns=15)
    assert [e.solved for e in episodes] == [m.shortest_path_length() + 1 <= 15 for m in mazes]


def test_garbage_answers_solve_nothing_and_never_crash():
    mazes = [generate_maze(9, seed) for seed in range(8)]
    garbage = [
        "",
        "move right",
        "('move', 7)",
        "<action>('jump', 0)</action>",
        "x" * 5000,
        "🙂",
        "('stop', 'go')",
        "()",
    ]
    calls = []

    def generate(chats):
        calls.append(len(chats))
        return [garbage[i % len(garbage)] for i in range(len(chats))]

    episodes = run_episodes(generate, mazes, max_turns=5)
    assert calls == [8] * 5
    assert not any(e.solved for e in episodes)
    assert all(e.turns == 5 and e.error and len(e.error) <= 200 and e.reward == 0.0 for e in episodes)


def test_finished_mazes_leave_the_batch_and_answers_are_recorded():
    mazes = [generate_maze(9, seed) for seed in (1, 2, 3)]
    scripts = [["('stop', 'stop')"], ["('move', 2)", "('stop', 'stop')"], ["('move', 0)"] * 3]
    generate = _lockstep(scripts)
    episodes = run_episodes(generate, mazes, max_turns=3)
    assert [len(chats) for chats in generate.calls] == [3, 2, 1]
    assert [e.turns for e in episodes] == [1, 2, 3]
    assert [e.solved for e in episodes] == [False, False, False]
    assert episodes[1].actions == ["('move', 2)", "('stop', 'stop')"]
    assert episodes[0].reward == pytest.approx(0.2)  # format only: stopped off target
    # The episode's messages: system, then observation/answer pairs.
    roles = [m["role"] for m in episodes[2].messages]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]


def _images(chat: list[dict]) -> int:
    return sum(part["type"] == "image_url" for m in chat if isinstance(m["content"], list) for part in m["content"])


@pytest.mark.parametrize("history_turns, expected_lengths", [(0, [2, 2, 2, 2]), (1, [2, 4, 4, 4]), (2, [2, 4, 6, 6])])
def test_history_window(history_turns, expected_lengths):
    maze = generate_maze(9, 5)
    generate = _lockstep([["('move', 3)"] * 4])
    (episode,) = run_episodes(generate, [maze], max_turns=4, history_turns=history_turns)
    chats = [calls[0] for calls in generate.calls]
    # The 4th chat is the latest earlier pairs then the 4th observation, exactly as the episode recorded them.
    assert chats[-1][1:] == episode.messages[max(1, 7 - 2 * history_turns) : 8]
    assert [len(chat) for chat in chats] == expected_lengths
    assert all(chat[0] == {"role": "system", "content": SYSTEM_PROMPT} for chat in chats)
    assert [_images(chat) for chat in chats] == [(n - 2) // 2 + 1 for n in expected_lengths]
    for chat in chats:
        assert chat[-1]["role"] == "user" and [m["role"] for m in chat[1:-1]] == ["user", "assistant"] * (
            (len(chat) - 2) // 2
        )
    if history_turns:  # the history ends with the previous answer
        assert chats[-1][-2] == {"role": "assistant", "content": "('move', 3)"}


def test_the_whole_conversation_as_skyrls_vlm_generator_renders_it():
    maze = generate_maze(9, 5)
    generate = _lockstep([["('move', 3)"] * 4])
    (episode,) = run_episodes(generate, [maze], max_turns=4, history_turns=None)
    chats = [calls[0] for calls in generate.calls]
    assert [len(chat) for chat in chats] == [2, 4, 6, 8]
    assert [_images(chat) for chat in chats] == [1, 2, 3, 4]
    # Each turn's chat is the episode so far: every earlier observation (with its image) and answer.
    assert all(chat == episode.messages[: len(chat)] for chat in chats)
    assert HISTORY_TURNS_BY_ENGINE == {"vllm": None, "transformers": 1}


def test_progress_callback_sees_every_turn():
    mazes = [generate_maze(9, 0)]
    seen: list[tuple[int, int]] = []
    run_episodes(
        _lockstep([["('move', 1)"] * 3]),
        mazes,
        max_turns=3,
        on_turn=lambda turn, eps: seen.append((turn, eps[0].turns)),
    )
    assert seen == [(1, 1), (2, 2), (3, 3)]


def test_bad_generate_output_and_arguments_are_refused():
    mazes = [generate_maze(9, 0), generate_maze(9, 1)]
    with pytest.raises(GenerateError, match="2 strings"):
        run_episodes(lambda chats: ["only one"], mazes, max_turns=2)
    with pytest.raises(GenerateError):
        run_episodes(lambda chats: [None, None], mazes, max_turns=2)
    with pytest.raises(ValueError):
        run_episodes(lambda chats: [], mazes, max_turns=0)
    with pytest.raises(ValueError):
        run_episodes(lambda chats: [], mazes, max_turns=3, history_turns=-1)


def test_episode_is_a_plain_record():
    episode = Episode(seed=3, solved=False, turns=0, error=None, reward=0.0, messages=[], actions=[])
    assert episode.seed == 3 and episode.actions == []
