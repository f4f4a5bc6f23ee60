"""The SFT starting point: expert play, its training samples, encoding, the checkpoint check, a short real run."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForImageTextToText

from cluster_jobs.maze.env import WALL_FEEDBACK
from cluster_jobs.maze.eval_set import eval_set_for_size, training_seeds
from cluster_jobs.maze.generator import generate_maze
from cluster_jobs.maze.oracle import oracle_action
from cluster_jobs.models.loading import load_processor
from cluster_jobs.models.policy import VisionPolicy
from local_stack.cluster_standins.sft_start import SftCheckpointMismatch, file_sha256, verify_checkpoint
from local_stack.cluster_standins.tiny_model import TinyShape, build_tiny_qwen3_vl
from research.expert import ExpertPlayer, expert_action, expert_episodes
from research.sft import (
    PAST_BAND_BEST_DIR,
    REPORT_FILE,
    RESUME_DIR,
    TRAINER_STATE_FILE,
    SftCannotResume,
    SftConfig,
    SftConfigError,
    SftOutOfBand,
    answer_loss,
    collate,
    encode_samples,
    expert_samples,
    train_sft,
)
from research.vision_pretrain import VisionPretrainConfig
from tests.fixtures_models import PerfectNextToken


def test_the_expert_solves_every_held_out_maze_in_the_fewest_turns():
    eval_set = eval_set_for_size(7)
    episodes, detours = expert_episodes(eval_set.mazes, eval_set.max_turns, history_turns=1)
    assert all(episode.solved for episode in episodes)
    for maze, episode in zip(eval_set.mazes, episodes, strict=False):
        assert len(episode.messages) == 1 + 2 * len(maze.shortest_path())  # a move per cell, then stop
    assert not any(flag for flags in detours for flag in flags)


def test_every_label_is_the_move_the_image_in_its_chat_calls_for():
    """Expert labels agree with the BFS oracle reading the chat's latest image (no turn is off by one),
    and detour turns never become labels."""
    samples = expert_samples(SftConfig(train_mazes=30, detour_prob=0.3, seed=1, wall_bumps=True))
    _, detours = expert_episodes(
        [generate_maze(7, seed) for seed in training_seeds(30, size=7)],
        17,
        history_turns=1,
        detour_prob=0.3,
        seed=1,
        wall_bumps=True,
    )
    flagged = sum(flag for flags in detours for flag in flags)
    turns = sum(len(flags) for flags in detours)
    assert flagged > 0 and len(samples) == turns - flagged
    for chat, answer in samples:
        assert answer == oracle_action(chat).to_text()
    # With wall bumps some detours ran into a wall (the loop above checked the labels after them);
    # without, no expert turn ever sees the wall feedback.
    assert any(WALL_FEEDBACK in chat[-1]["content"][-1]["text"] for chat, _ in samples)
    legal_only = expert_samples(SftConfig(train_mazes=30, detour_prob=0.3, seed=1))
    assert not any(WALL_FEEDBACK in chat[-1]["content"][-1]["text"] for chat, _ in legal_only)


def test_expert_action_stops_on_the_target_and_rejects_bad_detour_rates():
    maze = generate_maze(7, training_seeds(1, size=7)[0])
    assert expert_action(maze, maze.target).to_text() == "('stop', 'stop')"
    with pytest.raises(ValueError, match="detour_prob"):
        ExpertPlayer([maze], max_turns=5, detour_prob=1.0)


@pytest.fixture(scope="module")
def tiny7(tmp_path_factory) -> Path:
    return build_tiny_qwen3_vl(tmp_path_factory.mktemp("tiny7") / "m", maze_size=7)


def test_encoding_in_workers_equals_encoding_here(tiny7):
    processor = load_processor(tiny7)
    samples = expert_samples(SftConfig(train_mazes=3))[:6]
    here, workers = encode_samples(processor, samples, 0), encode_samples(processor, samples, 2)
    for one, other in zip(here, workers, strict=False):
        for name, value in vars(one).items():
            assert torch.equal(value, getattr(other, name)), name


def test_the_loss_counts_only_answer_tokens(tiny7):
    processor = load_processor(tiny7)
    samples = encode_samples(processor, expert_samples(SftConfig(train_mazes=2))[:3], 0)
    inputs, mask = collate(samples, processor.tokenizer.pad_token_id)
    assert mask.sum() == sum(int(sample.answer_mask.sum()) for sample in samples)

    loss, exact = answer_loss(PerfectNextToken(len(processor.tokenizer)), (inputs, mask))
    assert loss.item() == pytest.approx(0.0, abs=1e-6) and exact.all()


def test_a_temperature_divides_the_logits_and_leaves_the_exact_answers(tiny7):
    processor = load_processor(tiny7)
    model = AutoModelForImageTextToText.from_pretrained(tiny7, dtype=torch.float32)
    batch = collate(
        encode_samples(processor, expert_samples(SftConfig(train_mazes=2))[:3], 0), processor.tokenizer.pad_token_id
    )

    class Doubled(torch.nn.Module):  # the same model with every logit x 2
        def forward(self, **inputs):
            output = model(**inputs)
            output.logits = output.logits * 2
            return output

    with torch.no_grad():
        halved, exact = answer_loss(model, batch, temperature=0.5)
        doubled, doubled_exact = answer_loss(Doubled(), batch)
        plain = answer_loss(model, batch)[0]
    assert halved.item() == pytest.approx(doubled.item(), rel=1e-5) and halved.item() != pytest.approx(plain.item())
    assert torch.equal(exact, doubled_exact)


def test_a_short_sft_run_writes_its_curve_and_refuses_a_band_it_never_reached(tmp_path):
    config = SftConfig(
        train_mazes=4,
        steps=2,
        batch_size=4,
        eval_every=2,
        eval_from_exact=0.0,
        band=(0.99, 1.0),
        shape=TinyShape(),
        vision_pretrain=VisionPretrainConfig(steps=2, pictures=8, batch_size=4),
    )
    with pytest.raises(SftOutOfBand, match="no checkpoint had a held-out solve rate in"):
        train_sft(config, tmp_path / "out", device="cpu", log=lambda line: None)
    report = json.loads((tmp_path / "out" / REPORT_FILE).read_text())
    assert [point["step"] for point in report["curve"]] == [2]
    assert report["curve"][0]["solved"] == 0 and report["chosen_step"] is None
    assert report["eval_set_sha256"] == eval_set_for_size(7).sha256
    with pytest.raises(FileExistsError):
        train_sft(config, tmp_path / "out", device="cpu", log=lambda line: None)

    # Past the band: a rate above it ends the run, unless past_band asks for the rest of the curve.
    above = replace(config, steps=4, band=(-1.0, -0.5))
    # With past_band the best rate above the band (the first of equals) is saved, loadable, beside.
    for past_band, steps, best_step in ((False, [2], None), (True, [2, 4], 2)):
        with pytest.raises(SftOutOfBand):
            train_sft(
                replace(above, past_band=past_band), tmp_path / f"past-{past_band}", device="cpu", log=lambda line: None
            )
        past = json.loads((tmp_path / f"past-{past_band}" / REPORT_FILE).read_text())
        assert [point["step"] for point in past["curve"]] == steps
        assert (past["past_band_best_step"], past["past_band_best_solved"]) == (
            best_step,
            None if best_step is None else 0,
        )
        assert (tmp_path / f"past-{past_band}" / PAST_BAND_BEST_DIR).is_dir() is past_band
    # It loads as a whole checkpoint, and holds the trained weights (the run's own directory, never
    # in the band, still holds the random build).
    best_dir, built = tmp_path / "past-True" / PAST_BAND_BEST_DIR, tmp_path / "past-True" / "model.safetensors"
    VisionPolicy.load(best_dir, device="cpu")
    trained, random = load_file(best_dir / "model.safetensors"), load_file(built)
    assert trained.keys() == random.keys()
    assert any(not torch.equal(trained[name], random[name]) for name in random)

    # The report records every file's sha256: the checkpoint check passes, then catches any change.
    checkpoint = tmp_path / "out"
    assert verify_checkpoint(checkpoint)["files_sha256"] == report["files_sha256"]
    (checkpoint / "extra.bin").write_bytes(b"x")
    with pytest.raises(SftCheckpointMismatch, match="files"):
        verify_checkpoint(checkpoint)
    (checkpoint / "extra.bin").unlink()
    with (checkpoint / "config.json").open("a") as handle:
        handle.write(" ")
    with pytest.raises(SftCheckpointMismatch, match="config.json differ"):
        verify_checkpoint(checkpoint)
    (checkpoint / REPORT_FILE).write_text("{")
    with pytest.raises(SftCheckpointMismatch, match="no readable SFT report"):
        verify_checkpoint(checkpoint)


def test_a_run_its_time_limit_stopped_resumes_exactly_where_it_stopped(tmp_path):
    def quiet(line: str) -> None:
        pass

    config = SftConfig(
        train_mazes=4,
        steps=4,
        batch_size=4,
        eval_every=2,
        eval_from_exact=0.0,
        band=(0.0, 1.0),
        shape=TinyShape(),
        vision_pretrain=VisionPretrainConfig(steps=2, pictures=8, batch_size=4),
    )
    whole = train_sft(config, tmp_path / "whole", device="cpu", log=quiet)
    cut = tmp_path / "cut"
    # The limit is checked after every step: this invocation stops after step 1, between two reports, and hands
    # step 1's loss on to the resumed invocation's step-2 report.
    stopped = train_sft(replace(config, max_seconds=0.0), cut, device="cpu", log=quiet)
    assert (stopped.resume_step, stopped.curve) == (1, [])
    assert (cut / RESUME_DIR / TRAINER_STATE_FILE).is_file()
    with pytest.raises(SftCannotResume, match="another config"):
        train_sft(replace(config, learning_rate=0.5), cut, device="cpu", log=quiet, resume=True)
    with pytest.raises(FileExistsError, match="--resume"):
        train_sft(config, cut, device="cpu", log=quiet)

    # A run saved before a config field existed resumes: the field it lacks is the default it ran with.
    stored = json.loads((cut / REPORT_FILE).read_text())
    del stored["config"]["vision_pretrain"]["lr_decay"]
    (cut / REPORT_FILE).write_text(json.dumps(stored))
    # max_seconds is one invocation's, not the run's: the rest runs under another limit.
    resumed = train_sft(config, cut, device="cpu", command="again", log=quiet, resume=True)
    assert resumed.resume_step is None and resumed.resumed_commands == ["again"]
    assert resumed.curve == whole.curve  # the same losses, exact-answer rates and held-out results
    ended, straight = load_file(cut / "model.safetensors"), load_file(tmp_path / "whole" / "model.safetensors")
    assert all(torch.equal(ended[name], straight[name]) for name in straight)
    assert not (cut / RESUME_DIR).exists() and verify_checkpoint(cut)["resume_step"] is None

    # How often an invocation plays the held-out set is its own too: a run stopped before any play and resumed
    # playing at every step trains the very weights of the straight run, which played every second step.
    sparse = train_sft(
        replace(config, max_seconds=0.0, eval_every=4, eval_from_exact=1.0), tmp_path / "dense", device="cpu", log=quiet
    )
    assert sparse.resume_step == 1
    dense = train_sft(replace(config, eval_every=1), tmp_path / "dense", device="cpu", log=quiet, resume=True)
    assert [point["step"] for point in dense.curve] == [2, 3, 4]
    assert dense.curve[0] == whole.curve[0]  # step 2: the same losses of steps 1-2, the same play
    played = load_file(tmp_path / "dense" / "model.safetensors")
    assert all(torch.equal(played[name], straight[name]) for name in straight)
    with pytest.raises(SftCannotResume, match="no stopped run"):
        train_sft(config, cut, device="cpu", log=quiet, resume=True)
    with pytest.raises(SftCannotResume, match="no readable SFT report"):
        train_sft(config, tmp_path / "never-ran", device="cpu", log=quiet, resume=True)


# A two-step SFT of the default shape on a tower it does not pretrain and then keeps frozen.
FROZEN_TOWER = {
    "train_mazes": 4,
    "steps": 2,
    "batch_size": 4,
    "eval_every": 2,
    "eval_from_exact": 0.0,
    "band": (0.0, 1.0),
    "shape": TinyShape(),
    "vision_pretrain": VisionPretrainConfig(steps=0),
    "freeze_vision": True,
}


def test_freeze_vision_trains_the_language_model_only(tmp_path):
    built = load_file(
        build_tiny_qwen3_vl(tmp_path / "built", seed=0, shape=TinyShape(), maze_size=7) / "model.safetensors"
    )
    config = SftConfig(**FROZEN_TOWER)
    train_sft(config, tmp_path / "frozen", device="cpu", log=lambda line: None)
    trained = load_file(tmp_path / "frozen" / "model.safetensors")
    vision = [name for name in built if ".visual." in name]
    assert vision and all(torch.equal(trained[name], built[name]) for name in vision)
    assert any(not torch.equal(trained[name], built[name]) for name in built if name not in vision)


def test_a_tower_and_a_readout_taken_from_other_checkpoints(tmp_path):
    # The sources are built with other seeds, so their weights differ from the ones this run builds.
    tower_source = build_tiny_qwen3_vl(tmp_path / "tower", seed=1, shape=TinyShape(), maze_size=7)
    readout_source = build_tiny_qwen3_vl(tmp_path / "readout", seed=2, shape=TinyShape(), maze_size=7)
    built = load_file(
        build_tiny_qwen3_vl(tmp_path / "built", seed=0, shape=TinyShape(), maze_size=7) / "model.safetensors"
    )
    config = SftConfig(**FROZEN_TOWER, vision_from=str(tower_source), readout_from=str(readout_source))
    report = train_sft(config, tmp_path / "run", device="cpu", log=lambda line: None)
    trained = load_file(tmp_path / "run" / "model.safetensors")
    vision = [name for name in built if name.startswith("model.visual.")]
    readout = ["lm_head.weight", "model.language_model.norm.weight"]
    for names, source in ((vision, tower_source), (readout, readout_source)):
        taken = load_file(source / "model.safetensors")
        assert names and all(torch.equal(trained[name], taken[name]) for name in names)  # taken, and kept as taken
        assert any(not torch.equal(built[name], taken[name]) for name in names)
    assert any(not torch.equal(trained[name], built[name]) for name in built if name not in vision + readout)
    assert report.vision_from_sha256 == file_sha256(tower_source / "model.safetensors")
    assert report.readout_from_sha256 == file_sha256(readout_source / "model.safetensors")


def test_parts_from_a_checkpoint_are_refused_beside_pretraining_or_from_another_shape(tmp_path):
    other_shape = build_tiny_qwen3_vl(tmp_path / "other", seed=1, shape=TinyShape(vision_depth=2), maze_size=7)
    config = SftConfig(**FROZEN_TOWER, vision_from=str(other_shape))
    with pytest.raises(SftConfigError, match="pretraining steps to 0"):
        train_sft(
            replace(config, vision_pretrain=VisionPretrainConfig(steps=5)),
            tmp_path / "a",
            device="cpu",
            log=lambda line: None,
        )
    with pytest.raises(SftConfigError, match="do not fit this shape: model.visual.blocks.1"):
        train_sft(config, tmp_path / "b", device="cpu", log=lambda line: None)
    with pytest.raises(SftConfigError, match="not a checkpoint"):
        train_sft(replace(config, vision_from=str(tmp_path)), tmp_path / "c", device="cpu", log=lambda line: None)
    wider = build_tiny_qwen3_vl(tmp_path / "wider", seed=1, shape=TinyShape(hidden=128), maze_size=7)
    with pytest.raises(SftConfigError, match="lm_head.weight"):
        train_sft(
            replace(config, vision_from=None, readout_from=str(wider)),
            tmp_path / "d",
            device="cpu",
            log=lambda line: None,
        )
