"""Serve the console with uvicorn on 127.0.0.1: in a background thread (local pipeline, tests) or in the foreground."""

from __future__ import annotations

import socket
import threading
import time

import uvicorn

from opsconsole.app import create_app
from opsctl.target import Target

HOST = "127.0.0.1"  # loopback only: the console is for the operator on this machine
START_TIMEOUT_S = 30.0


class ConsoleServer:
    """The console app served on `HOST`:`port` (0: any free port) by a uvicorn server; `url` says where."""

    def __init__(self, target: Target, port: int = 0) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((HOST, port))
        self.port: int = self._socket.getsockname()[1]
        config = uvicorn.Config(create_app(target), log_level="warning", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The console's address, `http://127.0.0.1:<port>`."""
        return f"http://{HOST}:{self.port}"

    def run(self) -> None:
        """Serve in this thread until interrupted (Ctrl-C)."""
        self._server.run(sockets=[self._socket])

    def start(self) -> ConsoleServer:
        """Serve in a daemon thread; return once the server accepts connections (RuntimeError if not in time)."""
        self._thread = threading.Thread(target=self.run, name="opsconsole", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the ops console did not start on {self.url}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        """Stop serving and wait for the thread to end."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._socket.close()

    def __enter__(self) -> ConsoleServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
