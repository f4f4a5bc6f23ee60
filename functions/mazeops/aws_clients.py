"""boto3 clients made once per Lambda execution environment, on first use, and shared by its invocations.

A client is reused while the AWS settings it was made with (endpoint, region, access key) are
the ones in the environment; other settings get a client of their own.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from boto3.session import Session

# The environment variables a client depends on: a client made under other values is another client.
CLIENT_SETTINGS = ("AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID")

_lock = threading.Lock()
_clients: dict[tuple[str | None, ...], Any] = {}


def aws_client(service: str) -> Any:
    """The boto3 client of `service` (e.g. "s3") for the AWS settings in the environment now.

    The first call for a service and settings creates the client, through a boto3 Session of its
    own (the default session is not safe to share between threads); later calls return that
    client, from any thread.
    """
    key = (service, *(os.environ.get(name) for name in CLIENT_SETTINGS))
    with _lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = Session().client(service)
    return client
