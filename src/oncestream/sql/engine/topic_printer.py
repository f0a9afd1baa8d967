"""What PRINT writes for each batch of records it polls (sans-io): ksqlDB's TopicStreamWriter
(the ``/query`` endpoint) and BlockingPrintPublisher (``/query-stream``).

Every record polled goes through the formatter (so the format guess sees all of them); every
``interval``-th one is written; writing stops after ``limit`` records. On ``/query`` a
``Key format: ...`` / ``Value format: ...`` line comes before a batch's records whenever the list
of possible formats has changed since the last one written (always before the first batch);
``/query-stream`` writes record lines only.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncestream.sql.engine.record_formatter import PrintedRecord, RecordFormatter
from oncestream.sql.errors import StatementError

_NO_MATCH = (" does not match any supported format. "
             "It may be a STRING with encoding other than UTF8, or some other format.")


class TopicPrinter:
    """The lines of one PRINT, batch by batch (see the module docstring)."""

    def __init__(self, *, interval: int, limit: int | None, format_lines: bool) -> None:
        if interval < 1:
            raise StatementError(f"INTERVAL must be greater than one, but was: {interval}")
        self._interval = interval
        self._limit = limit
        self._format_lines = format_lines
        self._formatter = RecordFormatter()
        self._polled = 0
        self._written = 0
        # None: nothing written yet, so the first batch always states the formats.
        self._shown_keys: list[str] | None = None
        self._shown_values: list[str] | None = None

    @property
    def done(self) -> bool:
        """LIMIT records written (at once for LIMIT 0 or less)."""
        return self._limit is not None and self._written >= self._limit

    def take(self, records: Sequence[PrintedRecord]) -> list[str]:
        """The lines to write for one poll's ``records`` (none once ``done``)."""
        if self.done or not records:
            return []
        out = []
        for line in self._formatter.format(records):
            if self._polled % self._interval == 0:
                self._written += 1
                out.append(line)
            self._polled += 1
            if self.done:
                break
        if not self._format_lines:
            return out
        return self._format_changes() + out

    def _format_changes(self) -> list[str]:
        lines = []
        keys, values = self._formatter.keys.possible(), self._formatter.values.possible()
        if keys != self._shown_keys:
            self._shown_keys = keys
            lines.append("Key format: " + (" or ".join(keys) if keys else _NO_MATCH))
        if values != self._shown_values:
            self._shown_values = values
            lines.append("Value format: " + (" or ".join(values) if values else _NO_MATCH))
        return lines
