"""What an SFT policy must see to imitate the expert: label accuracy of lookup tables on feature sets.

Each feature set keys a table of the expert's answers on ``--mazes`` training mazes; its accuracy is the best
exact-answer rate a policy seeing only those features can reach. Example::

    python -m research.sft_label_ceilings --maze-size 7
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from collections.abc import Callable

from cluster_jobs.maze.actions import DIRECTION_STEPS, STOP
from cluster_jobs.maze.eval_set import training_seeds
from cluster_jobs.maze.generator import Maze, Position, generate_maze
from research.expert import expert_action

# What a policy sees at one turn: on_target, the previous move (None first), the agent's cell, and
# whether each neighbour (right, up, left, down: directions 0-3) is a wall.
Turn = tuple[bool, int | None, Position, tuple[bool, bool, bool, bool]]

FEATURE_SETS: dict[str, Callable[[Turn], tuple]] = {
    "on target": lambda t: (t[0],),
    "on target + previous move": lambda t: (t[0], t[1]),
    "on target + agent cell": lambda t: (t[0], t[2]),
    "on target + right/down walls": lambda t: (t[0], t[3][0], t[3][3]),
    "on target + previous move + right/down walls": lambda t: (t[0], t[1], t[3][0], t[3][3]),
    "on target + 4 walls": lambda t: (t[0], t[3]),
    "on target + previous move + 4 walls": lambda t: (t[0], t[1], t[3]),
}


def expert_turns(maze: Maze) -> list[tuple[Turn, str]]:
    """Each turn of the expert's shortest-path play of ``maze`` with the expert's answer."""
    turns, position, previous = [], maze.start, None
    while True:
        action = expert_action(maze, position)
        walls = tuple(
            maze.is_wall((position[0] + dr, position[1] + dc)) for _, (dr, dc) in sorted(DIRECTION_STEPS.items())
        )
        turns.append(((position == maze.target, previous, position, walls), action.to_text()))
        if action == STOP:
            return turns
        d_row, d_col = DIRECTION_STEPS[int(action.arg)]
        position, previous = (position[0] + d_row, position[1] + d_col), int(action.arg)


def ceilings(turns: list[tuple[Turn, str]]) -> dict[str, float]:
    """Feature set -> best exact-answer rate of a lookup table on those features."""
    result = {}
    for name, features in FEATURE_SETS.items():
        table: dict[tuple, Counter] = defaultdict(Counter)
        for turn, answer in turns:
            table[features(turn)][answer] += 1
        result[name] = sum(counts.most_common(1)[0][1] for counts in table.values()) / len(turns)
    return result


def main(argv: list[str] | None = None) -> int:
    """CLI entry (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--maze-size", type=int, default=7)
    parser.add_argument("--mazes", type=int, default=1000)
    args = parser.parse_args(argv)
    turns = [
        turn
        for seed in training_seeds(args.mazes, size=args.maze_size)
        for turn in expert_turns(generate_maze(args.maze_size, seed))
    ]
    print(f"{len(turns)} expert turns on {args.mazes} training mazes of {args.maze_size}x{args.maze_size}")
    for name, rate in ceilings(turns).items():
        print(f"  {rate:.3f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
