"""The tests' own port picker (tests/support/net.py): a port below the ephemeral range, so no
outgoing connection can take it between the probe and the server's bind."""

from __future__ import annotations

import socket

from support.net import LOWEST, _ephemeral_start, free_port


def test_ports_are_free_and_below_the_ephemeral_range() -> None:
    ports = {free_port() for _ in range(50)}
    assert all(LOWEST <= port < _ephemeral_start() for port in ports), sorted(ports)
    assert len(ports) > 40  # spread, not one port over and over
    for port in list(ports)[:5]:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))
