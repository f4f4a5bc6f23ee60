"""One maze episode with VisGym ``maze_2d`` rules, in plain Python (no SkyRL, no gym).

Every turn but the last earns 0; the last earns ``0.8 * task_reward + 0.2 * format_score`` (docs/design.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from PIL import Image

from cluster_jobs.maze.actions import DIRECTION_STEPS, ActionParseError, parse_action
from cluster_jobs.maze.generator import Maze
from cluster_jobs.maze.render import render_maze

ENV_CLASS = "maze2d"  # the SkyRL env_class of this task (skyrl_env registers it, datasets name it)
TASK_REWARD_WEIGHT = 0.8
FORMAT_REWARD_WEIGHT = 0.2
DEFAULT_MAX_TURNS = 15  # the training budget (SkyRL recipe); evaluation uses its eval set's max_turns

START_FEEDBACK = "You are the blue circle in the top-left corner; the red target square is in the bottom-right corner."
MOVED_FEEDBACK = "Action executed successfully."
WALL_FEEDBACK = "Cannot move into a wall."
SOLVED_FEEDBACK = "You stopped on the target. The maze is solved."
STOPPED_OFF_TARGET_FEEDBACK = "You stopped, but not on the target."
OUT_OF_TURNS_FEEDBACK = "No turns left."


class EpisodeFinishedError(RuntimeError):
    """``step`` was called on an episode that has already ended."""


@dataclass(frozen=True)
class Observation:
    """What the model sees: the rendered maze and the environment's feedback text."""

    image: Image.Image
    text: str


@dataclass(frozen=True)
class StepResult:
    """The outcome of one turn; ``info`` has ``task_reward``, ``format_ok``, ``format_score``,
    ``action`` (canonical text or None), ``error`` (parse error or None), ``agent``, ``turns``,
    ``truncated``."""

    observation: Observation
    reward: float
    done: bool
    info: dict[str, Any]


class MazeEpisode:
    """A single episode on ``maze``; the agent starts at ``maze.start``."""

    def __init__(self, maze: Maze, max_turns: int = DEFAULT_MAX_TURNS, turn_cost: float = 0.0) -> None:
        """Raises ``ValueError`` unless ``max_turns`` is a positive int and ``0 <= turn_cost * max_turns < 1``
        (a solved episode always earns more than an unsolved one)."""
        if not isinstance(max_turns, int) or isinstance(max_turns, bool) or max_turns < 1:
            raise ValueError(f"max_turns must be a positive int, got {max_turns!r}")
        is_number = isinstance(turn_cost, (int, float)) and not isinstance(turn_cost, bool)
        if not is_number or not 0 <= turn_cost * max_turns < 1:
            raise ValueError(f"turn_cost must be >= 0 and below 1/max_turns ({1 / max_turns:.4g}), got {turn_cost!r}")
        self.maze = maze
        self.max_turns = max_turns
        self.turn_cost = float(turn_cost)
        self.agent = maze.start
        self.turns = 0
        self.well_formed_turns = 0
        self.done = False
        self.solved = False
        self._feedback = START_FEEDBACK

    @property
    def format_score(self) -> float:
        """The fraction of turns so far whose answer was a well-formed action (0.0 before any turn)."""
        return self.well_formed_turns / self.turns if self.turns else 0.0

    def observation(self) -> Observation:
        """The current picture of the maze and the latest feedback."""
        return Observation(image=render_maze(self.maze, self.agent), text=self._feedback)

    def step(self, action_text: str) -> StepResult:
        """Play one turn with the model's raw answer ``action_text``; never raises on bad answers.

        Raises:
            EpisodeFinishedError: if the episode has already ended.
        """
        if self.done:
            raise EpisodeFinishedError(f"the episode ended after {self.turns} turns; start a new one")
        self.turns += 1
        task_reward = 0.0
        try:
            action = parse_action(action_text)
        except ActionParseError as error:
            action, parse_error = None, str(error)
            feedback = (
                f"Invalid answer: {parse_error}. Answer with exactly one action, e.g. ('move', 0) or ('stop', 'stop')."
            )
        else:
            parse_error = None
            self.well_formed_turns += 1
            if action.name == "stop":
                self.done = True
                self.solved = self.agent == self.maze.target
                task_reward = 1.0 - self.turn_cost * self.turns if self.solved else 0.0
                feedback = SOLVED_FEEDBACK if self.solved else STOPPED_OFF_TARGET_FEEDBACK
            else:
                d_row, d_col = DIRECTION_STEPS[action.arg]
                nxt = (self.agent[0] + d_row, self.agent[1] + d_col)
                if self.maze.is_wall(nxt):
                    feedback = WALL_FEEDBACK
                else:
                    self.agent = nxt
                    feedback = MOVED_FEEDBACK
        truncated = not self.done and self.turns >= self.max_turns
        if truncated:
            self.done = True
            feedback = f"{feedback} {OUT_OF_TURNS_FEEDBACK}"
        self._feedback = feedback
        reward = TASK_REWARD_WEIGHT * task_reward + FORMAT_REWARD_WEIGHT * self.format_score if self.done else 0.0
        info = {
            "task_reward": task_reward,
            "format_ok": parse_error is None,
            "format_score": self.format_score,
            "action": action.to_text() if action else None,
            "error": parse_error,
            "agent": self.agent,
            "turns": self.turns,
            "truncated": truncated,
        }
        return StepResult(observation=self.observation(), reward=reward, done=self.done, info=info)
