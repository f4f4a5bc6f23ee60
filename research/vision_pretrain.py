"""Pretraining of the tiny Qwen3-VL's vision tower on maze pictures, standing in for the 8B's pretrained ViT.

A linear probe on every merged image token (one maze cell) learns the cell's :data:`CELL_LABELS`, with ``route`` also
its :data:`ROUTE_LABELS` (a map of the maze's route); the probe is then dropped and the tower keeps what it learnt.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import torch
from PIL import Image
from transformers import PreTrainedModel, ProcessorMixin

from cluster_jobs.maze.actions import DIRECTION_STEPS
from cluster_jobs.maze.eval_set import training_seeds
from cluster_jobs.maze.generator import Maze, Position, generate_maze, grid_distances
from cluster_jobs.maze.oracle import closer_moves
from cluster_jobs.maze.render import render_maze

# Per cell: wall, target, agent, then "the neighbour in direction d is open" for d = 0..3 (action order).
CELL_LABELS = ("wall", "target", "agent", "right_open", "up_open", "left_open", "down_open")
# With route labels, per cell: "a move in direction d brings it one step closer to the target" for d = 0..3
# (none on a wall or on the target itself).
ROUTE_LABELS = ("toward_target_right", "toward_target_up", "toward_target_left", "toward_target_down")


@dataclass(frozen=True)
class VisionPretrainConfig:
    """How long and on what the vision tower is pretrained."""

    steps: int = 600
    pictures: int = 4000
    batch_size: int = 64
    learning_rate: float = 2e-3
    seed: int = 0
    route: bool = False  # also learn ROUTE_LABELS
    lr_decay: bool = False  # cosine decay of the learning rate to 0 over ``steps`` (else constant)


@dataclass(frozen=True)
class VisionPretrainAccuracy:
    """How well the probe read the pictures of the last logged steps: ``cells``, the fraction of all labels of
    every cell it got right; ``route`` (with route labels), the fraction of open cells but the target whose
    most likely route label is a move toward the target."""

    cells: float
    route: float | None = None


def cell_labels(maze: Maze, agent: Position) -> torch.Tensor:
    """``(size * size, len(CELL_LABELS))`` 0/1 labels of every cell in row-major order (the order of the
    merged image tokens when one token covers one cell)."""
    rows = []
    for row in range(maze.size):
        for col in range(maze.size):
            neighbours_open = [not maze.is_wall((row + dr, col + dc)) for dr, dc in DIRECTION_STEPS.values()]
            rows.append([maze.is_wall((row, col)), (row, col) == maze.target, (row, col) == agent, *neighbours_open])
    return torch.tensor(rows, dtype=torch.float32)


def route_labels(maze: Maze) -> torch.Tensor:
    """``(size * size, len(ROUTE_LABELS))`` 0/1 labels in row-major order: for every open cell but the target,
    the directions whose neighbour is one move closer to the target (exactly one in a generated maze)."""
    distance = grid_distances(maze.walls, maze.target)
    labels = torch.zeros(maze.size * maze.size, len(ROUTE_LABELS))
    for row, col in distance:
        labels[row * maze.size + col, closer_moves(distance, (row, col))] = 1
    return labels


def training_pictures(size: int, count: int, seed: int, route: bool = False) -> list[tuple[Image.Image, torch.Tensor]]:
    """``count`` pictures of training mazes (grids disjoint from the fixed evaluation set) with the agent on a
    random open cell (on the target one time in eight), and their cell labels (then their route labels, with
    ``route``)."""
    rng = random.Random(seed)
    pictures = []
    for maze_seed in training_seeds(count, size=size):
        maze = generate_maze(size, maze_seed)
        open_cells = [(r, c) for r in range(size) for c in range(size) if not maze.is_wall((r, c))]
        agent = maze.target if rng.random() < 1 / 8 else rng.choice(open_cells)
        labels = cell_labels(maze, agent)
        pictures.append((render_maze(maze, agent), torch.cat([labels, route_labels(maze)], dim=1) if route else labels))
    return pictures


def pretrain_vision(
    model: PreTrainedModel,
    processor: ProcessorMixin,
    maze_size: int,
    config: VisionPretrainConfig,
    device: str,
    log: Callable[[str], None] = print,
) -> VisionPretrainAccuracy:
    """Train ``model``'s vision tower in place with a linear probe on per-cell labels; returns how well the probe
    read the pictures of the last logged steps.

    Raises:
        ValueError: the processor does not map one merged image token to one maze cell.
    """
    generator = torch.Generator().manual_seed(config.seed)
    pictures = training_pictures(maze_size, config.pictures, config.seed, route=config.route)
    encoded = processor.image_processor(images=[picture for picture, _ in pictures], return_tensors="pt")
    tokens_per_picture = int(encoded["image_grid_thw"][0].prod()) // processor.image_processor.merge_size**2
    if tokens_per_picture != maze_size * maze_size:
        raise ValueError(
            f"{tokens_per_picture} image tokens per picture for a {maze_size}x{maze_size} maze; "
            "build the model with maze_size"
        )
    patches = encoded["pixel_values"].view(len(pictures), -1, encoded["pixel_values"].shape[-1]).to(device)
    grid = encoded["image_grid_thw"][0].to(device)
    labels = torch.stack([label for _, label in pictures]).to(device)
    visual = model.model.visual
    probe = torch.nn.Linear(model.config.text_config.hidden_size, labels.shape[-1]).to(device)
    optimizer = torch.optim.AdamW(
        [*visual.parameters(), *probe.parameters()], lr=config.learning_rate, weight_decay=0.0
    )
    schedule = learning_rate_schedule(optimizer, config)
    visual.train()
    correct: list[torch.Tensor] = []
    on_route: list[torch.Tensor] = []
    accuracy = VisionPretrainAccuracy(cells=0.0)
    for step in range(1, config.steps + 1):
        batch = torch.randint(len(pictures), (config.batch_size,), generator=generator).to(device)
        features = visual(patches[batch].flatten(0, 1), grid_thw=grid.repeat(config.batch_size, 1)).pooler_output
        logits = probe(features).view(config.batch_size, -1, labels.shape[-1])
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        correct.append(((logits > 0) == labels[batch].bool()).float().mean().detach())
        if config.route:
            on_route.append(route_accuracy(logits.detach(), labels[batch]))
        if step % 100 == 0 or step == config.steps:
            route = torch.stack(on_route).mean().item() if on_route else None
            accuracy = VisionPretrainAccuracy(cells=torch.stack(correct).mean().item(), route=route)
            correct, on_route = [], []
            route_text = "" if route is None else f", route accuracy {route:.4f}"
            log(
                f"vision pretraining step {step}/{config.steps}: loss {loss.item():.4f}, "
                f"cell-label accuracy {accuracy.cells:.4f}{route_text}"
            )
    return accuracy


def learning_rate_schedule(
    optimizer: torch.optim.Optimizer, config: VisionPretrainConfig
) -> torch.optim.lr_scheduler.LRScheduler:
    """The pretraining's schedule, stepped once after every optimizer step: constant, or with ``lr_decay`` a
    cosine from ``learning_rate`` down to 0 at step ``steps`` (a constant 2e-3 let long route pretraining
    diverge late)."""
    if config.lr_decay:
        return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(config.steps, 1))
    return torch.optim.lr_scheduler.ConstantLR(optimizer, factor=1.0, total_iters=0)


def route_accuracy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The fraction of cells with a route label whose most likely route label (the last ``len(ROUTE_LABELS)``
    columns of ``logits``) is one of them."""
    route_logits, route = logits[..., -len(ROUTE_LABELS) :], labels[..., -len(ROUTE_LABELS) :]
    chosen = route.gather(-1, route_logits.argmax(dim=-1, keepdim=True)).squeeze(-1)
    return chosen[route.sum(dim=-1) > 0].mean()
