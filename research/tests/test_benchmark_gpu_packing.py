"""The device scripts' packing (research/gpu/packing.sh): results split to what the device returns, checkpoints pruned."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest

PACKING = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "packing.sh"
PART_LIMIT = 15 * 1024 * 1024


def run_packing(workdir: Path, call: str) -> str:
    """Source packing.sh in bash in ``workdir`` (OUT=returned), run ``call`` and return what it printed."""
    return subprocess.run(["bash", "-c", f"set -eu; source {PACKING}; {call}"], cwd=workdir, check=True,
                          env={**os.environ, "OUT": "returned"}, capture_output=True, text=True).stdout  # fmt: skip


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "out" / "run").mkdir(parents=True)
    (tmp_path / "returned").mkdir()
    return tmp_path


def unpacked(workdir: Path, name: str) -> Path:
    """The returned tarball's parts joined and unpacked into a new folder."""
    joined = workdir / "joined.tar.gz"
    joined.write_bytes(b"".join(part.read_bytes() for part in sorted((workdir / "returned").glob(f"{name}.tar.gz*"))))
    target = workdir / "back"
    with tarfile.open(joined) as archive:
        archive.extractall(target, filter="data")
    return target


def test_a_small_result_comes_back_whole(workdir):
    (workdir / "out" / "run" / "report.json").write_text("{}")
    (workdir / "out" / "run.log").write_text("log\n")
    run_packing(workdir, "pack_out run run run.log")
    assert [path.name for path in (workdir / "returned").iterdir()] == ["run.tar.gz"]
    back = unpacked(workdir, "run")
    assert (back / "run" / "report.json").read_text() == "{}" and (back / "run.log").read_text() == "log\n"


def test_a_large_result_comes_back_in_parts_of_at_most_15_mib(workdir):
    weights = os.urandom(PART_LIMIT + 1024 * 1024)  # random bytes do not compress
    (workdir / "out" / "run" / "weights.bin").write_bytes(weights)
    run_packing(workdir, "pack_out run run")
    parts = sorted((workdir / "returned").iterdir())
    assert [part.name for part in parts] == ["run.tar.gz.part-00", "run.tar.gz.part-01"]
    assert all(part.stat().st_size <= PART_LIMIT for part in parts)
    assert (unpacked(workdir, "run") / "run" / "weights.bin").read_bytes() == weights


def test_keep_latest_checkpoint_leaves_only_the_one_to_resume_from(workdir):
    ckpts = workdir / "out" / "run" / "ckpts"
    for step in (5, 9, 10, 100):
        (ckpts / f"global_step_{step}" / "policy").mkdir(parents=True)
    (ckpts / "latest_ckpt_global_step.txt").write_text("10\n")
    run_packing(workdir, "keep_latest_checkpoint out/run/ckpts")
    assert sorted(path.name for path in ckpts.iterdir()) == ["global_step_10", "latest_ckpt_global_step.txt"]


def test_keep_latest_checkpoint_deletes_nothing_without_a_latest_step(workdir):
    ckpts = workdir / "out" / "run" / "ckpts"
    (ckpts / "global_step_5").mkdir(parents=True)
    run_packing(workdir, "keep_latest_checkpoint out/run/ckpts; keep_latest_checkpoint out/run/missing")
    (ckpts / "latest_ckpt_global_step.txt").write_text("\n")
    run_packing(workdir, "keep_latest_checkpoint out/run/ckpts")
    assert sorted(path.name for path in ckpts.iterdir()) == ["global_step_5", "latest_ckpt_global_step.txt"]


def test_latest_checkpoint_step_prints_the_step_a_resume_or_fork_starts_from(workdir):
    ckpts = workdir / "out" / "run" / "ckpts"
    ckpts.mkdir()
    assert run_packing(workdir, "latest_checkpoint_step out/run/ckpts") == ""  # no checkpoint yet
    (ckpts / "latest_ckpt_global_step.txt").write_text("35\n")
    assert run_packing(workdir, "latest_checkpoint_step out/run/ckpts") == "35"
