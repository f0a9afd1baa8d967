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
from oncestream.sql.errors import KsqlError
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
    columns, rows, _lag = pull_query_with_lag(tables, analyzed)
    return columns, rows


def pull_query_with_lag(tables: TableMaterializations, analyzed: AnalyzedQuery, *,
                        max_offset_lag: int | None = None,
                        host: str = "this node") -> tuple[list[ColumnHeader], list[list[Any]], dict[int, int]]:
    """``pull_query``, also giving the lag of the store commit the rows were read from, per
    partition (``TableMaterializations.snapshot_lag``). With ``max_offset_lag``
    (``ksql.query.pull.max.allowed.offset.lag``) a commit lagging more than that on any partition
    is refused with ksqlDB's error (HARouting: no host of that partition passed its lag filter;
    ``host`` names this node in it), before any row is read."""
    source = source_of(analyzed)
    plan = plan_of(analyzed)
    validate_plan(plan, source)   # refuse (streams, unsupported forms) before asking for a store
    with tables.reader(source.name) as reader:
        lag = tables.snapshot_lag(source.name, reader)
        if max_offset_lag is not None:
            too_far = {p: n for p, n in lag.items() if n > max_offset_lag}
            if too_far:
                raise lag_error(too_far, max_offset_lag, host)
        columns, rows = run_plan(plan, source, reader)
    return columns, rows, lag


def lag_error(too_far: dict[int, int], max_offset_lag: int, host: str) -> KsqlError:
    """ksqlDB's words when MaximumLagFilter excluded every host of a partition (HARouting)."""
    parts = ", ".join(f"Partition {p} failed to find valid host. Hosts scanned: [{host} was not selected because "
                      f"Host excluded because lag {n} exceeds maximum allowed lag {max_offset_lag}.]"
                      for p, n in sorted(too_far.items()))
    return KsqlError(f"Unable to execute pull query. [{parts}]")


class PullQueryStream:
    """A finished pull query's result as an ``engine.QueryStream`` (``is_pull`` True): the rows
    are computed up front (one consistent store commit), ``rows()`` yields them."""

    is_pull = True

    def __init__(self, columns: list[ColumnHeader], rows: list[list[Any]], *, limit: int | None = None,
                 query_id: str | None = None, offset_lag: dict[int, int] | None = None) -> None:
        self.query_id = query_id or f"query_pull_{next(_query_numbers)}"
        self.columns = columns
        # Per partition, how far the store commit the rows come from is behind the changelog.
        self.offset_lag = offset_lag
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


def start_pull_query(tables: TableMaterializations, analyzed: AnalyzedQuery, *, max_offset_lag: int | None = None,
                     host: str = "this node") -> PullQueryStream:
    """Run a pull query and wrap its result, with its lag, for the REST layer (blocking: call it
    in a thread). ``max_offset_lag`` and ``host``: see ``pull_query_with_lag``."""
    columns, rows, lag = pull_query_with_lag(tables, analyzed, max_offset_lag=max_offset_lag, host=host)
    limit = analyzed.limit if analyzed.limit is not None else analyzed.query.limit
    return PullQueryStream(columns, rows, limit=limit, offset_lag=lag)


__all__ = ["PullQueryStream", "execute_pull", "lag_error", "plan_of", "pull_query", "pull_query_with_lag",
           "source_of", "start_pull_query"]
