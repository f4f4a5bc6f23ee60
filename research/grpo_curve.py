"""GRPO from an SFT start outside the pipeline: the learning curve on the fixed held-out set.

The local pipeline's tiny trainer, driven by a run spec built from the flags, writes ``metrics.jsonl``, ``curve.json``
and ``curve.png`` under ``--out``; the same command again resumes the run there. Example::

    python -m research.grpo_curve --base-model research/results/sft-m9-d4-body-r920-cpu/checkpoint --maze-size 9 \\
        --steps 30 --eval-interval 10 --ckpt-interval 20 --out out/grpo-9x9
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import get_args

import torch

from cluster_jobs.maze.eval_set import eval_set_for_size
from cluster_jobs.models.policy import ADAPTER_WEIGHTS_FILE, VisionPolicy
from cluster_jobs.rollout import run_episodes
from cluster_jobs.train.metrics import TrainMetric
from cluster_jobs.train.skyrl_launch import TrainPaths
from local_stack.cluster_standins.sft_start import file_sha256
from local_stack.cluster_standins.tiny_model import TINY_BASE_MODEL_ID
from local_stack.cluster_standins.tiny_trainer.batches import HISTORY_TURNS
from local_stack.cluster_standins.tiny_trainer.checkpoints import (
    LATEST_CKPT_FILE,
    LORA_ADAPTER_DIR,
    TRAINER_STATE_FILE,
    checkpoint_policy_dir,
    latest_checkpoint,
)
from local_stack.cluster_standins.tiny_trainer.train import train_tiny_grpo
from local_stack.cluster_standins.tiny_trainer.trainer import DynamicSamplingExhausted
from local_stack.cluster_standins.tiny_trainer.update import NonFiniteUpdateError
from mazeops.runspec import LrScheduler, parse_run_spec
from research.curve_plot import draw, load_run


class CurveMismatch(ValueError):
    """``--out`` holds a curve of another spec, base model or fork."""


class ForkError(ValueError):
    """``--fork-from`` is not a checkpoint folder of a curve from this base model, or ``--out`` is not empty."""


def start_solved(
    base_model: Path, maze_size: int, adapter: Path | None = None, dtype: torch.dtype | None = None
) -> int:
    """Held-out mazes the base model (in ``dtype``, with the PEFT LoRA ``adapter`` directory, if given)
    solves greedily under the set's turn budget."""
    eval_set = eval_set_for_size(maze_size)
    policy = VisionPolicy.load(base_model, dtype=dtype)
    name = None if adapter is None else "fork"
    if name is not None:
        policy.add_adapter(name, adapter)
    episodes = run_episodes(
        lambda chats: policy.generate(chats, adapter=name),
        eval_set.mazes,
        eval_set.max_turns,
        history_turns=HISTORY_TURNS,
    )
    return sum(episode.solved for episode in episodes)


def fork_record(checkpoint: Path, base_sha256: str) -> dict:
    """What a curve forked from ``checkpoint`` (a curve's ``ckpts/global_step_N`` folder) records: the
    folder, its step and its adapter's sha256.

    Raises:
        ForkError: if ``checkpoint`` is not such a folder, or its curve's ``curve.json`` (when it lies where
            :mod:`research.grpo_curve` puts it) names another base model than ``base_sha256``.
    """
    not_a_checkpoint = ForkError(
        f"--fork-from {checkpoint}: not a checkpoint folder (global_step_N holding "
        f"policy/{LORA_ADAPTER_DIR}/{ADAPTER_WEIGHTS_FILE} and policy/{TRAINER_STATE_FILE})"
    )
    match = re.fullmatch(r"global_step_([0-9]{1,9})", checkpoint.name)
    if match is None:
        raise not_a_checkpoint
    step = int(match[1])
    policy_dir = checkpoint_policy_dir(checkpoint.parent, step)
    adapter = policy_dir / LORA_ADAPTER_DIR / ADAPTER_WEIGHTS_FILE
    if not adapter.is_file() or not (policy_dir / TRAINER_STATE_FILE).is_file():
        raise not_a_checkpoint
    parents = checkpoint.resolve().parents  # a curve's: <run>/shared/maze-rl/grpo-curve/ckpts/global_step_N
    parent_curve = parents[4] / "curve.json" if len(parents) > 4 else None
    if parent_curve is not None and parent_curve.is_file():
        parent_base = json.loads(parent_curve.read_text()).get("base_model_sha256", base_sha256)
        if parent_base != base_sha256:
            raise ForkError(
                f"--fork-from {checkpoint}: its curve trained from another base model (weights sha256 {parent_base})"
            )
    return {"checkpoint": str(checkpoint), "step": step, "adapter_sha256": file_sha256(adapter)}


def _fork_identity(fork: dict | None) -> tuple[int, str] | None:
    """The checkpoint a fork started from, wherever it lies now."""
    return None if fork is None else (fork["step"], fork["adapter_sha256"])


def start_fork(fork: dict, ckpt_dir: Path, base_model: Path, maze_size: int, dtype: torch.dtype | None = None) -> int:
    """Copy the forked checkpoint into the new curve's empty ``ckpt_dir`` as its latest, and return the held-out
    mazes its adapter solves.

    Raises:
        ForkError: if ``ckpt_dir`` already holds a checkpoint.
    """
    if latest_checkpoint(ckpt_dir) is not None:
        raise ForkError(f"{ckpt_dir} already holds checkpoints: fork into a new --out")
    source = Path(fork["checkpoint"])
    shutil.copytree(source, ckpt_dir / source.name)
    (ckpt_dir / LATEST_CKPT_FILE).write_text(f"{fork['step']}\n")
    return start_solved(
        base_model, maze_size, adapter=checkpoint_policy_dir(ckpt_dir, fork["step"]) / LORA_ADAPTER_DIR, dtype=dtype
    )


def device_name() -> str:
    """The hardware this invocation trains on: the GPU's name, or ``cpu``."""
    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


def _without_place(document: dict) -> dict:
    """The spec without ``shared_dir``: a curve moved to another machine or checkout is the same run."""
    return {key: value for key, value in document.items() if key != "shared_dir"}


def main(argv: list[str] | None = None) -> int:
    """CLI entry (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-model", type=Path, required=True, help="the SFT start (a tiny Qwen3-VL checkpoint)")
    parser.add_argument("--maze-size", type=int, default=7)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--eval-interval", type=int, default=5)
    parser.add_argument("--ckpt-interval", type=int, default=5)
    parser.add_argument("--batch-mazes", type=int, default=8, help="mazes per step (train_batch_size)")
    parser.add_argument("--mini-batch-mazes", type=int, default=8, help="mazes per optimizer step")
    parser.add_argument("--samples", type=int, default=8, help="samples per maze (GRPO group)")
    parser.add_argument(
        "--train-mazes",
        type=int,
        default=2000,
        help="training mazes, cycled (= --batch-mazes: the same mazes every step)",
    )
    parser.add_argument(
        "--train-seed-offset",
        type=int,
        default=None,
        metavar="SEED",
        help="the first training maze's seed (the run spec's maze.seed_offset; default 1000000, the "
        "SFT starts' own training mazes)",
    )
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument(
        "--lr-warmup", type=int, default=0, help="optimizer steps of linear lr warmup (lr_warmup_steps)"
    )
    parser.add_argument(
        "--lr-scheduler",
        choices=get_args(LrScheduler),
        default="constant_with_warmup",
        help="lr_scheduler: cosine and linear decay the lr to 0 at the run's last optimizer step",
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=None,
        help="sampling temperature (default: the run spec's, 0.7, as on the cluster)",
    )
    parser.add_argument("--epochs", type=int, default=1, help="update_epochs_per_batch")
    parser.add_argument("--lora-targets", default="all-linear", help="LoRA target modules (comma list or all-linear)")
    parser.add_argument("--kl-coef", type=float, default=None, help="turn the KL loss on with this coefficient")
    parser.add_argument(
        "--dual-clip",
        type=float,
        default=None,
        metavar="C",
        help="policy_loss_type dual_clip with this clip_ratio_c (SkyRL's default 3.0)",
    )
    parser.add_argument(
        "--loss-reduction",
        choices=["token_mean", "sequence_mean"],
        default="token_mean",
        help="loss_reduction: sequence_mean averages each episode's tokens first",
    )
    parser.add_argument(
        "--no-std-norm",
        action="store_true",
        help="grpo_norm_by_std false (Dr. GRPO): advantages are reward minus the group's mean, not over its std",
    )
    parser.add_argument(
        "--dynamic-sampling",
        type=int,
        default=None,
        metavar="MAX_BATCHES",
        help="dynamic_sampling filter (DAPO): train only on groups whose rewards differ, playing up to "
        "MAX_BATCHES batches a step to fill one",
    )
    parser.add_argument(
        "--train-max-turns", type=int, default=None, help="training turn budget (default: the eval set's)"
    )
    parser.add_argument(
        "--turn-cost",
        type=float,
        default=None,
        metavar="COST",
        help="the run spec's turn_cost: a solved training episode earns 1 - COST * turns (default 0)",
    )
    parser.add_argument("--seed", type=int, default=0, help="the run spec's seed")
    parser.add_argument(
        "--fork-from",
        type=Path,
        default=None,
        metavar="CHECKPOINT",
        help="start a new curve in an empty --out from another curve's ckpts/global_step_N folder (same base model): "
        "its next step is the one the parent would have played, under this command's spec",
    )
    parser.add_argument(
        "--float32",
        action="store_true",
        help="float32 weights on a GPU too (default there: bfloat16; a CPU always runs float32)",
    )
    parser.add_argument(
        "--stop-after",
        type=float,
        default=None,
        help="end after the first step past this many seconds (rerun to resume)",
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    started = time.monotonic()
    args.out = args.out.resolve()  # the spec's shared_dir is absolute
    args.out.mkdir(parents=True, exist_ok=True)
    document = {
        "base_model_id": TINY_BASE_MODEL_ID,
        "backend": "tiny",
        "shared_dir": str(args.out / "shared"),
        "total_steps": args.steps,
        "eval_interval": args.eval_interval,
        "ckpt_interval": args.ckpt_interval,
        "train_batch_size": args.batch_mazes,
        "policy_mini_batch_size": args.mini_batch_mazes,
        "n_samples_per_prompt": args.samples,
        "learning_rate": args.lr,
        "update_epochs_per_batch": args.epochs,
        "lora": {
            "target_modules": args.lora_targets if args.lora_targets == "all-linear" else args.lora_targets.split(",")
        },
        "max_turns": args.train_max_turns or eval_set_for_size(args.maze_size).max_turns,
        "maze": {"size": args.maze_size, "train_mazes": args.train_mazes},
        "seed": args.seed,
    }
    # Options off by default enter the spec only when set: a curve's spec names what it changed.
    if args.train_seed_offset is not None:
        document["maze"]["seed_offset"] = args.train_seed_offset
    if args.temperature is not None:
        document |= {"temperature": args.temperature}
    if args.kl_coef is not None:
        document |= {"use_kl_loss": True, "kl_loss_coef": args.kl_coef}
    if args.lr_warmup:
        document |= {"lr_warmup_steps": args.lr_warmup}
    if args.lr_scheduler != "constant_with_warmup":
        document |= {"lr_scheduler": args.lr_scheduler}
    if args.dual_clip is not None:
        document |= {"policy_loss_type": "dual_clip", "clip_ratio_c": args.dual_clip}
    if args.loss_reduction != "token_mean":
        document |= {"loss_reduction": args.loss_reduction}
    if args.no_std_norm:
        document |= {"grpo_norm_by_std": False}
    if args.dynamic_sampling is not None:
        document |= {"dynamic_sampling": "filter", "dynamic_sampling_max_batches": args.dynamic_sampling}
    if args.turn_cost is not None:
        document |= {"turn_cost": args.turn_cost}
    spec = parse_run_spec(json.dumps(document), "grpo-curve", {TINY_BASE_MODEL_ID: str(args.base_model.resolve())})
    curve_file = args.out / "curve.json"
    previous = json.loads(curve_file.read_text()) if curve_file.is_file() else None
    if previous is not None and _without_place(previous["spec"]) != _without_place(document):
        raise CurveMismatch(f"{args.out} holds a curve with another spec: {previous['spec']}")
    base_sha256 = file_sha256(args.base_model / "model.safetensors")  # the same start wherever the checkpoint lies
    if previous is not None and previous["base_model_sha256"] != base_sha256:
        raise CurveMismatch(
            f"{args.out} holds a curve from another base model (weights sha256 {previous['base_model_sha256']}, "
            f"not {base_sha256} of {args.base_model})"
        )
    if previous is not None and previous.get("float32", False) != args.float32:
        raise CurveMismatch(f"{args.out} holds a curve {'with' if previous.get('float32') else 'without'} --float32")
    dtype = torch.float32 if args.float32 else None
    fork = fork_record(args.fork_from, base_sha256) if args.fork_from is not None else None
    if previous is not None and _fork_identity(previous.get("fork")) != _fork_identity(fork):
        raise CurveMismatch(f"{args.out} holds a curve forked from {previous.get('fork')}, not from {fork}")
    start = (
        previous["start_solved"] if previous is not None else start_solved(args.base_model, args.maze_size, dtype=dtype)
    )
    print(f"SFT start: {start}/64 held-out", flush=True)
    paths = TrainPaths.for_run(spec)
    if fork is not None:
        fork["solved"] = (
            previous["fork"]["solved"]
            if previous is not None
            else start_fork(fork, paths.ckpt_dir, args.base_model, args.maze_size, dtype)
        )
        print(f"forked at step {fork['step']}: {fork['solved']}/64 held-out", flush=True)
    first_step = (latest_checkpoint(paths.ckpt_dir) or 0) + 1  # the trainer resumes after it
    error = None
    try:
        train_tiny_grpo(spec, paths, stop_after_s=args.stop_after, dtype=dtype)
    except (DynamicSamplingExhausted, NonFiniteUpdateError) as failure:
        # The trainer refused a step; the steps before it are still recorded and drawn.
        error = f"{type(failure).__name__}: {failure}"
    metrics_text = paths.metrics_file.read_text() if paths.metrics_file.is_file() else ""
    (args.out / "metrics.jsonl").write_text(metrics_text)
    metrics = [TrainMetric(**json.loads(line)) for line in metrics_text.splitlines()]
    points = [(m.step, m.eval_solve_rate) for m in metrics if m.eval_solve_rate is not None]
    last_step = metrics[-1].step if metrics else 0
    invocation = {
        "command": "python -m research.grpo_curve " + shlex.join(sys.argv[1:] if argv is None else argv),
        "steps": [first_step, last_step] if last_step >= first_step else [],
        "seconds": round(time.monotonic() - started, 1),
        "device": device_name(),
    }
    if error is not None:
        invocation["error"] = error
    result = {
        "spec": document,
        "base_model_sha256": base_sha256,
        **({"float32": True} if args.float32 else {}),
        "start_solved": start,
        **({"fork": fork} if fork is not None else {}),
        "held_out": [{"step": step, "solved": round(rate * 64), "solve_rate": rate} for step, rate in points],
        "last_step": last_step,
        "complete": last_step == args.steps,
        "invocations": (previous["invocations"] if previous is not None else []) + [invocation],
    }
    curve_file.write_text(json.dumps(result, indent=1) + "\n")
    draw(
        [load_run(args.out)],
        f"GRPO from the SFT start, {args.maze_size}x{args.maze_size} mazes",
        args.out / "curve.png",
    )
    for point in result["held_out"]:
        print(f"step {point['step']}: {point['solved']}/64 held-out (start {start}/64)")
    if error is not None:
        print(f"step {last_step} of {args.steps}: training stopped: {error}", file=sys.stderr)
        return 1
    print(f"step {last_step} of {args.steps}" + ("" if result["complete"] else ": run the same command again to go on"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
