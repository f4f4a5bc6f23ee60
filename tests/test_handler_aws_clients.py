"""A handler makes its boto3 clients once over its invocations, and each reaches the endpoint in its environment."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
import validate_run_spec
from botocore.exceptions import EndpointConnectionError
from mazeops_testing import BASE_MODEL, BASE_MODELS, FakeLambdaContext, closed_port_url
from moto.server import ThreadedMotoServer

from mazeops import aws_clients

BUCKET = "maze-clients-test"
RUNS_TABLE = "maze-clients-runs"
SPEC = {"base_model_id": BASE_MODEL, "backend": "tiny", "total_steps": 4, "eval_interval": 2, "ckpt_interval": 2}


@pytest.fixture
def endpoint() -> Iterator[str]:
    """A moto server in this process with the bucket and the runs table; its URL."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    session = boto3.session.Session("testing", "testing", region_name="us-east-1")
    session.client("s3", endpoint_url=url).create_bucket(Bucket=BUCKET)
    session.client("dynamodb", endpoint_url=url).create_table(
        TableName=RUNS_TABLE,
        KeySchema=[{"AttributeName": "run_id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "run_id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    try:
        yield url
    finally:
        server.stop()


@pytest.fixture
def created(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """(service, endpoint URL) of every client made from here on."""
    clients: list[tuple[str, str]] = []

    class CountingSession(aws_clients.Session):
        def client(self, service_name: str, *args: Any, **kwargs: Any) -> Any:
            client = super().client(service_name, *args, **kwargs)
            clients.append((service_name, client.meta.endpoint_url))
            return client

    monkeypatch.setattr(aws_clients, "Session", CountingSession)
    monkeypatch.setattr(aws_clients, "_clients", {})
    return clients


def upload_spec(url: str, run_id: str) -> str:
    """Write a run spec for `run_id` to the moto server at `url`; its key."""
    key = f"requests/{run_id}.json"
    s3 = boto3.session.Session("testing", "testing", region_name="us-east-1").client("s3", endpoint_url=url)
    s3.put_object(Bucket=BUCKET, Key=key, Body=json.dumps(SPEC).encode())
    return key


def validate(run_id: str) -> dict[str, Any]:
    """Invoke validate_run_spec on the run spec of `run_id`."""
    event = {"bucket": BUCKET, "key": f"requests/{run_id}.json", "run_id": run_id, "execution_arn": f"arn:{run_id}"}
    return validate_run_spec.lambda_handler(event, FakeLambdaContext())


def test_a_handler_makes_its_clients_once_and_each_reaches_its_endpoint(
    endpoint: str, created: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_MAX_ATTEMPTS": "1",
        "AWS_ENDPOINT_URL": endpoint,
        "ARTIFACTS_BUCKET": BUCKET,
        "RUNS_TABLE": RUNS_TABLE,
        "BASE_MODELS": json.dumps(BASE_MODELS),
    }.items():
        monkeypatch.setenv(name, value)
    for run_id in ("run1", "run2"):
        upload_spec(endpoint, run_id)
        assert validate(run_id)["run_id"] == run_id
    assert sorted(created) == [("dynamodb", endpoint), ("s3", endpoint)]

    elsewhere = closed_port_url()
    monkeypatch.setenv("AWS_ENDPOINT_URL", elsewhere)
    with pytest.raises(EndpointConnectionError, match=re.escape(elsewhere)):
        validate("run3")
    assert created[2:] == [("s3", elsewhere)]

    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    upload_spec(endpoint, "run3")
    assert validate("run3")["run_id"] == "run3"
    assert len(created) == 3
    runs = boto3.session.Session("testing", "testing", region_name="us-east-1").client(
        "dynamodb", endpoint_url=endpoint
    )
    rows = runs.scan(TableName=RUNS_TABLE)["Items"]
    assert sorted(row["run_id"]["S"] for row in rows) == ["run1", "run2", "run3"]
