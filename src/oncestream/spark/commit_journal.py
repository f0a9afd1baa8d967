"""The sink's durable commit decisions: one record per committed micro-batch in a compacted topic.

Key: the streaming query id. Value (JSON): the batch id and the PreparedTxnState of every write
task's transaction, ``{"batch_id": 7, "txns": {"<transactional id>": "<pid>:<epoch>", ...}}``.
The driver appends this record *before* completing the transactions: it is the commit point of
the batch (the role the database row plays in KIP-939's dual write). After a crash the last
record says which prepared transactions to commit (those it lists) and which to abort (any other),
and which batch ids are already in the log, so a batch Spark replays is not written twice.

Compaction keeps the last record per query; lookups read backwards from the end of the partition
in growing windows, so they stay cheap however long the query has run.
"""

from __future__ import annotations

import json
import time
import zlib
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from oncestream.protocol.records import NewRecord, decode_batches, encode_batch
from oncestream.spark.errors import BrokerRequestError
from oncestream.spark.log_client import ClientSettings, LogClient

COMMITS_TOPIC = "__oncestream_spark_commits"
COMMITS_PARTITIONS = 1
_FIRST_WINDOW = 64
_FETCH_BYTES = 1 << 20


@dataclass(frozen=True)
class CommitRecord:
    """The last committed batch of a query and its transactions (transactional id -> state)."""

    query_id: str
    batch_id: int
    txns: dict[str, str] = field(default_factory=dict)

    def encode(self) -> bytes:
        """The record value (JSON)."""
        return json.dumps({"batch_id": self.batch_id, "txns": self.txns,
                           "written_ms": int(time.time() * 1000)}, sort_keys=True).encode()

    @classmethod
    def decode(cls, query_id: str, value: bytes) -> CommitRecord:
        """Parse a record value written by ``encode``."""
        data = json.loads(value)
        return cls(query_id, int(data["batch_id"]), {str(k): str(v) for k, v in data["txns"].items()})


NO_COMMIT = -1


class CommitJournal:
    """Read and append commit records for one cluster."""

    def __init__(self, bootstrap_servers: str, client: LogClient | None = None,
                 settings: ClientSettings | None = None) -> None:
        self._client = client or LogClient(bootstrap_servers, client_id="oncestream-spark-journal",
                                           settings=settings)
        self._own_client = client is None

    def close(self) -> None:
        """Close the connections this journal opened."""
        if self._own_client:
            self._client.close()

    def ensure_topic(self) -> None:
        """Create the compacted journal topic if it does not exist."""
        if COMMITS_TOPIC not in self._client.metadata([COMMITS_TOPIC]):
            self._client.create_topic(COMMITS_TOPIC, COMMITS_PARTITIONS, {"cleanup.policy": "compact"})

    def _partition(self, query_id: str) -> int:
        return zlib.crc32(query_id.encode()) % COMMITS_PARTITIONS

    def last(self, query_id: str) -> CommitRecord | None:
        """The newest commit record of ``query_id``, or None if it never committed."""
        if COMMITS_TOPIC not in self._client.metadata([COMMITS_TOPIC]):
            return None
        tp = (COMMITS_TOPIC, self._partition(query_id))
        start = self._client.list_offsets([tp], -2, read_committed=False)[tp]
        end = self._client.list_offsets([tp], -1, read_committed=False)[tp]
        key = query_id.encode()
        window = _FIRST_WINDOW
        upper = end
        while upper > start:
            lower = max(start, upper - window)
            found = self._scan(tp, lower, upper, key)
            if found is not None:
                return CommitRecord.decode(query_id, found)
            upper = lower
            window *= 4
        return None

    def _scan(self, tp: tuple[str, int], lower: int, upper: int, key: bytes) -> bytes | None:
        """The value of the last record with ``key`` in [lower, upper)."""
        position = lower
        found: bytes | None = None
        while position < upper:
            result = self._client.fetch(tp, position, max_bytes=_FETCH_BYTES, read_committed=False,
                                        max_wait_ms=0)
            if result.error == ErrorCode.offset_out_of_range and result.log_start_offset > position:
                position = result.log_start_offset
                continue
            if result.error != ErrorCode.none:
                raise BrokerRequestError(f"reading {COMMITS_TOPIC}: {result.error.name}")
            moved = False
            for batch in decode_batches(result.records, allow_partial=True):
                if batch.header.next_offset <= position:
                    continue
                moved = True
                if not batch.header.is_control:
                    for rec in batch.records:
                        if position <= rec.offset < upper and rec.key == key and rec.value is not None:
                            found = rec.value
                position = batch.header.next_offset
            if not moved:
                break  # compaction left a gap at the end of the window
        return found

    def append(self, record: CommitRecord) -> None:
        """Write the record durably (acks=all) and wait for the acknowledgement.

        A plain Produce of one small batch: the full producer (I/O thread, idempotence handshake)
        would cost more than the write. Retries may duplicate the record, which is harmless: the
        last record per query is what counts and a duplicate says the same thing.
        """
        self.ensure_topic()
        tp = (COMMITS_TOPIC, self._partition(record.query_id))
        now_ms = int(time.time() * 1000)
        batch = encode_batch([NewRecord(record.encode(), key=record.query_id.encode(), timestamp_ms=now_ms)],
                             now_ms=now_ms)
        self._client.produce(tp, batch)
