"""A local single-node Ray head whose dashboard serves the Ray Jobs REST API, with Ray's token authentication on.

`RayHead` runs ``ray start --head --block`` as a child process with its own temp dir, free ports and a fresh token
(RAY_AUTH_MODE=token, as on the cluster), and stops exactly that head (never ``ray stop``); its jobs inherit the
environment given to it, the token included, so their ``ray.init()`` and Serve calls authenticate too.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from local_stack.net import free_port

# Ray Serve gives a new HTTP proxy 5 s (RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S) to answer its first readiness check,
# its worker's start included; on a loaded 2-core machine that start took longer, the controller killed the proxy and
# `serve.start` failed with ActorDiedError. A local head waits longer; the cluster keeps Ray's default.
SERVE_PROXY_READY_CHECK_TIMEOUT_S = "60"

OBJECT_STORE_BYTES = 200 * 1024 * 1024


class RayHeadError(RuntimeError):
    """The Ray head did not start (or answer) in time."""


class RayHead:
    """Context manager for one local Ray head; `address` is its dashboard URL."""

    def __init__(
        self,
        env: Mapping[str, str],
        num_cpus: int = 2,
        serve_port: int = 8000,
        startup_timeout_s: float = 120.0,
    ):
        """env: variables added to this process's environment for the head and its jobs; serve_port: the HTTP port
        whoever starts Ray Serve on this head uses (not a ``ray start`` option), 0 for a free one."""
        self.env = dict(env)
        self.num_cpus = num_cpus
        self.serve_port = serve_port or free_port()
        self.startup_timeout_s = startup_timeout_s
        self.dashboard_port = free_port()
        self.agent_port = free_port()
        self.client_server_port = free_port()
        self.auth_token = secrets.token_hex(32)
        self.temp_dir: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._ended_sessions: set[str] = set()  # sessions of this head before a restart: they no longer count as ready

    @property
    def address(self) -> str:
        """The dashboard / Ray Jobs REST API base URL, http://127.0.0.1:<port>."""
        return f"http://127.0.0.1:{self.dashboard_port}"

    @property
    def serve_url(self) -> str:
        """Where a Ray Serve app started with `serve_port` answers."""
        return f"http://127.0.0.1:{self.serve_port}"

    @property
    def log_path(self) -> Path:
        """Output of the ``ray start`` process (Ray's own logs are under temp_dir/session_latest/logs)."""
        if self.temp_dir is None:
            raise RayHeadError("the Ray head has not been started")
        return self.temp_dir / "ray-start.log"

    def start(self) -> RayHead:
        """Start the head and wait until its dashboard answers."""
        self.launch()
        self.wait_until_ready()
        return self

    def launch(self) -> None:
        """Start the ``ray start`` process without waiting (see `wait_until_ready`)."""
        # Ray puts Unix sockets under the temp dir: keep the path short (108-byte limit).
        self.temp_dir = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
        self._spawn()

    def halt(self) -> None:
        """Stop the head process as a crash would, keeping its ports, token and temp dir for `restart`."""
        if self.temp_dir is None:
            raise RayHeadError("the Ray head has not been started")
        session = _dashboard_session(self.address, self.auth_token) if self._process is not None else None
        if session is not None:
            self._ended_sessions.add(session)
        self._stop_process()

    def restart(self) -> RayHead:
        """Stop the head process (unless `halt` did) and start it again on the same ports, token and temp dir, and
        wait until it answers.

        What a head crash and its restart do on the cluster: running jobs die and the new head knows none of the
        jobs submitted before (its job table is in memory); clients and the stack's token secret keep working.
        """
        self.halt()
        self._spawn()
        self.wait_until_ready()
        return self

    def _spawn(self) -> None:
        """Run ``ray start --head --block`` on this head's ports, token and temp dir, its output appended to the log."""
        command = [
            sys.executable,
            "-m",
            "ray.scripts.scripts",
            "start",
            "--head",
            "--block",
            f"--num-cpus={self.num_cpus}",
            "--port=0",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={self.dashboard_port}",
            f"--dashboard-agent-listen-port={self.agent_port}",
            f"--ray-client-server-port={self.client_server_port}",
            f"--object-store-memory={OBJECT_STORE_BYTES}",
            f"--temp-dir={self.temp_dir}",
            "--disable-usage-stats",
        ]
        environment = {name: value for name, value in os.environ.items() if name != "RAY_ADDRESS"}
        environment.update(self.env)
        environment["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] = "0"
        environment["RAY_AUTH_MODE"] = "token"
        environment["RAY_AUTH_TOKEN"] = self.auth_token
        environment["RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S"] = SERVE_PROXY_READY_CHECK_TIMEOUT_S
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                command, env=environment, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop this head (and every process it started) and remove its temp dir; safe to call twice."""
        self._stop_process(timeout_s)
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
            self.temp_dir = None

    def _stop_process(self, timeout_s: float = 30.0) -> None:
        """Stop the ``ray start`` process (it stops every process of the head); keep the temp dir."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None

    def __enter__(self) -> RayHead:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def wait_until_ready(self) -> None:
        """Block until the Jobs API can take a job; on failure stop the head and raise RayHeadError.

        Ready means ``GET /api/version`` answers for this head's session (its session directory is under
        `temp_dir`: another head's dashboard on the port is an error) and the head node's dashboard agent
        (which runs submitted jobs) answers HTTP; before that, submissions fail with "No available agent".
        """
        try:
            self._poll_until_ready()
        except BaseException:
            self.stop()
            raise

    def _poll_until_ready(self) -> None:
        if self._process is None:
            raise RayHeadError("the Ray head has not been launched")
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RayHeadError(f"ray start exited with {self._process.returncode}:\n{self._log_tail()}")
            agent_answers = _http_status(f"http://127.0.0.1:{self.agent_port}/") is not None
            session = _dashboard_session(self.address, self.auth_token) if agent_answers else None
            if session is not None and session not in self._ended_sessions:
                if session not in {entry.name for entry in self.temp_dir.iterdir() if entry.is_dir()}:
                    raise RayHeadError(
                        f"port {self.dashboard_port} answers for another Ray head (session {session!r} is not under "
                        f"{self.temp_dir}):\n{self._log_tail()}"
                    )
                return
            time.sleep(0.25)
        raise RayHeadError(f"Ray Jobs API not ready within {self.startup_timeout_s:.0f} s:\n{self._log_tail()}")

    def _log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def _dashboard_session(address: str, token: str) -> str | None:
    """The session name a Ray dashboard at `address` reports on ``GET /api/version``, or None if it does not."""
    request = urllib.request.Request(f"{address}/api/version", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            session = json.loads(response.read())["session_name"]
    except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError, KeyError, TypeError):
        return None
    return session if isinstance(session, str) and session else None


def _http_status(url: str) -> int | None:
    """The HTTP status a server at `url` answers with (an error page counts), or None if none answers."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None
