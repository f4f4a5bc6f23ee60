"""Ray Jobs REST client: failure modes against a fake server (fast), the real API against a local Ray head (slow)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from mazeops_testing import FakeHttpServer, answer, closed_port_url

from local_stack.ray_head import RayHead
from mazeops.ray_jobs import (
    InvalidRayAddress,
    MissingRayAuthToken,
    RayAuthRejected,
    RayJobError,
    RayJobNotFound,
    RayJobsClient,
    RayUnavailable,
    authenticated_client,
)

JOB = {
    "submission_id": "train-run1",
    "status": "RUNNING",
    "message": "Job is running.",
    "start_time": 1,
    "end_time": None,
}


# --- fast: a fake Jobs API ---------------------------------------------------------------------


def test_get_parses_the_job_description() -> None:
    with FakeHttpServer(
        {
            ("GET", "/api/jobs/train-run1"): answer(
                200, {**JOB, "status": "FAILED", "error_type": "JOB_ENTRYPOINT_COMMAND_ERROR", "driver_exit_code": 1}
            )
        }
    ) as server:
        info = RayJobsClient(server.url).get("train-run1")
    assert (info.status, info.terminal, info.error_type, info.driver_exit_code) == (
        "FAILED",
        True,
        "JOB_ENTRYPOINT_COMMAND_ERROR",
        1,
    )
    assert not info.already_submitted


def test_submit_posts_the_request_when_the_id_is_new() -> None:
    state = {"submitted": False}

    def get(_body: bytes) -> tuple[int, object]:
        return (200, {**JOB, "status": "PENDING"}) if state["submitted"] else (404, b"Job train-run1 does not exist")

    def post(body: bytes) -> tuple[int, object]:
        state["submitted"] = True
        return 200, {"submission_id": "train-run1", "job_id": None}

    routes = {("GET", "/api/jobs/train-run1"): get, ("POST", "/api/jobs/"): post}
    with FakeHttpServer(routes) as server:
        info = RayJobsClient(server.url, headers={"Cookie": "session=abc"}).submit(
            "train-run1",
            "python -m x",
            runtime_env={"env_vars": {"A": "1"}},
            metadata={"run_id": "run1"},
            entrypoint_num_gpus=1,
        )
    assert (info.status, info.already_submitted) == ("PENDING", False)
    posted = json.loads(next(body for method, _path, _h, body in server.requests if method == "POST"))
    assert posted == {
        "entrypoint": "python -m x",
        "submission_id": "train-run1",
        "runtime_env": {"env_vars": {"A": "1"}},
        "metadata": {"run_id": "run1"},
        "entrypoint_num_gpus": 1,
    }
    assert all(headers.get("Cookie") == "session=abc" for _m, _p, headers, _b in server.requests)


def test_submit_of_an_existing_id_returns_it_without_posting() -> None:
    with FakeHttpServer({("GET", "/api/jobs/train-run1"): answer(200, JOB)}) as server:
        info = RayJobsClient(server.url).submit("train-run1", "python -m x")
    assert info.already_submitted and info.status == "RUNNING"
    assert [method for method, *_ in server.requests] == ["GET"]


def test_submit_race_answered_500_returns_the_job_the_other_caller_created() -> None:
    calls = {"get": 0}

    def get(_body: bytes) -> tuple[int, object]:
        calls["get"] += 1
        return (404, b"does not exist") if calls["get"] == 1 else (200, JOB)

    routes = {
        ("GET", "/api/jobs/train-run1"): get,
        ("POST", "/api/jobs/"): answer(500, b"Job with submission_id train-run1 already exists"),
    }
    with FakeHttpServer(routes) as server:
        info = RayJobsClient(server.url).submit("train-run1", "python -m x")
    assert info.already_submitted and calls["get"] == 2


def test_submit_500_without_a_job_is_unavailable() -> None:
    routes = {
        ("GET", "/api/jobs/train-run1"): answer(404, b"nope"),
        ("POST", "/api/jobs/"): answer(500, b"No available agent"),
    }
    with FakeHttpServer(routes) as server, pytest.raises(RayUnavailable, match="no such job"):
        RayJobsClient(server.url).submit("train-run1", "python -m x")


def test_http_errors_map_to_the_three_error_types() -> None:
    routes = {
        ("GET", "/api/jobs/missing"): answer(404, b"Job missing does not exist"),
        ("GET", "/api/jobs/broken"): answer(503, b"overloaded"),
        ("GET", "/api/jobs/refused"): answer(400, b"bad request"),
        ("GET", "/api/jobs/locked"): answer(401, b"Unauthorized: Missing authentication token"),
    }
    with FakeHttpServer(routes) as server:
        client = RayJobsClient(server.url)
        with pytest.raises(RayJobNotFound, match="does not exist"):
            client.get("missing")
        with pytest.raises(RayUnavailable, match="HTTP 503"):
            client.get("broken")
        with pytest.raises(RayJobError, match="HTTP 400"):
            client.get("refused")
        with pytest.raises(RayJobError, match="HTTP 401.*authentication"):
            client.get("locked")


def test_non_json_and_unexpected_answers_are_job_errors() -> None:
    routes = {
        ("GET", "/api/jobs/html"): answer(200, b"<html>login</html>"),
        ("GET", "/api/jobs/shape"): answer(200, {"no": "status"}),
        ("POST", "/api/jobs/shape/stop"): answer(200, {"weird": 1}),
        ("GET", "/api/jobs/shape/logs"): answer(200, ["not", "logs"]),
    }
    with FakeHttpServer(routes) as server:
        client = RayJobsClient(server.url)
        with pytest.raises(RayJobError, match="non-JSON"):
            client.get("html")
        with pytest.raises(RayJobError, match="unexpected job description"):
            client.get("shape")
        with pytest.raises(RayJobError, match="unexpected stop response"):
            client.stop("shape")
        with pytest.raises(RayJobError, match="unexpected logs"):
            client.logs_tail("shape")


def test_timeout_is_unavailable() -> None:
    def slow(_body: bytes) -> tuple[int, object]:
        time.sleep(1.0)
        return 200, JOB

    with (
        FakeHttpServer({("GET", "/api/jobs/train-run1"): slow}) as server,
        pytest.raises(RayUnavailable, match="cannot reach"),
    ):
        RayJobsClient(server.url, timeout_s=0.2).get("train-run1")


def test_connection_refused_is_unavailable() -> None:
    with pytest.raises(RayUnavailable, match="cannot reach Ray"):
        RayJobsClient(closed_port_url(), timeout_s=2).get("train-run1")


def test_unresolvable_host_is_unavailable() -> None:
    with pytest.raises(RayUnavailable):
        RayJobsClient("http://ray-head.invalid:8265", timeout_s=2).version()


def test_stop_accepts_both_answer_shapes() -> None:
    routes = {
        ("POST", "/api/jobs/a/stop"): answer(200, {"stopped": True}),
        ("POST", "/api/jobs/b/stop"): answer(200, False),
    }
    with FakeHttpServer(routes) as server:
        client = RayJobsClient(server.url)
        assert client.stop("a") is True
        assert client.stop("b") is False


def test_logs_tail_keeps_the_end() -> None:
    with FakeHttpServer({("GET", "/api/jobs/a/logs"): answer(200, {"logs": "x" * 100 + "END"})}) as server:
        assert RayJobsClient(server.url).logs_tail("a", max_chars=5) == "xxEND"


def test_submission_ids_are_quoted_into_the_path() -> None:
    with FakeHttpServer({}) as server, pytest.raises(RayJobNotFound):
        RayJobsClient(server.url).get("../../api/version")
    assert server.requests[0][1] == "/api/jobs/..%2F..%2Fapi%2Fversion"


@pytest.mark.parametrize("address", ["sagemaker_ray://my-cluster/ray", "ray-head:8265", "", "http://"])
def test_non_http_addresses_are_refused(address: str) -> None:
    with pytest.raises(InvalidRayAddress, match="http"):
        RayJobsClient(address)


def test_the_product_client_sends_the_token_and_refuses_to_go_without_one() -> None:
    with FakeHttpServer({("GET", "/api/version"): answer(200, {"version": "4"})}) as server:
        authenticated_client(server.url, "tok").version()
        assert server.requests[0][2]["Authorization"] == "Bearer tok"
    with pytest.raises(MissingRayAuthToken, match="auth token is empty"):
        authenticated_client("http://ray-head.internal:8265", "")


@pytest.mark.parametrize(("code", "meaning"), [(401, "Missing authentication token"), (403, "Invalid")])
def test_a_refused_token_is_its_own_clear_error(code: int, meaning: str) -> None:
    routes = {("GET", "/api/jobs/train-run1"): answer(code, meaning.encode())}
    with FakeHttpServer(routes) as server, pytest.raises(RayAuthRejected, match=f"HTTP {code}: {meaning}.*TOKEN"):
        authenticated_client(server.url, "tok").get("train-run1")


# --- slow: a real local Ray head -----------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_head() -> Iterator[tuple[str, str]]:
    """The local stack's Ray head (token authentication on, its own ports and temp dir); yields (URL, token)."""
    with RayHead({}, num_cpus=1, serve_port=0) as head:
        yield head.address, head.auth_token


def _wait_terminal(client: RayJobsClient, submission_id: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not client.get(submission_id).terminal:
        assert time.monotonic() < deadline, f"{submission_id} did not end within {timeout_s} s"
        time.sleep(0.5)


@pytest.mark.slow
def test_real_head_refuses_requests_without_the_token(ray_head: tuple[str, str]) -> None:
    url, _token = ray_head
    with pytest.raises(RayAuthRejected, match="HTTP 401"):
        RayJobsClient(url).version()
    with pytest.raises(RayAuthRejected, match="HTTP 403"):
        authenticated_client(url, "not-the-token").submit("intruder", "echo pwned")


@pytest.mark.slow
def test_real_head_submit_is_idempotent_and_reports_success_and_logs(ray_head: tuple[str, str]) -> None:
    url, token = ray_head
    client = authenticated_client(url, token, timeout_s=30)
    assert client.version()["ray_version"]
    first = client.submit("ok-job", "echo maze-ok", metadata={"run_id": "r1", "kind": "train"})
    second = client.submit("ok-job", "echo something else")
    assert not first.already_submitted and second.already_submitted
    _wait_terminal(client, "ok-job")
    done = client.get("ok-job")
    assert (done.status, done.terminal) == ("SUCCEEDED", True)
    assert done.end_time and done.start_time and done.end_time >= done.start_time
    assert "maze-ok" in client.logs_tail("ok-job")


@pytest.mark.slow
def test_real_head_reports_a_failed_job(ray_head: tuple[str, str]) -> None:
    url, token = ray_head
    client = authenticated_client(url, token, timeout_s=30)
    client.submit("bad-job", "python -c 'import sys; sys.exit(3)'")
    _wait_terminal(client, "bad-job")
    failed = client.get("bad-job")
    assert failed.status == "FAILED"
    assert failed.error_type == "JOB_ENTRYPOINT_COMMAND_ERROR"
    assert failed.driver_exit_code == 3


@pytest.mark.slow
def test_real_head_stops_a_running_job_and_404s_unknown_ids(ray_head: tuple[str, str]) -> None:
    url, token = ray_head
    client = authenticated_client(url, token, timeout_s=30)
    client.submit("long-job", "sleep 300")
    assert client.stop("long-job") is True
    _wait_terminal(client, "long-job")
    assert client.get("long-job").status == "STOPPED"
    with pytest.raises(RayJobNotFound):
        client.get("no-such-job")
    with pytest.raises(RayJobNotFound):
        client.stop("no-such-job")
