"""Ports on loopback for servers a test starts."""

from __future__ import annotations

import random
import socket
from pathlib import Path

# A server's port is probed here and bound by the server a moment later. Ports come from below
# the kernel's ephemeral range (net.ipv4.ip_local_port_range, 32768-60999 on Debian), where the
# outgoing connections of every test — and of the other pytest-xdist workers — take theirs: one
# of them could otherwise take the port in between (a Redis Cluster node once failed "Address
# already in use" on its bus port that way). Below it only another test's listener can collide,
# one chance in thousands, and the probe skips every port bound now.
LOWEST = 10000
_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_random = random.SystemRandom()  # not the `random` a Hypothesis test seeds


def _ephemeral_start() -> int:
    try:
        return int(_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on now, outside the ephemeral range (free until somebody binds it:
    retry a bind that fails)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    highest = _ephemeral_start() - 1
    for _ in range(200):
        port = _random.randint(LOWEST, highest) if highest > LOWEST else 0
        with socket.socket(family) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise RuntimeError(f"no free port on {host} in {LOWEST}-{highest} after 200 tries")
