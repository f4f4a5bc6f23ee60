"""The ops console without a browser: the state machine graph layout, history marks, and the app's refusals.

The app runs in Starlette's TestClient over moto (the `aws` fixture); the browser tests against
the live local stack are in test_console_local.py.
"""

from __future__ import annotations

import html
import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest
from botocore.exceptions import ClientError
from fastapi.testclient import TestClient
from matplotlib import image as plt_image
from mazeops_testing import BASE_MODEL, BUCKET, REGION, REGISTRY_TABLE, RUNS_TABLE, Aws, put_eval_result

from mazeops.cluster_health import ClusterHealth, write_health
from mazeops.dynamo import to_item
from mazeops.guards import EvalPoint, collapse_verdict
from mazeops.runs import RunsTable
from mazeops.runspec import CollapseGuard, GuardSpec
from opsconsole import pages
from opsconsole.app import create_app
from opsconsole.graph import NODE_H, NODE_W, layers, layout, transitions
from opsconsole.history import event_rows, one_line, state_marks
from opsctl.target import Target

STATEMACHINES = Path(__file__).resolve().parents[1] / "statemachines"
DEFINITIONS = {path.name.split(".")[0]: json.loads(path.read_text()) for path in STATEMACHINES.glob("*.asl.json")}
T0 = datetime(2026, 12, 3, 6, 0, tzinfo=UTC)


# --- the graph -----------------------------------------------------------------------------------


@pytest.mark.parametrize("machine", sorted(DEFINITIONS))
def test_every_state_is_drawn_once_without_overlaps_and_every_transition_too(machine: str) -> None:
    definition = DEFINITIONS[machine]
    graph = layout(definition, {})
    assert sorted(node.name for node in graph.nodes) == sorted(definition["States"])
    boxes = [(node.x, node.y) for node in graph.nodes]
    for i, (x1, y1) in enumerate(boxes):
        assert x1 >= 0 and x1 + NODE_W <= graph.width and y1 >= 0 and y1 + NODE_H <= graph.height
        for x2, y2 in boxes[i + 1 :]:
            assert abs(x1 - x2) >= NODE_W or abs(y1 - y2) >= NODE_H, "two state boxes overlap"
    expected = {(name, target) for name, state in definition["States"].items() for target, _ in transitions(state)}
    assert {(edge.source, edge.target) for edge in graph.edges} == expected


@pytest.mark.parametrize("machine", sorted(DEFINITIONS))
def test_layers_go_down_except_into_loops(machine: str) -> None:
    definition = DEFINITIONS[machine]
    depth = layers(definition)
    assert depth[definition["StartAt"]] == 0
    upward = [
        (name, target)
        for name, state in definition["States"].items()
        for target, _ in transitions(state)
        if depth[target] <= depth[name]
    ]
    # only the poll loops go back up: to their Wait state
    assert upward and all(definition["States"][target]["Type"] == "Wait" for _, target in upward)


def test_transitions_cover_next_choices_default_and_catch() -> None:
    state = {
        "Type": "Task",
        "Next": "A",
        "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "F"}, {"ErrorEquals": ["X"], "Next": "A"}],
    }
    assert transitions(state) == [("A", ""), ("F", "catch")]
    choice = {"Type": "Choice", "Choices": [{"Variable": "$.x", "BooleanEquals": True, "Next": "B"}], "Default": "C"}
    assert transitions(choice) == [("B", "choice"), ("C", "choice")]


# --- the history ---------------------------------------------------------------------------------


def _event(number: int, kind: str, **details: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"id": number, "type": kind, "timestamp": T0}
    if details:
        key = "stateEnteredEventDetails" if kind.endswith("StateEntered") else "taskFailedEventDetails"
        event[key] = details
    return event


FAILED_RUN = [
    _event(1, "ExecutionStarted"),
    _event(2, "PassStateEntered", name="Configure"),
    _event(3, "TaskStateEntered", name="ValidateRunSpec"),
    _event(
        4,
        "TaskFailed",
        error="InvalidRunSpec",
        cause=json.dumps({"errorMessage": "unknown base model", "stackTrace": ["..."]}),
    ),
    _event(5, "TaskStateEntered", name="NotifyRunFailed"),
    _event(6, "FailStateEntered", name="RunFailed"),
    _event(7, "ExecutionFailed"),
]


def test_a_failed_execution_marks_the_state_that_failed_and_the_fail_state() -> None:
    rows = event_rows(FAILED_RUN)
    assert [row.state for row in rows] == [
        "",
        "Configure",
        "ValidateRunSpec",
        "ValidateRunSpec",
        "NotifyRunFailed",
        "RunFailed",
        "RunFailed",
    ]
    assert rows[3].detail == "InvalidRunSpec unknown base model" and rows[3].failed
    assert state_marks(rows, "FAILED") == {
        "Configure": "visited",
        "ValidateRunSpec": "failed",
        "NotifyRunFailed": "visited",
        "RunFailed": "failed",
    }


def test_a_running_execution_marks_its_current_state() -> None:
    rows = event_rows(FAILED_RUN[:3])
    assert state_marks(rows, "RUNNING") == {"Configure": "visited", "ValidateRunSpec": "current"}


def test_one_line_causes() -> None:
    assert one_line(json.dumps({"errorMessage": "bad\n  spec", "stackTrace": ["x"]})) == "bad spec"
    assert one_line("plain\ntext") == "plain text"
    assert one_line(None) == ""


# --- the app's refusals ------------------------------------------------------------------------------


@pytest.fixture
def client(aws: Aws) -> TestClient:
    target = Target(
        stack_name="console-test",
        session=boto3.Session(region_name=REGION),
        outputs={
            "ArtifactsBucketName": BUCKET,
            "RunsTableName": RUNS_TABLE,
            "RegistryTableName": REGISTRY_TABLE,
            "TrainingStateMachineArn": aws.training_arn,
            "EvaluationStateMachineArn": aws.evaluation_arn,
        },
        overrides={"RAY_ADDRESS": "http://127.0.0.1:9", "SERVE_URL": "http://127.0.0.1:9"},
    )
    return TestClient(create_app(target), base_url="http://127.0.0.1", raise_server_exceptions=False)


@pytest.mark.parametrize(
    "path",
    [
        "/executions/training/train-nope",
        "/executions/nonsense/x",
        "/runs/nope",
        "/runs/Not%20A%20Run",
        "/runs/nope/jobs/train-nope/log",
        "/runs/nope/curve.png",
        "/registry/nope",
        "/registry/nope/mazes",
        "/play?model=Not%20A%20Model",
        "/play?model=tiny&eval_set=0000",
        "/nothing/here",
    ],
)
def test_unknown_ids_get_the_404_page(client: TestClient, path: str) -> None:
    answer = client.get(path)
    assert answer.status_code == 404
    assert "404 · Not found" in answer.text and "Traceback" not in answer.text


def test_pages_of_an_empty_deployment_load(client: TestClient) -> None:
    for path in ("/executions", "/runs", "/registry"):
        answer = client.get(path)
        assert answer.status_code == 200, path
    assert client.get("/", follow_redirects=False).headers["location"] == "/executions"


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
@pytest.mark.parametrize("path", ["/executions", "/runs/nope", "/registry", "/nothing/here"])
def test_every_method_that_could_write_is_refused(client: TestClient, method: str, path: str) -> None:
    answer = client.request(method, path, content=b"{}")
    assert answer.status_code == 405
    assert "the console only reads" in answer.text


def test_other_hosts_are_refused(client: TestClient) -> None:
    assert client.get("/executions", headers={"Host": "evil.example"}).status_code == 400


def test_a_bad_query_is_a_400_page(client: TestClient) -> None:
    answer = client.get("/play?model=tiny&seed=abc")
    assert answer.status_code == 400 and "seed" in answer.text


def test_failures_are_one_line_pages_without_a_trace(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(target: Target) -> dict[str, Any]:
        raise ClientError({"Error": {"Code": "AccessDenied", "Message": "not allowed"}}, "ListExecutions")

    def broken(target: Target) -> dict[str, Any]:
        raise KeyError("secret internals")

    monkeypatch.setattr(pages, "executions", refused)
    answer = client.get("/executions")
    assert answer.status_code == 502 and "AccessDenied" in answer.text
    monkeypatch.setattr(pages, "executions", broken)
    answer = client.get("/executions")
    assert answer.status_code == 500
    assert "KeyError" in answer.text and "secret internals" not in answer.text and "Traceback" not in answer.text


# --- a run's guards and the cluster's health ------------------------------------------------------------


def _running_run(aws: Aws, run_id: str) -> RunsTable:
    runs = RunsTable(aws.dynamodb, RUNS_TABLE)
    execution = f"{aws.training_arn}:train-{run_id}"
    runs.create_run(run_id, f"runs/{run_id}/spec.json", "ab" * 32, BASE_MODEL, execution, GuardSpec().model_dump(), 6)
    runs.set_status(run_id, "RUNNING")
    return runs


def _bits(solved: int) -> str:
    return "1" * solved + "0" * (64 - solved)


def test_the_run_page_of_a_stopped_run_shows_its_guards_the_reason_and_the_marked_steps(
    aws: Aws, client: TestClient
) -> None:
    runs = _running_run(aws, "r3")
    for step, solved in ((20, 45), (40, 12), (60, 10)):
        put_eval_result(aws.s3, "r3", step, _bits(solved))
    points = [EvalPoint(20, 45, 64), EvalPoint(40, 12, 64), EvalPoint(60, 10, 64)]
    verdict = collapse_verdict(points, None, CollapseGuard())
    assert verdict is not None and runs.mark_stopped("r3", verdict)
    answer = client.get("/runs/r3")
    assert answer.status_code == 200
    text = html.unescape(answer.text)
    assert '<dd class="status STOPPED" data-stopped="stopped by">' + verdict.reason + "</dd>" in text
    assert "40, 60 (marked on the learning curve)" in text
    assert '<dd data-guard="stall">no new adapter for 360 min while the Ray job runs</dd>' in text
    assert '<dd data-guard="spend">500 GPU-hours (6 GPUs)</dd>' in text
    assert "red crosses: the evaluations that made the guard stop the run" in text
    assert 'id="cluster"' not in text
    curve = client.get("/runs/r3/curve.png")
    assert curve.status_code == 200 and curve.headers["content-type"] == "image/png"
    picture = plt_image.imread(io.BytesIO(curve.content), format="png")
    assert int((np.abs(picture[..., :3] - np.array([1.0, 0.0, 0.0])).max(axis=-1) < 0.06).sum()) > 150


def test_the_run_page_of_an_active_run_says_when_the_cluster_became_unreachable(aws: Aws, client: TestClient) -> None:
    _running_run(aws, "r1")
    put_eval_result(aws.s3, "r1", 20, _bits(30))
    since = (datetime.now(UTC) - timedelta(minutes=41, seconds=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    write_health(aws.dynamodb, RUNS_TABLE, ClusterHealth(False, since, unreachable_since=since))
    text = html.unescape(client.get("/runs/r1").text)
    assert f'<p id="cluster" class="FAILED">cluster unreachable since {since} (41 min)</p>' in text
    assert "stopped by" not in text and "red crosses" not in text
    curve = client.get("/runs/r1/curve.png")
    picture = plt_image.imread(io.BytesIO(curve.content), format="png")
    assert int((np.abs(picture[..., :3] - np.array([1.0, 0.0, 0.0])).max(axis=-1) < 0.06).sum()) == 0
    runs_page = client.get("/runs").text
    assert "/runs/r1" in runs_page and "#CLUSTER" not in runs_page


# --- the one action: evaluating an adapter again ---------------------------------------------------------


def _adapter_row(aws: Aws, adapter: str, status: str) -> None:
    run_id, step = adapter.split("-step")
    item = {
        "base_model_id": "qwen3-vl-8b-sft",
        "adapter_name": adapter,
        "run_id": run_id,
        "step": int(step),
        "status": status,
        "manifest_key": f"runs/{run_id}/adapters/global_step_{step}/manifest.json",
        "lora_rank": 32,
        "created_at": "2026-12-03T06:00:00Z",
        "updated_at": "2026-12-03T07:00:00Z",
    }
    aws.dynamodb.put_item(TableName=REGISTRY_TABLE, Item=to_item(item))


ORIGIN = {"Origin": "http://127.0.0.1"}
EVALUATE = "/registry/qwen3-vl-8b-sft/r1-step20/evaluate"


def _evaluations(aws: Aws) -> list[str]:
    return [e["name"] for e in aws.sfn.list_executions(stateMachineArn=aws.evaluation_arn)["executions"]]


def test_the_base_model_page_offers_evaluate_again_only_where_it_is_allowed(aws: Aws, client: TestClient) -> None:
    _adapter_row(aws, "r1-step20", "REJECTED")
    _adapter_row(aws, "r1-step30", "CHAMPION")
    page = client.get("/registry/qwen3-vl-8b-sft").text
    assert f'action="{EVALUATE}"' in page and "evaluation attempt 2 of r1-step20" in page
    assert "/r1-step30/evaluate" not in page


@pytest.mark.parametrize("headers", [ORIGIN, {"Referer": "http://127.0.0.1/registry/qwen3-vl-8b-sft"}])
def test_evaluate_again_starts_the_next_attempt_and_shows_its_execution(
    aws: Aws, client: TestClient, headers: dict[str, str]
) -> None:
    _adapter_row(aws, "r1-step20", "EVAL_FAILED")
    answer = client.post(EVALUATE, headers=headers, follow_redirects=False)
    assert answer.status_code == 303
    assert answer.headers["location"] == "/executions/evaluation/eval-r1-step20-a2"
    assert _evaluations(aws) == ["eval-r1-step20-a2"]
    assert client.get(answer.headers["location"]).status_code == 200


@pytest.mark.parametrize(
    "headers",
    [{}, {"Origin": "http://evil.example"}, {"Origin": "null"}, {"Referer": "http://evil.example/registry"}],
    ids=["none", "other-origin", "opaque-origin", "other-referer"],
)
def test_evaluate_again_from_another_origin_is_forbidden(aws: Aws, client: TestClient, headers: dict[str, str]) -> None:
    _adapter_row(aws, "r1-step20", "EVAL_FAILED")
    answer = client.post(EVALUATE, headers=headers)
    assert answer.status_code == 403 and "own pages" in answer.text
    assert _evaluations(aws) == []


@pytest.mark.parametrize(
    ("status", "code", "message"),
    [("CHAMPION", 409, "is the champion"), ("EVALUATING", 409, "is being evaluated now"), (None, 404, "no adapter")],
)
def test_evaluate_again_is_refused_with_the_reason(
    aws: Aws, client: TestClient, status: str | None, code: int, message: str
) -> None:
    if status:
        _adapter_row(aws, "r1-step20", status)
    answer = client.post(EVALUATE, headers=ORIGIN)
    assert answer.status_code == code and message in answer.text and "Traceback" not in answer.text
    assert _evaluations(aws) == []


def test_other_posts_are_refused_even_from_the_console(client: TestClient) -> None:
    for path in ("/registry/qwen3-vl-8b-sft", "/registry/qwen3-vl-8b-sft/r1-step20/promote", "/executions"):
        assert client.post(path, headers=ORIGIN).status_code == 405, path
    assert client.put(EVALUATE, headers=ORIGIN).status_code == 405
