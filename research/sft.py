"""The SFT start: a freshly built tiny Qwen3-VL fine-tuned on expert maze play (:mod:`research.expert`).

Answer-token cross-entropy, held-out greedy play every ``eval_every`` steps once exact answers reach
``eval_from_exact``, and the last checkpoint whose held-out rate lies in ``band`` kept; ``--resume`` goes on
with a run that ``max_seconds`` stopped. Example::

    python -m research.sft --maze-size 7 --out out/sft-m7
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy
import torch
from safetensors.torch import load_file
from transformers import AutoModelForImageTextToText, ProcessorMixin

from cluster_jobs.maze.eval_set import EvalSet, eval_set_for_size, training_seeds
from cluster_jobs.maze.generator import generate_maze
from cluster_jobs.models.loading import (
    default_device,
    encode_answered_chats,
    load_processor,
)
from cluster_jobs.models.policy import VisionPolicy
from cluster_jobs.rollout import run_episodes, turn_chats
from local_stack.cluster_standins.sft_start import REPORT_FILE, checkpoint_files, file_sha256, files_sha256
from local_stack.cluster_standins.tiny_model import TinyShape, build_tiny_qwen3_vl
from research.expert import expert_episodes
from research.vision_pretrain import VisionPretrainConfig, pretrain_vision

HISTORY_TURNS = 1  # the chat shape of rollouts and evaluation (cluster_jobs.evaluate.job)
# With past_band: the best checkpoint above the band, a loadable model beside the kept one (not a
# GRPO start: it shows how far supervised play gets, and what GRPO does from there).
PAST_BAND_BEST_DIR = "past-band-best"
# Where a run stopped by its time limit keeps what the next invocation needs to go on (not a checkpoint).
RESUME_DIR = "resume"
TRAINER_STATE_FILE = "trainer_state.pt"
# Config fields that say how fast, for how long or how often one invocation plays the held-out set, not what it
# trains (greedy play draws no random numbers, so it leaves training as it was): a resumed invocation may change them.
PER_INVOCATION_FIELDS = ("workers", "max_seconds", "eval_every", "eval_from_exact")

Sample = tuple[list[dict], str]


class SftOutOfBand(RuntimeError):
    """No evaluated checkpoint had a held-out solve rate inside the band."""


class SftCannotResume(RuntimeError):
    """``--resume`` found no stopped run of the same config to go on with."""


@dataclass(frozen=True)
class SftConfig:
    """What one SFT run does; recorded in the report."""

    maze_size: int = 7
    train_mazes: int = 2000
    detour_prob: float = 0.15
    wall_bumps: bool = False
    steps: int = 4000
    batch_size: int = 64
    learning_rate: float = 1e-3
    eval_every: int = 200
    eval_from_exact: float = 0.5
    band: tuple[float, float] = (0.30, 0.55)
    past_band: bool = False
    seed: int = 0
    workers: int = 0
    max_seconds: float = float("inf")
    shape: TinyShape = field(default_factory=TinyShape)
    vision_pretrain: VisionPretrainConfig = field(default_factory=VisionPretrainConfig)
    # SFT trains the language model only, the vision tower (and its merger) staying as pretraining left it,
    # as GRPO's LoRA, which vLLM serves on the language model, does.
    freeze_vision: bool = False
    # The vision tower (and its merger) of another SFT checkpoint of the same shape, instead of pretraining one here
    # (vision_pretrain.steps must then be 0): a new language model on a tower already made, in minutes on a CPU.
    vision_from: str | None = None
    # The readout (lm_head and the final norm) of another SFT checkpoint of the same shape, kept as taken: the start
    # then learns only in what GRPO's LoRA on the language model's linear layers can change too. A LoRA cannot move the
    # readout, and vLLM serves no readout LoRA for Qwen3 (research/RESULTS.md); a readout left as built caps every
    # logit near 1.3, and a built one scaled up stalls the SFT, so it comes from a model whose SFT trained it, as an
    # 8B's comes from its pretraining.
    readout_from: str | None = None


# The weights that --vision-from and --readout-from take from another checkpoint (the names in model.safetensors).
VISION_PARTS = ("model.visual.",)
READOUT_PARTS = ("lm_head.", "model.language_model.norm.")


class SftConfigError(ValueError):
    """An SFT config that cannot run as asked (e.g. a tower both taken from a checkpoint and pretrained here)."""


@dataclass
class SftReport:
    """The learning curve and the kept checkpoint."""

    config: dict
    command: str
    eval_set: str
    eval_set_sha256: str
    eval_max_turns: int
    samples: int
    vision_pretrain_accuracy: float | None = None
    vision_pretrain_route_accuracy: float | None = None
    vision_from_sha256: str | None = None
    readout_from_sha256: str | None = None
    curve: list[dict] = field(default_factory=list)
    chosen_step: int | None = None
    chosen_solve_rate: float | None = None
    chosen_solved: int | None = None
    past_band_best_step: int | None = None
    past_band_best_solved: int | None = None
    files_sha256: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    resume_step: int | None = None
    resumed_commands: list[str] = field(default_factory=list)


def expert_samples(config: SftConfig) -> list[Sample]:
    """``(chat, answer)`` pairs of the expert's non-detour turns on ``config.train_mazes`` training mazes."""
    eval_set = eval_set_for_size(config.maze_size)
    mazes = [
        generate_maze(config.maze_size, seed) for seed in training_seeds(config.train_mazes, size=config.maze_size)
    ]
    episodes, detours = expert_episodes(
        mazes,
        eval_set.max_turns,
        HISTORY_TURNS,
        detour_prob=config.detour_prob,
        seed=config.seed,
        wall_bumps=config.wall_bumps,
    )
    return [
        sample
        for episode, episode_detours in zip(episodes, detours, strict=False)
        for sample, detour in zip(turn_chats(episode, HISTORY_TURNS), episode_detours, strict=False)
        if not detour
    ]


def held_out_solve_rate(policy: VisionPolicy, eval_set: EvalSet) -> tuple[int, float]:
    """``(solved, rate)`` of greedy play on the fixed set under its turn budget."""
    episodes = run_episodes(policy.generate, eval_set.mazes, eval_set.max_turns, history_turns=HISTORY_TURNS)
    solved = sum(episode.solved for episode in episodes)
    return solved, solved / len(episodes)


def answer_loss(
    model: torch.nn.Module, batch: tuple[dict, torch.Tensor], temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean cross-entropy of the answer tokens (prompt, image and padding tokens masked out), of the logits
    divided by ``temperature`` (as GRPO scores its samples), and per sample whether greedy decoding reproduces
    every answer token (teacher-forced; the temperature does not change it)."""
    inputs, mask = batch
    logits = model(**inputs).logits[:, :-1].float() / temperature
    targets = inputs["input_ids"][:, 1:]
    token_loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    answer = mask[:, 1:]
    loss = (token_loss * answer).sum() / answer.sum().clamp(min=1)
    exact = ((logits.argmax(dim=-1) == targets) | ~answer).all(dim=1)
    return loss, exact


@dataclass(frozen=True)
class EncodedSample:
    """One expert turn encoded once: token ids, image patches (float16 to halve memory), answer mask."""

    input_ids: torch.Tensor
    mm_token_type_ids: torch.Tensor
    pixel_values: torch.Tensor
    image_grid_thw: torch.Tensor
    answer_mask: torch.Tensor


_worker_processor: ProcessorMixin | None = None


def _init_worker(processor: ProcessorMixin) -> None:
    global _worker_processor
    _worker_processor = processor
    # One thread each: the workers already fill the cores, and each one's own OpenMP pool (8
    # threads with the GPU scripts' OMP_NUM_THREADS) made encoding 2x slower on 2 cores, and the
    # 9x9 SFT's on 16 cores took 185-360 s for 28718 turns.
    torch.set_num_threads(1)


def _encode_in_worker(sample: Sample) -> dict[str, numpy.ndarray]:
    # Arrays, not tensors: tensors cross processes as shared-memory file descriptors, which some
    # sandboxes (gVisor) refuse ("received 0 items of ancdata"); arrays are pickled by value.
    assert _worker_processor is not None
    return {name: value.numpy() for name, value in vars(encode_sample(_worker_processor, sample)).items()}


def encode_sample(processor: ProcessorMixin, sample: Sample) -> EncodedSample:
    """Encode one ``(chat, answer)`` (see :func:`~cluster_jobs.models.loading.encode_answered_chats`)."""
    inputs, mask = encode_answered_chats(processor, [sample[0]], [sample[1]])
    return EncodedSample(
        input_ids=inputs["input_ids"][0],
        mm_token_type_ids=inputs["mm_token_type_ids"][0],
        pixel_values=inputs["pixel_values"].to(torch.float16),
        image_grid_thw=inputs["image_grid_thw"],
        answer_mask=mask[0],
    )


def encode_samples(processor: ProcessorMixin, samples: Sequence[Sample], workers: int) -> list[EncodedSample]:
    """Encode every sample once, in ``workers`` processes (0: in this one)."""
    if workers <= 0:
        return [encode_sample(processor, sample) for sample in samples]
    # spawn, not fork: a fork of a process whose OpenMP threads are running can deadlock.
    context = multiprocessing.get_context("spawn")
    with context.Pool(workers, initializer=_init_worker, initargs=(processor,)) as pool:
        arrays = pool.map(_encode_in_worker, samples, chunksize=64)
    return [EncodedSample(**{name: torch.from_numpy(value) for name, value in fields.items()}) for fields in arrays]


def collate(samples: Sequence[EncodedSample], pad_token_id: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Left-pad encoded samples into one batch: model inputs and the answer mask."""
    width = max(len(sample.input_ids) for sample in samples)

    def left_pad(rows: list[torch.Tensor], value: int) -> torch.Tensor:
        return torch.stack([torch.nn.functional.pad(row, (width - len(row), 0), value=value) for row in rows])

    inputs = {
        "input_ids": left_pad([s.input_ids for s in samples], pad_token_id),
        "attention_mask": left_pad([torch.ones_like(s.input_ids) for s in samples], 0),
        "mm_token_type_ids": left_pad([s.mm_token_type_ids for s in samples], 0),
        "pixel_values": torch.cat([s.pixel_values for s in samples]).to(torch.float32),
        "image_grid_thw": torch.cat([s.image_grid_thw for s in samples]),
    }
    return inputs, left_pad([s.answer_mask for s in samples], 0).bool()


def train_sft(
    config: SftConfig,
    out_dir: Path,
    device: str | None = None,
    command: str = "",
    log: Callable[[str], None] = print,
    resume: bool = False,
) -> SftReport:
    """Run SFT per ``config`` into the empty or new directory ``out_dir``: the checkpoint, ``sft_report.json`` and,
    with ``past_band``, ``past-band-best/``.

    With ``resume``, go on with the run that its time limit stopped in ``out_dir`` (the same config,
    but for :data:`PER_INVOCATION_FIELDS`), from its ``resume/`` state; the report keeps its curve.

    Raises:
        FileExistsError: without ``resume``, ``out_dir`` already holds files.
        SftCannotResume: with ``resume``, ``out_dir`` holds no stopped run of this config.
        SftOutOfBand: the run ended and no evaluated checkpoint landed in ``config.band`` (the report is still written).
        SftConfigError: ``vision_from`` with vision pretraining steps, or ``vision_from``/``readout_from`` not a
            checkpoint of this shape.
    """
    if config.vision_from is not None and config.vision_pretrain.steps:
        raise SftConfigError(
            "a tower taken from a checkpoint (vision_from) is not pretrained again: "
            "set the vision pretraining steps to 0"
        )
    out_dir = Path(out_dir)
    device = device or default_device()
    started = time.monotonic()
    if resume:
        report, state = _stopped_run(out_dir, config)
        report.resume_step = None
        report.resumed_commands.append(command)
        model = AutoModelForImageTextToText.from_pretrained(out_dir / RESUME_DIR, dtype=torch.float32).to(device)
    else:
        if out_dir.exists() and any(out_dir.iterdir()):
            raise FileExistsError(
                f"{out_dir} is not empty; SFT writes a new checkpoint (--resume goes on with a stopped run)"
            )
        state = None
        torch.manual_seed(config.seed)
        build_tiny_qwen3_vl(out_dir, seed=config.seed, shape=config.shape, maze_size=config.maze_size)
        model = AutoModelForImageTextToText.from_pretrained(out_dir, dtype=torch.float32).to(device)
    processor = load_processor(out_dir)
    eval_set = eval_set_for_size(config.maze_size)
    samples = expert_samples(config)
    if state is None:
        report = SftReport(
            config=asdict(config),
            command=command,
            eval_set=eval_set.name,
            eval_set_sha256=eval_set.sha256,
            eval_max_turns=eval_set.max_turns,
            samples=len(samples),
        )
        if config.vision_from is not None:
            report.vision_from_sha256 = load_parts(model, Path(config.vision_from), VISION_PARTS)
            log(f"vision tower from {config.vision_from} (model.safetensors sha256 {report.vision_from_sha256})")
        if config.readout_from is not None:
            report.readout_from_sha256 = load_parts(model, Path(config.readout_from), READOUT_PARTS)
            log(f"readout from {config.readout_from} (model.safetensors sha256 {report.readout_from_sha256})")
    seconds_before = report.seconds

    def run_seconds() -> float:  # over every invocation of the run, this one's so far included
        return round(seconds_before + time.monotonic() - started, 1)

    log(
        f"SFT: {len(samples)} expert turns from {config.train_mazes} training mazes of "
        f"{config.maze_size}x{config.maze_size}; held-out set {eval_set.name} ({len(eval_set.mazes)} mazes, "
        f"{eval_set.max_turns} turns); device {device}"
    )
    # Resident on the device once: batches are then cut there, not copied each step.
    encoded = [
        EncodedSample(**{name: value.to(device) for name, value in vars(sample).items()})
        for sample in encode_samples(processor, samples, config.workers)
    ]
    log(f"encoded {len(encoded)} turns in {time.monotonic() - started:.0f} s")
    if state is None and config.vision_pretrain.steps:
        accuracy = pretrain_vision(model, processor, config.maze_size, config.vision_pretrain, device, log)
        report.vision_pretrain_accuracy = round(accuracy.cells, 4)
        if accuracy.route is not None:
            report.vision_pretrain_route_accuracy = round(accuracy.route, 4)
    if config.freeze_vision:
        model.model.visual.requires_grad_(False)
    if config.readout_from is not None:
        model.lm_head.requires_grad_(False)
        model.model.language_model.norm.requires_grad_(False)
    trained = [parameter for parameter in model.parameters() if parameter.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=config.learning_rate, weight_decay=0.0)
    order = torch.Generator().manual_seed(config.seed)
    batches, first_step = [], 1
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
        order.set_state(state["order"])
        torch.set_rng_state(state["rng"])
        batches, first_step = state["batches"], state["step"] + 1
        log(f"resumed at step {first_step} of {config.steps}")
    policy = VisionPolicy(model, processor)
    # The steps since the last report: an invocation stopped between reports hands them on, so the next report's means
    # are whole (older states, stopped on a report step, hold none). The state was loaded on the CPU, so they move to
    # this invocation's device.
    losses, exact = (
        ([], [])
        if state is None
        else (
            [value.to(device) for value in state.get("interval_losses", [])],
            [value.to(device) for value in state.get("interval_exact", [])],
        )
    )
    low, high = config.band
    for step in range(first_step, config.steps + 1):
        # The limit is checked after every step (here, before the next), not only at reports: an outer timeout must
        # not find the run between two reports with its state unsaved.
        done = step - 1
        if done >= first_step and time.monotonic() - started > config.max_seconds:
            _save_resume_state(out_dir / RESUME_DIR, model, optimizer, order, batches, done, losses, exact)
            report.resume_step, report.seconds = done, run_seconds()
            _write_report(report, out_dir)
            log(f"stopped at step {done} of {config.steps} on the time limit; the same command with --resume goes on")
            return report
        model.train()
        if not batches:  # a new epoch, reshuffled
            permutation = torch.randperm(len(encoded), generator=order).tolist()
            batches = [
                permutation[i : i + config.batch_size]
                for i in range(0, len(permutation) - config.batch_size + 1, config.batch_size)
            ]
        inputs, mask = collate([encoded[i] for i in batches.pop()], processor.tokenizer.pad_token_id)
        loss, batch_exact = answer_loss(model, (inputs, mask))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
        exact.append(batch_exact.float().mean())
        if step % config.eval_every and step != config.steps:
            continue
        mean_loss, mean_exact = torch.stack(losses).mean().item(), torch.stack(exact).mean().item()
        losses, exact = [], []
        if mean_exact < config.eval_from_exact and step != config.steps:
            log(
                f"step {step}/{config.steps}: loss {mean_loss:.4f}, exact answers {mean_exact:.3f} "
                f"(held-out play waits for {config.eval_from_exact}), {time.monotonic() - started:.0f} s"
            )
        else:
            model.eval()
            solved, rate = held_out_solve_rate(policy, eval_set)
            report.curve.append(
                {
                    "step": step,
                    "loss": round(mean_loss, 5),
                    "train_exact": round(mean_exact, 4),
                    "solved": solved,
                    "solve_rate": rate,
                }
            )
            saved = ""
            if low <= rate <= high:
                model.save_pretrained(out_dir)
                report.chosen_step, report.chosen_solve_rate, report.chosen_solved = step, rate, solved
                saved = " (in band: saved)"
            elif (
                rate > high
                and config.past_band
                and (report.past_band_best_solved is None or solved > report.past_band_best_solved)
            ):
                save_beside(model, out_dir, out_dir / PAST_BAND_BEST_DIR)
                report.past_band_best_step, report.past_band_best_solved = step, solved
                saved = f" (best past the band: saved to {PAST_BAND_BEST_DIR}/)"
            log(
                f"step {step}/{config.steps}: loss {mean_loss:.4f}, exact answers {mean_exact:.3f}, "
                f"held-out {solved}/{len(eval_set.mazes)} = {rate:.3f}{saved}, {time.monotonic() - started:.0f} s"
            )
            report.seconds = run_seconds()
            _write_report(report, out_dir)
            if rate > high and not config.past_band:
                break
    shutil.rmtree(out_dir / RESUME_DIR, ignore_errors=True)  # the run has ended: nothing to go on with
    if report.chosen_step is None:
        report.seconds = run_seconds()
        _write_report(report, out_dir)
        raise SftOutOfBand(
            f"no checkpoint had a held-out solve rate in [{low}, {high}]; curve in {out_dir / REPORT_FILE}"
        )
    return report


def _save_resume_state(
    target: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    order: torch.Generator,
    batches: list,
    step: int,
    losses: list[torch.Tensor],
    exact: list[torch.Tensor],
) -> None:
    """Keep in ``target`` what a resumed invocation needs to go on exactly after ``step``, the ``losses`` and
    ``exact``-answer rates of the steps since the last report included."""
    model.save_pretrained(target)
    state = {
        "step": step,
        "optimizer": optimizer.state_dict(),
        "order": order.get_state(),
        "batches": batches,
        "rng": torch.get_rng_state(),
        "interval_losses": losses,
        "interval_exact": exact,
    }
    torch.save(state, target / TRAINER_STATE_FILE)


def _stopped_run(out_dir: Path, config: SftConfig) -> tuple[SftReport, dict]:
    """The report and the training state of the run that its time limit stopped in ``out_dir``.

    Raises:
        SftCannotResume: no readable report, no stopped run, or a run of another config.
    """
    try:
        report = SftReport(**json.loads((out_dir / REPORT_FILE).read_text()))
    except (OSError, ValueError, TypeError) as error:
        raise SftCannotResume(f"{out_dir}: no readable SFT report to resume ({error})") from error
    state_file = out_dir / RESUME_DIR / TRAINER_STATE_FILE
    if report.resume_step is None or not state_file.is_file():
        raise SftCannotResume(
            f"{out_dir}: no stopped run to resume (the run ended, or never stopped on its time limit)"
        )
    if _what_it_trains(_with_defaults(report.config, asdict(SftConfig()))) != _what_it_trains(asdict(config)):
        raise SftCannotResume(f"{out_dir} holds a run of another config: {report.config}")
    return report, torch.load(state_file, map_location="cpu", weights_only=True)


def _with_defaults(stored: dict, defaults: dict) -> dict:
    """``stored`` (a config as an older run saved it) with every field it lacks, at any depth, taken from
    ``defaults``: a field added later defaults to what runs did before it existed."""
    filled = dict(stored)
    for key, default in defaults.items():
        if key not in filled:
            filled[key] = default
        elif isinstance(default, dict) and isinstance(filled[key], dict):
            filled[key] = _with_defaults(filled[key], default)
    return filled


def _what_it_trains(config: dict) -> dict:
    """A config as JSON holds it (tuples as lists), without the fields a resumed invocation may change."""
    return {key: value for key, value in json.loads(json.dumps(config)).items() if key not in PER_INVOCATION_FIELDS}


def load_parts(model: torch.nn.Module, checkpoint: Path, prefixes: tuple[str, ...]) -> str:
    """Load every weight of ``checkpoint`` whose name starts with one of ``prefixes`` into ``model``.

    ``model`` must have exactly those weights under those prefixes, with the same shapes. Returns the sha256 of the
    checkpoint's ``model.safetensors``.

    Raises:
        SftConfigError: ``checkpoint`` has no ``model.safetensors``, or its weights under ``prefixes`` do not fit
            ``model``'s.
    """
    weights = Path(checkpoint) / "model.safetensors"
    if not weights.is_file():
        raise SftConfigError(f"{checkpoint} is not a checkpoint: no model.safetensors")
    taken = {name: value for name, value in load_file(weights).items() if name.startswith(prefixes)}
    own = {name: value for name, value in model.state_dict().items() if name.startswith(prefixes)}
    misfits = sorted(set(own) ^ set(taken)) + sorted(
        name for name in own.keys() & taken.keys() if own[name].shape != taken[name].shape
    )
    if misfits:
        raise SftConfigError(
            f"the weights of {checkpoint} under {', '.join(prefixes)} do not fit this shape: {', '.join(misfits[:5])}"
        )
    with torch.no_grad():
        for name, value in taken.items():
            own[name].copy_(value)
    return file_sha256(weights)


def save_beside(model: torch.nn.Module, out_dir: Path, target: Path) -> None:
    """Save ``model`` to ``target`` as a whole checkpoint: ``out_dir``'s tokenizer, processor and
    config files, and the model's weights."""
    target.mkdir(exist_ok=True)
    for path in checkpoint_files(out_dir):
        if path.name != "model.safetensors":
            shutil.copyfile(path, target / path.name)
    model.save_pretrained(target)


def _write_report(report: SftReport, out_dir: Path) -> None:
    """Write ``sft_report.json`` with the hashes of the checkpoint files as they are now."""
    report.files_sha256 = files_sha256(out_dir)
    (out_dir / REPORT_FILE).write_text(json.dumps(asdict(report), indent=1) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry: ``python -m research.sft --maze-size 7 --out DIR [options]``."""
    defaults, shape = SftConfig(), TinyShape()
    parser = argparse.ArgumentParser(
        description="SFT of the tiny Qwen3-VL on expert maze play (the GRPO starting point)."
    )
    parser.add_argument("--out", required=True, type=Path, help="new directory for the checkpoint and sft_report.json")
    parser.add_argument("--maze-size", type=int, default=defaults.maze_size)
    parser.add_argument("--train-mazes", type=int, default=defaults.train_mazes)
    parser.add_argument("--detour-prob", type=float, default=defaults.detour_prob)
    parser.add_argument(
        "--wall-bumps",
        action="store_true",
        help="detours may run into walls (the data then shows recovering from 'Cannot move into a wall.')",
    )
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
    parser.add_argument("--lr", type=float, default=defaults.learning_rate)
    parser.add_argument("--eval-every", type=int, default=defaults.eval_every)
    parser.add_argument(
        "--eval-from-exact",
        type=float,
        default=defaults.eval_from_exact,
        help="play the held-out set only once this fraction of training answers is exactly right",
    )
    parser.add_argument("--band", type=float, nargs=2, default=defaults.band, metavar=("LOW", "HIGH"))
    parser.add_argument(
        "--past-band",
        action="store_true",
        help="go on after a rate passes the band, to record how far SFT gets (the kept checkpoint is still the last "
        f"in the band; the best one above it goes to {PAST_BAND_BEST_DIR}/)",
    )
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--workers", type=int, default=defaults.workers, help="processes encoding the expert turns")
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=defaults.max_seconds,
        help="stop after the first step past this many seconds (resumable with --resume)",
    )
    parser.add_argument("--hidden", type=int, default=shape.hidden)
    parser.add_argument("--layers", type=int, default=shape.layers)
    parser.add_argument("--heads", type=int, default=shape.heads)
    parser.add_argument("--kv-heads", type=int, default=shape.kv_heads)
    parser.add_argument("--head-dim", type=int, default=shape.head_dim)
    parser.add_argument("--intermediate", type=int, default=shape.intermediate)
    parser.add_argument("--vision-hidden", type=int, default=shape.vision_hidden)
    parser.add_argument("--vision-depth", type=int, default=shape.vision_depth)
    parser.add_argument(
        "--vision-pretrain-steps",
        type=int,
        default=defaults.vision_pretrain.steps,
        help="steps of vision-tower pretraining on per-cell maze labels before SFT (0: none)",
    )
    parser.add_argument(
        "--route-labels",
        action="store_true",
        help="vision pretraining also teaches every cell the move toward the target (a route map)",
    )
    parser.add_argument(
        "--vision-lr-decay",
        action="store_true",
        help="vision pretraining's learning rate decays to 0 on a cosine (else constant)",
    )
    parser.add_argument(
        "--freeze-vision",
        action="store_true",
        help="after vision pretraining, train the language model only (the tower as GRPO's LoRA leaves it)",
    )
    parser.add_argument(
        "--vision-from",
        default=None,
        metavar="CHECKPOINT",
        help="take the vision tower of this SFT checkpoint (same shape) instead of pretraining one "
        "(with --vision-pretrain-steps 0)",
    )
    parser.add_argument(
        "--readout-from",
        default=None,
        metavar="CHECKPOINT",
        help="take lm_head and the final norm of this SFT checkpoint (same shape) and keep them as taken "
        "(what GRPO's LoRA cannot change either)",
    )
    parser.add_argument("--device", default=None)
    parser.add_argument(
        "--resume",
        action="store_true",
        help="go on with the run that --max-seconds stopped in --out (the same flags but --workers, --max-seconds, "
        "--eval-every and --eval-from-exact)",
    )
    args = parser.parse_args(argv)
    config = SftConfig(
        maze_size=args.maze_size,
        train_mazes=args.train_mazes,
        detour_prob=args.detour_prob,
        wall_bumps=args.wall_bumps,
        steps=args.steps,
        batch_size=args.batch_size,
        learning_rate=args.lr,
        eval_every=args.eval_every,
        eval_from_exact=args.eval_from_exact,
        band=tuple(args.band),
        past_band=args.past_band,
        seed=args.seed,
        workers=args.workers,
        max_seconds=args.max_seconds,
        shape=TinyShape(
            hidden=args.hidden,
            layers=args.layers,
            heads=args.heads,
            kv_heads=args.kv_heads,
            head_dim=args.head_dim,
            intermediate=args.intermediate,
            vision_hidden=args.vision_hidden,
            vision_depth=args.vision_depth,
        ),
        vision_pretrain=VisionPretrainConfig(
            steps=args.vision_pretrain_steps, route=args.route_labels, lr_decay=args.vision_lr_decay
        ),
        freeze_vision=args.freeze_vision,
        vision_from=args.vision_from,
        readout_from=args.readout_from,
    )
    command = "python -m research.sft " + shlex.join(sys.argv[1:] if argv is None else list(argv))
    try:
        report = train_sft(config, args.out, device=args.device, command=command, resume=args.resume)
    except (SftOutOfBand, SftCannotResume, SftConfigError, FileExistsError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    if report.resume_step is not None:
        kept = (
            "none in the band yet"
            if report.chosen_step is None
            else f"step {report.chosen_step} ({report.chosen_solved} solved)"
        )
        print(
            f"stopped at step {report.resume_step} on the time limit (kept so far: {kept}); "
            "rerun with --resume to go on"
        )
        return 0
    print(
        f"kept step {report.chosen_step}: held-out {report.chosen_solved} solved = "
        f"{report.chosen_solve_rate:.3f} -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
