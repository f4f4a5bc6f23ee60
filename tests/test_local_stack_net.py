"""Ports for local servers, and a Ray head that refuses another head's dashboard on its port (fast: no Ray)."""

import socket
import subprocess
from urllib.parse import urlparse

import pytest

from local_stack import net
from local_stack.net import RAY_WORKER_PORTS_END, ephemeral_port_start, free_port
from local_stack.ray_head import RayHead, RayHeadError
from tests.mazeops_testing import FakeHttpServer, answer


def test_free_ports_lie_between_rays_worker_ports_and_the_ephemeral_range_and_can_be_bound():
    ports = [free_port() for _ in range(50)]
    assert all(RAY_WORKER_PORTS_END < port < ephemeral_port_start() for port in ports)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", ports[0]))


@pytest.mark.parametrize(
    ("text", "start"), [("40000\t60999\n", 40000), ("", 32768), ("not a port\n", 32768), (None, 32768)]
)
def test_the_ephemeral_range_is_read_from_the_os_with_linuxs_default_otherwise(tmp_path, monkeypatch, text, start):
    path = tmp_path / "ip_local_port_range"
    if text is not None:
        path.write_text(text)
    monkeypatch.setattr(net, "EPHEMERAL_RANGE", path)
    assert ephemeral_port_start() == start


def test_no_free_port_in_the_range_is_a_clear_error(monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", free_port()))
        monkeypatch.setattr(net.random, "randint", lambda _low, _high: taken.getsockname()[1])
        with pytest.raises(OSError, match=r"no free TCP port in 20000-\d+ after 200 tries"):
            free_port()


def _head_answered_by(server: FakeHttpServer, temp_dir) -> RayHead:
    """A RayHead whose dashboard and agent ports are `server`'s and whose `ray start` is a sleeping child."""
    head = RayHead({}, serve_port=1, startup_timeout_s=10)
    head.dashboard_port = head.agent_port = urlparse(server.url).port
    head.temp_dir = temp_dir
    (temp_dir / "session_2026-12-07_ours").mkdir(parents=True)
    (temp_dir / "ray-start.log").write_text("ray start output\n")
    head._process = subprocess.Popen(["sleep", "60"])
    return head


def test_a_dashboard_of_this_heads_session_is_ready(tmp_path):
    routes = {("GET", "/api/version"): answer(200, {"session_name": "session_2026-12-07_ours"})}
    with FakeHttpServer(routes) as server:
        head = _head_answered_by(server, tmp_path / "ray")
        try:
            head.wait_until_ready()
        finally:
            head.stop()


@pytest.mark.parametrize("session", ["session_2026-12-07_theirs", "..", "."])
def test_another_heads_dashboard_on_the_port_is_refused_and_the_head_stopped(tmp_path, session):
    with FakeHttpServer({("GET", "/api/version"): answer(200, {"session_name": session})}) as server:
        head = _head_answered_by(server, tmp_path / "ray")
        process = head._process
        with pytest.raises(RayHeadError, match=r"answers for another Ray head .*\n.*ray start output"):
            head.wait_until_ready()
    assert process.poll() is not None and head._process is None
