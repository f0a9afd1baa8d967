"""A running PRINT as the REST layer streams it: a ``QueryStream`` whose rows are one text line
each (``[line]``), with no columns. Where the records come from is the node's business: it hands
in ``poll`` (one poll's records, blocking at most a moment; called in a worker thread) and
``close`` (frees the consumer), so this loop and ``topic_printer`` never touch a client."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable
from typing import Any

from oncestream.sql.engine.interface import ColumnHeader
from oncestream.sql.engine.record_formatter import PrintedRecord
from oncestream.sql.engine.topic_printer import TopicPrinter

_ids = itertools.count(1)


class TopicPrintStream:
    """Implements ``engine.interface.QueryStream`` for PRINT (see the module docstring); the REST
    layer recognises it by type to write its rows as plain text lines."""

    is_pull = False

    def __init__(self, printer: TopicPrinter, poll: Callable[[], list[PrintedRecord]],
                 close: Callable[[], None]) -> None:
        self.query_id = f"print_{next(_ids)}"
        self.columns: list[ColumnHeader] = []
        self.limit_reached = False
        self._printer = printer
        self._poll = poll
        self._close = close
        self._closed = False

    async def rows(self) -> AsyncIterator[list[Any]]:
        """Each line to write, as ``[line]``, until LIMIT lines or ``close()``."""
        try:
            while not self._closed:
                if self._printer.done:
                    self.limit_reached = True
                    return
                records = await asyncio.to_thread(self._poll)
                for line in self._printer.take(records):
                    yield [line]
        finally:
            await self.close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.to_thread(self._close)
