"""The evaluation job picks the fixed eval set of the maze size the adapter's run trained on."""

from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws

from cluster_jobs.evaluate.artifacts import EvaluationRefused
from cluster_jobs.evaluate.maze_set import eval_set_for_run
from cluster_jobs.maze.eval_set import eval_set_for_size
from mazeops.layout import normalized_spec_key
from mazeops.runspec import MAX_SPEC_BYTES, parse_run_spec

BUCKET = "eval-set-test"
BASE_MODELS = {"tiny-qwen3-vl": "/shared/models/tiny"}


@pytest.fixture
def s3(monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


def put_spec(s3, run_id: str, size: int) -> None:
    """Write the run's normalized spec as validate_run_spec does."""
    spec = parse_run_spec(json.dumps({"base_model_id": "tiny-qwen3-vl", "maze": {"size": size}}), run_id, BASE_MODELS)
    s3.put_object(Bucket=BUCKET, Key=normalized_spec_key(run_id), Body=spec.model_dump_json())


@pytest.mark.parametrize(("size", "name", "max_turns"), [(9, "maze-eval-64", 31), (7, "maze-eval-64-7x7", 17)])
def test_the_runs_maze_size_picks_the_set(s3, size, name, max_turns):
    put_spec(s3, "run-a", size)
    lines: list[str] = []
    eval_set = eval_set_for_run(s3, BUCKET, "run-a", lines.append)
    assert (eval_set.name, eval_set.size, eval_set.max_turns) == (name, size, max_turns)
    assert eval_set == eval_set_for_size(size) and lines == []


def test_a_run_without_a_spec_gets_the_default_9x9_set(s3):
    lines: list[str] = []
    assert eval_set_for_run(s3, BUCKET, "hand-made", lines.append) == eval_set_for_size(9)
    assert lines == [f"run hand-made has no spec at s3://{BUCKET}/runs/hand-made/spec.json; using the default 9x9 set"]


def _spec_of_size(size):
    return lambda s3: put_spec(s3, "run-a", size)


def _raw(body: bytes):
    return lambda s3: s3.put_object(Bucket=BUCKET, Key=normalized_spec_key("run-a"), Body=body)


def _spec_of_another_run(s3):
    put_spec(s3, "run-b", 9)
    s3.copy_object(
        Bucket=BUCKET,
        Key=normalized_spec_key("run-a"),
        CopySource={"Bucket": BUCKET, "Key": normalized_spec_key("run-b")},
    )


# case -> (what to write at runs/run-a/spec.json, expected refusal text)
REFUSED = {
    "size-without-a-set": (
        _spec_of_size(11),
        "run run-a trained on 11x11 mazes: there is no fixed evaluation set for 11x11",
    ),
    "small-size-without-a-set": (
        _spec_of_size(5),
        "there is no fixed evaluation set for 5x5 mazes; sets exist for 7x7, 9x9",
    ),
    "not-json": (_raw(b"{not json"), "is not a valid normalized run spec"),
    "not-a-normalized-spec": (_raw(b'{"base_model_id": "tiny-qwen3-vl"}'), "is not a valid normalized run spec"),
    "too-large": (_raw(b" " * (MAX_SPEC_BYTES + 1)), "the limit is"),
    "another-runs-spec": (_spec_of_another_run, "holds the spec of run 'run-b', not 'run-a'"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_unusable_specs_are_refused(s3, case):
    write, message = REFUSED[case]
    write(s3)
    with pytest.raises(EvaluationRefused, match=message):
        eval_set_for_run(s3, BUCKET, "run-a", lambda line: None)
