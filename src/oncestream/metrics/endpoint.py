"""``/metrics`` over HTTP inside the process's asyncio loop (``metrics.listen=HOST:PORT``).

The exposition is prometheus-client's (``generate_latest`` of the process's own registry); only the
HTTP framing is ours, and it is the least HTTP/1.1 a scraper needs: one GET, one response, close.

Why on the loop and not prometheus-client's ``start_http_server`` thread: the collectors read the
sans-io state (logs, coordinators, connection counts) at scrape time, and that state belongs to the
loop. A scrape on another thread would race the loop mid-update (a dict changing size during
iteration); on the loop it sees one consistent moment, and the hot path takes no lock for it.
A scrape of a broker with a few thousand partitions costs a few ms of loop time every scrape
interval, nothing in between.
"""

from __future__ import annotations

import asyncio
import logging

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

log = logging.getLogger(__name__)

# A scraper's request line and headers fit in this; anything longer is not a scraper.
_MAX_REQUEST_BYTES = 16 * 1024
_REQUEST_TIMEOUT_S = 10.0


class MetricsListenError(ValueError):
    """``metrics.listen`` is not ``HOST:PORT``."""


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too; port 0 lets the OS pick) as (host, port)."""
    host, sep, port_text = value.strip().rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise MetricsListenError(f"metrics.listen must be HOST:PORT, not {value!r}")
    return host.strip("[]"), int(port_text)


class MetricsEndpoint:
    """Serves ``registry`` at ``GET /metrics`` on ``host:port`` from the running loop."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int, *, off_loop: bool = False) -> None:
        """``off_loop``: collect on a worker thread (collectors that block, e.g. py4j calls into
        Spark, and read only thread-safe state); by default on the loop (see the module docstring)."""
        self.registry = registry
        self.off_loop = off_loop
        self.host = host
        self.port = port  # the bound one once started (port 0: the one the OS picked)
        self._server: asyncio.base_events.Server | None = None

    @classmethod
    def from_listen(cls, registry: CollectorRegistry, listen: str, *, off_loop: bool = False) -> MetricsEndpoint:
        """An endpoint for a ``metrics.listen`` value."""
        host, port = parse_listen(listen)
        return cls(registry, host, port, off_loop=off_loop)

    async def start(self) -> None:
        """Bind and serve; the bound port is in ``port`` and logged."""
        self._server = await asyncio.start_server(self._serve, self.host or None, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("oncestream metrics listening on http://%s:%d/metrics", self.host, self.port)

    def close(self) -> None:
        """Stop accepting scrapes (one in progress finishes on its own)."""
        if self._server is not None:
            self._server.close()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _REQUEST_TIMEOUT_S)
            if len(head) > _MAX_REQUEST_BYTES:
                raise ValueError("request too long")
            method, _, rest = head.partition(b" ")
            path = rest.partition(b" ")[0].partition(b"?")[0]
            if method not in (b"GET", b"HEAD"):
                status, body, ctype = b"405 Method Not Allowed", b"GET only\n", b"text/plain"
            elif path != b"/metrics":
                status, body, ctype = b"404 Not Found", b"see /metrics\n", b"text/plain"
            else:
                try:
                    exposition = (await asyncio.to_thread(generate_latest, self.registry) if self.off_loop
                                  else generate_latest(self.registry))
                except Exception:  # a collector's bug: say so to the scraper and in the log, keep serving
                    log.exception("collecting metrics failed")
                    status, body, ctype = b"500 Internal Server Error", b"collecting metrics failed\n", b"text/plain"
                else:
                    status, body, ctype = b"200 OK", exposition, CONTENT_TYPE_PLAIN_0_0_4.encode()
            writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: " + ctype + b"\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n")
            if method != b"HEAD":
                writer.write(body)
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError):
            pass  # not a scraper, or one that went away: nothing to answer
        finally:
            writer.close()
