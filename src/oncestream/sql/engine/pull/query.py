"""The entry points the node calls: ``execute_pull`` over an analyzed query, ``pull_query`` to
also pick the store reader, and ``PullQueryStream`` (``engine.QueryStream`` for a pull query's
rows, as the REST layer writes ``/query`` and ``/query-stream`` answers)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from typing import Any

from oncestream.sql.engine.interface import ColumnHeader
from oncestream.sql.engine.pull.execute import PullPlan, outputs_of, pull_error, run_plan, validate_plan
from oncestream.sql.engine.pull.materializations import TableMaterializations
from oncestream.sql.language.analyzer import AnalyzedQuery
from oncestream.sql.language.catalog import SourceInfo

_query_numbers = itertools.count(1)


def plan_of(analyzed: AnalyzedQuery) -> PullPlan:
    """The ``PullPlan`` of an analyzed pull query; refuses (as ksqlDB's PullQueryValidator
    words it) what a pull query cannot have."""
    # The analyzer refuses JOIN, WINDOW, GROUP BY, PARTITION BY and HAVING in pull queries (the
    # one home of those rules); what it lets through but a store cannot answer is refused here.
    query = analyzed.query
    if query.is_push:
        raise pull_error("Pull queries don't support EMIT clauses.")
    if analyzed.aggregates:
        raise pull_error("Pull queries don't support GROUP BY clauses.")
    limit = analyzed.limit if analyzed.limit is not None else query.limit
    return PullPlan(outputs_of(analyzed.columns, analyzed.expressions), analyzed.where, limit)


def source_of(analyzed: AnalyzedQuery) -> SourceInfo:
    """The table a pull query reads (its FROM source)."""
    return analyzed.sources[analyzed.from_alias]


def execute_pull(analyzed: AnalyzedQuery, source: SourceInfo, reader: Any) -> tuple[list[ColumnHeader], list[list[Any]]]:
    """Run an analyzed pull query over ``source``'s store through ``reader`` (a read_committed
    store reader); returns the result's column headers and rows (JSON-ready values)."""
    return run_plan(plan_of(analyzed), source, reader)


def pull_query(tables: TableMaterializations, analyzed: AnalyzedQuery) -> tuple[list[ColumnHeader], list[list[Any]]]:
    """``execute_pull`` on this node's materialized copy of the query's table."""
    source = source_of(analyzed)
    plan = plan_of(analyzed)
    validate_plan(plan, source)   # refuse (streams, unsupported forms) before asking for a store
    with tables.reader(source.name) as reader:
        return run_plan(plan, source, reader)


class PullQueryStream:
    """A finished pull query's result as an ``engine.QueryStream`` (``is_pull`` True): the rows
    are computed up front (one consistent store commit), ``rows()`` yields them."""

    is_pull = True

    def __init__(self, columns: list[ColumnHeader], rows: list[list[Any]], *, limit: int | None = None,
                 query_id: str | None = None) -> None:
        self.query_id = query_id or f"query_pull_{next(_query_numbers)}"
        self.columns = columns
        self._rows = rows
        self.limit_reached = limit is not None and len(rows) >= limit
        self._closed = False

    async def rows(self) -> AsyncIterator[list[Any]]:
        for row in self._rows:
            if self._closed:
                return
            yield row

    async def close(self) -> None:
        self._closed = True


def start_pull_query(tables: TableMaterializations, analyzed: AnalyzedQuery) -> PullQueryStream:
    """Run a pull query and wrap its result for the REST layer (blocking: call it in a thread)."""
    columns, rows = pull_query(tables, analyzed)
    limit = analyzed.limit if analyzed.limit is not None else analyzed.query.limit
    return PullQueryStream(columns, rows, limit=limit)


__all__ = ["PullQueryStream", "execute_pull", "plan_of", "pull_query", "source_of",
           "start_pull_query"]
