"""benchmarks/gpu/wheels.sh asks pip for requirements.lock's pins of the wheels the device lacks, for the device's Python."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHEELS = ROOT / "benchmarks" / "gpu" / "wheels.sh"


def run_wheels(workdir: Path, lock: str) -> subprocess.CompletedProcess:
    """Run wheels.sh in ``workdir`` with ``lock`` as requirements.lock and a ``python3`` that records its arguments."""
    (workdir / "requirements.lock").write_text(lock)
    bin_dir = workdir / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python3"
    fake.write_text('#!/bin/sh\necho "$@" > "$PWD/pip-args"\n')
    fake.chmod(0o755)
    shutil.copy(WHEELS, workdir / "wheels.sh")
    return subprocess.run(["bash", "wheels.sh"], cwd=workdir, capture_output=True, text=True,
                          env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})  # fmt: skip


def test_the_project_lock_pins_all_four_and_pip_gets_them_for_python_3_12(tmp_path):
    result = run_wheels(tmp_path, (ROOT / "requirements.lock").read_text())
    assert result.returncode == 0, result.stderr
    args = (tmp_path / "pip-args").read_text().split()
    assert args[:3] == ["-m", "pip", "download"]
    assert args[args.index("--python-version") + 1] == "3.12" and "--no-deps" in args
    pins = sorted(arg for arg in args if "==" in arg)
    assert [pin.split("==")[0] for pin in pins] == ["annotated-types", "pydantic", "pydantic_core", "typing-inspection"]
    assert (tmp_path / ".whl").is_dir()


def test_a_lock_without_one_pin_stops_before_pip(tmp_path):
    result = run_wheels(tmp_path, "pydantic==2.13.5\npydantic_core==2.46.5\nannotated-types==0.8.0\npydantic-settings==2.16.3\n")
    assert result.returncode == 1
    assert "lacks one of the four pins" in result.stderr
    assert not (tmp_path / "pip-args").exists()
