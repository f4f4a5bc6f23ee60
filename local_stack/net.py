"""Local networking helper: ports for servers that bind them a few seconds after they are chosen."""

import random
import socket
from pathlib import Path

# Ray's default worker ports (`ray start --min-worker-port/--max-worker-port`) end here.
RAY_WORKER_PORTS_END = 19999
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
DEFAULT_EPHEMERAL_START = 32768
PICK_ATTEMPTS = 200


def ephemeral_port_start() -> int:
    """The first port of the OS's ephemeral range (what ``bind(0)`` and outgoing connections draw from)."""
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return DEFAULT_EPHEMERAL_START


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, between Ray's worker ports and the ephemeral range.

    A port the OS picks (``bind(0)``) comes from the ephemeral range, from which every outgoing connection
    and every other server started with port 0 (a Ray head's own services among them) draws too: one chosen
    for a server that binds it seconds later, as a Ray head's dashboard does, can be taken in between.
    Ports below that range are taken only on request.
    """
    low, high = RAY_WORKER_PORTS_END + 1, ephemeral_port_start() - 1
    for _ in range(PICK_ATTEMPTS):
        port = random.randint(low, high)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OSError(f"no free TCP port in {low}-{high} after {PICK_ATTEMPTS} tries")
