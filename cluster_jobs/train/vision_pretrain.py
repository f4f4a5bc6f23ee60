"""Pretraining of the tiny Qwen3-VL's vision tower on maze pictures: what a pretrained ViT brings to the 8B.

Qwen3-VL-8B's vision tower was pretrained on billions of images before any maze SFT; the tiny model's
starts from random weights. Its one expert action per turn is too sparse a signal to teach it to see
(SFT of a random tower plateaus at "on target + previous move", docs/learning.md). So the tower is
first trained on dense labels of generated training mazes: for every merged image token (one maze
cell), a linear probe reads the cell's content (wall, target, agent) and which of its four
neighbours are open. The probe is thrown away; the tower and its mergers keep what they learnt and the
SFT trains everything from there.
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
from cluster_jobs.maze.generator import Maze, Position, generate_maze
from cluster_jobs.maze.render import render_maze

# Per cell: wall, target, agent, then "the neighbour in direction d is open" for d = 0..3 (action order).
CELL_LABELS = ("wall", "target", "agent", "right_open", "up_open", "left_open", "down_open")


@dataclass(frozen=True)
class VisionPretrainConfig:
    """How long and on what the vision tower is pretrained."""

    steps: int = 600
    pictures: int = 4000
    batch_size: int = 64
    learning_rate: float = 2e-3
    seed: int = 0


def cell_labels(maze: Maze, agent: Position) -> torch.Tensor:
    """``(size * size, len(CELL_LABELS))`` 0/1 labels of every cell in row-major order (the order of the
    merged image tokens when one token covers one cell)."""
    rows = []
    for row in range(maze.size):
        for col in range(maze.size):
            neighbours_open = [not maze.is_wall((row + dr, col + dc)) for dr, dc in DIRECTION_STEPS.values()]
            rows.append([maze.is_wall((row, col)), (row, col) == maze.target, (row, col) == agent, *neighbours_open])
    return torch.tensor(rows, dtype=torch.float32)


def training_pictures(size: int, count: int, seed: int) -> list[tuple[Image.Image, torch.Tensor]]:
    """``count`` pictures of training mazes (grids disjoint from the fixed evaluation set) with the agent on a
    random open cell (on the target one time in eight), and their cell labels."""
    rng = random.Random(seed)
    pictures = []
    for maze_seed in training_seeds(count, size=size):
        maze = generate_maze(size, maze_seed)
        open_cells = [(r, c) for r in range(size) for c in range(size) if not maze.is_wall((r, c))]
        agent = maze.target if rng.random() < 1 / 8 else rng.choice(open_cells)
        pictures.append((render_maze(maze, agent), cell_labels(maze, agent)))
    return pictures


def pretrain_vision(
    model: PreTrainedModel,
    processor: ProcessorMixin,
    maze_size: int,
    config: VisionPretrainConfig,
    device: str,
    log: Callable[[str], None] = print,
) -> float:
    """Train ``model``'s vision tower in place with a linear probe on per-cell labels; returns the probe's
    per-label accuracy over the last logged steps (the fraction of the 7 labels of every cell it gets right).

    Raises:
        ValueError: the processor does not map one merged image token to one maze cell.
    """
    generator = torch.Generator().manual_seed(config.seed)
    pictures = training_pictures(maze_size, config.pictures, config.seed)
    encoded = processor.image_processor(images=[picture for picture, _ in pictures], return_tensors="pt")
    tokens_per_picture = int(encoded["image_grid_thw"][0].prod()) // processor.image_processor.merge_size**2
    if tokens_per_picture != maze_size * maze_size:
        raise ValueError(f"{tokens_per_picture} image tokens per picture for a {maze_size}x{maze_size} maze; build the model with maze_size")
    patches = encoded["pixel_values"].view(len(pictures), -1, encoded["pixel_values"].shape[-1]).to(device)
    grid = encoded["image_grid_thw"][0].to(device)
    labels = torch.stack([label for _, label in pictures]).to(device)
    visual = model.model.visual
    probe = torch.nn.Linear(model.config.text_config.hidden_size, len(CELL_LABELS)).to(device)
    optimizer = torch.optim.AdamW([*visual.parameters(), *probe.parameters()], lr=config.learning_rate, weight_decay=0.0)
    visual.train()
    correct: list[torch.Tensor] = []
    accuracy = 0.0
    for step in range(1, config.steps + 1):
        batch = torch.randint(len(pictures), (config.batch_size,), generator=generator).to(device)
        features = visual(patches[batch].flatten(0, 1), grid_thw=grid.repeat(config.batch_size, 1)).pooler_output
        logits = probe(features).view(config.batch_size, -1, len(CELL_LABELS))
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        correct.append(((logits > 0) == labels[batch].bool()).float().mean().detach())
        if step % 100 == 0 or step == config.steps:
            accuracy = torch.stack(correct).mean().item()
            correct = []
            log(f"vision pretraining step {step}/{config.steps}: loss {loss.item():.4f}, cell-label accuracy {accuracy:.4f}")
    return accuracy
