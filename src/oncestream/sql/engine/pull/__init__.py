"""Pull queries (issue 13 part 3): materialized tables and ``SELECT ... FROM table WHERE ...``
answered from them, as ksqlDB's pull queries.

Interface for the node (``oncestream.sql.server.node``):

``TableMaterializations(state_dir, bootstrap_servers, client_properties)``
    One KIP-892 ``StateStore`` per TABLE of the metastore (``CREATE TABLE`` over a topic,
    ``CREATE SOURCE TABLE``, ``CREATE TABLE AS SELECT``) under ``<state_dir>/tables/<name>``,
    kept equal to a committed prefix of the table's topic (its changelog) by
    ``oncestream.state.materializer.Materializer`` running in one thread per table, reading
    read_committed. Methods:

    - ``ensure(source: SourceInfo) -> bool``: start materializing a table (idempotent; streams
      ignored; a changed topic restarts it). ``sync(sources)`` does it for the whole metastore
      and drops what is gone: call it after every applied command and at startup.
    - ``drop(name)``: stop and delete the store (``DROP TABLE``).
    - ``reader(name)``: context manager giving a read_committed reader frozen at one commit.
    - ``lag(name) -> {partition: records behind}`` (``DESCRIBE EXTENDED``), ``positions(name)``
      (store commit and changelog end per partition), ``status(name)``.
    - ``close()``: stop everything (each materializer commits; the stores stay for next start).

``execute_pull(analyzed, source, reader) -> (list[ColumnHeader], list[list])``
    Run an analyzed pull query (``oncestream.sql.language.analyzer.analyze_query``) over ``source``'s
    store through ``reader``. ``pull_query(mats, analyzed)`` picks the reader of the query's
    table; ``start_pull_query(mats, analyzed)`` wraps the result as an ``engine.QueryStream``
    (``PullQueryStream``, ``is_pull`` True) for ``SqlEngine.start_query``. Both block (RocksDB
    reads): call them in a thread from the event loop.
    Key lookups (``=``, ``IN``), key ranges (``< <= > >= BETWEEN``, a byte-range scan where the
    key encoding is order-preserving, else scan and filter: see ``lookup``), full scans with
    ``LIMIT``, windowed tables with ``WINDOWSTART``/``WINDOWEND`` bounds, projection expressions
    (``evaluate`` lists what is supported; the rest is refused with ``StatementError``).

``node_hooks.PullQueries``: the five calls the node makes (its docstring says where).

Modules: ``materializations`` (stores and their threads), ``lookup`` (access path from WHERE),
``oncestream.sql.language.evaluate`` (expressions), ``execute`` (decode with ``oncestream.sql.engine.serde``, filter, project).
See docs/state-stores.md, "Pull queries".
"""

from oncestream.sql.engine.pull.execute import OutputColumn, PullPlan, run_plan, star_outputs
from oncestream.sql.engine.pull.materializations import (
    TableMaterializations,
    TableNotMaterializedError,
    TableNotReadyError,
    TableStatus,
)
from oncestream.sql.engine.pull.query import PullQueryStream, execute_pull, plan_of, pull_query, source_of, start_pull_query

__all__ = [
    "OutputColumn",
    "PullPlan",
    "PullQueryStream",
    "TableMaterializations",
    "TableNotMaterializedError",
    "TableNotReadyError",
    "TableStatus",
    "execute_pull",
    "plan_of",
    "pull_query",
    "run_plan",
    "source_of",
    "star_outputs",
    "start_pull_query",
]
