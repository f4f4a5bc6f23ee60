"""Capture one thread's stdout, stderr and root-logger records while other threads keep writing as before."""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import threading
from collections.abc import Iterator
from typing import TextIO

LOG_FORMAT = "[%(levelname)s]\t%(asctime)s\t%(message)s"  # the AWS Python runtime's log line


class ThreadOutput(io.TextIOBase):
    """A stdout/stderr stand-in that sends one thread's writes to a buffer.

    Writes from the capturing thread land in the buffer; writes from any other thread go to the
    stream this object replaced. A logging handler created while output is captured keeps a
    reference to it, so its later output is captured too.
    """

    def __init__(self, fallback: TextIO):
        super().__init__()
        self.fallback = fallback
        self.owner: int | None = None
        self.buffer_: io.StringIO | None = None

    @property
    def encoding(self) -> str:
        """The replaced stream's encoding."""
        return getattr(self.fallback, "encoding", None) or "utf-8"

    def writable(self) -> bool:
        """Always writable."""
        return True

    def write(self, text: str) -> int:
        """Write to the buffer from the capturing thread, else to the replaced stream."""
        if self.buffer_ is not None and threading.get_ident() == self.owner:
            return self.buffer_.write(text)
        return self.fallback.write(text)

    def flush(self) -> None:
        """Flush the replaced stream (the buffer needs none)."""
        if self.buffer_ is None or threading.get_ident() != self.owner:
            self.fallback.flush()


# One pair per process: a handler's logging.StreamHandler keeps the stream it was created with
# (Powertools adds one per logger name, once), so every capture goes through the same objects.
STDOUT_PROXY = ThreadOutput(sys.stdout)
STDERR_PROXY = ThreadOutput(sys.stderr)


@contextlib.contextmanager
def captured_output() -> Iterator[io.StringIO]:
    """Capture this thread's stdout/stderr and root-logger records (formatted as `LOG_FORMAT`) into a buffer.

    If another thread swaps ``sys.stdout``/``sys.stderr`` meanwhile (pytest does between test
    phases), a bare ``print`` may land there instead; its choice stands after the block.
    """
    captured = io.StringIO()
    saved = sys.stdout, sys.stderr
    for proxy, current in ((STDOUT_PROXY, sys.stdout), (STDERR_PROXY, sys.stderr)):
        if current is not proxy:
            proxy.fallback = current
        proxy.owner, proxy.buffer_ = threading.get_ident(), captured
    sys.stdout, sys.stderr = STDOUT_PROXY, STDERR_PROXY
    log_handler = logging.StreamHandler(captured)
    log_handler.setFormatter(logging.Formatter(LOG_FORMAT))
    capturing_thread = threading.get_ident()  # read here: a filter runs in the thread that logs
    log_handler.addFilter(lambda record: record.thread == capturing_thread)
    logging.getLogger().addHandler(log_handler)
    try:
        yield captured
    finally:
        logging.getLogger().removeHandler(log_handler)
        if sys.stdout is STDOUT_PROXY:
            sys.stdout = saved[0]
        if sys.stderr is STDERR_PROXY:
            sys.stderr = saved[1]
        for proxy in (STDOUT_PROXY, STDERR_PROXY):
            proxy.owner, proxy.buffer_ = None, None
