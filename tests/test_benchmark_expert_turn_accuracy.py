"""The held-out/training exact-answer benchmark counts every expert turn and scores it as SFT does."""

from __future__ import annotations

import torch

from benchmarks.expert_turn_accuracy import expert_turn_accuracy, main
from cluster_jobs.maze.eval_set import eval_set_for_size
from cluster_jobs.models.loading import load_processor
from cluster_jobs.models.tiny import build_tiny_qwen3_vl


def test_every_expert_turn_is_scored_and_a_perfect_model_answers_all(tmp_path, capsys):
    base = build_tiny_qwen3_vl(tmp_path / "m", maze_size=7)
    processor = load_processor(base)
    eval_set = eval_set_for_size(7)
    mazes = eval_set.mazes[:3]
    vocab = len(processor.tokenizer)

    class Perfect(torch.nn.Module):  # logits that put all mass on the true next token
        def forward(self, input_ids, **_):
            logits = torch.full((*input_ids.shape, vocab), -1e4)
            logits[:, :-1].scatter_(-1, input_ids[:, 1:, None], 1e4)
            return type("Out", (), {"logits": logits})()

    turns = sum(len(maze.shortest_path()) for maze in mazes)  # a move per step, then stop
    assert expert_turn_accuracy(Perfect(), processor, mazes, eval_set.max_turns) == (turns, turns)

    assert main(["--base-model", str(base), "--maze-size", "7", "--mazes", "2"]) == 0
    held_out, training = capsys.readouterr().out.splitlines()
    all_turns = sum(len(maze.shortest_path()) for maze in eval_set.mazes)
    assert held_out.startswith(f"held-out ({eval_set.name}): ") and f"/{all_turns} = " in held_out
    assert training.startswith("training (first 2): ") and training.endswith("expert turns answered exactly")
