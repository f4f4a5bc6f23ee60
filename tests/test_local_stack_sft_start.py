"""The SFT start's integrity record: the committed start passes its check, and any change to its files is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from local_stack.cluster_standins.sft_start import REPORT_FILE, SftCheckpointMismatch, verify_checkpoint
from local_stack.pipeline import BASE_MODEL_DIR

CHECKPOINT_FILES = sorted(path.name for path in BASE_MODEL_DIR.iterdir() if path.name != REPORT_FILE)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=20,
)


def copy_of_start(parent: Path) -> Path:
    """A copy of the committed SFT start under ``parent``."""
    return Path(shutil.copytree(BASE_MODEL_DIR, parent / BASE_MODEL_DIR.name))


@pytest.fixture(scope="module")
def start_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_of_start(tmp_path_factory.mktemp("start"))


def test_the_committed_start_matches_its_report():
    report = verify_checkpoint(BASE_MODEL_DIR)
    assert sorted(report["files_sha256"]) == CHECKPOINT_FILES
    assert "model.safetensors" in CHECKPOINT_FILES and "config.json" in CHECKPOINT_FILES


@pytest.mark.parametrize("name", CHECKPOINT_FILES)
def test_a_changed_file_is_refused(tmp_path, name):
    checkpoint = copy_of_start(tmp_path)
    content = bytearray((checkpoint / name).read_bytes())
    content[len(content) // 2] ^= 0x01
    (checkpoint / name).write_bytes(bytes(content))
    with pytest.raises(SftCheckpointMismatch, match=f"{name} differ from the recorded sha256"):
        verify_checkpoint(checkpoint)


def test_an_added_file_is_refused(tmp_path):
    checkpoint = copy_of_start(tmp_path)
    (checkpoint / "extra.json").write_text("{}")
    with pytest.raises(SftCheckpointMismatch, match="extra.json"):
        verify_checkpoint(checkpoint)


def test_a_removed_file_is_refused(tmp_path):
    checkpoint = copy_of_start(tmp_path)
    (checkpoint / "tokenizer.json").unlink()
    with pytest.raises(SftCheckpointMismatch, match="the report records"):
        verify_checkpoint(checkpoint)


def test_a_missing_report_is_refused(tmp_path):
    checkpoint = copy_of_start(tmp_path)
    (checkpoint / REPORT_FILE).unlink()
    with pytest.raises(SftCheckpointMismatch, match="no readable SFT report"):
        verify_checkpoint(checkpoint)


def test_a_report_that_is_a_folder_is_refused(tmp_path):
    checkpoint = copy_of_start(tmp_path)
    (checkpoint / REPORT_FILE).unlink()
    (checkpoint / REPORT_FILE).mkdir()
    with pytest.raises(SftCheckpointMismatch, match="no readable SFT report"):
        verify_checkpoint(checkpoint)


@given(st.binary(max_size=256) | JSON_VALUES.map(lambda value: json.dumps(value).encode()))
@example(b"\xff\xfe not UTF-8")
@example(b"[" * 100_000)  # deeper than json's recursion limit
@example(b'{"files_sha256": "ab"}')
@example(b'{"files_sha256": {}}')
def test_any_other_report_is_refused(start_copy, report_bytes):
    (start_copy / REPORT_FILE).write_bytes(report_bytes)
    with pytest.raises(SftCheckpointMismatch):
        verify_checkpoint(start_copy)


def test_a_report_of_other_digests_is_refused(tmp_path):
    checkpoint = copy_of_start(tmp_path)
    report = json.loads((checkpoint / REPORT_FILE).read_text())
    report["files_sha256"]["config.json"] = "0" * 64
    (checkpoint / REPORT_FILE).write_text(json.dumps(report))
    with pytest.raises(SftCheckpointMismatch, match="config.json differ"):
        verify_checkpoint(checkpoint)
