"""PRINT on a node: checks the topic, then reads it with a plain consumer as ksqlDB's
PrintTopicUtil does (every partition assigned, no group, read_uncommitted as a Kafka consumer
reads by default; at the end of each partition, or at its start with FROM BEGINNING).

The end is the partitions' high watermarks when the statement starts, so a record produced once
the response has begun is printed; ksqlDB's ``auto.offset.reset=latest`` resolves it at the first
fetch instead, which comes to the same for any record produced after the statement."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from oncestream.client import OFFSET_BEGINNING, TIMESTAMP_NOT_AVAILABLE, Admin, Consumer, KafkaException, TopicPartition
from oncestream.sql.engine.record_formatter import NO_TIMESTAMP, PrintedRecord
from oncestream.sql.engine.topic_print_stream import TopicPrintStream
from oncestream.sql.engine.topic_printer import TopicPrinter
from oncestream.sql.errors import BadRequestError, KsqlError, StatementError
from oncestream.sql.language import sql_ast

POLL_S = 0.5               # one poll's wait: how soon a closed PRINT lets its consumer go
MAX_RECORDS_PER_POLL = 500


def missing_topic_error(topic: str, existing: list[str], *, query_stream: bool) -> Exception:
    """ksqlDB's answer for a topic that is not there: /query's (StreamedQueryResource, with the
    names that differ only in case as suggestions) or /query-stream's (BlockingPrintPublisher)."""
    if query_stream:
        return StatementError(f"Topic does not exist: {topic}")
    alternatives = sorted(name for name in existing if name.lower() == topic.lower())
    suggestion = "".join(f"\n\tprint {name};" for name in alternatives)
    return BadRequestError(f"Could not find topic '{topic}', or the KSQL user does not have permissions to "
                           "list the topic. Topic names are case-sensitive."
                           + ("\nDid you mean:" + suggestion if suggestion else ""))


class TopicReader:
    """A consumer assigned every partition of one topic, polled and closed from worker threads
    (the lock keeps ``close`` from racing a poll in progress)."""

    def __init__(self, client_conf: Mapping[str, Any], topic: str, partitions: int, *, from_beginning: bool) -> None:
        self._topic = topic
        self._lock = threading.Lock()
        self._closed = False
        self._consumer = Consumer({**client_conf, "isolation.level": "read_uncommitted", "enable.auto.commit": False,
                                   "client.id": "oncestream-sql-print"})
        try:
            assignment = []
            for partition in range(partitions):
                if from_beginning:
                    offset = OFFSET_BEGINNING
                else:
                    _low, offset = self._consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
                assignment.append(TopicPartition(topic, partition, offset))
            self._consumer.assign(assignment)
        except BaseException:
            self._consumer.close()
            raise

    def poll(self) -> list[PrintedRecord]:
        """One poll's records. A consumer error ends the PRINT with its text as the last line
        (ksqlDB writes the exception's message), hence a ``KsqlError``."""
        with self._lock:
            if self._closed:
                return []
            try:
                messages = self._consumer.consume(MAX_RECORDS_PER_POLL, POLL_S)
            except KafkaException as exc:
                raise KsqlError(str(exc)) from exc
        out = []
        for message in messages:
            error = message.error()
            if error is not None:
                raise KsqlError(str(KafkaException(error)))
            kind, timestamp_ms = message.timestamp()
            out.append(PrintedRecord(timestamp_ms=NO_TIMESTAMP if kind == TIMESTAMP_NOT_AVAILABLE else timestamp_ms,
                                     key=message.key(), value=message.value(), partition=message.partition()))
        return out

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._consumer.close()


def start_print(statement: sql_ast.PrintTopic, admin: Admin, client_conf: Mapping[str, Any], *,
                query_stream: bool) -> TopicPrintStream:
    """Start ``statement`` (blocking: call it from a worker thread). ``query_stream``: the
    /query-stream flavour (record lines only, its own missing-topic error)."""
    try:
        topics = admin.list_topics(timeout=30, include_internal=True)
        if statement.topic not in topics:
            raise missing_topic_error(statement.topic, topics, query_stream=query_stream)
        # After the topic check, as ksqlDB refuses a bad INTERVAL only once it found the topic.
        printer = TopicPrinter(interval=statement.interval, limit=statement.limit, format_lines=not query_stream)
        partitions = len(admin.describe_topics([statement.topic], timeout=30)[statement.topic].partitions)
        reader = TopicReader(client_conf, statement.topic, partitions, from_beginning=statement.from_beginning)
    except (KafkaException, TimeoutError) as exc:
        raise KsqlError(f"Could not read topic '{statement.topic}': {exc}") from exc
    return TopicPrintStream(printer, reader.poll, reader.close)
