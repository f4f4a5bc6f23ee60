"""The integrity record of an SFT start: ``sft_report.json`` holds the sha256 of every file of the
checkpoint it sits in, and :func:`verify_checkpoint` checks the files against it before a run uses them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

REPORT_FILE = "sft_report.json"


class SftCheckpointMismatch(RuntimeError):
    """A checkpoint's files are not the ones its ``sft_report.json`` recorded."""


def checkpoint_files(checkpoint_dir: Path) -> list[Path]:
    """The checkpoint's files, by name: everything but the report itself."""
    return [path for path in sorted(checkpoint_dir.iterdir()) if path.is_file() and path.name != REPORT_FILE]


def file_sha256(path: Path) -> str:
    """The hex sha256 of the file at ``path``."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def files_sha256(checkpoint_dir: Path) -> dict[str, str]:
    """The sha256 of each of the checkpoint's files, by name: what a report records."""
    return {path.name: file_sha256(path) for path in checkpoint_files(checkpoint_dir)}


def verify_checkpoint(checkpoint_dir: Path) -> dict:
    """Check every file of an SFT checkpoint against the sha256 its report recorded; return the report.

    Raises:
        SftCheckpointMismatch: no report, a recorded file missing or changed, or a file not recorded.
    """
    report_path = Path(checkpoint_dir) / REPORT_FILE
    try:
        report = json.loads(report_path.read_text())
        recorded = dict(report["files_sha256"])
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as error:  # RecursionError: nested too deep
        raise SftCheckpointMismatch(f"{report_path}: no readable SFT report ({error})") from error
    present = {path.name for path in checkpoint_files(Path(checkpoint_dir))}
    if present != set(recorded):
        raise SftCheckpointMismatch(
            f"{checkpoint_dir}: files {sorted(present)} but the report records {sorted(recorded)}"
        )
    changed = [name for name, digest in recorded.items() if file_sha256(Path(checkpoint_dir) / name) != digest]
    if changed:
        raise SftCheckpointMismatch(f"{checkpoint_dir}: {', '.join(sorted(changed))} differ from the recorded sha256")
    return report
