"""The tool venv's checks speak JSON: a request on stdin, one result object on stdout's last line."""

from __future__ import annotations

import json
import sys
import traceback
from typing import Any


def read_request() -> dict[str, Any]:
    """The JSON object the test wrote to stdin."""
    return json.load(sys.stdin)


def write_result(result: dict[str, Any]) -> None:
    """Print ``result`` as the last line of stdout (libraries log to stderr)."""
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


def describe(error: BaseException) -> str:
    """``Type: message`` of an exception raised by a library, with the library frame that raised it."""
    frames = traceback.extract_tb(error.__traceback__)
    where = f" ({frames[-1].filename.split('site-packages/')[-1]}:{frames[-1].lineno})" if frames else ""
    return f"{type(error).__name__}: {error}{where}"
