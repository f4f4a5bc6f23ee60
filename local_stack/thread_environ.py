"""``os.environ`` routed by thread: one thread reads a function's environment, every other the process's."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, MutableMapping
from typing import Any


class _ThreadEnvironData(MutableMapping[Any, Any]):
    """Stands in for ``os.environ._data`` (the encoded variables behind ``os.environ``): the thread that
    created it sees `function_data`, every other thread `host_data`."""

    def __init__(self, host_data: MutableMapping[Any, Any], function_data: dict[Any, Any]):
        self.host_data = host_data
        self.function_data = function_data
        self.owner = threading.get_ident()

    def _current(self) -> MutableMapping[Any, Any]:
        return self.function_data if threading.get_ident() == self.owner else self.host_data

    def __getitem__(self, key: Any) -> Any:
        return self._current()[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self._current()[key] = value

    def __delitem__(self, key: Any) -> None:
        del self._current()[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._current()))

    def __len__(self) -> int:
        return len(self._current())


def host_environment() -> dict[str, str]:
    """A snapshot of this process's environment, taken in one C call (another thread may set a variable meanwhile)."""
    environ = os.environ
    data = environ._data.copy()  # type: ignore[attr-defined]
    return {environ.decodekey(key): environ.decodevalue(value) for key, value in data.items()}  # type: ignore[attr-defined]


@contextlib.contextmanager
def thread_environ(environment: dict[str, str]) -> Iterator[None]:
    """Make ``os.environ`` read as `environment` in this thread for the block; other threads keep the process's.

    The store behind ``os.environ`` is routed, not the ``os.environ`` object replaced: libraries keep
    references to that object (botocore's configuration providers do). Only Python sees `environment`:
    C-level ``getenv`` and subprocesses see the process's variables.
    """
    environ = os.environ
    host_data = environ._data  # type: ignore[attr-defined]
    encode_key, encode_value = environ.encodekey, environ.encodevalue  # type: ignore[attr-defined]
    function_data = {encode_key(name): encode_value(value) for name, value in environment.items()}
    environ._data = _ThreadEnvironData(host_data, function_data)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        environ._data = host_data  # type: ignore[attr-defined]
