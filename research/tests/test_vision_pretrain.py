"""Vision-tower pretraining on per-cell maze labels: the labels, their order against the image tokens, a short run."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster_jobs.maze.actions import DIRECTION_STEPS
from cluster_jobs.maze.generator import generate_maze
from cluster_jobs.maze.render import render_maze
from cluster_jobs.models.loading import load_base_model
from local_stack.cluster_standins.tiny_model import build_tiny_qwen3_vl
from research.vision_pretrain import (
    CELL_LABELS,
    ROUTE_LABELS,
    VisionPretrainConfig,
    cell_labels,
    learning_rate_schedule,
    pretrain_vision,
    route_accuracy,
    route_labels,
    training_pictures,
)


@pytest.fixture(scope="module")
def maze7_model(tmp_path_factory):
    return load_base_model(build_tiny_qwen3_vl(tmp_path_factory.mktemp("tiny7"), maze_size=7), device="cpu")


def test_cell_labels_mark_walls_target_agent_and_open_neighbours():
    maze = generate_maze(7, 123)
    labels = cell_labels(maze, maze.start).view(7, 7, len(CELL_LABELS))
    column = {name: index for index, name in enumerate(CELL_LABELS)}
    assert labels[..., column["agent"]].sum() == 1 and labels[(*maze.start, column["agent"])] == 1
    assert labels[..., column["target"]].sum() == 1 and labels[(*maze.target, column["target"])] == 1
    assert labels[0, :, column["wall"]].all() and not labels[(*maze.start, column["wall"])]
    # The outer ring is wall, so nothing beyond the grid is ever open.
    assert not labels[0, :, column["up_open"]].any() and not labels[:, 6, column["right_open"]].any()
    for row in range(1, 6):
        for col in range(1, 6):
            assert labels[row, col, column["right_open"]] == (not maze.walls[row][col + 1])
            assert labels[row, col, column["down_open"]] == (not maze.walls[row + 1][col])


def test_following_the_route_labels_from_the_start_walks_the_shortest_path():
    maze = generate_maze(9, 7)
    labels = route_labels(maze).view(9, 9, len(ROUTE_LABELS))
    walked = [maze.start]
    while walked[-1] != maze.target:
        (direction,) = labels[walked[-1]].nonzero().flatten().tolist()
        walked.append((walked[-1][0] + DIRECTION_STEPS[direction][0], walked[-1][1] + DIRECTION_STEPS[direction][1]))
    assert walked == maze.shortest_path()


@settings(max_examples=40, deadline=None)
@given(size=st.sampled_from([5, 7, 9, 11]), seed=st.integers(min_value=0, max_value=10**6))
def test_every_open_cell_but_the_target_has_one_route_label_leading_to_an_open_cell(size, seed):
    maze = generate_maze(size, seed)
    labels = route_labels(maze).view(size, size, len(ROUTE_LABELS))
    for row in range(size):
        for col in range(size):
            moves = labels[row, col].nonzero().flatten().tolist()
            if maze.is_wall((row, col)) or (row, col) == maze.target:
                assert moves == []
            else:
                (direction,) = moves
                assert not maze.is_wall((row + DIRECTION_STEPS[direction][0], col + DIRECTION_STEPS[direction][1]))


def test_route_accuracy_counts_only_cells_with_a_route_label():
    labels = torch.zeros(1, 3, len(CELL_LABELS) + len(ROUTE_LABELS))
    labels[0, 0, -4], labels[0, 1, -1] = 1, 1  # cell 0 goes right, cell 1 down, cell 2 is a wall
    logits = torch.zeros_like(labels)
    logits[0, 0, -4], logits[0, 1, -3], logits[0, 2, -2] = 5.0, 5.0, 5.0
    assert route_accuracy(logits, labels).item() == 0.5


@pytest.mark.parametrize("lr_decay", [False, True])
def test_the_learning_rate_stays_constant_or_decays_to_zero_on_a_cosine(lr_decay):
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.AdamW([parameter], lr=2e-3)
    schedule = learning_rate_schedule(optimizer, VisionPretrainConfig(steps=10, learning_rate=2e-3, lr_decay=lr_decay))
    rates = []
    for _ in range(10):
        optimizer.step()
        schedule.step()
        rates.append(optimizer.param_groups[0]["lr"])
    if lr_decay:
        assert all(later < earlier for earlier, later in zip(rates, rates[1:], strict=False)) and rates[
            -1
        ] == pytest.approx(0.0, abs=1e-12)
        assert rates[4] == pytest.approx(1e-3)  # half-way down the cosine
    else:
        assert rates == [2e-3] * 10


def test_the_merged_image_tokens_follow_the_cells_in_row_major_order(maze7_model):
    model, processor = maze7_model
    maze = generate_maze(7, 5)
    moved = (
        (maze.start[0], maze.start[1] + 1)
        if not maze.walls[maze.start[0]][maze.start[1] + 1]
        else (maze.start[0] + 1, maze.start[1])
    )
    encoded = processor.image_processor(
        images=[render_maze(maze, maze.start), render_maze(maze, moved)], return_tensors="pt"
    )
    with torch.no_grad():
        first, second = model.model.get_image_features(encoded["pixel_values"], encoded["image_grid_thw"]).pooler_output
    changed = ((first - second).norm(dim=-1) > 1e-3).nonzero().flatten().tolist()
    assert changed == sorted([maze.start[0] * 7 + maze.start[1], moved[0] * 7 + moved[1]])


def test_pretraining_teaches_the_tower_more_than_the_label_frequencies(maze7_model):
    model, processor = maze7_model
    labels = torch.stack([label for _, label in training_pictures(7, 256, seed=0)])
    majority = torch.maximum(labels.mean(dim=(0, 1)), 1 - labels.mean(dim=(0, 1))).mean().item()
    accuracy = pretrain_vision(
        model, processor, 7, VisionPretrainConfig(steps=200, pictures=256, batch_size=32), "cpu", log=lambda line: None
    )
    assert accuracy.cells > majority + 0.05 and accuracy.route is None, (accuracy, majority)


def test_pretraining_with_route_labels_learns_the_route_better_than_its_most_frequent_move(tmp_path):
    model, processor = load_base_model(build_tiny_qwen3_vl(tmp_path / "tiny7", maze_size=7), device="cpu")
    labels = torch.stack([label for _, label in training_pictures(7, 256, seed=0, route=True)])[..., len(CELL_LABELS) :]
    routed = labels[labels.sum(dim=-1) > 0]
    most_frequent = routed.mean(dim=0).max().item()
    config = VisionPretrainConfig(steps=200, pictures=256, batch_size=32, route=True)
    accuracy = pretrain_vision(model, processor, 7, config, "cpu", log=lambda line: None)
    assert accuracy.route > most_frequent + 0.1, (accuracy, most_frequent)


def test_a_model_whose_image_tokens_are_not_cells_is_refused(tmp_path):
    model, processor = load_base_model(build_tiny_qwen3_vl(tmp_path / "tiny"), device="cpu")
    with pytest.raises(ValueError, match="16 image tokens per picture for a 7x7 maze"):
        pretrain_vision(model, processor, 7, VisionPretrainConfig(steps=1, pictures=2, batch_size=2), "cpu")
