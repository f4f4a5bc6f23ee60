"""Untrusted input never escapes its parser's error (property-based; tests/test_bad_input.py has the table).

Every parser of outside input is fed arbitrary bytes, JSON and hostile structures; each accepts
the input or raises its own error type, and no other exception gets out.
"""

from __future__ import annotations

import contextlib
import io
import json
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mazeops_testing import (
    BASE_MODEL,
    BASE_MODELS,
    eval_result_document,
    execution_status_change_event,
    s3_object_created_event,
    scheduled_event,
)

from mazeops.baseline import parse_baseline_result, parse_baseline_result_key
from mazeops.evalresult import InvalidEvalResult, parse_eval_result
from mazeops.events import (
    InvalidEvent,
    event_kind,
    parse_execution_status_change,
    parse_s3_object_created,
    parse_scheduled_event,
)
from mazeops.inputs import InvalidInput, field
from mazeops.jsontext import NotJson, loads
from mazeops.layout import parse_manifest_key, parse_request_key
from mazeops.manifest import InvalidManifest, parse_manifest
from mazeops.names import (
    InvalidName,
    parse_adapter_name,
    parse_job_id,
    validate_base_model_id,
    validate_run_id,
    validate_step,
)
from mazeops.ray_jobs import RayJobError, RayJobsClient
from mazeops.runspec import InvalidRunSpec, parse_run_spec
from mazeops.serve_client import SmokeTestFailed, load_smoke_image, smoke_test

EXAMPLES = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10**300, max_value=10**400)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)
ANY_KEYS = st.text(max_size=12) | st.integers() | st.none() | st.booleans() | st.tuples(st.integers())
HOSTILE_VALUES = st.recursive(
    SCALARS | st.binary(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(ANY_KEYS, children, max_size=3),
    max_leaves=12,
)


def deep(depth: int, opening: bytes = b"[", closing: bytes = b"]") -> bytes:
    return opening * depth + closing * depth


HOSTILE_TEXTS = st.sampled_from(
    [
        deep(30000),  # past the recursion limit, within every size limit
        deep(20000, b'{"a":', b"}").replace(b'{"a":}', b'{"a":1}'),
        b'{"total_steps": ' + b"9" * 5000 + b"}",  # past the 4,300-digit int conversion limit
        b'{"n": 1e999999, "m": -1e999999, "x": NaN, "y": Infinity}',
        b"\xff\xfe\x00{",
        '{"base_model_id": "\ud800"}',
        b'{"a": "\x00"}',
        b"",
        b"null",
        b"[]",
        b'"' + b"\\u0000" * 100 + b'"',
    ]
)


def raw_inputs(valid: dict[str, Any]) -> st.SearchStrategy[bytes | str]:
    """Arbitrary bytes and text, JSON of any shape, `valid` with one field replaced, and HOSTILE_TEXTS."""
    near_valid = st.sampled_from(sorted(valid)).flatmap(
        lambda key: JSON_VALUES.map(lambda value: {**valid, key: value})
    )
    documents = (JSON_VALUES | near_valid).map(json.dumps)
    return st.binary(max_size=200) | st.text(max_size=200) | documents | documents.map(str.encode) | HOSTILE_TEXTS


def only_raises(
    parse: Callable[[Any], Any], allowed: type[Exception] | tuple[type[Exception], ...], value: Any
) -> None:
    """`parse(value)` returns, or raises an `allowed` error and nothing else."""
    with contextlib.suppress(allowed):
        parse(value)


VALID_SPEC = {"base_model_id": BASE_MODEL, "backend": "tiny", "total_steps": 4, "lora": {"rank": 8, "alpha": 16}}
VALID_MANIFEST = {
    "schema": "maze-adapter/v1",
    "run_id": "run1",
    "step": 10,
    "adapter_name": "run1-step10",
    "base_model_id": BASE_MODEL,
    "lora_rank": 32,
    "lora_alpha": 64,
    "created_at": "2026-12-02T16:00:00Z",
    "files": {
        "adapter_config.json": {"sha256": "a" * 64, "size": 1},
        "adapter_model.safetensors": {"sha256": "b" * 64, "size": 2},
    },
}
VALID_RESULT = eval_result_document("run1", 10, "10" * 32)
BASELINE_FIELDS = ("base_model_id", "eval_set_sha256", "outcomes", "backend", "started_at", "finished_at")
VALID_BASELINE = {key: VALID_RESULT[key] for key in BASELINE_FIELDS} | {
    "schema": "maze-baseline/v1",
    "eval_set_name": "maze-eval-64",
}


def test_the_hostile_texts_are_refused_by_the_json_reader_itself() -> None:
    for text in (deep(30000), b'{"n": ' + b"9" * 5000 + b"}", b"\xff\xfe\x00{"):
        with pytest.raises(NotJson):
            loads(text)


@EXAMPLES
@given(raw_inputs(VALID_SPEC))
def test_run_specs(raw: bytes | str) -> None:
    only_raises(lambda value: parse_run_spec(value, "run1", BASE_MODELS), InvalidRunSpec, raw)


@EXAMPLES
@given(raw_inputs(VALID_MANIFEST))
def test_adapter_manifests(raw: bytes | str) -> None:
    only_raises(parse_manifest, InvalidManifest, raw)


@EXAMPLES
@given(raw_inputs(VALID_RESULT))
def test_evaluation_results(raw: bytes | str) -> None:
    only_raises(parse_eval_result, InvalidEvalResult, raw)


@EXAMPLES
@given(raw_inputs(VALID_BASELINE))
def test_baseline_results(raw: bytes | str) -> None:
    only_raises(parse_baseline_result, InvalidEvalResult, raw)


def near_valid_events(valid: dict[str, Any]) -> st.SearchStrategy[Any]:
    """`valid` with one field (top level or in `detail`) replaced by anything, or anything at all."""
    top = st.sampled_from(sorted(valid)).flatmap(lambda key: HOSTILE_VALUES.map(lambda value: {**valid, key: value}))
    detail = (st.sampled_from(sorted(valid["detail"])) if valid["detail"] else st.nothing()).flatmap(
        lambda key: HOSTILE_VALUES.map(lambda value: {**valid, "detail": {**valid["detail"], key: value}})
    )
    return top | detail | HOSTILE_VALUES | st.dictionaries(ANY_KEYS, HOSTILE_VALUES, max_size=5)


@EXAMPLES
@given(near_valid_events(s3_object_created_event("requests/run1.json")))
def test_s3_object_created_events(event: Any) -> None:
    only_raises(parse_s3_object_created, InvalidEvent, event)
    only_raises(event_kind, InvalidEvent, event)


@EXAMPLES
@given(near_valid_events(scheduled_event()))
def test_scheduled_events(event: Any) -> None:
    only_raises(parse_scheduled_event, InvalidEvent, event)


@EXAMPLES
@given(near_valid_events(execution_status_change_event("train-run1")))
def test_execution_status_change_events(event: Any) -> None:
    only_raises(parse_execution_status_change, InvalidEvent, event)


@EXAMPLES
@given(HOSTILE_VALUES | st.text(alphabet=st.characters(), max_size=80))
def test_names_keys_and_handler_inputs(value: Any) -> None:
    for parse in (validate_run_id, validate_base_model_id, validate_step, parse_adapter_name, parse_job_id):
        only_raises(parse, InvalidName, value)
    if isinstance(value, str):
        for parse in (parse_request_key, parse_manifest_key, parse_baseline_result_key):
            only_raises(parse, InvalidName, value)
    only_raises(lambda event: field(event, "run_id", str), InvalidInput, value)
    only_raises(lambda event: field({"step": event}, "step", int), InvalidInput, value)


class CannedResponse(io.BytesIO):
    """What urlopen returns: the body, as a context manager."""

    def __enter__(self) -> CannedResponse:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


ANSWERS = (
    st.binary(max_size=100)
    | (JSON_VALUES | st.dictionaries(st.text(max_size=10), JSON_VALUES, max_size=4)).map(
        lambda value: json.dumps(value).encode()
    )
    | HOSTILE_TEXTS.map(lambda text: text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
)


@EXAMPLES
@given(ANSWERS)
def test_answers_of_the_ray_head_and_of_ray_serve(monkeypatch_answers: Callable[[bytes], None], body: bytes) -> None:
    monkeypatch_answers(body)
    client = RayJobsClient("http://ray-head.internal:8265")
    for call in (client.get, client.stop, client.logs_tail, lambda job: client.submit(job, "python -m x")):
        only_raises(call, RayJobError, "train-run1")
    only_raises(
        lambda model: smoke_test("http://serve.internal:8000", model, load_smoke_image()),
        SmokeTestFailed,
        f"{BASE_MODEL}:run1-step10",
    )


@pytest.fixture(scope="module")
def monkeypatch_answers() -> Any:
    """Make every HTTP request of this module answer 200 with the given body."""
    answer = {"body": b""}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(urllib.request, "urlopen", lambda request, timeout=None: CannedResponse(answer["body"]))
        yield lambda body: answer.update(body=body)
