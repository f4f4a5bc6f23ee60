"""Expert maze play for SFT: BFS shortest-path moves in VisGym's action format, through the real environment.

:class:`ExpertPlayer` is a ``generate`` function for :func:`cluster_jobs.rollout.run_episodes`; with probability
``detour_prob`` it answers a random move instead (a detour: marked, never a training label), so the data shows recovery.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from dataclasses import dataclass

from cluster_jobs.maze.actions import DIRECTION_STEPS, STOP, Action
from cluster_jobs.maze.generator import Maze, Position
from cluster_jobs.rollout import Episode, run_episodes


def expert_action(maze: Maze, position: Position) -> Action:
    """The first action of a shortest way from ``position`` to the target (stop when already there)."""
    if position == maze.target:
        return STOP
    path = dataclasses.replace(maze, start=position).shortest_path()
    step = (path[1][0] - position[0], path[1][1] - position[1])
    direction = next(d for d, offset in DIRECTION_STEPS.items() if offset == step)
    return Action("move", direction)


@dataclass
class _Walker:
    """The expert's view of one episode: where the agent stands and whether the episode is over."""

    maze: Maze
    position: Position
    turns: int = 0
    done: bool = False


class ExpertPlayer:
    """A ``generate`` function that plays ``mazes`` (in ``run_episodes`` order) as the expert.

    ``run_episodes`` sends one chat per unfinished episode, in maze order; the player mirrors which
    episodes are unfinished (it stops a maze after its stop answer or ``max_turns`` turns).
    ``detours[i]`` lists, per turn of maze ``i``, whether that answer was a random detour.
    """

    def __init__(
        self, mazes: Sequence[Maze], max_turns: int, detour_prob: float = 0.0, seed: int = 0, wall_bumps: bool = False
    ) -> None:
        if not 0.0 <= detour_prob < 1.0:
            raise ValueError(f"detour_prob must be in [0, 1), got {detour_prob}")
        self.max_turns = max_turns
        self.detour_prob = detour_prob
        self.wall_bumps = wall_bumps
        self._rng = random.Random(seed)
        self._walkers = [_Walker(maze, maze.start) for maze in mazes]
        self.detours: list[list[bool]] = [[] for _ in mazes]

    def __call__(self, chats: list[list[dict]]) -> list[str]:
        active = [index for index, walker in enumerate(self._walkers) if not walker.done]
        if len(chats) != len(active):
            raise RuntimeError(f"expected {len(active)} chats (one per unfinished maze), got {len(chats)}")
        return [self._answer(index) for index in active]

    def _answer(self, index: int) -> str:
        walker = self._walkers[index]
        action = expert_action(walker.maze, walker.position)
        detour = action != STOP and self._rng.random() < self.detour_prob
        if detour:
            directions = list(DIRECTION_STEPS) if self.wall_bumps else self._open_directions(walker)
            action = Action("move", self._rng.choice(directions))
        if action == STOP:
            walker.done = True
        else:
            d_row, d_col = DIRECTION_STEPS[int(action.arg)]
            moved = (walker.position[0] + d_row, walker.position[1] + d_col)
            if not walker.maze.is_wall(moved):
                walker.position = moved
        walker.turns += 1
        walker.done = walker.done or walker.turns >= self.max_turns
        self.detours[index].append(detour)
        return action.to_text()

    @staticmethod
    def _open_directions(walker: _Walker) -> list[int]:
        row, col = walker.position
        return [d for d, (dr, dc) in DIRECTION_STEPS.items() if not walker.maze.is_wall((row + dr, col + dc))]


def expert_episodes(
    mazes: Sequence[Maze],
    max_turns: int,
    history_turns: int,
    detour_prob: float = 0.0,
    seed: int = 0,
    wall_bumps: bool = False,
) -> tuple[list[Episode], list[list[bool]]]:
    """Play ``mazes`` as the expert through the real environment; returns the episodes and, per
    episode, which turns were detours (see :class:`ExpertPlayer` for ``wall_bumps``)."""
    player = ExpertPlayer(mazes, max_turns, detour_prob, seed, wall_bumps)
    episodes = run_episodes(player, mazes, max_turns=max_turns, history_turns=history_turns)
    return episodes, player.detours
