"""The ops console without a browser: the state machine graph layout, history marks, and the app's refusals.

The app runs in Starlette's TestClient over moto (the `aws` fixture); the browser tests against
the live local stack are in test_console_local.py.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from fastapi.testclient import TestClient
from mazeops_testing import BUCKET, REGION, REGISTRY_TABLE, RUNS_TABLE, Aws

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
