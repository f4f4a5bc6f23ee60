"""Where a policy's greedy play first leaves the shortest path on the fixed held-out mazes, and how close the call was.

For each failed maze: the first turn off the BFS oracle's path (into a wall, or a legal wrong branch), the policy's
probability of the oracle's action and of its own, and the whole path played. Example::

    python -m research.first_errors --base-model research/results/sft-m9-d4-body-r920-cpu/checkpoint --maze-size 9 \\
        [--adapter DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from cluster_jobs.maze.actions import (
    DIRECTION_STEPS,
    STOP,
    Action,
    ActionParseError,
    parse_action,
)
from cluster_jobs.maze.env import MazeEpisode
from cluster_jobs.maze.eval_set import eval_set_for_size
from cluster_jobs.maze.generator import Maze
from cluster_jobs.maze.oracle import chat_view, oracle_action
from cluster_jobs.models.policy import VisionPolicy
from cluster_jobs.rollout import Episode, run_episodes, turn_chats
from local_stack.cluster_standins.tiny_trainer.batches import HISTORY_TURNS, encode_answers
from local_stack.cluster_standins.tiny_trainer.log_probs import token_log_probs

ACTIONS: tuple[Action, ...] = (*(Action("move", direction) for direction in range(4)), STOP)
MOVE_LETTERS = "RULD"  # VisGym's directions 0-3: right, up, left, down
# A failure "ends stuck" when at least its last STUCK_TURNS answers are one move into one wall.
STUCK_TURNS = 3
# Action -> probability, for the chat of one turn.
Scorer = Callable[[list[dict], str], dict[Action, float]]


@dataclass(frozen=True)
class FirstError:
    """The first turn of a failed episode whose action is not the oracle's.

    Attributes:
        seed: the maze's seed.
        turn: the turn (1-based).
        chosen: the policy's action; None for an answer that does not parse.
        oracle: the oracle's action.
        into_wall: the chosen move runs into a wall.
        p_oracle: the policy's probability of the oracle's action.
        p_chosen: of its own action (None for an unparsable answer).
    """

    seed: int
    turn: int
    chosen: Action | None
    oracle: Action
    into_wall: bool
    p_oracle: float
    p_chosen: float | None


def first_error(episode: Episode, score: Scorer) -> FirstError | None:
    """The first turn of ``episode`` whose answer is not the oracle's action; None if there is none."""
    for turn, (chat, answer) in enumerate(turn_chats(episode, HISTORY_TURNS), start=1):
        oracle = oracle_action(chat)
        try:
            chosen = parse_action(answer)
        except ActionParseError:
            chosen = None
        if chosen == oracle:
            continue
        view = chat_view(chat)
        into_wall = False
        if chosen is not None and chosen.name == "move":
            row, col = view.agent[0] + DIRECTION_STEPS[chosen.arg][0], view.agent[1] + DIRECTION_STEPS[chosen.arg][1]
            into_wall = not (0 <= row < len(view.walls) and 0 <= col < len(view.walls)) or view.walls[row][col]
        probabilities = score(chat, answer)
        return FirstError(
            seed=episode.seed,
            turn=turn,
            chosen=chosen,
            oracle=oracle,
            into_wall=into_wall,
            p_oracle=probabilities[oracle],
            p_chosen=None if chosen is None else probabilities[chosen],
        )
    return None


def played_path(episode: Episode, maze: Maze) -> list[str]:
    """Each turn of ``episode`` on ``maze`` as a letter: ``R U L D`` a move made, ``xR`` (etc.) a move into a
    wall (the agent stays), ``S`` a stop, ``?`` an unparsable answer; replayed through the environment's own rules."""
    env = MazeEpisode(maze, max_turns=max(1, len(episode.actions)))
    path = []
    for answer in episode.actions:
        before = env.agent
        info = env.step(answer).info
        if info["action"] is None:
            path.append("?")
            continue
        action = parse_action(info["action"])
        if action.name != "move":
            path.append("S")
        else:
            path.append(MOVE_LETTERS[action.arg] if info["agent"] != before else "x" + MOVE_LETTERS[action.arg])
    return path


def compact(path: Sequence[str]) -> str:
    """``path`` as text, a run of three or more equal turns written once with its length (``xR*23``)."""
    runs: list[list] = []
    for turn in path:
        if runs and runs[-1][0] == turn:
            runs[-1][1] += 1
        else:
            runs.append([turn, 1])
    return " ".join(f"{turn}*{count}" if count >= 3 else " ".join([turn] * count) for turn, count in runs)


def ends_stuck(path: Sequence[str]) -> bool:
    """The path's last ``STUCK_TURNS`` turns or more are one and the same move into a wall."""
    tail = path[-STUCK_TURNS:]
    return len(tail) == STUCK_TURNS and tail[0].startswith("x") and len(set(tail)) == 1


def path_summary(paths: Sequence[list[str]], failed: Sequence[bool]) -> list[str]:
    """Report lines: failures that end stuck, and the share of moves made up or left, over all ``paths``."""
    failures = [path for path, fail in zip(paths, failed, strict=False) if fail]
    moves = [turn for path in paths for turn in path if turn in MOVE_LETTERS]
    away = sum(turn in "UL" for turn in moves)
    return [
        f"failures ending stuck (one move into one wall for the last {STUCK_TURNS}+ turns): "
        f"{sum(ends_stuck(path) for path in failures)} of {len(failures)}",
        f"moves made up or left: {away} of {len(moves)}",
    ]


def action_scorer(policy: VisionPolicy) -> Scorer:
    """Each action's probability under ``policy``: the softmax of its whole answer's log-prob, written as the
    policy wrote its own answer (with or without VisGym's ``<action>`` tags)."""

    @torch.no_grad()
    def score(chat: list[dict], answer: str) -> dict[Action, float]:
        template = "<action>{}</action>" if "<action>" in answer else "{}"
        texts = [template.format(action.to_text()) for action in ACTIONS]
        inputs, mask = encode_answers(policy.processor, [chat] * len(texts), texts)
        log_probs = token_log_probs(policy.model, inputs, temperature=1.0)
        totals = torch.where(mask.to(log_probs.device), log_probs, torch.zeros_like(log_probs)).sum(dim=1)
        return dict(zip(ACTIONS, torch.softmax(totals, dim=0).tolist(), strict=False))

    return score


def summary(errors: Sequence[FirstError]) -> list[str]:
    """Report lines: counts by kind, the commonest (chosen, oracle) pairs, and the spread of p(oracle)."""
    if not errors:
        return ["no failed maze"]
    kinds = Counter(
        "into a wall" if e.into_wall else "unparsable" if e.chosen is None else "legal, wrong branch" for e in errors
    )
    pairs = Counter((e.chosen.to_text() if e.chosen else "?", e.oracle.to_text()) for e in errors)
    close = sum(e.p_oracle >= 0.3 for e in errors)
    return [
        "first errors: " + ", ".join(f"{count} {kind}" for kind, count in kinds.most_common()),
        "chosen -> oracle: " + ", ".join(f"{c} -> {o}: {n}" for (c, o), n in pairs.most_common(4)),
        (
            f"p(oracle) at the first error: median {statistics.median(e.p_oracle for e in errors):.2f}, "
            f"{close} of {len(errors)} at 0.3 or more (close calls)"
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    """CLI entry (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-model", type=Path, required=True)
    parser.add_argument("--adapter", type=Path, help="a PEFT LoRA adapter directory to play with")
    parser.add_argument("--maze-size", type=int, default=7)
    args = parser.parse_args(argv)
    policy = VisionPolicy.load(args.base_model)
    if args.adapter is not None:
        from peft import PeftModel

        policy = VisionPolicy(PeftModel.from_pretrained(policy.model, args.adapter), policy.processor)
    eval_set = eval_set_for_size(args.maze_size)
    episodes = run_episodes(policy.generate, eval_set.mazes, eval_set.max_turns, history_turns=HISTORY_TURNS)
    score = action_scorer(policy)
    errors = [error for episode in episodes if not episode.solved if (error := first_error(episode, score))]
    print(f"greedy: {sum(e.solved for e in episodes)}/{len(episodes)} solved on {eval_set.name}")
    for error in errors:
        chosen = error.chosen.to_text() if error.chosen else "unparsable"
        p_chosen = "-" if error.p_chosen is None else f"{error.p_chosen:.2f}"
        into_wall = " into a wall" if error.into_wall else ""
        print(
            f"  seed {error.seed:2d} turn {error.turn:2d}: {chosen} (p {p_chosen}) instead of "
            f"{error.oracle.to_text()} (p {error.p_oracle:.2f}){into_wall}"
        )
    for line in summary(errors):
        print(line)
    paths = [played_path(episode, maze) for episode, maze in zip(episodes, eval_set.mazes, strict=False)]
    for episode, maze, path in zip(episodes, eval_set.mazes, paths, strict=False):
        if not episode.solved:
            print(f"  seed {episode.seed:2d} (shortest path {maze.shortest_path_length()} moves): {compact(path)}")
    for line in path_summary(paths, [not episode.solved for episode in episodes]):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
