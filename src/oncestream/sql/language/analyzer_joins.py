"""Join analysis for the analyzer (``oncestream.sql.language.analyzer``): the ON equality, ksqlDB's join
kinds (stream-stream needs WITHIN, stream-table on the table's primary key, table-table on primary
keys), windowed and co-partitioned sources, with ksqlDB's messages."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from oncestream.sql.errors import StatementError
from oncestream.sql.language.analyzer_expr import (
    PSEUDO_KEY,
    TYPE_KEY,
    ExpressionResolver,
    Scope,
    column_ref,
    ksql_format,
    no_map_key,
    same_expression,
    type_of,
)
from oncestream.sql.language.catalog import Format, SourceInfo
from oncestream.sql.language.sql_ast import Query, SourceKind


class JoinType:
    STREAM_STREAM = "STREAM_STREAM"
    STREAM_TABLE = "STREAM_TABLE"
    TABLE_TABLE = "TABLE_TABLE"
    FOREIGN_KEY = "FOREIGN_KEY"           # table-table on a foreign key of the left table


@dataclass(frozen=True)
class AnalyzedJoin:
    """One join, resolved: ``left_key``/``right_key`` are the two sides of the ON equality
    (``left_key`` references the sources joined so far, ``right_key`` the joined source)."""

    kind: str                      # INNER | LEFT | RIGHT | FULL
    join_type: str                 # JoinType.*
    right_alias: str
    right: SourceInfo
    on: exp.Expr
    left_key: exp.Expr
    right_key: exp.Expr
    within_before_ms: int | None
    within_after_ms: int | None
    within_grace_ms: int | None


def key_synonyms(joins: list[AnalyzedJoin] | tuple[AnalyzedJoin, ...]) -> list[exp.Expr]:
    """The expressions equal to the key of the joins' result, in ksqlDB's order (ksqlDB's key
    synonyms): a join whose left side is one of the result's so far adds its right side (no
    repartition); another left side starts again from the join's two sides; a FULL OUTER join's
    key is synthetic (either side may be null), so it has none."""
    keys: list[exp.Expr] = []
    for join in joins:
        if join.kind == "FULL":
            keys = []
        elif any(same_expression(join.left_key, k) for k in keys):
            keys = [*keys, join.right_key]
        else:
            keys = [join.left_key, join.right_key]
    return keys


def _outer_unparen(on: exp.Expr) -> exp.Expr:
    """``on`` without its outer parentheses (``ON (a.id = b.id)``)."""
    while isinstance(on, exp.Paren):
        on = on.this
    return on


def _duration_ok(ms: int | None) -> bool:
    return ms is None or ms >= 0


def _t(e: exp.Expr) -> str:
    ty = type_of(e)
    return "NULL" if ty is None else ty.ksql_name


class JoinRules:
    """Mixin of the analysis: sources in scope and the joins of the FROM clause."""

    query: Query
    all_sources: Mapping[str, SourceInfo]
    scope_sources: dict[str, SourceInfo]

    def _source(self, name: str) -> SourceInfo:
        info = self.all_sources.get(name)
        if info is None:
            raise StatementError(f"{name} does not exist.")
        return info

    def _add_source(self, name: str, alias: str | None) -> str:
        info = self._source(name)
        key = alias or name
        if key in self.scope_sources:
            raise StatementError(f"Each side of the join must have a unique alias: {key}")
        self.scope_sources[key] = info
        return key

    def _check_co_partitioned(self, left_key: exp.Expr, right_alias: str) -> None:
        """ksqlDB joins only sources with the same number of partitions."""
        left_alias = next((c.table for c in left_key.find_all(exp.Column) if c.table), None)
        if left_alias is None:
            return
        left, right = self.scope_sources[left_alias], self.scope_sources[right_alias]
        if left.partitions != right.partitions:
            raise StatementError(f"Can't join `{left.name}` with `{right.name}` since the number of partitions don't match. "
                                 f"`{left.name}` partitions = {left.partitions}; `{right.name}` partitions = {right.partitions}. "
                                 "Please repartition either one so that the number of partitions match.")

    def _check_windowed_join(self, left_key: exp.Expr, right_key: exp.Expr, right_alias: str) -> None:
        """ksqlDB joins windowed sources only to windowed sources of a compatible kind, on their keys."""
        left_alias = next((c.table for c in left_key.find_all(exp.Column) if c.table), None)
        if left_alias is None:
            return
        left, right = self.scope_sources[left_alias], self.scope_sources[right_alias]
        lw, rw = left.window, right.window
        if lw is None and rw is None:
            return
        if lw is None or rw is None:
            windowed, plain = (left_alias, lw) if lw is not None else (right_alias, rw)
            other = right_alias if lw is not None else left_alias
            assert plain is not None
            raise StatementError(f"Can not join windowed source to non-windowed source.\n`{windowed}` is {plain.kind.value} "
                                 f"windowed\n`{other}` is not windowed")
        if (lw.kind.value == "SESSION") != (rw.kind.value == "SESSION"):
            raise StatementError(
                f"Incompatible windowed sources.\nLeft source: {lw.kind.value}\nRight source: {rw.kind.value}\n"
                "Session windowed sources can only be joined to other session windowed sources, and may still not result in "
                "expected behaviour as session bounds must be an exact match for the join to work\n"
                "Hopping and tumbling windowed sources can only be joined to other hopping and tumbling windowed sources")
        # ksqlDB repartitions a side whose key is not the joined one, or whose key format (the
        # window's kind and size are part of it) differs from the other side's, which it cannot
        # for a windowed source; a Schema Registry key format is always repartitioned
        # (PreJoinRepartitionNode's forceRepartition), which a differing window then passes
        differs = (lw.kind, lw.size_ms) != (rw.kind, rw.size_ms)
        for key, info in ((left_key, left), (right_key, right)):
            forced = info.key_format in (Format.AVRO, Format.JSON_SR, Format.PROTOBUF)
            if (differs and not forced) or not self._is_key_ref(key, info):
                raise StatementError("Implicit repartitioning of windowed sources is not supported. "
                                     "See https://github.com/confluentinc/ksql/issues/4385.")

    def _join_sides(self, on: exp.Expr, resolver: ExpressionResolver, right_alias: str) -> tuple[exp.Expr, exp.Expr]:
        if not isinstance(on, exp.EQ):
            if isinstance(on, exp.And):
                raise StatementError("Invalid join condition: joins on multiple conditions are not yet supported. "
                                     f"Got {ksql_format(on, qualify=True)}.")
            raise StatementError(f"Unsupported join expression: {ksql_format(on, qualify=True)}")
        left = resolver.resolve(on.left, "JOIN ON")
        right = resolver.resolve(on.right, "JOIN ON")

        def aliases(e: exp.Expr) -> set[str]:
            return {c.table for c in e.find_all(exp.Column) if c.table}

        la, ra = aliases(left), aliases(right)
        for side, refs in ((on.left, la), (on.right, ra)):
            if len(refs) != 1:
                raise StatementError(f"Invalid comparison expression '{ksql_format(side, qualify=True)}' in join "
                                     f"'{ksql_format(on, qualify=True)}'. Each side of the join comparision must contain "
                                     "references from exactly one source.")
        if la == ra:
            # ksqlDB's Analyzer.throwOnIncompleteJoinCriteria
            raise StatementError("Each side of the join must reference exactly one source and not the same source. "
                                 f"Left side references `{next(iter(la))}` and right references `{next(iter(ra))}`")
        if right_alias not in la | ra:
            # ksqlDB's Analyzer.throwOnJoinWithoutSource
            raise StatementError(f"A join criteria is expected to reference the source (`{right_alias}`) in the FROM clause, "
                                 f"instead the right source references `{next(iter(ra))}` and the left source references "
                                 f"`{next(iter(la))}`")
        if right_alias in la and right_alias not in ra:
            left, right, la, ra = right, left, ra, la
        if ra != {right_alias} or right_alias in la:
            raise StatementError(f"Invalid comparison expression '{ksql_format(on, qualify=True)}' in join "
                                 f"'{ksql_format(on, qualify=True)}'. Each side of the join comparision must contain "
                                 "references from exactly one source.")
        if type_of(left) != type_of(right):
            raise StatementError(f"Invalid join condition: types don't match. Got {ksql_format(left, qualify=True)}"
                                 f"{{{_t(left)}}} = {ksql_format(right, qualify=True)}{{{_t(right)}}}.")
        return left, right

    @staticmethod
    def _is_key_ref(e: exp.Expr, info: SourceInfo) -> bool:
        if not isinstance(e, exp.Column) or e.meta.get(PSEUDO_KEY):
            return False
        col = info.column(e.name)
        return col is not None and col.is_key and len(info.key_columns) == 1

    def _analyze_joins(self, from_alias: str) -> tuple[list[AnalyzedJoin], SourceKind]:
        joins: list[AnalyzedJoin] = []
        left_kind = self.scope_sources[from_alias].kind
        # ksqlDB's Analyzer first takes each join's source and criteria, in order; the rules of the
        # join kinds (keys, WITHIN, join order) come after, from its logical planner
        sided: list[tuple[Any, str, exp.Expr, exp.Expr, ExpressionResolver]] = []
        for spec in self.query.joins:
            if any(info.name == spec.source for info in self.scope_sources.values()):
                if len(self.scope_sources) > 1:
                    raise StatementError(f"N-way joins do not support multiple occurrences of the same source. "
                                         f"Source: '{spec.source}'.")
                raise StatementError(f"Can not join '{self.query.source}' to '{spec.source}': self joins are not yet supported.")
            right_alias = self._add_source(spec.source, spec.alias)
            resolver = ExpressionResolver(Scope(dict(self.scope_sources)))
            left_key, right_key = self._join_sides(_outer_unparen(spec.on), resolver, right_alias)
            self._check_windowed_join(left_key, right_key, right_alias)
            sided.append((spec, right_alias, left_key, right_key, resolver))
        for spec, right_alias, left_key, right_key, resolver in sided:
            right = self.scope_sources[right_alias]
            left_source = self.scope_sources.get(left_key.table) if isinstance(left_key, exp.Column) else None
            foreign_key = left_kind is SourceKind.TABLE and right.kind is SourceKind.TABLE and (
                left_source is None or not self._is_key_ref(left_key, left_source))
            if not foreign_key:   # a foreign-key join repartitions, so any partition counts join (ksqlDB)
                self._check_co_partitioned(left_key, right_alias)
            key_type = type_of(left_key)
            if key_type is not None and isinstance(left_key, exp.Column):
                named = column_ref(f"{left_key.table}_{left_key.name}", None, key_type)
                no_map_key(named)
            kind = spec.kind.upper()
            # the ON equality as written (qualified), for ksqlDB's messages
            on_eq = _outer_unparen(spec.on)   # an EQ (checked by _join_sides)
            on_left, on_right = on_eq.args["this"], on_eq.args["expression"]
            written = (f"{ksql_format(resolver.resolve(on_left, 'JOIN ON'), qualify=True)} = "
                       f"{ksql_format(resolver.resolve(on_right, 'JOIN ON'), qualify=True)}")
            join_words = {"INNER": "[INNER] JOIN", "LEFT": "LEFT [OUTER] JOIN", "RIGHT": "RIGHT [OUTER] JOIN",
                          "FULL": "[FULL] OUTER JOIN"}.get(kind, f"{kind} JOIN")
            left_name = self.scope_sources[from_alias].name
            has_within = spec.within_before_ms is not None or spec.within_after_ms is not None
            if left_kind is SourceKind.STREAM and right.kind is SourceKind.STREAM:
                join_type = JoinType.STREAM_STREAM
                if not has_within:
                    raise StatementError(
                        "Stream-Stream joins must have a WITHIN clause specified. None was provided. To learn about how to "
                        "specify a WITHIN clause with a stream-stream join, please visit: "
                        "https://docs.confluent.io/current/ksql/docs/syntax-reference.html#create-stream-as-select")
                if not (_duration_ok(spec.within_before_ms) and _duration_ok(spec.within_after_ms)):
                    raise StatementError("WITHIN durations must not be negative")
                result_kind = SourceKind.STREAM
            elif left_kind is SourceKind.TABLE and right.kind is SourceKind.STREAM:
                raise StatementError(f"Invalid join order: table-stream joins are not supported; only stream-table joins. "
                                     f"Got {left_name} {join_words} {right.name}.")
            elif left_kind is SourceKind.STREAM:
                join_type = JoinType.STREAM_TABLE
                if has_within:
                    raise StatementError(
                        "A window definition was provided for a Stream-Table join. These joins are not windowed. Please drop "
                        "the window definition (ie. the WITHIN clause) and try to execute your join again.")
                if kind in ("FULL", "RIGHT"):
                    what = "full-outer" if kind == "FULL" else "right-outer"
                    raise StatementError(f"Invalid join type: {what} join not supported for stream-table join. "
                                         f"Got {left_name} {join_words} {right.name}.")
                if not self._is_key_ref(right_key, right):
                    raise StatementError("Invalid join condition: stream-table joins require to join on the table's primary key. "
                                         f"Got {written}.")
                result_kind = SourceKind.STREAM
            else:
                join_type = JoinType.TABLE_TABLE
                if has_within:
                    raise StatementError(
                        "A window definition was provided for a Table-Table join. These joins are not windowed. Please drop "
                        "the window definition (i.e. the WITHIN clause) and try to execute your join again.")
                if not self._is_key_ref(right_key, right):
                    raise StatementError("Invalid join condition: table-table joins require to join on the primary key of the "
                                         f"right input table. Got {written}.")
                left_info = self.scope_sources.get(left_key.table) if isinstance(left_key, exp.Column) else None
                if left_info is None or not self._is_key_ref(left_key, left_info):
                    # a foreign-key join (KIP-213): the left side is any expression of the left table
                    join_type = JoinType.FOREIGN_KEY
                    if kind in ("RIGHT", "FULL"):
                        raise StatementError(f"{kind} OUTER JOIN on a foreign key is not supported")
                    if joins:
                        # ksqlDB's LogicalPlanner: both sides of a foreign-key join must be sources
                        raise StatementError("Invalid join condition: foreign-key table-table joins are not supported as "
                                             f"part of n-way joins. Got {written}.")
                result_kind = SourceKind.TABLE
            on = exp.EQ(this=left_key, expression=right_key)
            on.meta[TYPE_KEY] = None
            joins.append(AnalyzedJoin(kind, join_type, right_alias, right, on, left_key, right_key,
                                      spec.within_before_ms, spec.within_after_ms, spec.within_grace_ms))
            left_kind = result_kind
        return joins, left_kind
