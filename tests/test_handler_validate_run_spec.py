"""validate_run_spec: spec validation, normalized spec, runs row, hostile and duplicate input (moto)."""

from __future__ import annotations

import hashlib
import json

import pytest
import validate_run_spec
from mazeops_testing import BASE_MODEL, BASE_MODELS, BUCKET, RUNS_TABLE, Aws, FakeLambdaContext

from mazeops.inputs import InvalidInput
from mazeops.names import InvalidName
from mazeops.runs import RunAlreadyExists, RunsTable
from mazeops.runspec import InvalidRunSpec

ARN = "arn:aws:states:us-east-1:123456789012:execution:maze-training:train-run1"
SPEC = {"base_model_id": BASE_MODEL, "backend": "tiny", "total_steps": 4, "eval_interval": 2, "ckpt_interval": 2}


def upload(aws: Aws, body: bytes | dict, key: str = "requests/run1.json") -> None:
    aws.s3.put_object(Bucket=BUCKET, Key=key, Body=body if isinstance(body, bytes) else json.dumps(body).encode())


def call(key: str = "requests/run1.json", run_id: object = "run1", **overrides: object) -> dict:
    event = {"bucket": BUCKET, "key": key, "run_id": run_id, "execution_arn": ARN, **overrides}
    return validate_run_spec.lambda_handler(event, FakeLambdaContext())


def test_valid_spec_is_normalized_and_recorded(aws: Aws) -> None:
    upload(aws, SPEC)
    result = call()
    written = aws.s3.get_object(Bucket=BUCKET, Key="runs/run1/spec.json")["Body"].read()
    assert result == {
        "run_id": "run1",
        "spec_key": "runs/run1/spec.json",
        "spec_sha256": hashlib.sha256(written).hexdigest(),
        "base_model_id": BASE_MODEL,
        "backend": "tiny",
        "total_steps": 4,
    }
    normalized = json.loads(written)
    assert normalized["run_id"] == "run1" and normalized["base_model_path"] == BASE_MODELS[BASE_MODEL]
    assert normalized["lora"] == {"rank": 32, "alpha": 64, "target_modules": "all-linear"}
    row = RunsTable(aws.dynamodb, RUNS_TABLE).get_run("run1")
    assert (row.status, row.execution_arn, row.spec_sha256) == ("SUBMITTED", ARN, result["spec_sha256"])


def test_second_call_with_the_same_spec_is_a_no_op(aws: Aws) -> None:
    upload(aws, SPEC)
    assert call() == call()


def test_reused_run_id_with_another_spec_is_refused_and_keeps_the_first_spec(aws: Aws) -> None:
    upload(aws, SPEC)
    first = call()
    upload(aws, {**SPEC, "total_steps": 8})
    with pytest.raises(RunAlreadyExists):
        call()
    written = aws.s3.get_object(Bucket=BUCKET, Key="runs/run1/spec.json")["Body"].read()
    assert hashlib.sha256(written).hexdigest() == first["spec_sha256"]


@pytest.mark.parametrize(
    "body, message",
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (json.dumps({**SPEC, "learning_rat": 1e-6}).encode(), "learning_rat"),
        (json.dumps({**SPEC, "base_model_id": "llama-9"}).encode(), "unknown base model"),
        (json.dumps({**SPEC, "loss_reduction": "seq_mean_token_sum_norm"}).encode(), "loss_reduction"),
        (json.dumps({**SPEC, "dynamic_sampling": "replace"}).encode(), "dynamic_sampling"),
        (
            json.dumps({**SPEC, "dynamic_sampling": "filter", "dynamic_sampling_max_batches": 0}).encode(),
            "dynamic_sampling_max_batches",
        ),
        (json.dumps({**SPEC, "run_name": "other"}).encode(), "differs from the key"),
        (b" " * (64 * 1024 + 1), "limit is 65536"),
        (b"", "not valid JSON"),
    ],
)
def test_bad_specs_are_refused_clearly(aws: Aws, body: bytes, message: str) -> None:
    upload(aws, body)
    with pytest.raises(InvalidRunSpec, match=message):
        call()
    assert RunsTable(aws.dynamodb, RUNS_TABLE).get_run("run1") is None


def test_missing_spec(aws: Aws) -> None:
    with pytest.raises(InvalidRunSpec, match="does not exist"):
        call()


@pytest.mark.parametrize("key", ["requests/../x.json", "requests/Run 1.json", "runs/run1/spec.json"])
def test_hostile_keys_raise_invalid_name(aws: Aws, key: str) -> None:
    with pytest.raises(InvalidName):
        call(key=key, run_id=None)


def test_run_id_must_match_the_key(aws: Aws) -> None:
    upload(aws, SPEC)
    with pytest.raises(InvalidName, match="does not match"):
        call(run_id="run2")
    with pytest.raises(InvalidName, match="does not match"):
        call(run_id=None)


def test_other_bucket_and_malformed_input(aws: Aws) -> None:
    with pytest.raises(InvalidRunSpec, match="artifacts bucket"):
        call(bucket="elsewhere-bucket")
    with pytest.raises(InvalidInput, match="'execution_arn'"):
        validate_run_spec.lambda_handler(
            {"bucket": BUCKET, "key": "requests/run1.json", "run_id": "run1"}, FakeLambdaContext()
        )
    with pytest.raises(InvalidInput, match="must be str"):
        call(key=["requests/run1.json"])
    with pytest.raises(InvalidInput, match="JSON object"):
        validate_run_spec.lambda_handler("requests/run1.json", FakeLambdaContext())
