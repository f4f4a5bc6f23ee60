"""The checked-in eval set: content, hash check, tampering, and training seeds."""

import json

import pytest

from cluster_jobs.maze.eval_set import (
    DEFAULT_PATH,
    EvalSetError,
    EvalSetMismatch,
    load_eval_set,
    mazes_sha256,
    training_seeds,
    write_eval_set,
)
from cluster_jobs.maze.generator import generate_maze


def test_checked_in_eval_set_loads():
    eval_set = load_eval_set()
    assert eval_set.name == "maze-eval-64"
    assert eval_set.size == 9
    assert eval_set.seeds == tuple(range(64))
    assert [m.seed for m in eval_set.mazes] == list(range(64))
    assert all(m == generate_maze(9, m.seed) for m in eval_set.mazes)
    assert eval_set.sha256 == mazes_sha256(eval_set.mazes)
    assert len({m.to_text() for m in eval_set.mazes}) == 64


def test_write_reproduces_the_checked_in_file(tmp_path):
    path = tmp_path / "eval_set.json"
    write_eval_set(path)
    assert path.read_text() == DEFAULT_PATH.read_text()


def test_hash_is_order_sensitive():
    mazes = load_eval_set().mazes
    assert mazes_sha256(mazes) != mazes_sha256(mazes[::-1])


def _tampered(tmp_path, **changes):
    spec = json.loads(DEFAULT_PATH.read_text())
    spec.update(changes)
    path = tmp_path / "eval_set.json"
    path.write_text(json.dumps(spec))
    return path


@pytest.mark.parametrize(
    "changes",
    [
        {"sha256": "0" * 64},
        {"seeds": list(range(1, 65))},
        {"seeds": list(range(63))},
        {"seeds": list(range(63, -1, -1))},
        {"size": 11},
    ],
)
def test_tampering_raises_mismatch(tmp_path, changes):
    with pytest.raises(EvalSetMismatch, match="hash"):
        load_eval_set(_tampered(tmp_path, **changes))


@pytest.mark.parametrize(
    "changes",
    [{"seeds": []}, {"seeds": "0..63"}, {"size": "9"}, {"sha256": None}, {"size": 8}, {"seeds": [-1]}],
)
def test_malformed_fields_raise_eval_set_error(tmp_path, changes):
    with pytest.raises(EvalSetError, match="eval set"):
        load_eval_set(_tampered(tmp_path, **changes))


def test_unreadable_files_raise_eval_set_error(tmp_path):
    with pytest.raises(EvalSetError, match="cannot read"):
        load_eval_set(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(EvalSetError, match="cannot read"):
        load_eval_set(bad)
    bad.write_text('{"name": "x"}')
    with pytest.raises(EvalSetError, match="cannot read"):
        load_eval_set(bad)


def test_training_seeds_start_at_the_offset_and_avoid_eval_seeds():
    seeds = training_seeds(100)
    assert seeds == list(range(1_000_000, 1_000_100))
    assert training_seeds(5, offset=64) == [64, 65, 66, 67, 68]
    assert training_seeds(0) == []


def test_training_seeds_skip_mazes_identical_to_an_eval_maze():
    # Seed 1005323 happens to generate the same 9x9 grid as eval seed 36.
    assert generate_maze(9, 1_005_323).to_text() == generate_maze(9, 36).to_text()
    assert training_seeds(3, offset=1_005_322) == [1_005_322, 1_005_324, 1_005_325]
    assert training_seeds(3, offset=1_005_322, size=11) == [1_005_322, 1_005_323, 1_005_324]


@pytest.mark.parametrize(("n", "offset"), [(-1, 1_000_000), (1.5, 1_000_000), (10, 0), (10, 63)])
def test_training_seeds_validate_arguments(n, offset):
    with pytest.raises(ValueError):
        training_seeds(n, offset=offset)
