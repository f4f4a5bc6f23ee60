"""Supervised training of GRPO's adapter from an SFT start: how far the LoRA that GRPO trains can get at all.

Trains a LoRA of the run spec's shape on the language model (``--full``: the whole language model) on the start's own
SFT data, plays the held-out set every ``--eval-every`` steps and writes ``lora_sft.json`` into ``--out``. Example::

    python -m research.lora_sft --base-model research/results/sft-m9-d4-body-r920-cpu/checkpoint --steps 480 \\
        --eval-every 40 --out out/lora-sft
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from peft import get_peft_model
from transformers import AutoModelForImageTextToText

from cluster_jobs.maze.eval_set import eval_set_for_size
from cluster_jobs.models.loading import load_processor
from cluster_jobs.models.policy import VisionPolicy
from local_stack.cluster_standins.tiny_trainer.trainer import lora_config
from mazeops.runspec import LoraSpec
from research.sft import (
    REPORT_FILE,
    SftConfig,
    answer_loss,
    collate,
    encode_samples,
    expert_samples,
    held_out_solve_rate,
)

LM_TARGETS = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
RESULT_FILE = "lora_sft.json"
# What decides the SFT's expert turns (expert_samples); a report saved before a field existed ran with its default.
DATA_FIELDS = ("maze_size", "train_mazes", "detour_prob", "wall_bumps", "seed")


def start_data_config(base_model: Path, train_mazes: int | None = None) -> SftConfig:
    """The expert data the start's SFT trained on (:data:`DATA_FIELDS`), from its ``sft_report.json``;
    ``train_mazes`` takes the first that many of those mazes instead."""
    stored = json.loads((base_model / REPORT_FILE).read_text())["config"]
    data = {name: stored.get(name, getattr(SftConfig, name)) for name in DATA_FIELDS}  # older reports lack later fields
    if train_mazes:
        data["train_mazes"] = train_mazes
    return SftConfig(**data)


def trainable_model(model: torch.nn.Module, lora: LoraSpec | None, also_train: str | None = None) -> torch.nn.Module:
    """``model`` with its vision tower frozen and, with ``lora``, everything else frozen too under a fresh LoRA
    built as GRPO builds it (:func:`~local_stack.cluster_standins.tiny_trainer.trainer.lora_config`), plus full
    copies of the ``also_train`` modules (PEFT's ``modules_to_save``, names matched as suffixes); without ``lora``,
    the whole language model trains."""
    model.model.visual.requires_grad_(False)
    if lora is None:
        return model
    config = lora_config(lora)
    config.modules_to_save = also_train.split(",") if also_train else None
    return get_peft_model(model, config)


def train(
    model: torch.nn.Module,
    encoded: Sequence,
    pad_token_id: int,
    steps: int,
    batch_size: int,
    lr: float,
    seed: int,
    evaluate: Callable[[int], None],
    eval_every: int,
    log: Callable[[str], None] = print,
    temperature: float = 1.0,
) -> None:
    """AdamW on the answer tokens of random batches of ``encoded`` turns for ``steps`` steps, the loss on the
    logits divided by ``temperature``; ``evaluate(step)`` every ``eval_every`` steps (never with 0)."""
    trained = [parameter for parameter in model.parameters() if parameter.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=lr, weight_decay=0.0)
    order = torch.Generator().manual_seed(seed)
    losses, exact = [], []
    for step in range(1, steps + 1):
        model.train()
        batch = torch.randint(len(encoded), (batch_size,), generator=order).tolist()
        loss, batch_exact = answer_loss(model, collate([encoded[i] for i in batch], pad_token_id), temperature)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        exact.append(batch_exact.float().mean().item())
        if eval_every and step % eval_every == 0:
            log(
                f"step {step}/{steps}: loss {sum(losses) / len(losses):.4f}, "
                f"exact answers {sum(exact) / len(exact):.3f}"
            )
            losses, exact = [], []
            model.eval()
            evaluate(step)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-model", type=Path, required=True, help="an SFT checkpoint with its sft_report.json")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--full", action="store_true", help="train the whole language model (the SFT's way), not a LoRA"
    )
    parser.add_argument("--lora-targets", default=LM_TARGETS)
    parser.add_argument("--rank", type=int, default=LoraSpec().rank, help="LoRA rank (the run spec's default)")
    parser.add_argument("--alpha", type=int, default=LoraSpec().alpha, help="LoRA alpha (the run spec's default)")
    parser.add_argument(
        "--also-train",
        default=None,
        metavar="MODULES",
        help="modules trained in full beside the LoRA, e.g. lm_head (a diagnosis: vLLM serves LoRA weights only)",
    )
    parser.add_argument("--steps", type=int, default=480)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument(
        "--temperature",
        type=float,
        default=1.0,
        help="the loss on logits / T, as GRPO scores its samples (greedy play does not change)",
    )
    parser.add_argument("--eval-every", type=int, default=40, help="held-out play every N steps (0: none)")
    parser.add_argument(
        "--train-mazes", type=int, default=None, help="the first N of the start's training mazes (default: all)"
    )
    parser.add_argument("--workers", type=int, default=0, help="processes encoding the expert turns")
    args = parser.parse_args(argv)

    started = time.monotonic()
    config = start_data_config(args.base_model, args.train_mazes)
    processor = load_processor(args.base_model)
    base = AutoModelForImageTextToText.from_pretrained(args.base_model, dtype=torch.float32)
    lora = None if args.full else LoraSpec(rank=args.rank, alpha=args.alpha, target_modules=args.lora_targets)
    model = trainable_model(base, lora, args.also_train)
    encoded = encode_samples(processor, expert_samples(config), args.workers)
    eval_set = eval_set_for_size(config.maze_size)
    policy = VisionPolicy(model, processor)
    result = {
        "command": shlex.join(["python", "-m", "research.lora_sft", *(sys.argv[1:] if argv is None else argv)]),
        "trains": "the language model"
        if args.full
        else (
            f"LoRA r {lora.rank} alpha {lora.alpha} on {lora.target_modules}"
            + (f", and {args.also_train} in full" if args.also_train else "")
        ),
        "temperature": args.temperature,
        "trained_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "turns": len(encoded),
        "curve": [],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    print(
        f"{result['trains']}: {result['trained_parameters']} parameters; {len(encoded)} expert turns from "
        f"{config.train_mazes} training mazes, encoded in {time.monotonic() - started:.0f} s"
    )

    def evaluate(step: int) -> None:
        solved, _ = held_out_solve_rate(policy, eval_set)
        result["curve"].append({"step": step, "solved": solved})
        (args.out / RESULT_FILE).write_text(json.dumps(result, indent=1) + "\n")
        print(f"step {step}: {solved}/{len(eval_set.mazes)} held-out, {time.monotonic() - started:.0f} s", flush=True)

    evaluate(0)
    pad = processor.tokenizer.pad_token_id
    train(
        model,
        encoded,
        pad,
        args.steps,
        args.batch_size,
        args.lr,
        config.seed,
        evaluate,
        args.eval_every,
        temperature=args.temperature,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
