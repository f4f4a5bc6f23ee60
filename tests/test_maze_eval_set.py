"""The checked-in eval sets (9x9 and 7x7): content, budget, hash check, tampering, lookup by size, training seeds."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster_jobs.maze.eval_set import (
    DEFAULT_PATH,
    EVAL_SETS,
    EvalSetError,
    EvalSetMismatch,
    NoEvalSet,
    eval_set_for_size,
    eval_set_path,
    eval_set_sha256,
    eval_turn_budget,
    load_eval_set,
    training_seeds,
    write_eval_set,
)
from cluster_jobs.maze.generator import generate_maze

# size -> (name, file, turn budget, distinct grids among the 64 mazes)
CHECKED_IN = {
    9: ("maze-eval-64", "eval_set.json", 31, 64),
    7: ("maze-eval-64-7x7", "eval_set_7x7.json", 17, 57),
}


@pytest.mark.parametrize("size", sorted(CHECKED_IN))
def test_checked_in_eval_sets_load(size):
    name, file_name, budget, distinct = CHECKED_IN[size]
    eval_set = eval_set_for_size(size)
    assert eval_set_path(size).name == file_name
    assert (eval_set.name, eval_set.size, eval_set.max_turns) == (name, size, budget)
    assert eval_set.max_turns == eval_turn_budget(size)
    assert eval_set.seeds == tuple(range(64))
    assert [m.seed for m in eval_set.mazes] == list(range(64))
    assert all(m == generate_maze(size, m.seed) for m in eval_set.mazes)
    assert eval_set.sha256 == eval_set_sha256(eval_set.mazes, budget)
    assert len({m.to_text() for m in eval_set.mazes}) == distinct


def test_the_default_set_is_the_9x9_set():
    assert load_eval_set() == eval_set_for_size(9)
    assert eval_set_path(9) == DEFAULT_PATH
    assert set(EVAL_SETS) == set(CHECKED_IN)


@pytest.mark.parametrize("size", [5, 11, 8, 101])
def test_sizes_without_a_set_raise_no_eval_set(size):
    with pytest.raises(NoEvalSet, match=f"no fixed evaluation set for {size}x{size} mazes; sets exist for 7x7, 9x9"):
        eval_set_for_size(size)


def test_a_set_file_of_another_size_is_refused(monkeypatch):
    monkeypatch.setitem(EVAL_SETS, 7, ("maze-eval-64-7x7", "eval_set.json"))
    with pytest.raises(EvalSetError, match="holds 9x9 mazes, not 7x7"):
        eval_set_for_size(7)


@pytest.mark.parametrize("size", sorted(CHECKED_IN))
def test_write_reproduces_the_checked_in_file(tmp_path, size):
    path = tmp_path / "eval_set.json"
    write_eval_set(size, path)
    assert path.read_text() == eval_set_path(size).read_text()


def test_hash_covers_order_and_budget():
    mazes = load_eval_set().mazes
    assert eval_set_sha256(mazes, 31) != eval_set_sha256(mazes[::-1], 31)
    assert eval_set_sha256(mazes, 31) != eval_set_sha256(mazes, 15)


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
        {"max_turns": 15},
    ],
)
def test_tampering_raises_mismatch(tmp_path, changes):
    with pytest.raises(EvalSetMismatch, match="hash"):
        load_eval_set(_tampered(tmp_path, **changes))


@pytest.mark.parametrize(
    "changes",
    [
        {"seeds": []},
        {"seeds": "0..63"},
        {"size": "9"},
        {"sha256": None},
        {"size": 8},
        {"seeds": [-1]},
        {"max_turns": 0},
        {"max_turns": "31"},
        {"max_turns": True},
    ],
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
    spec = json.loads(DEFAULT_PATH.read_text())
    del spec["max_turns"]
    bad.write_text(json.dumps(spec))
    with pytest.raises(EvalSetError, match="cannot read"):
        load_eval_set(bad)


def test_training_seeds_start_at_the_offset_and_avoid_eval_seeds():
    seeds = training_seeds(100)
    assert seeds == list(range(1_000_000, 1_000_100))
    assert training_seeds(5, offset=64) == [64, 65, 66, 67, 68]
    assert training_seeds(0) == []


def test_training_seeds_skip_mazes_identical_to_an_eval_maze_of_their_size():
    # Seed 1005323 happens to generate the same 9x9 grid as eval seed 36.
    assert generate_maze(9, 1_005_323).to_text() == generate_maze(9, 36).to_text()
    assert training_seeds(3, offset=1_005_322) == [1_005_322, 1_005_324, 1_005_325]
    assert training_seeds(3, offset=1_005_322, size=11) == [1_005_322, 1_005_323, 1_005_324]
    # 7x7 mazes have 192 grids; the 7x7 set covers 57 of them, so many 7x7 seeds are skipped.
    seeds_7 = training_seeds(200, size=7)
    assert len(seeds_7) == 200 and seeds_7[-1] - seeds_7[0] + 1 > 200


@settings(max_examples=25, deadline=None)
@given(
    size=st.sampled_from([7, 9]),
    n=st.integers(min_value=0, max_value=40),
    offset=st.integers(min_value=64, max_value=10**9),
)
def test_training_grids_never_equal_an_eval_grid_of_their_size(size, n, offset):
    eval_grids = {maze.to_text() for maze in eval_set_for_size(size).mazes}
    seeds = training_seeds(n, offset=offset, size=size)
    assert len(seeds) == n and seeds == sorted(set(seeds)) and all(seed >= offset for seed in seeds)
    assert not any(generate_maze(size, seed).to_text() in eval_grids for seed in seeds)
    skipped = set(range(offset, seeds[-1] + 1)) - set(seeds) if seeds else set()
    assert all(generate_maze(size, seed).to_text() in eval_grids for seed in skipped)


@pytest.mark.parametrize(("n", "offset"), [(-1, 1_000_000), (1.5, 1_000_000), (10, 0), (10, 63)])
def test_training_seeds_validate_arguments(n, offset):
    with pytest.raises(ValueError):
        training_seeds(n, offset=offset)
