"""Multi-turn maze rollouts: play many mazes in lock-step with one batched ``generate`` call per turn.

``generate`` maps a batch of OpenAI-style chats to one answer each; a malformed answer costs its turn, it never
stops the rollout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from cluster_jobs.maze.env import MazeEpisode
from cluster_jobs.maze.generator import Maze
from cluster_jobs.maze.prompt import SYSTEM_PROMPT, observation_message

Generate = Callable[[list[list[dict]]], list[str]]
MAX_ERROR_CHARS = 200

# The earlier observation/answer pairs each turn's prompt carries (None: the whole conversation), by the engine
# that evaluates the trainer's adapters, so that evaluation and serving clients show the model what its trainer's
# rollouts did. vLLM is the cluster's, where SkyRL 0.4.0's VLM generator re-renders the whole conversation every turn
# (skyrl/train/generators/skyrl_vlm_generator.py, `agent_loop`); transformers is the local stand-ins', whose tiny
# CPU trainer keeps one earlier turn (two images per prompt at most).
HISTORY_TURNS_BY_ENGINE: dict[str, int | None] = {"vllm": None, "transformers": 1}


class GenerateError(RuntimeError):
    """``generate`` did not return one string per chat."""


@dataclass
class Episode:
    """One maze played to the end.

    Attributes:
        seed: the maze's seed.
        solved: the agent stopped on the target.
        turns: turns played (answers given).
        error: the parse error of the episode's last malformed answer (cut to 200 characters), or
            None when every answer was a well-formed action.
        reward: the environment's final reward (0.8 task + 0.2 format).
        messages: the whole episode as a chat: system prompt, then each observation and answer.
        actions: the raw answers, one per turn.
    """

    seed: int
    solved: bool
    turns: int
    error: str | None
    reward: float
    messages: list[dict]
    actions: list[str] = field(default_factory=list)


def run_episodes(
    generate: Generate,
    mazes: Sequence[Maze],
    max_turns: int,
    history_turns: int | None = None,
    on_turn: Callable[[int, list[Episode]], None] | None = None,
    turn_cost: float = 0.0,
) -> list[Episode]:
    """Play all mazes in lock-step (one batched generate call per turn); the conversation sent each turn is the
    system prompt + the last `history_turns` observation/answer pairs (images included; None: all of them).

    That is, each chat is the system prompt, the ``history_turns`` most recent earlier
    observation/answer pairs (every one for None), then the current observation. Only unfinished episodes are sent.
    ``on_turn(turn, episodes)``, if given, is called after each turn (for progress reports).
    ``turn_cost`` is the episodes' reward option (:class:`~cluster_jobs.maze.env.MazeEpisode`; 0 for evaluation).

    Returns:
        One :class:`Episode` per maze, in the order of ``mazes``.

    Raises:
        ValueError: ``max_turns`` < 1, ``history_turns`` < 0, or ``turn_cost`` out of range.
        GenerateError: ``generate`` returned other than one string per chat.
    """
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, got {max_turns}")
    if history_turns is not None and history_turns < 0:
        raise ValueError(f"history_turns must be >= 0, got {history_turns}")
    system = {"role": "system", "content": SYSTEM_PROMPT}
    envs = [MazeEpisode(maze, max_turns=max_turns, turn_cost=turn_cost) for maze in mazes]
    episodes = [
        Episode(seed=maze.seed, solved=False, turns=0, error=None, reward=0.0, messages=[system]) for maze in mazes
    ]
    pending = [observation_message(env.observation(), first=True) for env in envs]
    for turn in range(1, max_turns + 1):
        active = [index for index, env in enumerate(envs) if not env.done]
        if not active:
            break
        chats = [_chat(system, episodes[index].messages, pending[index], history_turns) for index in active]
        answers = generate(chats)
        if not isinstance(answers, list) or len(answers) != len(chats) or not all(isinstance(a, str) for a in answers):
            raise GenerateError(f"generate must return {len(chats)} strings, got {_describe(answers)}")
        for index, answer in zip(active, answers, strict=False):
            _play(envs[index], episodes[index], pending, index, answer)
        if on_turn is not None:
            on_turn(turn, episodes)
    return episodes


def _chat(system: dict, messages: list[dict], current: dict, history_turns: int | None) -> list[dict]:
    """System prompt + the last ``history_turns`` pairs of ``messages`` (all for None) + ``current``."""
    pairs = messages[1:]
    kept = pairs if history_turns is None else pairs[max(0, len(pairs) - 2 * history_turns) :]
    return [system, *kept, current]


def _play(env: MazeEpisode, episode: Episode, pending: list[dict], index: int, answer: str) -> None:
    """Step ``env`` with ``answer`` and record the turn in ``episode``; queue the next observation."""
    result = env.step(answer)
    episode.messages += [pending[index], {"role": "assistant", "content": answer}]
    episode.actions.append(answer)
    episode.turns = env.turns
    if result.info["error"] is not None:
        episode.error = result.info["error"][:MAX_ERROR_CHARS]
    if result.done:
        episode.solved = env.solved
        episode.reward = result.reward
    else:
        pending[index] = observation_message(result.observation, first=False)


def _describe(answers: object) -> str:
    """A short description of a bad ``generate`` return value."""
    if isinstance(answers, list):
        return f"a list of {len(answers)} items of types {sorted({type(a).__name__ for a in answers})}"
    return type(answers).__name__


def turn_chats(episode: Episode, history_turns: int | None) -> list[tuple[list[dict], str]]:
    """``(chat, answer)`` for every turn of ``episode``, each chat exactly as :func:`run_episodes` sent it
    with the same ``history_turns``."""
    system, pairs = episode.messages[0], episode.messages[1:]
    return [
        (_chat(system, [system, *pairs[:index]], pairs[index], history_turns), pairs[index + 1]["content"])
        for index in range(0, len(pairs), 2)
    ]
