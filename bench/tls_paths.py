"""What the broker's TLS byte path costs, without the broker: asyncio's TLS transport (the old
path) against broker/tls_pump.py (a thread per connection owning the TLS socket, the event loop
serving a plaintext socket pair), both on uvloop as in the broker.

The server runs in this process: one connection, a StreamReader/StreamWriter on the loop as the
broker's connection task has. The client is a separate Python process (its CPU is not counted):
``upload`` sends ``--mb`` MB in 1 MiB writes (the produce direction), ``download`` receives them
(the consume direction; the server writes 1 MiB and drains, as a Fetch response). Reported per
path and direction: MB/s wall, the server process's CPU seconds per decimal GB (all threads) and
the event loop thread's alone (what every other client of a broker competes with). The loop
does ``--loop-work-ms-per-mb`` of pure-Python work per MB moved, holding the GIL, as the broker's
request handling does, so the pump thread has to win the GIL from a busy loop as in the broker.
The client's bytes are Kafka frames (one frame of ``--mb`` MB), as a broker's clients send: the C
pump hands the loop whole frames.

    PYTHONPATH=src:. .venv/bin/python bench/tls_paths.py --mb 200 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import ssl
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import uvloop

from oncestream.broker.tls_pump import ConnectionOrigin, TlsListener, bind_listening_sockets
from tests.support.certs import Pki, make_pki

CHUNK_BYTES = 1024 * 1024
MB = 1_000_000

CLIENT = textwrap.dedent("""
    import socket, ssl, sys
    port, ca, direction, total, write = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    context = ssl.create_default_context(cafile=ca)
    with context.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="localhost") as tls:
        if direction == "upload":
            tls.sendall(total.to_bytes(4, "big"))  # one Kafka frame of total bytes (as a broker's clients send)
            chunk = b"u" * write
            sent = 0
            while sent < total:
                tls.sendall(chunk[: total - sent])
                sent += min(len(chunk), total - sent)
            tls.recv(1)  # the server's acknowledgement: everything arrived
        else:
            tls.sendall(b"\\x00\\x00\\x00\\x01g")  # a one-byte frame
            got = 0
            while got < total:
                data = tls.recv(1 << 20)
                if not data:
                    raise SystemExit(f"short download: {got} of {total}")
                got += len(data)
""")


def busy_s(seconds: float) -> None:
    """Pure-Python work on the loop (holding the GIL), the stand-in for the broker's own."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, direction: str, total: int,
                done: asyncio.Future[None], work_s_per_mb: float) -> None:
    try:
        if direction == "upload":
            got = 0
            while got < total + 4:  # the frame's size, then its bytes
                size = len(await reader.read(CHUNK_BYTES))
                got += size
                busy_s(work_s_per_mb * size / MB)
            writer.write(b"k")
        else:
            await reader.readexactly(5)
            chunk = b"d" * CHUNK_BYTES
            sent = 0
            while sent < total:
                writer.write(chunk[: total - sent])
                sent += min(CHUNK_BYTES, total - sent)
                busy_s(work_s_per_mb * CHUNK_BYTES / MB)
                await writer.drain()
        await writer.drain()
    finally:
        done.set_result(None)


async def one_run(path: str, direction: str, total: int, pki: Pki, work_s_per_mb: float,
                  write_bytes: int) -> tuple[float, float, float]:
    loop = asyncio.get_running_loop()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(pki.server_keystore))
    done: asyncio.Future[None] = loop.create_future()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await serve(reader, writer, direction, total, done, work_s_per_mb)

    if path == "asyncio":
        server = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=context)
        port = server.sockets[0].getsockname()[1]
        close = server.close
    else:
        attached: list[asyncio.Task[None]] = []

        def attach(pair_end: socket.socket, _origin: ConnectionOrigin) -> None:
            attached.append(loop.create_task(_attach(pair_end)))

        async def _attach(pair_end: socket.socket) -> None:
            reader, writer = await asyncio.open_connection(sock=pair_end)
            await handler(reader, writer)

        sockets = bind_listening_sockets("127.0.0.1", 0)
        listener = TlsListener(sockets, context, loop, handshake_timeout_s=30.0, linger_s=30.0, deliver=attach)
        port = sockets[0].getsockname()[1]
        close = listener.close
    client = await asyncio.create_subprocess_exec(sys.executable, "-c", CLIENT, str(port), str(pki.ca), direction,
                                                  str(total), str(write_bytes))
    started, cpu_started, loop_cpu_started = time.perf_counter(), time.process_time(), time.thread_time()
    await done
    if await client.wait() != 0:
        raise SystemExit("the client failed")
    loop_cpu_s = time.thread_time() - loop_cpu_started
    wall_s, cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
    close()
    return total / MB / wall_s, cpu_s / (total / 1e9), loop_cpu_s / (total / 1e9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--client-write-bytes", type=int, default=CHUNK_BYTES,
                        help="bytes per client write on upload: each becomes at least one TLS record"
                             " (librdkafka writes a produce request in pieces)")
    parser.add_argument("--loop-work-ms-per-mb", type=float, default=2.0,
                        help="pure-Python work the loop does per MB moved, holding the GIL (the broker's"
                             " own: ~2 ms/MB on produce, 0.4-0.7 on consume, docs/benchmarks.md)")
    args = parser.parse_args()
    pki = make_pki(Path(tempfile.mkdtemp(prefix="tls-paths-")))
    print("| round | path | direction | MB/s | server CPU s/GB | loop thread CPU s/GB |")
    print("| ---: | --- | --- | ---: | ---: | ---: |")
    for round_no in range(1, args.rounds + 1):
        for direction in ("upload", "download"):
            for path in ("asyncio", "pump"):
                mb_s, cpu_gb, loop_gb = uvloop.run(one_run(path, direction, args.mb * MB, pki,
                                                     args.loop_work_ms_per_mb / 1000, args.client_write_bytes))
                print(f"| {round_no} | {path} | {direction} | {mb_s:.0f} | {cpu_gb:.2f} | {loop_gb:.2f} |", flush=True)


if __name__ == "__main__":
    main()
