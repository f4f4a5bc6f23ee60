"""aws_clients and idempotency: one client (and one idempotency store) per AWS settings, shared across threads."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from mazeops import aws_clients
from mazeops.aws_clients import aws_client
from mazeops.idempotency import idempotency_store

SETTINGS = {
    "AWS_ENDPOINT_URL": "http://127.0.0.1:4001",
    "AWS_DEFAULT_REGION": "eu-west-1",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
}


@pytest.fixture
def created(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The services of the clients made from here on, with SETTINGS in the environment."""
    services: list[str] = []

    class CountingSession(aws_clients.Session):
        def client(self, service_name: str, *args: Any, **kwargs: Any) -> Any:
            services.append(service_name)
            return super().client(service_name, *args, **kwargs)

    monkeypatch.setattr(aws_clients, "Session", CountingSession)
    monkeypatch.setattr(aws_clients, "_clients", {})
    for name, value in SETTINGS.items():
        monkeypatch.setenv(name, value)
    return services


def test_a_client_is_made_once_per_service(created: list[str]) -> None:
    s3 = aws_client("s3")
    assert aws_client("s3") is s3
    dynamodb = aws_client("dynamodb")
    assert aws_client("dynamodb") is dynamodb is not s3
    assert created == ["s3", "dynamodb"]
    assert (s3.meta.endpoint_url, s3.meta.region_name) == ("http://127.0.0.1:4001", "eu-west-1")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("AWS_ENDPOINT_URL", "http://127.0.0.1:4002"),
        ("AWS_DEFAULT_REGION", "us-east-2"),
        ("AWS_ACCESS_KEY_ID", "other"),
    ],
)
def test_other_settings_get_a_client_of_their_own(
    created: list[str], monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    first = aws_client("s3")
    monkeypatch.setenv(name, value)
    second = aws_client("s3")
    assert second is not first
    assert created == ["s3", "s3"]
    if name == "AWS_ENDPOINT_URL":
        assert second.meta.endpoint_url == value
    if name == "AWS_DEFAULT_REGION":
        assert second.meta.region_name == value
    monkeypatch.setenv(name, SETTINGS[name])
    assert aws_client("s3") is first


def test_threads_asking_at_once_share_one_client(created: list[str]) -> None:
    start = threading.Barrier(8)
    clients: list[Any] = []

    def ask() -> None:
        start.wait()
        clients.append(aws_client("stepfunctions"))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(clients) == 8 and all(client is clients[0] for client in clients)
    assert created == ["stepfunctions"]


def test_an_idempotency_store_is_made_once_per_function_and_client(
    created: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = idempotency_store("maze-idempotency", "start_execution")
    assert idempotency_store("maze-idempotency", "start_execution") is store
    assert store.client is aws_client("dynamodb")
    assert idempotency_store("maze-idempotency", "submit_ray_job") is not store
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:4002")
    moved = idempotency_store("maze-idempotency", "start_execution")
    assert moved is not store and moved.client.meta.endpoint_url == "http://127.0.0.1:4002"
    assert created == ["dynamodb", "dynamodb"]
