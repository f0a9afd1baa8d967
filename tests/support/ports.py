"""Free TCP ports from the OS: tests never bind a fixed port."""

from __future__ import annotations

import socket


def free_tcp_port(host: str = "127.0.0.1") -> int:
    """Return a port the OS reports free on ``host`` (bind port 0, read it, close).

    There is a small race between closing this socket and the broker binding the port; the
    broker fixtures retry on a new port when the process exits before becoming ready.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_accepts_connections(host: str, port: int, timeout_s: float = 0.2) -> bool:
    """True when a TCP connect to ``host:port`` succeeds right now."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False
