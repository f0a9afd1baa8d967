"""Could TLS run off the broker's event loop? What encryption through ``ssl.MemoryBIO`` costs and
whether a worker thread runs it beside the loop (CPython releases the GIL inside SSLObject calls).

Three measurements, TLS 1.3 with the test PKI's EC P-256 server certificate, 256 KiB writes:
1. one thread encrypting ``--mb`` MB: MB/s wall and CPU seconds per GB (process CPU time);
2. two threads encrypting at once: their total MB/s (about twice 1. if they run in parallel);
3. a pure-Python loop (the event loop's stand-in) counting for one second alone, beside an
   encrypting thread, and beside another pure-Python thread (the GIL's cost, for comparison).

    PYTHONPATH=src:. .venv/bin/python bench/tls_offload.py --mb 200
"""

from __future__ import annotations

import argparse
import ssl
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.certs import make_pki

WRITE_BYTES = 256 * 1024


Bios = tuple[ssl.MemoryBIO, ssl.MemoryBIO, ssl.MemoryBIO, ssl.MemoryBIO]


def handshaken(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext) -> tuple[ssl.SSLObject, ssl.SSLObject, *Bios]:
    """(server, client, server's incoming BIO, server's outgoing, client's incoming, client's
    outgoing) of a server and a client SSLObject over memory BIOs, after their handshake."""
    s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname="localhost")
    for _ in range(10):
        for side in (client, server):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    return server, client, s_in, s_out, c_in, c_out


def connected_pair(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext) -> tuple[ssl.SSLObject, ssl.MemoryBIO]:
    """A server SSLObject after its handshake with a client, both over memory BIOs, and the BIO
    its records go out to."""
    server, _client, _s_in, s_out, _c_in, _c_out = handshaken(server_ctx, client_ctx)
    return server, s_out


def encrypt(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext, total_mb: int, stop: threading.Event | None = None) -> None:
    server, out = connected_pair(server_ctx, client_ctx)
    data = b"x" * WRITE_BYTES
    for _ in range(total_mb * 1_000_000 // WRITE_BYTES):
        if stop is not None and stop.is_set():
            return
        server.write(data)
        out.read()


def decrypt_cpu_s_per_gb(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext, total_mb: int = 64) -> float:
    """CPU seconds this thread spends per decimal GB decrypting, as a server, what a client wrote in
    full 16 KiB records (the cheapest shape: one record header and tag per 16 KiB): the least any
    TLS listener on this machine pays per byte it receives, whatever else it does."""
    server, client, s_in, _s_out, _c_in, c_out = handshaken(server_ctx, client_ctx)
    record = b"x" * 16384
    records = []
    for _ in range(total_mb * 1_000_000 // len(record)):
        client.write(record)
        records.append(c_out.read())
    started_s = time.thread_time()
    for ciphertext in records:
        s_in.write(ciphertext)
        server.read(len(record))
    return (time.thread_time() - started_s) / (len(records) * len(record) / 1e9)


def spin(seconds: float) -> int:
    count, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        count += 1
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=200)
    args = parser.parse_args()
    pki = make_pki(Path(tempfile.mkdtemp(prefix="tls-offload-")))
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(str(pki.server_keystore))
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.load_verify_locations(str(pki.ca))
    client_ctx.check_hostname = False
    started, cpu_started = time.perf_counter(), time.process_time()
    encrypt(server_ctx, client_ctx, args.mb)
    wall_s, cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
    print(f"one thread: {args.mb / wall_s:.0f} MB/s, {cpu_s / (args.mb / 1000):.2f} CPU s/GB")
    threads = [threading.Thread(target=encrypt, args=(server_ctx, client_ctx, args.mb)) for _ in range(2)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(f"two threads at once: {2 * args.mb / (time.perf_counter() - started):.0f} MB/s total")
    alone = spin(1.0)
    stop = threading.Event()
    worker = threading.Thread(target=encrypt, args=(server_ctx, client_ctx, 10**6, stop))
    worker.start()
    beside_tls = spin(1.0)
    stop.set()
    worker.join()
    other = threading.Thread(target=spin, args=(1.0,))
    other.start()
    beside_python = spin(1.0)
    other.join()
    print(f"loop stand-in: beside an encrypting thread {beside_tls / alone:.2f}x its pace alone,"
          f" beside a pure-Python thread {beside_python / alone:.2f}x")


if __name__ == "__main__":
    main()
