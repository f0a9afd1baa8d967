"""The analyzer: checks a parsed ``ast.Query`` against the metastore's sources and derives what
the compiler needs, with ksqlDB's rules and error messages.

``analyze_query(query, sources, sink=None)`` resolves sources and aliases, expands ``*`` and
``alias.*``, types every expression (``analyzer_expr``), names output columns as ksqlDB does
(``KSQL_COL_<n>`` for unnamed expressions, the field name for ``a->b``, ``<ALIAS>_<COL>`` for a
column whose name clashes between joined sources), applies ksqlDB's output-key rules, validates
joins, windows, GROUP BY and HAVING, and decides the result kind (STREAM or TABLE).

Output keys (ksqlDB 0.10+):

- aggregation: the GROUP BY expressions are the key columns;
- ``PARTITION BY e, ...``: the partitioning expressions (``PARTITION BY NULL``: no key);
- a join: the join expression (either side; a synthetic ``ROWKEY`` for FULL OUTER joins or when
  a side is not a plain column);
- otherwise the source's key columns.

A key column takes the name of the select item that is that key expression. A persistent query
(``sink`` given) must select every key (``Key missing from projection...``) exactly once; key
columns come first in its ``columns``, as in ksqlDB's sink schema. A push query keeps the
projection order (key columns marked KEY where selected).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlglot import exp

from oncestream.sql import catalog
from oncestream.sql.analyzer_expr import (
    PSEUDO_KEY,
    TYPE_KEY,
    WINDOW_BOUNDS,
    ExpressionResolver,
    Scope,
    call_parts,
    is_aggregate_call,
    ksql_text,
    type_of,
)
from oncestream.sql.ast import Query, SourceKind, WindowSpec
from oncestream.sql.catalog import Column, Namespace, SourceInfo
from oncestream.sql.errors import StatementError
from oncestream.sql.types import SqlType

__all__ = ["AnalyzedJoin", "AnalyzedQuery", "analyze_query", "type_of", "call_parts", "TYPE_KEY", "PSEUDO_KEY"]


class JoinType:
    STREAM_STREAM = "STREAM_STREAM"
    STREAM_TABLE = "STREAM_TABLE"
    TABLE_TABLE = "TABLE_TABLE"


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


@dataclass(frozen=True)
class AnalyzedQuery:
    """Everything the compiler needs about one query (all expressions resolved and typed).

    ``columns`` and ``expressions`` are parallel: the output column and the expression computing
    it (over the source columns for a plain query, over GROUP BY keys and aggregate calls for an
    aggregation). ``key_expressions`` are what the output is keyed by (GROUP BY / PARTITION BY /
    join key / source key), parallel to ``key_names``."""

    query: Query
    columns: tuple[Column, ...]
    expressions: tuple[exp.Expr, ...]
    result_kind: SourceKind
    window: WindowSpec | None
    sources: dict[str, SourceInfo]               # alias (or name) -> source, FROM first
    from_alias: str
    joins: tuple[AnalyzedJoin, ...] = ()
    where: exp.Expr | None = None
    group_by: tuple[exp.Expr, ...] = ()
    having: exp.Expr | None = None
    partition_by: tuple[exp.Expr, ...] = ()
    key_expressions: tuple[exp.Expr, ...] = ()
    key_names: tuple[str, ...] = ()
    aggregates: tuple[exp.Expr, ...] = ()  # distinct aggregate calls (select + having)
    synthetic_key: str | None = None             # ROWKEY-style name of a synthetic join key
    persistent: bool = False
    emit_final: bool = False
    limit: int | None = None
    warnings: tuple[str, ...] = field(default=())

    @property
    def is_aggregate(self) -> bool:
        return bool(self.group_by) or bool(self.aggregates)

    @property
    def windowed(self) -> bool:
        return self.window is not None

    @property
    def key_columns(self) -> tuple[Column, ...]:
        return tuple(c for c in self.columns if c.is_key)

    @property
    def value_columns(self) -> tuple[Column, ...]:
        return tuple(c for c in self.columns if not c.is_key)

    def schema_text(self) -> str:
        """ksqlDB's schema string: ```ID` INTEGER KEY, `NAME` STRING``."""
        return ", ".join(f"`{c.name}` {c.type.ksql_name}{' KEY' if c.is_key else ''}" for c in self.columns)


_NUMBERED = re.compile(r"^(?P<name>.*?)(?:_(?P<number>\d+))?$")


class _AliasGenerator:
    """ksqlDB's ColumnAliasGenerator: KSQL_COL_<n> (n not used by any source column of that
    shape) and, for ``a->b``, the field name (``B``, then ``B_1``... when taken)."""

    def __init__(self, sources: Mapping[str, SourceInfo]) -> None:
        self.used: dict[str, set[int]] = {}
        for info in sources.values():
            for col in info.columns:
                m = _NUMBERED.match(col.name)
                assert m is not None
                number = m.group("number")
                self.used.setdefault(m.group("name"), set()).add(int(number) if number is not None else 0)
        self.next: dict[str, int] = {}

    def _next(self, prefix: str, drop_zero: bool) -> str:
        used = self.used.get(prefix, set())
        idx = self.next.get(prefix, 0)
        while idx in used:
            idx += 1
        self.next[prefix] = idx + 1
        return prefix if (idx == 0 and drop_zero) else f"{prefix}_{idx}"

    def ksql_col(self) -> str:
        return self._next("KSQL_COL", drop_zero=False)

    def struct_field(self, field_name: str) -> str:
        m = _NUMBERED.match(field_name)
        assert m is not None
        return self._next(m.group("name"), drop_zero=True)


def _duration_ok(ms: int | None) -> bool:
    return ms is None or ms >= 0


def analyze_query(query: Query, sources: Mapping[str, SourceInfo], *, sink: str | None = None) -> AnalyzedQuery:
    """Analyze ``query`` against ``sources`` (the metastore's sources by name). ``sink`` names the
    stream/table a persistent query writes (CREATE ... AS SELECT / INSERT INTO); None for a push
    or pull query. Raises ``StatementError`` with ksqlDB's message."""
    return _Analysis(query, sources, sink).run()


class _Analysis:
    def __init__(self, query: Query, sources: Mapping[str, SourceInfo], sink: str | None) -> None:
        self.query = query
        self.all_sources = sources
        self.sink = sink
        self.scope_sources: dict[str, SourceInfo] = {}

    # -- sources and joins -------------------------------------------------------------------

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

    def _join_sides(self, on: exp.Expr, resolver: ExpressionResolver, right_alias: str) -> tuple[exp.Expr, exp.Expr]:
        if not isinstance(on, exp.EQ):
            if isinstance(on, exp.And):
                raise StatementError("Invalid join condition: joins on multiple conditions are not yet supported. "
                                     f"Got {ksql_text(on)}.")
            raise StatementError(f"Unsupported join expression: {ksql_text(on)}")
        left = resolver.resolve(on.left, "JOIN ON")
        right = resolver.resolve(on.right, "JOIN ON")

        def aliases(e: exp.Expr) -> set[str]:
            return {c.table for c in e.find_all(exp.Column) if c.table}

        la, ra = aliases(left), aliases(right)
        if right_alias in la and right_alias not in ra:
            left, right, la, ra = right, left, ra, la
        if ra != {right_alias} or not la or right_alias in la:
            raise StatementError(f"Invalid comparison expression '{ksql_text(on)}' in join '{ksql_text(on)}'. "
                                 "Each side of the join comparision must contain references from exactly one source.")
        if type_of(left) != type_of(right):
            raise StatementError(f"Invalid join condition: types don't match. Got {ksql_text(left)}{{{_t(left)}}} = "
                                 f"{ksql_text(right)}{{{_t(right)}}}.")
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
        for spec in self.query.joins:
            right_alias = self._add_source(spec.source, spec.alias)
            right = self.scope_sources[right_alias]
            resolver = ExpressionResolver(Scope(dict(self.scope_sources)))
            left_key, right_key = self._join_sides(spec.on, resolver, right_alias)
            kind = spec.kind.upper()
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
                                     f"Got {from_alias} [{kind}] JOIN {right_alias}.")
            elif left_kind is SourceKind.STREAM:
                join_type = JoinType.STREAM_TABLE
                if has_within:
                    raise StatementError(
                        "A window definition was provided for a Stream-Table join. These joins are not windowed. Please drop "
                        "the window definition (ie. the WITHIN clause) and try to execute your join again.")
                if kind in ("FULL", "RIGHT"):
                    what = "Full outer" if kind == "FULL" else "Right"
                    raise StatementError(f"{what} joins between streams and tables are not supported.")
                if not self._is_key_ref(right_key, right):
                    raise StatementError("Invalid join condition: stream-table joins require to join on the table's primary key. "
                                         f"Got {ksql_text(left_key)} = {ksql_text(right_key)}.")
                result_kind = SourceKind.STREAM
            else:
                join_type = JoinType.TABLE_TABLE
                if has_within:
                    raise StatementError(
                        "A window definition was provided for a Table-Table join. These joins are not windowed. Please drop "
                        "the window definition (i.e. the WITHIN clause) and try to execute your join again.")
                if not self._is_key_ref(right_key, right):
                    raise StatementError("Invalid join condition: table-table joins require to join on the primary key of the "
                                         f"right input table. Got {ksql_text(left_key)} = {ksql_text(right_key)}.")
                left_info = self.scope_sources.get(left_key.table) if isinstance(left_key, exp.Column) else None
                if left_info is None or not self._is_key_ref(left_key, left_info):
                    raise StatementError("Invalid join condition: foreign-key table-table joins are not supported. "
                                         f"Got {ksql_text(left_key)} = {ksql_text(right_key)}.")
                result_kind = SourceKind.TABLE
            on = exp.EQ(this=left_key, expression=right_key)
            on.meta[TYPE_KEY] = None
            joins.append(AnalyzedJoin(kind, join_type, right_alias, right, on, left_key, right_key,
                                      spec.within_before_ms, spec.within_after_ms, spec.within_grace_ms))
            left_kind = result_kind
        return joins, left_kind

    # -- the whole query ----------------------------------------------------------------------

    def run(self) -> AnalyzedQuery:
        q = self.query
        from_alias = self._add_source(q.source, q.source_alias)
        joins, kind = self._analyze_joins(from_alias)
        from_info = self.scope_sources[from_alias]
        select = q.select
        group_nodes = list(select.args["group"].expressions) if select.args.get("group") else []
        having_node = select.args["having"].this if select.args.get("having") else None
        where_node = select.args["where"].this if select.args.get("where") else None
        window = q.window

        if window is not None and not group_nodes:
            raise StatementError("WINDOW clause requires a GROUP BY clause.")
        if from_info.window is not None and window is not None:
            raise StatementError(f"Cannot apply a WINDOW to the windowed source {from_alias}.")

        base_scope = Scope(dict(self.scope_sources), windowed=from_info.window is not None, default_alias=from_alias)
        resolver = ExpressionResolver(base_scope)

        where = resolver.resolve(where_node, "WHERE") if where_node is not None else None
        if where is not None:
            ty = type_of(where)
            if ty is not None and ty.base.value != "BOOLEAN":
                raise StatementError(f"Type error in WHERE expression: Should evaluate to boolean but is {ksql_text(where)} "
                                     f"({ty.ksql_name}) instead.")
            if any(is_aggregate_call(n) for n in where.walk()):
                raise StatementError("WHERE clause can not contain aggregate functions.")

        group_by = tuple(resolver.resolve(g, "GROUP BY") for g in group_nodes)
        for g in group_by:
            if any(is_aggregate_call(n) for n in g.walk()):
                raise StatementError(f"GROUP BY expression can not contain aggregate functions: {ksql_text(g)}")
        partition_by: tuple[exp.Expr, ...] = ()
        partition_null = len(q.partition_by) == 1 and isinstance(q.partition_by[0], exp.Null)
        if q.partition_by:
            if group_nodes:
                raise StatementError("PARTITION BY and GROUP BY in the same query is not supported.")
            if kind is SourceKind.TABLE:
                raise StatementError("Cannot repartition a TABLE source.")
            if not partition_null:
                partition_by = tuple(resolver.resolve(p, "PARTITION BY") for p in q.partition_by)

        # windowed aggregation: WINDOWSTART/WINDOWEND become selectable
        agg_scope = Scope(dict(self.scope_sources), windowed=window is not None or from_info.window is not None,
                          default_alias=from_alias)
        select_resolver = ExpressionResolver(agg_scope)

        # key expressions and their default names
        synthetic_key: str | None = None
        key_exprs: list[exp.Expr]
        viable_join_keys: list[exp.Expr] = []
        if group_by:
            key_exprs = list(group_by)
            kind = SourceKind.TABLE
        elif partition_by or partition_null:
            key_exprs = list(partition_by)
        elif joins:
            last = joins[-1]
            if last.kind == "FULL" or not isinstance(last.left_key, exp.Column) or not isinstance(last.right_key, exp.Column):
                synthetic_key = self._synthetic_key_name()
                key_exprs = [ExpressionResolver._column_node(synthetic_key, None, type_of(last.left_key) or _t_default())]
                select_resolver = ExpressionResolver(Scope(dict(self.scope_sources), windowed=agg_scope.windowed,
                                                           extra={synthetic_key: type_of(last.left_key) or _t_default()},
                                                           default_alias=from_alias))
            else:
                viable_join_keys = [last.left_key, last.right_key] if last.kind != "RIGHT" else [last.right_key, last.left_key]
                key_exprs = [viable_join_keys[0]]
        else:
            key_exprs = [ExpressionResolver._column_node(c.name, from_alias, c.type) for c in from_info.key_columns]

        # the projection
        items = self._expand_projection(select_resolver, joins)
        aggregates: list[exp.Expr] = []

        def collect_aggs(e: exp.Expr) -> None:
            for n in e.walk():
                if is_aggregate_call(n) and n not in aggregates:
                    aggregates.append(n)

        for _, expr, _orig in items:
            collect_aggs(expr)
        having = select_resolver.resolve(having_node, "HAVING") if having_node is not None else None
        if having is not None:
            collect_aggs(having)

        if aggregates and not group_by:
            agg_names = ", ".join(sorted({str(a.this) for a in aggregates}))
            raise StatementError(f"Aggregate functions ({agg_names}) are only supported with a GROUP BY clause.")
        if group_by:
            if not aggregates:
                raise StatementError("GROUP BY requires aggregate functions in either the SELECT or HAVING clause.")
            bad = [orig for _, expr, orig in items if not self._valid_in_aggregate(expr, group_by)]
            if bad:
                raise StatementError("Non-aggregate SELECT expression(s) not part of GROUP BY: "
                                     + ", ".join(ksql_text(b) for b in bad))
            if having is not None and not self._valid_in_aggregate(having, group_by):
                raise StatementError(f"Non-aggregate HAVING expression not part of GROUP BY: {ksql_text(having)}")
            if joins:
                raise StatementError("Aggregations over joins are not supported yet.")
        elif having is not None:
            raise StatementError("HAVING requires a GROUP BY clause.")

        # keys: which projection items carry them, and their names
        key_alias: dict[int, str] = {}
        value_items: list[tuple[str, exp.Expr]] = []
        key_items: list[tuple[str, exp.Expr, int]] = []
        seen_key_names: dict[int, list[str]] = {}
        for name, expr, _orig in items:
            idx = self._key_index(expr, key_exprs, viable_join_keys)
            if idx is not None:
                seen_key_names.setdefault(idx, []).append(name)
                key_items.append((name, expr, idx))
                key_alias.setdefault(idx, name)
            else:
                value_items.append((name, expr))

        persistent = self.sink is not None
        if persistent:
            for idx, names in seen_key_names.items():
                if len(names) > 1:
                    raise StatementError(
                        f"The projection contains a key column ({_shown(key_exprs[idx])}) more than once, aliased as: "
                        f"{' and '.join(sorted(names))}.\nEach key column must only be in the projection once. If you intended "
                        "to copy the key into the value, then consider using the AS_VALUE function to indicate which key "
                        "reference should be copied.")
            missing = [k for i, k in enumerate(key_exprs) if i not in seen_key_names]
            if missing:
                self._missing_keys(missing, group_by, partition_by, joins, synthetic_key, viable_join_keys)
            # ksqlDB drops un-aliased window bounds from a persistent query's value
            value_items = [(n, e) for n, e in value_items
                           if not (isinstance(e, exp.Column) and e.name in WINDOW_BOUNDS and n == e.name)]
            if not value_items:
                raise StatementError("The projection contains no value columns.")

        columns: list[Column] = []
        expressions: list[exp.Expr] = []
        if persistent:
            ordered = sorted(key_items, key=lambda k: k[2])
            for name, expr, _ in ordered:
                columns.append(Column(name, _type(expr), Namespace.KEY))
                expressions.append(expr)
            for name, expr in value_items:
                columns.append(Column(name, _type(expr), Namespace.VALUE))
                expressions.append(expr)
        else:
            key_names_set = {id(e) for _, e, _ in key_items}
            for name, expr, _ in items:
                ns = Namespace.KEY if id(expr) in key_names_set else Namespace.VALUE
                columns.append(Column(name, _type(expr), ns))
                expressions.append(expr)
        seen: set[str] = set()
        for col in columns:
            if col.name in seen:
                raise StatementError(f"Duplicate value columns found in schema: `{col.name}` {col.type.ksql_name}")
            seen.add(col.name)

        key_names = tuple(key_alias.get(i, _default_key_name(k)) for i, k in enumerate(key_exprs))
        result_window = window if window is not None else from_info.window
        return AnalyzedQuery(
            query=q, columns=tuple(columns), expressions=tuple(expressions), result_kind=kind, window=result_window,
            sources=dict(self.scope_sources), from_alias=from_alias, joins=tuple(joins), where=where, group_by=group_by,
            having=having, partition_by=partition_by, key_expressions=tuple(key_exprs), key_names=key_names,
            aggregates=tuple(aggregates), synthetic_key=synthetic_key, persistent=persistent,
            emit_final=q.emit.value == "FINAL", limit=q.limit)

    def _synthetic_key_name(self) -> str:
        gen = _AliasGenerator(self.scope_sources)
        return gen._next("ROWKEY", drop_zero=True)

    @staticmethod
    def _key_index(expr: exp.Expr, key_exprs: list[exp.Expr], viable: list[exp.Expr]) -> int | None:
        for i, k in enumerate(key_exprs):
            if expr == k:
                return i
        if viable and any(expr == v for v in viable):
            return 0
        return None

    def _missing_keys(self, missing: list[exp.Expr], group_by: tuple[exp.Expr, ...],
                      partition_by: tuple[exp.Expr, ...], joins: list[AnalyzedJoin], synthetic: str | None,
                      viable: list[exp.Expr]) -> None:
        sink = self.sink
        if group_by:
            what, shown = "grouping expression", [_shown(m) for m in missing]
        elif partition_by:
            what, shown = "partitioning expression", [_shown(m) for m in missing]
        elif joins and synthetic is None:
            options = [ksql_text(v) for v in viable]
            raise StatementError("Key missing from projection (ie, SELECT).\nThe query used to build "
                                 f"{sink} must include the join expression {' or '.join(options)} in its projection "
                                 f"(eg, SELECT {options[0]}...).")
        elif synthetic is not None:
            raise StatementError(
                "Key missing from projection (ie, SELECT). See https://cnfl.io/0.19-synthetic-join-keys.\nThe query used to "
                f"build {sink} must include the join expression {synthetic} in its projection (eg, SELECT {synthetic}...).\n"
                f"{synthetic} was added as a synthetic key column because the join criteria did not match any source column. "
                "This expression must be included in the projection and may be aliased. ")
        else:
            what, shown = "key column", [m.name for m in missing]
        plural = "s" if len(shown) > 1 else ""
        types = what + plural
        joined = " and ".join(shown) if len(shown) <= 2 else ", ".join(shown[:-1]) + " and " + shown[-1]
        raise StatementError(f"Key{plural} missing from projection (ie, SELECT).\nThe query used to build {sink} must include "
                             f"the {types} {joined} in its projection (eg, SELECT {', '.join(shown)}...).")

    @staticmethod
    def _valid_in_aggregate(expr: exp.Expr, group_by: tuple[exp.Expr, ...]) -> bool:
        if any(expr == g for g in group_by) or is_aggregate_call(expr):
            return True
        if isinstance(expr, exp.Column):
            return bool(expr.meta.get(PSEUDO_KEY)) and expr.name in WINDOW_BOUNDS
        children = [c for c in expr.iter_expressions()]
        return all(_Analysis._valid_in_aggregate(c, group_by) for c in children if not isinstance(c, exp.DataType))

    def _expand_projection(self, resolver: ExpressionResolver,
                           joins: list[AnalyzedJoin]) -> list[tuple[str, exp.Expr, exp.Expr]]:
        """(output name, resolved expression, original expression) per output column."""
        gen = _AliasGenerator(self.scope_sources)
        is_join = bool(joins)
        clashing = self._clashing_names()
        out: list[tuple[str, exp.Expr, exp.Expr]] = []
        for item in self.query.select.expressions:
            if isinstance(item, exp.Star):
                for alias in self.scope_sources:
                    out.extend(self._star(alias, is_join))
                continue
            if isinstance(item, exp.Column) and isinstance(item.this, exp.Star):
                alias = item.table
                if alias not in self.scope_sources:
                    raise StatementError(f"Source '{alias}' not found in the FROM clause (in '{alias}.*').")
                out.extend(self._star(alias, is_join))
                continue
            if isinstance(item, exp.Alias):
                expr = resolver.resolve(item.this)
                out.append((item.alias, expr, item.this))
                continue
            expr = resolver.resolve(item)
            if isinstance(expr, exp.Column):
                name = expr.name
                if is_join and expr.table and name in clashing:
                    name = f"{expr.table}_{name}"
            elif isinstance(expr, exp.Dot):
                name = gen.struct_field(expr.expression.name)
            else:
                name = gen.ksql_col()
            out.append((name, expr, item))
        return out

    def _clashing_names(self) -> set[str]:
        counts: dict[str, int] = {}
        for info in self.scope_sources.values():
            for col in info.columns:
                counts[col.name] = counts.get(col.name, 0) + 1
        return {n for n, c in counts.items() if c > 1}

    def _star(self, alias: str, is_join: bool) -> list[tuple[str, exp.Expr, exp.Expr]]:
        info = self.scope_sources[alias]
        out: list[tuple[str, exp.Expr, exp.Expr]] = []
        cols: list[tuple[str, SqlType]] = [(c.name, c.type) for c in info.key_columns]
        if info.window is not None:
            cols += [(b, _bigint()) for b in WINDOW_BOUNDS]
        cols += [(c.name, c.type) for c in info.value_columns]
        for name, ty in cols:
            node = ExpressionResolver._column_node(name, alias, ty)
            out.append((f"{alias}_{name}" if is_join else name, node, node))
        return out


def _shown(e: exp.Expr) -> str:
    """An expression as ksqlDB prints it in key messages: source qualifiers dropped."""
    copy = e.copy()
    for col in copy.find_all(exp.Column):
        col.set("table", None)
    return ksql_text(copy)


def _t(e: exp.Expr) -> str:
    ty = type_of(e)
    return "NULL" if ty is None else ty.ksql_name


def _type(e: exp.Expr) -> SqlType:
    ty = type_of(e)
    if ty is None:
        raise StatementError("Can't infer a type of null. Please explicitly cast it to a required type, "
                             "e.g. CAST(null AS VARCHAR): "
                             f"{ksql_text(e)}")
    return ty


def _bigint() -> SqlType:
    from oncestream.sql.types import BIGINT
    return BIGINT


def _t_default() -> SqlType:
    from oncestream.sql.types import STRING
    return STRING


def _default_key_name(k: exp.Expr) -> str:
    return k.name if isinstance(k, exp.Column) else "KSQL_COL_0"


def windowed_key_columns(analyzed: AnalyzedQuery) -> tuple[str, ...]:
    """The pseudo columns a windowed result adds beside its key (ksqlDB's WINDOWSTART/WINDOWEND)."""
    return WINDOW_BOUNDS if analyzed.windowed else ()


def output_source(analyzed: AnalyzedQuery, *, name: str, topic: str, key_format: catalog.Format,
                  value_format: catalog.Format, statement: str, partitions: int, replicas: int = 1,
                  created_by: str | None = None, timestamp_column: str | None = None) -> SourceInfo:
    """The ``SourceInfo`` of the sink a persistent query creates (CREATE ... AS SELECT)."""
    cols = tuple(analyzed.columns)
    return SourceInfo(name=name, kind=analyzed.result_kind, topic=topic, key_format=key_format, value_format=value_format,
                      columns=cols, statement=statement, partitions=partitions, replicas=replicas,
                      timestamp_column=timestamp_column, window=analyzed.window, created_by=created_by)
