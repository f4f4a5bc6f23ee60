"""OpenAIChatService without Ray: the tiny Qwen3-VL, tiny PEFT adapters in moto S3, dynamic loading, LRU."""

from __future__ import annotations

import json
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster_jobs.maze.env import MazeEpisode
from cluster_jobs.maze.eval_set import load_eval_set
from cluster_jobs.maze.prompt import SYSTEM_PROMPT, observation_message
from cluster_jobs.models.policy import VisionPolicy
from local_stack.cluster_standins.adapter_store import S3AdapterStore
from local_stack.cluster_standins.chat_service import OpenAIChatService
from local_stack.cluster_standins.tiny_model import TINY_BASE_MODEL_ID, build_tiny_qwen3_vl
from tests.fixtures_models import make_tiny_adapter

PREFIX = f"serving/{TINY_BASE_MODEL_ID}/"


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """The tiny base model and local adapter folders: three good ones, one of another shape, one broken."""
    root = tmp_path_factory.mktemp("serve-models")
    base_dir = build_tiny_qwen3_vl(root / "base")
    adapters = {}
    for seed, name in enumerate(("run-a-step1", "run-a-step2", "run-b-step1"), start=1):
        adapters[name] = root / name
        make_tiny_adapter(base_dir, adapters[name], seed=seed)
    other_shape = root / "other-shape"
    make_tiny_adapter(base_dir, other_shape, rank=8)
    shutil.copy(adapters["run-a-step1"] / "adapter_config.json", other_shape / "adapter_config.json")  # says rank 4
    broken = root / "broken"
    shutil.copytree(adapters["run-a-step1"], broken)
    (broken / "adapter_model.safetensors").write_bytes(b"not safetensors")
    return base_dir, adapters | {"other-shape": other_shape, "broken": broken}


@pytest.fixture(scope="module")
def policy(artifacts):
    return VisionPolicy.load(artifacts[0], device="cpu")


@pytest.fixture
def upload(s3, bucket, artifacts):
    """`upload(name, source=name)`: put local adapter folder `source` in the serving prefix as `name`."""

    def put(name: str, source: str | None = None) -> None:
        for path in artifacts[1][source or name].iterdir():
            s3.put_object(Bucket=bucket, Key=f"{PREFIX}{name}/{path.name}", Body=path.read_bytes())

    return put


def make_service(policy, s3, bucket, tmp_path, max_loaded_adapters=4):
    store = S3AdapterStore(bucket, PREFIX, tmp_path / "adapter-cache", s3)
    return OpenAIChatService(TINY_BASE_MODEL_ID, policy, store, max_loaded_adapters)


@pytest.fixture
def service(policy, s3, bucket, tmp_path):
    created = []

    def build(max_loaded_adapters=4):
        created.append(make_service(policy, s3, bucket, tmp_path, max_loaded_adapters))
        return created[-1]

    yield build
    for service in created:  # the policy is shared by the module's tests
        for name in service.loaded_adapters:
            policy.remove_adapter(name)


MAZE_MESSAGE = observation_message(MazeEpisode(load_eval_set().mazes[0]).observation(), first=True)


def maze_request(model: str, **extra) -> dict:
    """The first observation of eval maze 0 (picture and text) without the long system prompt, to stay fast."""
    return {"model": model, "messages": [MAZE_MESSAGE], "max_tokens": 8, "temperature": 0} | extra


def answer(service, model: str, **extra) -> str:
    status, body = service.handle_chat(maze_request(model, **extra))
    assert status == 200, body
    return body["choices"][0]["message"]["content"]


def test_base_request_answers_in_openai_shape(service):
    request = maze_request(TINY_BASE_MODEL_ID)
    request["messages"] = [{"role": "system", "content": SYSTEM_PROMPT}, MAZE_MESSAGE]
    status, body = service().handle_chat(request)
    assert status == 200, body
    assert set(body) == {"id", "object", "created", "model", "choices", "usage"}
    assert body["id"].startswith("chatcmpl-")
    assert body["object"] == "chat.completion"
    assert body["model"] == TINY_BASE_MODEL_ID
    (choice,) = body["choices"]
    assert choice["index"] == 0
    assert choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str)
    assert choice["finish_reason"] in {"stop", "length"}
    usage = body["usage"]
    assert usage["prompt_tokens"] > 16 + len(SYSTEM_PROMPT) // 4  # 16 image tokens, the text
    assert 0 <= usage["completion_tokens"] <= 8
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_models_lists_adapters_uploaded_after_start(service, upload):
    running = service()
    assert [card["id"] for card in running.list_models()[1]["data"]] == [TINY_BASE_MODEL_ID]
    upload("run-a-step2")
    upload("run-a-step1")
    status, body = running.list_models()
    assert status == 200
    assert body["object"] == "list"
    assert [card["id"] for card in body["data"]] == [
        TINY_BASE_MODEL_ID,
        f"{TINY_BASE_MODEL_ID}:run-a-step1",
        f"{TINY_BASE_MODEL_ID}:run-a-step2",
    ]
    assert all(card["object"] == "model" for card in body["data"])


def test_adapter_uploaded_after_start_is_loaded_on_first_request(service, upload):
    running = service()
    base_answer = answer(running, TINY_BASE_MODEL_ID)
    assert answer(running, TINY_BASE_MODEL_ID) == base_answer  # greedy decoding is deterministic
    upload("run-a-step1")
    adapter_answer = answer(running, f"{TINY_BASE_MODEL_ID}:run-a-step1")
    assert adapter_answer != base_answer
    assert running.loaded_adapters == ["run-a-step1"]
    assert answer(running, TINY_BASE_MODEL_ID) == base_answer  # the base model is untouched by the adapter


def test_least_recently_used_adapter_is_evicted(service, upload, policy):
    running = service(max_loaded_adapters=2)
    for name in ("run-a-step1", "run-a-step2", "run-b-step1"):
        upload(name)
    first = answer(running, f"{TINY_BASE_MODEL_ID}:run-a-step1")
    answer(running, f"{TINY_BASE_MODEL_ID}:run-a-step2")
    answer(running, f"{TINY_BASE_MODEL_ID}:run-a-step1")
    answer(running, f"{TINY_BASE_MODEL_ID}:run-b-step1")
    assert running.loaded_adapters == ["run-a-step1", "run-b-step1"]
    assert not policy.has_adapter("run-a-step2")
    answer(running, f"{TINY_BASE_MODEL_ID}:run-a-step2")
    assert running.loaded_adapters == ["run-b-step1", "run-a-step2"]
    assert not policy.has_adapter("run-a-step1")
    assert answer(running, f"{TINY_BASE_MODEL_ID}:run-a-step1") == first  # reloaded after eviction
    assert running.loaded_adapters == ["run-a-step2", "run-a-step1"]


@pytest.mark.parametrize("model", ["qwen3-vl-8b-sft", "qwen3-vl-8b-sft:run-a-step1", f"{TINY_BASE_MODEL_ID}x", ""])
def test_unknown_base_model_is_404(service, model, s3_calls):
    status, body = service().handle_chat(maze_request(model))
    expected_status = 400 if model == "" else 404  # an empty model id is a malformed request
    assert status == expected_status
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == "invalid_request_error"
    assert s3_calls == []


def test_unknown_adapter_is_404(service):
    running = service()
    status, body = running.handle_chat(maze_request(f"{TINY_BASE_MODEL_ID}:run-z-step7"))
    assert status == 404
    assert body["error"]["code"] == "model_not_found"
    assert "run-z-step7" in body["error"]["message"]
    assert running.loaded_adapters == []


@pytest.mark.parametrize(
    "adapter", ["..", "../run-a-step1", "run-a/step1", "run-a-step1:run-a-step2", "x" * 150 + "-step1", ""]
)
def test_hostile_adapter_name_is_400_before_any_s3_call(service, adapter, s3_calls):
    status, body = service().handle_chat(maze_request(f"{TINY_BASE_MODEL_ID}:{adapter}"))
    assert status == 400
    assert body["error"]["type"] == "invalid_request_error"
    assert s3_calls == []


@pytest.mark.parametrize("source", ["broken", "other-shape"])
def test_unloadable_adapter_is_400_and_a_fixed_upload_is_served(service, upload, source):
    running = service()
    upload("run-c-step1", source=source)
    status, body = running.handle_chat(maze_request(f"{TINY_BASE_MODEL_ID}:run-c-step1"))
    assert status == 400
    assert body["error"]["code"] == "adapter_load_failed"
    assert "run-c-step1" in body["error"]["message"]
    assert running.loaded_adapters == []
    upload("run-c-step1", source="run-a-step1")
    assert answer(running, f"{TINY_BASE_MODEL_ID}:run-c-step1")
    assert running.loaded_adapters == ["run-c-step1"]


@pytest.mark.parametrize(
    "body, fragment",
    [
        ([1, 2], "invalid request"),
        ({"model": TINY_BASE_MODEL_ID}, "messages"),
        (maze_request(TINY_BASE_MODEL_ID, stream=True), "stream"),
        (maze_request(TINY_BASE_MODEL_ID, max_tokens=0), "max_tokens"),
        (maze_request(TINY_BASE_MODEL_ID, temperature=-1), "temperature"),
        ({"model": TINY_BASE_MODEL_ID, "messages": [{"role": "robot", "content": "hi"}]}, "role"),
        (
            {
                "model": TINY_BASE_MODEL_ID,
                "messages": [
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}
                ],
            },
            "data URI",
        ),
        (
            {
                "model": TINY_BASE_MODEL_ID,
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}],
                    }
                ],
            },
            "readable image",
        ),
    ],
)
def test_malformed_request_is_400_with_a_clear_message(service, body, fragment):
    status, answer_body = service().handle_chat(body)
    assert status == 400
    assert fragment in answer_body["error"]["message"]


def test_raw_json_body_is_accepted_and_invalid_json_refused(service):
    running = service()
    status, body = running.handle_chat(json.dumps(maze_request(TINY_BASE_MODEL_ID)).encode())
    assert status == 200, body
    status, body = running.handle_chat(b'{"model": ')
    assert status == 400
    assert "Invalid JSON" in body["error"]["message"]


def test_sampling_with_a_seed_is_reproducible(service):
    running = service()
    sampled = [answer(running, TINY_BASE_MODEL_ID, temperature=1.0, seed=seed) for seed in (3, 3)]
    assert sampled[0] == sampled[1]


# --- untrusted requests (property-based) -----------------------------------------------------------------

JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=10), children, max_size=3),
    max_leaves=12,
)
TEXT_MESSAGE = {"role": "user", "content": "hi"}
NEAR_VALID = st.fixed_dictionaries(
    {"model": st.sampled_from([TINY_BASE_MODEL_ID, f"{TINY_BASE_MODEL_ID}:run-z-step9", "x" * 201, ""]) | JSON_VALUES},
    optional={
        "messages": st.lists(
            st.fixed_dictionaries({"role": JSON_VALUES | st.just("user"), "content": JSON_VALUES}), max_size=2
        )
        | JSON_VALUES,
        "max_tokens": st.integers() | JSON_VALUES,
        "temperature": st.floats(allow_nan=True) | JSON_VALUES,
        "seed": st.integers() | JSON_VALUES,
        "n": JSON_VALUES,
    },
)
HOSTILE_BODIES = st.sampled_from(
    [
        b"[" * 30000 + b"]" * 30000,
        b'{"model": "m", "max_tokens": ' + b"9" * 5000 + b"}",
        b"\xff\xfe",
        b"",
        b"null",
        b'{"model": "tiny-qwen3-vl", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": '
        b'{"url": "data:image/png;base64,AAAA"}}]}], "max_tokens": 1}',
        b'{"model": "tiny-qwen3-vl", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": '
        b'{"url": "http://x/y.png"}}]}], "max_tokens": 1}',
    ]
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(body=st.binary(max_size=200) | NEAR_VALID.map(json.dumps) | NEAR_VALID | JSON_VALUES | HOSTILE_BODIES)
def test_any_request_gets_an_openai_error_or_an_answer_never_an_exception(service, body) -> None:
    status, answer = service().handle_chat(body)
    assert status in (200, 400, 404), answer
    if status != 200:
        assert answer["error"]["type"] == "invalid_request_error" and isinstance(answer["error"]["message"], str)
