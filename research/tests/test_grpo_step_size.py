"""The GRPO step-size probe: every lr starts from the same LoRA, and measures how far its steps move the policy."""

from __future__ import annotations

import re

import pytest

from local_stack.pipeline import BASE_MODEL_DIR
from research.grpo_step_size import main


def test_each_lr_starts_from_the_first_lora(capsys, one_torch_thread):
    # The 7x7 SFT start solves some of its samples, so the group's advantages are not all 0 and lr 1e-2
    # moves the policy. lr 0 after it: were the LoRA not put back, lr 0 would show lr 1e-2's movement.
    assert (
        main(
            [
                "--base-model",
                str(BASE_MODEL_DIR),
                "--maze-size",
                "7",
                "--mazes",
                "1",
                "--samples",
                "4",
                "--steps",
                "2",
                "--lr",
                "1e-2",
                "0",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r".*: [1-3] of 4 sampled episodes solved, \d+ turns, \d+ answer tokens \(\d+ s\)", lines[0])
    moved = {line.split(":")[0]: re.findall(r"([\d.]+) / ([\d.]+)", line) for line in lines[1:]}
    assert sorted(moved) == ["lr 0", "lr 0.01"]
    assert all(len(steps) == 2 for steps in moved.values())
    assert moved["lr 0"] == [("0.0000", "1.0")] * 2
    assert all(float(kl) > 0 and float(ratio) > 1 for kl, ratio in moved["lr 0.01"])


def test_an_lr_is_required():
    with pytest.raises(SystemExit):
        main(["--base-model", "x"])
