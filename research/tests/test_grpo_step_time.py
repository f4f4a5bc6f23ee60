"""research.grpo_step_time runs end to end on a tiny random model and compares per-turn times."""

from __future__ import annotations

import re

import torch

from local_stack.cluster_standins.tiny_model import build_tiny_qwen3_vl
from research import grpo_step_time


def test_it_times_a_step_then_one_with_the_pixels_on_the_host(tmp_path, capsys, monkeypatch):
    devices = []
    real_time_step = grpo_step_time.time_step

    def recording(trainer, mazes, eval_set):
        devices.append(trainer.processor.image_processor.pixels_device)
        return real_time_step(trainer, mazes, eval_set)

    monkeypatch.setattr(grpo_step_time, "time_step", recording)
    base = build_tiny_qwen3_vl(tmp_path / "base")
    code = grpo_step_time.main(
        [
            "--base-model",
            str(base),
            "--maze-size",
            "7",
            "--batch-mazes",
            "1",
            "--mini-batch-mazes",
            "1",
            "--samples",
            "2",
            "--epochs",
            "1",
            "--also-pixels-on-host",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert devices == [torch.device("cpu")] * 3  # warm-up, the model's device (the CPU here), the host
    assert "pixels on the model's device" in out and "pixels on the host" in out
    assert len(re.findall(r"step \(rollout \+ update\): [\d.]+ s, [\d.]+ ms a turn", out)) == 2
    assert re.search(r"time a turn, micro-batches of 16 with pixels on the host / the first: \d+\.\d\d", out)
