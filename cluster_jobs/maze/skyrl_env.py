"""The maze as a SkyRL gym environment (``env_class`` ``maze2d``) for multi-turn VLM GRPO.

Settings come from the dataset row's extras, then the env config; rewards follow :mod:`cluster_jobs.maze.env`
(docs/design.md).
"""

from __future__ import annotations

import numbers
import operator
from collections.abc import Mapping
from typing import Any

import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, ConversationType

from cluster_jobs.maze.env import DEFAULT_MAX_TURNS, ENV_CLASS, MazeEpisode
from cluster_jobs.maze.eval_set import EVAL_SET_SIZE
from cluster_jobs.maze.generator import generate_maze
from cluster_jobs.maze.prompt import SYSTEM_PROMPT, observation_message

ENTRY_POINT = "cluster_jobs.maze.skyrl_env:MazeEnv"


class MazeEnv(BaseTextEnv):
    """One maze episode behind SkyRL's ``BaseTextEnv`` interface."""

    def __init__(self, env_config: Mapping[str, Any] | None = None, extras: Mapping[str, Any] | None = None):
        super().__init__()
        for name, value in (("env_config", env_config), ("extras", extras)):
            if value is not None and not isinstance(value, Mapping):
                raise TypeError(f"maze2d {name} must be a mapping, got {type(value).__name__}")
        settings = {**dict(env_config or {}), **dict(extras or {})}
        if "seed" not in settings:
            raise ValueError("maze2d needs a 'seed' in the dataset row extras or the env config")
        self.max_turns = _int_setting(settings, "max_turns", DEFAULT_MAX_TURNS)
        maze = generate_maze(_int_setting(settings, "size", EVAL_SET_SIZE), _int_setting(settings, "seed", None))
        self.episode = MazeEpisode(maze, max_turns=self.max_turns, turn_cost=_float_setting(settings, "turn_cost", 0.0))

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        """Ignore the dataset's placeholder ``prompt``; return the system prompt and the first image message."""
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            observation_message(self.episode.observation(), first=True),
        ]
        return messages, {"seed": self.episode.maze.seed, "size": self.episode.maze.size}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Play the model's answer ``action``; the next user message carries the new image and feedback."""
        self.turns += 1
        result = self.episode.step(action)
        observations = [] if result.done else [observation_message(result.observation, first=False)]
        return BaseTextEnvStepOutput(
            observations=observations, reward=result.reward, done=result.done, metadata=result.info
        )

    def get_metrics(self) -> dict[str, Any]:
        """Per-episode metrics, averaged by SkyRL across episodes."""
        return {
            "turns": self.episode.turns,
            "solved": self.episode.solved,
            "format_score": self.episode.format_score,
        }


def _int_setting(settings: Mapping[str, Any], name: str, default: int | None) -> int:
    """``settings[name]`` (or ``default``) as an int; numpy ints from a dataset pass, floats and text do not."""
    value = settings.get(name, default)
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(f"maze2d setting {name!r} must be an integer, got {value!r}") from None


def _float_setting(settings: Mapping[str, Any], name: str, default: float) -> float:
    """``settings[name]`` (or ``default``) as a float; ints and numpy numbers are accepted, text and bools are not."""
    value = settings.get(name, default)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"maze2d setting {name!r} must be a number, got {value!r}")
    return float(value)


def register_maze_env() -> None:
    """Register ``maze2d`` with skyrl_gym (safe to call again in the same process).

    Raises:
        ValueError: if ``maze2d`` is already registered with a different entry point.
    """
    existing = skyrl_gym.registry.get(ENV_CLASS)
    if existing is None:
        skyrl_gym.register(id=ENV_CLASS, entry_point=ENTRY_POINT)
    elif existing.entry_point != ENTRY_POINT:
        raise ValueError(f"{ENV_CLASS} is already registered with entry point {existing.entry_point!r}")
