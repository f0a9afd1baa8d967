"""Free TCP ports from the OS: tests never bind a fixed port.

The helpers live with the one broker child-process helper (``oncestream.broker_process``); the
tests import them from here. There is a small race between closing the probing socket and the
broker binding the port; the broker fixtures retry on a new port when the process exits before
becoming ready.
"""

from __future__ import annotations

from oncestream.broker_process import free_tcp_port, port_accepts_connections

__all__ = ["free_tcp_port", "port_accepts_connections"]
