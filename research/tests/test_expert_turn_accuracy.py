"""research.expert_turn_accuracy counts every expert turn and scores it as SFT does."""

from __future__ import annotations

from cluster_jobs.maze.eval_set import eval_set_for_size
from cluster_jobs.models.loading import load_processor
from local_stack.cluster_standins.tiny_model import build_tiny_qwen3_vl
from research.expert_turn_accuracy import expert_turn_accuracy, main
from tests.fixtures_models import PerfectNextToken


def test_every_expert_turn_is_scored_and_a_perfect_model_answers_all(tmp_path, capsys):
    base = build_tiny_qwen3_vl(tmp_path / "m", maze_size=7)
    processor = load_processor(base)
    eval_set = eval_set_for_size(7)
    mazes = eval_set.mazes[:3]
    turns = sum(len(maze.shortest_path()) for maze in mazes)  # a move per step, then stop
    assert expert_turn_accuracy(PerfectNextToken(len(processor.tokenizer)), processor, mazes, eval_set.max_turns) == (
        turns,
        turns,
    )

    assert main(["--base-model", str(base), "--maze-size", "7", "--mazes", "2"]) == 0
    held_out, training = capsys.readouterr().out.splitlines()
    all_turns = sum(len(maze.shortest_path()) for maze in eval_set.mazes)
    assert held_out.startswith(f"held-out ({eval_set.name}): ") and f"/{all_turns} = " in held_out
    assert training.startswith("training (first 2): ") and training.endswith("expert turns answered exactly")
