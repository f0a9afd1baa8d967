"""Aggregation rules for the analyzer (``oncestream.sql.language.analyzer``), as ksqlDB's AggregateAnalyzer
states them: GROUP BY without aggregates, non-aggregate select items, HAVING, window bounds,
table aggregations, map-typed keys, with ksqlDB's messages."""

from __future__ import annotations

from sqlglot import exp

from oncestream.sql.errors import StatementError
from oncestream.sql.language import catalog, functions
from oncestream.sql.language.analyzer_expr import (
    PSEUDO_KEY,
    WINDOW_BOUNDS,
    call_parts,
    is_aggregate_call,
    ksql_format,
    same_expression,
)
from oncestream.sql.language.analyzer_joins import AnalyzedJoin
from oncestream.sql.language.catalog import SourceInfo
from oncestream.sql.language.sql_ast import SourceKind, WindowSpec

# The aggregate functions that can aggregate a table: they can undo a retracted row (ksqlDB's
# TableUdaf; engine/compile/table_udafs.py implements each).
TABLE_AGGREGATES = frozenset({"COUNT", "SUM", "AVG", "COLLECT_LIST", "CORRELATION", "STDDEV_SAMP", "STDDEV_SAMPLE",
                              "HISTOGRAM", "ATTR", "SUM_LIST"})


class AggregateRules:
    """Mixin of the analysis: GROUP BY / HAVING / aggregate checks."""

    scope_sources: dict[str, SourceInfo]

    @staticmethod
    def _non_aggregate_refs(expr: exp.Expr, group_by: tuple[exp.Expr, ...]) -> list[exp.Expr]:
        """Column references of ``expr`` outside aggregate calls and outside any sub-expression
        that is a GROUP BY expression (ksqlDB's AggregateAnalyzer); window bounds count as grouped."""
        if any(same_expression(expr, g) for g in group_by) or is_aggregate_call(expr):
            return []
        if isinstance(expr, exp.Column):
            grouped_bound = bool(expr.meta.get(PSEUDO_KEY)) and expr.name in WINDOW_BOUNDS
            return [] if grouped_bound else [expr]
        out: list[exp.Expr] = []
        for child in expr.iter_expressions():
            if not isinstance(child, exp.DataType):
                out.extend(AggregateRules._non_aggregate_refs(child, group_by))
        return out

    def _check_group_by(self, group_by: tuple[exp.Expr, ...], windowed: bool) -> None:
        for i, g in enumerate(group_by):
            agg = next((n for n in g.walk() if is_aggregate_call(n)), None)
            if agg is not None:
                raise StatementError(f"GROUP BY does not support aggregate functions: {agg.this} is an aggregate function.")
            if any(same_expression(g, other) for other in group_by[:i]):
                raise StatementError(f"Duplicate GROUP BY expression: {ksql_format(g, qualify=True)}")
            if windowed:
                self._no_window_bounds(g)
        if group_by:
            kafka = [alias for alias, info in self.scope_sources.items() if info.value_format is catalog.Format.KAFKA]
            if kafka:
                raise StatementError(f"Source(s) {', '.join(kafka)} are using the 'KAFKA' value format. This format does not "
                                     "yet support GROUP BY.")

    @staticmethod
    def _no_window_bounds(e: exp.Expr) -> None:
        for n in e.walk():
            if isinstance(n, exp.Column) and n.meta.get(PSEUDO_KEY) and n.name in WINDOW_BOUNDS:
                raise StatementError(f"Window bounds column {n.name} can only be used in the SELECT clause of windowed "
                                     "aggregations and can not be passed to aggregate functions.\n"
                                     "See https://github.com/confluentinc/ksql/issues/4397")

    def _check_aggregation(self, items: list[tuple[str, exp.Expr, exp.Expr]], group_by: tuple[exp.Expr, ...],
                           having: exp.Expr | None, aggregates: list[exp.Expr], joins: list[AnalyzedJoin],
                           window: WindowSpec | None) -> None:
        """ksqlDB's AggregateAnalyzer rules, with its messages."""
        if not group_by:
            if aggregates:
                # ksqlDB groups by a constant then: every non-aggregate select item is refused
                bad = [expr for _, expr, _ in items if self._non_aggregate_refs(expr, ())]
                if bad:
                    raise StatementError("Non-aggregate SELECT expression(s) not part of GROUP BY: "
                                         + ", ".join(ksql_format(b) for b in bad)
                                         + "\nEither add the column(s) to the GROUP BY or remove them from the SELECT.")
                calls = ", ".join(_as_analyzed(a) for a in aggregates)
                raise StatementError(f"CREATE TABLE AS SELECT statement does not support aggregate function [{calls}] "
                                     "without a GROUP BY clause.")
            if having is not None:
                raise StatementError("HAVING requires a GROUP BY clause.")
            return
        if not aggregates:
            raise StatementError("GROUP BY requires aggregate functions in either the SELECT or HAVING clause.")
        if window is not None:
            for agg in aggregates:
                for arg in agg.expressions:
                    self._no_window_bounds(arg)
        bad = [expr for _, expr, _ in items if self._non_aggregate_refs(expr, group_by)]
        if bad:
            raise StatementError("Non-aggregate SELECT expression(s) not part of GROUP BY: "
                                 + ", ".join(ksql_format(b) for b in bad)
                                 + "\nEither add the column(s) to the GROUP BY or remove them from the SELECT.")
        if having is not None:
            refs = self._non_aggregate_refs(having, group_by)
            if refs:
                raise StatementError("Non-aggregate HAVING expression not part of GROUP BY: "
                                     + ", ".join(dict.fromkeys(ksql_format(r) for r in refs))
                                     + "\nConsider switching the HAVING clause to a WHERE clause before the GROUP BY.")
        from_info = self.scope_sources[next(iter(self.scope_sources))]
        if from_info.kind is SourceKind.TABLE:
            if window is not None:
                raise StatementError("Windowing not supported for table aggregations.")
            unsupported = list(dict.fromkeys(str(a.this) for a in aggregates if str(a.this) not in TABLE_AGGREGATES))
            if unsupported:
                names = unsupported[0] if len(unsupported) == 1 else ", ".join(unsupported[:-1]) + " and " + unsupported[-1]
                raise StatementError(f"The aggregation function{'s' if len(unsupported) > 1 else ''} {names} cannot be applied "
                                     "to a table source, only to a stream source.")
        self._check_state_format(aggregates, from_info)

    @staticmethod
    def _check_state_format(aggregates: list[exp.Expr], from_info: SourceInfo) -> None:
        """ksqlDB keeps an aggregation's state in the source's value format (MaterializationUtil):
        a format of primitives only (DELIMITED, KAFKA) cannot hold the ARRAY / MAP / STRUCT state
        of AVG, TOPK, LATEST_BY_OFFSET... (``functions.has_composite_state``)."""
        if from_info.value_format not in (catalog.Format.DELIMITED, catalog.Format.KAFKA):
            return
        for agg in aggregates:
            parts = call_parts(agg)
            if parts is not None and functions.has_composite_state(parts[0]):
                raise StatementError("One of the functions used in the statement has an intermediate type that the value "
                                     "format can not handle. Please remove the function or change the format.\nConsider "
                                     "up-voting https://github.com/confluentinc/ksql/issues/3950, which will resolve this "
                                     "limitation")


def _as_analyzed(call: exp.Expr) -> str:
    """An aggregate call as ksqlDB's AggregateAnalyzer lists it: one without arguments
    (``COUNT(*)``) gets the default argument ROWTIME (``COUNT(ROWTIME)``)."""
    parts = call_parts(call)
    if parts is not None and all(isinstance(a, exp.Star) for a in parts[1]):
        return f"{parts[0]}(ROWTIME)"
    return ksql_format(call)
