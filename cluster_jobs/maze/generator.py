"""Maze generation in the style of VisGym's ``maze_2d`` (Wilson's algorithm, corner to corner).

A uniform spanning tree over the rooms of a ``size`` x ``size`` grid, from ``random.Random(seed)`` alone, so a
seed gives the same maze on every platform (docs/design.md).
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

Position = tuple[int, int]

MIN_SIZE = 5
MAX_SIZE = 101

# Row/col offsets between neighbouring rooms, in a fixed order (determinism).
_ROOM_STEPS: tuple[Position, ...] = ((0, 2), (-2, 0), (0, -2), (2, 0))
# Row/col offsets between neighbouring grid cells (one move of the agent).
_CELL_STEPS: tuple[Position, ...] = ((0, 1), (-1, 0), (0, -1), (1, 0))


class MazeError(ValueError):
    """A maze parameter or maze grid is invalid."""


@dataclass(frozen=True)
class Maze:
    """An immutable square maze.

    Attributes:
        size: grid cells per side, walls included (odd, >= 5).
        walls: ``walls[row][col]`` is True where the cell is a wall.
        start: the agent's start position ``(row, col)``.
        target: the target position ``(row, col)``.
        seed: the seed the maze was generated from.
    """

    size: int
    walls: tuple[tuple[bool, ...], ...]
    start: Position
    target: Position
    seed: int

    def __post_init__(self) -> None:
        validate_size(self.size)
        if len(self.walls) != self.size or any(len(row) != self.size for row in self.walls):
            raise MazeError(f"walls must be {self.size} rows of {self.size} cells")
        for name, pos in (("start", self.start), ("target", self.target)):
            if self.is_wall(pos):
                raise MazeError(f"{name} {pos} must be an open cell inside the maze")

    def in_bounds(self, pos: Position) -> bool:
        """True when ``pos`` lies on the grid."""
        row, col = pos
        return 0 <= row < self.size and 0 <= col < self.size

    def is_wall(self, pos: Position) -> bool:
        """True when ``pos`` is a wall; anything outside the grid counts as wall."""
        return not self.in_bounds(pos) or self.walls[pos[0]][pos[1]]

    def to_text(self) -> str:
        """The canonical text of the grid: one line per row, ``#`` wall, ``.`` path, no trailing newline."""
        return "\n".join("".join("#" if wall else "." for wall in row) for row in self.walls)

    def shortest_path(self) -> list[Position]:
        """The positions of a shortest path from ``start`` to ``target`` (both included), by BFS.

        Raises:
            MazeError: if the target cannot be reached (never for a generated maze).
        """
        previous: dict[Position, Position | None] = {self.start: None}
        frontier = deque([self.start])
        while frontier:
            pos = frontier.popleft()
            if pos == self.target:
                path = [pos]
                while (parent := previous[path[-1]]) is not None:
                    path.append(parent)
                return path[::-1]
            for d_row, d_col in _CELL_STEPS:
                nxt = (pos[0] + d_row, pos[1] + d_col)
                if nxt not in previous and not self.is_wall(nxt):
                    previous[nxt] = pos
                    frontier.append(nxt)
        raise MazeError(f"target {self.target} is unreachable from start {self.start}")

    def shortest_path_length(self) -> int:
        """The number of moves on a shortest path from ``start`` to ``target``."""
        return len(self.shortest_path()) - 1


def grid_distances(walls: tuple[tuple[bool, ...], ...], source: Position) -> dict[Position, int]:
    """Moves from ``source`` to every open cell reachable from it (BFS over the grid ``walls[row][col]``)."""
    size = len(walls)
    distance = {source: 0}
    frontier = deque([source])
    while frontier:
        cell = frontier.popleft()
        for d_row, d_col in _CELL_STEPS:
            row, col = cell[0] + d_row, cell[1] + d_col
            if 0 <= row < size and 0 <= col < size and not walls[row][col] and (row, col) not in distance:
                distance[(row, col)] = distance[cell] + 1
                frontier.append((row, col))
    return distance


def validate_size(size: int) -> None:
    """Raise :class:`MazeError` unless ``size`` is an odd int in ``[MIN_SIZE, MAX_SIZE]``."""
    if not isinstance(size, int) or isinstance(size, bool):
        raise MazeError(f"maze size must be an int, got {type(size).__name__}")
    if size % 2 == 0 or not MIN_SIZE <= size <= MAX_SIZE:
        raise MazeError(f"maze size must be odd and between {MIN_SIZE} and {MAX_SIZE}, got {size}")


def generate_maze(size: int, seed: int) -> Maze:
    """Generate the maze of ``size`` x ``size`` cells for ``seed`` (same inputs, same maze).

    Raises:
        MazeError: if ``size`` is not odd in ``[5, 101]`` or ``seed`` is not a non-negative int.
    """
    validate_size(size)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise MazeError(f"maze seed must be a non-negative int, got {seed!r}")
    rng = random.Random(seed)
    rooms = [(row, col) for row in range(1, size - 1, 2) for col in range(1, size - 1, 2)]
    in_tree = {rooms[rng.randrange(len(rooms))]}
    open_cells = set(in_tree)
    for first in rooms:
        if first in in_tree:
            continue
        # Loop-erased random walk: only the last exit taken from each room is kept.
        exit_to: dict[Position, Position] = {}
        room = first
        while room not in in_tree:
            steps = [
                (room[0] + d_row, room[1] + d_col)
                for d_row, d_col in _ROOM_STEPS
                if 0 < room[0] + d_row < size - 1 and 0 < room[1] + d_col < size - 1
            ]
            exit_to[room] = steps[rng.randrange(len(steps))]
            room = exit_to[room]
        room = first
        while room not in in_tree:
            nxt = exit_to[room]
            in_tree.add(room)
            open_cells.add(room)
            open_cells.add(((room[0] + nxt[0]) // 2, (room[1] + nxt[1]) // 2))
            room = nxt
    walls = tuple(tuple((row, col) not in open_cells for col in range(size)) for row in range(size))
    return Maze(size=size, walls=walls, start=(1, 1), target=(size - 2, size - 2), seed=seed)
