"""Decode throughput of the one record codec's two hot consumers: the client's fetch decoder
(``Message`` objects) and the Spark reader's column builder (Arrow batches), in MB/s.

Workload: 1 KiB values with 8-byte keys and no headers, 100 records per batch (about a 100 KiB
produce batch), uncompressed unless ``--codec`` says otherwise; the blob is decoded as a fetch
response's records would be, from offset 0, read_committed with an empty aborted list (the filter
runs, nothing is hidden). Each path runs ``--rounds`` times on the same blob in this process and
the best round is reported. Time is the process's CPU time (``time.process_time``), not wall
time: on a shared machine other processes take the CPU away from a round, which CPU time does not
count, so the figure is MB per CPU-second of decoding (``--wall`` reports wall time instead).

    .venv/bin/python bench/decode.py                 # 64 MB, 7 rounds, both paths
    .venv/bin/python bench/decode.py --mb 16 --codec lz4

This is a benchmark command, not a test: it checks only that every record was decoded.
"""

from __future__ import annotations

import argparse
import time

from oncestream.client.consumer.fetch_decoder import decode_partition
from oncestream.protocol.compression import COMPRESSION_BY_NAME
from oncestream.protocol.records import NewRecord, encode_batch

RECORDS_PER_BATCH = 100
VALUE_BYTES = 1024


def build_blob(total_mb: int, codec: int) -> tuple[bytes, int]:
    """Concatenated batches holding about ``total_mb`` MB of records, and their record count."""
    value = bytes(range(256)) * (VALUE_BYTES // 256)
    batches = []
    offset = 0
    size = 0
    while size < total_mb * 1_000_000:
        records = [NewRecord(value=value, key=b"k%07d" % (offset + i)) for i in range(RECORDS_PER_BATCH)]
        batch = encode_batch(records, now_ms=1_700_000_000_000, base_offset=offset, compression=codec)
        batches.append(batch)
        offset += RECORDS_PER_BATCH
        size += RECORDS_PER_BATCH * (VALUE_BYTES + 8)
    return b"".join(batches), offset


def client_decode(blob: bytes) -> int:
    """Records the client's decoder returns for the whole blob."""
    result = decode_partition(blob, "bench", 0, 0, read_committed=True, aborted=())
    return len(result.messages)


def spark_decode(blob: bytes) -> int:
    """Rows the Spark reader's column builder makes of the whole blob (Arrow conversion included)."""
    from oncestream.spark import partition_reader as pr

    rows = 0
    for arrow_batch in pr.decode_to_arrow(blob, "bench", 0, 0, 2**62, read_committed=True):
        rows += arrow_batch.num_rows
    return rows


def measure(name: str, fn, blob: bytes, expected: int, rounds: int, clock=time.process_time) -> float:
    """Best MB/s over ``rounds`` runs (payload bytes: keys and values)."""
    payload_mb = expected * (VALUE_BYTES + 8) / 1_000_000
    best = 0.0
    for _ in range(rounds):
        start = clock()
        got = fn(blob)
        elapsed = clock() - start
        if got != expected:
            raise SystemExit(f"{name}: decoded {got} records, expected {expected}")
        best = max(best, payload_mb / elapsed)
    print(f"{name:8s} {best:8.1f} MB/s  ({expected} records, best of {rounds})")
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=64, help="MB of record payload to decode")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--codec", default="none", choices=sorted(COMPRESSION_BY_NAME))
    parser.add_argument("--only", choices=["client", "spark"], help="run one path only")
    parser.add_argument("--wall", action="store_true", help="wall-clock time instead of CPU time")
    args = parser.parse_args()
    clock = time.perf_counter if args.wall else time.process_time
    blob, count = build_blob(args.mb, COMPRESSION_BY_NAME[args.codec])
    if args.only in (None, "client"):
        measure("client", client_decode, blob, count, args.rounds, clock)
    if args.only in (None, "spark"):
        measure("spark", spark_decode, blob, count, args.rounds, clock)


if __name__ == "__main__":
    main()
