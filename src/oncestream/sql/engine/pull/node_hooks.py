"""The few calls a SQL-server node makes for pull queries (``oncestream.sql.server.node.Node``).

Wiring (a few lines in ``sql/server/node.py`` and ``sql/server/server_main.py``; tested with exactly these
by tests/interop/sql/test_pull_two_nodes.py and test_sql_security.py):

1. ``NodeSettings`` gets ``state_dir: str | None = None``; ``server_main`` passes
   ``state_dir=str(state_dir)`` (the node's ``--state-dir``).
2. ``Node.__init__``: ``self._pull = PullQueries(settings.state_dir or ".",
   settings.bootstrap_servers, settings.client_properties)``.
3. ``Node._apply`` (runner thread), before ``return result``:
   ``self._pull.metastore_changed(self._metastore.sources())``: starts materializing new tables,
   drops dropped ones; during replay at startup it reaches every table of the metastore.
4. ``Node.start_query``, right after ``analyze_query``: ``if PullQueries.is_pull(statement):
   return await self._pull.start_query(analyzed)`` (a finished ``QueryStream``; it is not a
   push query, so it does not go into the push-query registry).
5. ``Node.stop``, after ``self._runner.stop()``: ``self._pull.close()``.
6. ``DESCRIBE ... EXTENDED`` (``Node._describe``): pass ``statistics=self._pull.statistics_text(
   source.name) if statement.extended else ""`` to ``entities.source_description``; optionally
   ``self._pull.store_lags()`` as ``hostStoreLags.stateStoreLags`` in ``cluster_status``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from oncestream.sql.engine.pull.materializations import TableMaterializations, TableNotMaterializedError
from oncestream.sql.engine.pull.query import PullQueryStream, start_pull_query
from oncestream.sql.errors import KsqlError
from oncestream.sql.language import sql_ast
from oncestream.sql.language.analyzer import AnalyzedQuery
from oncestream.sql.language.catalog import SourceInfo

log = logging.getLogger(__name__)


class PullQueries:
    """A node's materialized tables and the pull queries answered from them."""

    def __init__(self, state_dir: str | Path, bootstrap_servers: str,
                 client_properties: Mapping[str, str] | None = None, **settings: Any) -> None:
        self.tables = TableMaterializations(state_dir, bootstrap_servers, client_properties, **settings)

    @staticmethod
    def is_pull(statement: sql_ast.QueryStatement) -> bool:
        """A SELECT without ``EMIT CHANGES|FINAL`` is a pull query."""
        return not statement.query.is_push

    def metastore_changed(self, sources: Iterable[SourceInfo]) -> None:
        """Make the materialized tables follow the metastore (cheap when nothing changed)."""
        self.tables.sync(list(sources))

    async def start_query(self, analyzed: AnalyzedQuery, *, max_offset_lag: int | None = None,
                          host: str = "this node") -> PullQueryStream:
        """Run a pull query on this node's copy of the table (in a thread: RocksDB reads block);
        the answer carries the lag of the store commit it read (``offset_lag``), and one lagging
        more than ``max_offset_lag`` is refused (``query.pull_query_with_lag``). Needs no Spark:
        a restarted node answers from the stores on disk as soon as its metastore knows the table."""
        return await asyncio.to_thread(start_pull_query, self.tables, analyzed, max_offset_lag=max_offset_lag,
                                       host=host)

    def statistics_text(self, name: str) -> str:
        """The materialization lag of ``name`` as one line for DESCRIBE EXTENDED's statistics
        (empty for a source this node does not materialize)."""
        try:
            positions = self.tables.positions(name)
        except TableNotMaterializedError:
            return ""
        except Exception as exc:  # noqa: BLE001 - DESCRIBE must answer even when the broker does not
            return f"materialization-lag: unknown ({exc})"
        lag = sum(end - current for current, end in positions.values())
        parts = ", ".join(f"{p}: {end - current}" for p, (current, end) in positions.items())
        return f"materialization-lag: {lag} records behind the changelog (by partition {parts})"

    def store_lags(self) -> dict[str, Any]:
        """ksqlDB's ``stateStoreLags`` shape: per table store, per partition
        ``currentOffsetPosition``, ``endOffsetPosition``, ``offsetLag``."""
        out: dict[str, Any] = {}
        for name in self.tables.names():
            try:
                positions = self.tables.positions(name)
            except (KsqlError, TableNotMaterializedError):
                continue
            except Exception as exc:  # noqa: BLE001 - a status page must not fail on one table
                log.warning("pull queries: lag of %s unavailable: %s", name, exc)
                continue
            out[name] = {"lagByPartition": {str(p): {"currentOffsetPosition": current, "endOffsetPosition": end,
                                                     "offsetLag": end - current}
                                            for p, (current, end) in positions.items()},
                         "size": len(positions)}
        return out

    def close(self) -> None:
        """Stop materializing (each store commits what it applied and stays on disk)."""
        self.tables.close()
