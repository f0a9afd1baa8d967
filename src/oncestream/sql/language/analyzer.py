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
- a join: a side of the ON equality that is a plain column ("viable key"; the first one the
  projection selects, left side first, the others being ordinary value columns); a synthetic
  ``ROWKEY`` for FULL OUTER joins or when neither side is a plain column (``SELECT *`` then starts
  with it);
- otherwise the source's key columns.

``SELECT *`` after ``PARTITION BY`` lists the new key, the remaining value columns, then the old
key columns, as ksqlDB's repartitioned schema does. Pseudo columns (ROWTIME, ROWPARTITION,
ROWOFFSET, and WINDOWSTART/WINDOWEND on windowed results) resolve everywhere they may; persistent
queries must alias them.

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

from oncestream.sql.errors import ExpressionTypeError, StatementError
from oncestream.sql.language import catalog
from oncestream.sql.language import types as t
from oncestream.sql.language.analyzer_aggregates import AggregateRules
from oncestream.sql.language.analyzer_expr import (
    PSEUDO_KEY,
    TYPE_KEY,
    WINDOW_BOUNDS,
    ExpressionResolver,
    Scope,
    call_parts,
    column_ref,
    is_aggregate_call,
    ksql_format,
    ksql_text,
    no_map_key,
    same_expression,
    type_of,
    unknown_qualifier,
)
from oncestream.sql.language.analyzer_joins import AnalyzedJoin, JoinRules, JoinType, key_synonyms
from oncestream.sql.language.analyzer_table_functions import check_table_functions, is_table_function_call
from oncestream.sql.language.catalog import Column, Namespace, SourceInfo
from oncestream.sql.language.sql_ast import Emit, Query, SourceKind, WindowSpec
from oncestream.sql.language.types import SqlType

__all__ = ["PSEUDO_KEY", "TYPE_KEY", "AnalyzedJoin", "AnalyzedQuery", "JoinType", "analyze_query", "call_parts", "type_of"]


# ksqlDB's PullQueryValidator ends every refusal with its syntax help.
PULL_QUERY_HELP = (" See https://cnfl.io/queries for more info.\n"
                   "Add EMIT CHANGES if you intended to issue a push query.")


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
        return ", ".join(c.schema_text for c in self.columns)


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

    def next_name(self, prefix: str, drop_zero: bool) -> str:
        """The next free ``<prefix>_<n>`` (``<prefix>`` alone for n = 0 when ``drop_zero``)."""
        used = self.used.get(prefix, set())
        idx = self.next.get(prefix, 0)
        while idx in used:
            idx += 1
        self.next[prefix] = idx + 1
        return prefix if (idx == 0 and drop_zero) else f"{prefix}_{idx}"

    def ksql_col(self) -> str:
        return self.next_name("KSQL_COL", drop_zero=False)

    def struct_field(self, field_name: str) -> str:
        m = _NUMBERED.match(field_name)
        assert m is not None
        return self.next_name(m.group("name"), drop_zero=True)


def analyze_query(query: Query, sources: Mapping[str, SourceInfo], *, sink: str | None = None) -> AnalyzedQuery:
    """Analyze ``query`` against ``sources`` (the metastore's sources by name). ``sink`` names the
    stream/table a persistent query writes (CREATE ... AS SELECT / INSERT INTO); None for a push
    or pull query. Raises ``StatementError`` with ksqlDB's message."""
    return _Analysis(query, sources, sink).run()


class _Analysis(JoinRules, AggregateRules):
    def __init__(self, query: Query, sources: Mapping[str, SourceInfo], sink: str | None) -> None:
        self.query = query
        self.all_sources = sources
        self.sink = sink
        self.scope_sources: dict[str, SourceInfo] = {}

    # -- sources and joins -------------------------------------------------------------------

    def _check_qualifiers(self) -> None:
        """Every ``X.col`` and ``X.*`` names a source or alias of the FROM clause: ksqlDB checks
        this while it builds the statement's tree, before anything is resolved."""
        q = self.query
        names = {q.source_alias or q.source} | {j.alias or j.source for j in q.joins}
        trees: list[exp.Expr] = [q.select, *(j.on for j in q.joins), *q.partition_by]
        for tree in trees:
            for column in tree.find_all(exp.Column):
                if column.table and column.table not in names:
                    raise unknown_qualifier(column.table)

    # -- the whole query ----------------------------------------------------------------------

    def run(self) -> AnalyzedQuery:
        q = self.query
        self._check_qualifiers()
        from_alias = self._add_source(q.source, q.source_alias)
        joins, kind = self._analyze_joins(from_alias)
        if joins:
            kafka = [alias for alias, info in self.scope_sources.items() if info.value_format is catalog.Format.KAFKA]
            if kafka:
                raise StatementError(f"Source(s) {', '.join(kafka)} are using the 'KAFKA' value format. This format does not "
                                     "yet support JOIN.")
        from_info = self.scope_sources[from_alias]
        select = q.select
        group_nodes = list(select.args["group"].expressions) if select.args.get("group") else []
        having_node = select.args["having"].this if select.args.get("having") else None
        where_node = select.args["where"].this if select.args.get("where") else None
        window = q.window

        self._check_reserved_names()
        if group_nodes and any(is_table_function_call(n) for item in select.expressions for n in item.walk()):
            # ksqlDB's Analyzer refuses this before typing the projection
            raise StatementError("Table functions cannot be used with aggregations.")
        if from_info.window is not None and window is not None:
            raise StatementError(f"Cannot apply a WINDOW to the windowed source {from_alias}.")

        base_scope = Scope(dict(self.scope_sources), windowed=from_info.window is not None, default_alias=from_alias)
        resolver = ExpressionResolver(base_scope)

        if self.sink is not None and from_info.window is not None and from_info.kind is SourceKind.TABLE:
            raise StatementError("KSQL does not support persistent queries on windowed tables.")
        where = None
        if where_node is not None:
            bound = next((c.name for c in where_node.find_all(exp.Column) if c.name in WINDOW_BOUNDS), None)
            if bound is not None and from_info.window is None:
                raise StatementError(f"Error in WHERE expression: Unknown column {bound}.")
            where = _filter_resolve(resolver, where_node, "WHERE")
        if where is not None and where_node is not None:
            ty = type_of(where)
            if ty is not None and ty.base.value != "BOOLEAN":
                raise StatementError(f"Type error in WHERE expression: Should evaluate to boolean but is "
                                     f"{ksql_format(where_node)} ({ty.ksql_name}) instead.")
            if any(is_aggregate_call(n) for n in where.walk()):
                raise StatementError("WHERE clause can not contain aggregate functions.")

        group_resolver = resolver
        if window is not None:   # so that window bounds in GROUP BY get ksqlDB's own message below
            group_resolver = ExpressionResolver(Scope(dict(self.scope_sources), windowed=True, default_alias=from_alias))
        group_by = tuple(group_resolver.resolve(g, "GROUP BY") for g in group_nodes)
        self._check_group_by(group_by, window is not None)
        for g in group_by:
            no_map_key(g)
        partition_by: tuple[exp.Expr, ...] = ()
        partition_null = len(q.partition_by) == 1 and isinstance(q.partition_by[0], exp.Null)
        if q.partition_by:
            if group_nodes:
                raise StatementError("PARTITION BY and GROUP BY in the same query is not supported.")
            if kind is SourceKind.TABLE:
                raise StatementError("Cannot repartition a TABLE source.")
            if not partition_null:
                if any(isinstance(p, exp.Null) for p in q.partition_by):
                    raise StatementError("Cannot PARTITION BY multiple columns including NULL")
                try:
                    partition_by = tuple(resolver.resolve(p, "PARTITION BY") for p in q.partition_by)
                except StatementError as e:
                    if e.message.startswith("PARTITION BY column '") and e.message.endswith("' cannot be resolved."):
                        name = e.message[len("PARTITION BY column '"):-len("' cannot be resolved.")]
                        raise StatementError(f"{e.message} '{name}' must be a column in the source schema since PARTITION BY "
                                             "is applied on the input.") from e
                    raise
                # the key columns' names as the sink gets them (ksqlDB checks the key serde's columns)
                partition_names = _AliasGenerator(self.scope_sources)
                for p in partition_by:
                    if isinstance(p, exp.Column):
                        no_map_key(p)
                    elif isinstance(p, exp.Dot):
                        no_map_key(p, partition_names.struct_field(p.expression.name))
                    else:
                        no_map_key(p, partition_names.ksql_col())

        # windowed aggregation: WINDOWSTART/WINDOWEND become selectable
        # (ksqlDB does not resolve WINDOWSTART/WINDOWEND of a windowed aggregation over a join)
        agg_scope = Scope(dict(self.scope_sources), windowed=(window is not None and not joins) or from_info.window is not None,
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
        elif joins and joins[-1].join_type == JoinType.FOREIGN_KEY:
            # a foreign-key join's key is the left table's primary key
            left_alias = next(iter(self.scope_sources))
            key_exprs = [column_ref(c.name, left_alias, c.type) for c in self.scope_sources[left_alias].key_columns]
        elif joins:
            last = joins[-1]
            # ksqlDB's viable keys: the key synonyms that are plain columns (a FULL OUTER join has
            # none: either side may be null); without one the key is a synthetic ROWKEY
            viable_join_keys = [k for k in key_synonyms(joins) if isinstance(k, exp.Column) and not k.meta.get(PSEUDO_KEY)]
            viable_join_keys = [k for i, k in enumerate(viable_join_keys)
                                if not any(same_expression(k, other) for other in viable_join_keys[:i])]
            if not viable_join_keys:
                synthetic_key = self._synthetic_key_name()
                key_exprs = [column_ref(synthetic_key, None, type_of(last.left_key) or t.STRING)]
                select_resolver = ExpressionResolver(Scope(dict(self.scope_sources), windowed=agg_scope.windowed,
                                                           extra={synthetic_key: type_of(last.left_key) or t.STRING},
                                                           default_alias=from_alias))
            else:
                key_exprs = [viable_join_keys[0]]
        else:
            key_exprs = [column_ref(c.name, from_alias, c.type) for c in from_info.key_columns]

        items = self._expand_projection(select_resolver, joins, partition_by, synthetic_key)
        if viable_join_keys:
            # the key is the first viable key (left side first) that the projection selects (ksqlDB's JoinNode)
            chosen = next((v for v in viable_join_keys if any(same_expression(e, v) for _, e, _ in items)), None)
            key_exprs = [chosen if chosen is not None else viable_join_keys[0]]
        aggregates: list[exp.Expr] = []

        def collect_aggs(e: exp.Expr) -> None:
            for n in e.walk():
                if is_aggregate_call(n) and n not in aggregates:
                    aggregates.append(n)

        for _, expr, _orig in items:
            collect_aggs(expr)
        having = _filter_resolve(select_resolver, having_node, "HAVING") if having_node is not None else None
        if having is not None and window is not None:
            self._no_window_bounds(having)
        if having is not None:
            collect_aggs(having)

        self._check_aggregation(items, group_by, having, aggregates, joins, window)
        if window is not None and not group_nodes:
            # ksqlDB's LogicalPlanner, after the Analyzer's aggregate rules
            raise StatementError("WINDOW clause requires a GROUP BY clause.")
        check_table_functions([e for _, e, _ in items], grouped=bool(group_by) or bool(aggregates),
                              table_source=kind is SourceKind.TABLE,
                              other_clauses=[c for c in (where, having, *group_by, *partition_by) if c is not None])
        if q.emit is Emit.FINAL and (window is None or not group_by):
            raise StatementError("EMIT FINAL is only supported for windowed aggregations.")
        if q.emit is Emit.NONE and self.sink is None:
            self._check_pull_query(joins, window, group_by, having)

        # keys: which projection items carry them, and their names
        key_alias: dict[int, str] = {}
        value_items: list[tuple[str, exp.Expr]] = []
        key_items: list[tuple[str, exp.Expr, int]] = []
        seen_key_names: dict[int, list[str]] = {}
        for name, expr, _orig in items:
            idx = self._key_index(expr, key_exprs)
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
                    aliases = " and ".join(f"`{n}`" for n in names)
                    if group_by:   # ksqlDB's LogicalPlanner wording for grouped keys
                        what = f"The projection contains a key column more than once: {aliases}."
                    else:
                        shown = _shown(key_exprs[idx])
                        key_col = key_exprs[idx]
                        if joins and isinstance(key_col, exp.Column) and key_col.table:
                            shown = f"{key_col.table}_{shown}"   # the joined schema's name of the column
                        what = (f"The projection contains a key column (`{shown}`) more than once, aliased as: "
                                f"{' and '.join(sorted(names))}.")
                    raise StatementError(
                        f"{what}\nEach key column must only be in the projection once. If you intended to copy the key into "
                        "the value, then consider using the AS_VALUE function to indicate which key reference should be copied.")
            missing = [k for i, k in enumerate(key_exprs) if i not in seen_key_names]
            if missing:
                self._missing_keys(missing, group_by, partition_by, joins, synthetic_key, viable_join_keys)
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

    _PULL_RULES = (("joins", "Pull queries don't support JOIN clauses."),
                   ("window", "Pull queries don't support WINDOW clauses."),
                   ("group_by", "Pull queries don't support GROUP BY clauses."),
                   ("partition_by", "Pull queries don't support PARTITION BY clauses."),
                   ("having", "Pull queries don't support HAVING clauses."))

    def _check_pull_query(self, joins: list[AnalyzedJoin], window: WindowSpec | None, group_by: tuple[exp.Expr, ...],
                          having: exp.Expr | None) -> None:
        """ksqlDB's PullQueryValidator rules (a query without EMIT is a pull query)."""
        present = {"joins": bool(joins), "window": window is not None, "group_by": bool(group_by),
                   "partition_by": bool(self.query.partition_by), "having": having is not None}
        for what, message in self._PULL_RULES:
            if present[what]:
                raise StatementError(message + PULL_QUERY_HELP)
        if self.query.limit is not None and self.query.limit < 0:
            raise StatementError("Pull queries don't support negative integers in the LIMIT clause.")

    def _check_reserved_names(self) -> None:
        """ksqlDB's reserved-token checks on the projection as written (before resolution): a
        system column's name as an alias of something else, or an un-aliased system column in a
        persistent query (its sink would get a column by that name)."""
        reserved = (catalog.ROWTIME, catalog.ROWPARTITION, catalog.ROWOFFSET, *WINDOW_BOUNDS)
        is_join = bool(self.query.joins)
        for item in self.query.select.expressions:
            if isinstance(item, exp.Alias):
                name, inner = item.alias, item.this
            elif isinstance(item, exp.Column) and not isinstance(item.this, exp.Star):
                if is_join and item.table:
                    continue       # named <ALIAS>_<COLUMN> in a join
                name, inner = item.name, item
            else:
                continue
            if name.upper() not in reserved:
                continue
            if not (isinstance(inner, exp.Column) and inner.name.upper() == name.upper()):
                raise StatementError(f"`{name.upper()}` is a reserved column name. You cannot use it as an alias for a column.")
            if self.sink is not None:
                raise StatementError(f"Reserved column name in select: `{name.upper()}`. Please remove or alias the column.")

    def _synthetic_key_name(self) -> str:
        gen = _AliasGenerator(self.scope_sources)
        return gen.next_name("ROWKEY", drop_zero=True)

    @staticmethod
    def _key_index(expr: exp.Expr, key_exprs: list[exp.Expr]) -> int | None:
        for i, k in enumerate(key_exprs):
            if same_expression(expr, k):
                return i
        return None

    def _missing_keys(self, missing: list[exp.Expr], group_by: tuple[exp.Expr, ...],
                      partition_by: tuple[exp.Expr, ...], joins: list[AnalyzedJoin], synthetic: str | None,
                      viable: list[exp.Expr]) -> None:
        sink = self.sink
        if group_by:
            what, shown = "grouping expression", [ksql_format(m) for m in missing]
        elif partition_by:
            # ksqlDB lists every partitioning expression, qualified, when any is missing
            what, shown = "partitioning expression", [ksql_format(p, qualify=True) for p in partition_by]
        elif joins and joins[-1].join_type == JoinType.FOREIGN_KEY:
            left = self.scope_sources[next(iter(self.scope_sources))]
            names = [f"`{m.name}`" for m in missing]
            plural = "s" if len(names) > 1 else ""
            raise StatementError(f"Primary key column{plural} missing in projection. For foreign-key table-table joins, the "
                                 "projection must include all primary key columns from the left input table "
                                 f"(`{left.name}`). Missing column{plural}: {', '.join(names)}.")
        elif joins and synthetic is None:
            options = [ksql_format(v, qualify=True) for v in viable]
            plural = "s" if len(options) > 1 else ""
            listed = " or ".join(options) if len(options) <= 2 else ", ".join(options[:-1]) + " or " + options[-1]
            raise StatementError("Key missing from projection (ie, SELECT).\nThe query used to build "
                                 f"`{sink}` must include the join expression{plural} {listed} in its projection "
                                 f"(eg, SELECT {options[0]}...).")
        elif synthetic is not None:
            raise StatementError(
                "Key missing from projection (ie, SELECT). See https://cnfl.io/2LV7ouS.\nThe query used to "
                f"build `{sink}` must include the join expression {synthetic} in its projection (eg, SELECT {synthetic}...).\n"
                f"{synthetic} was added as a synthetic key column because the join criteria did not match any source column. "
                "This expression must be included in the projection and may be aliased.")
        else:
            # ksqlDB lists every key column of the source when any is missing
            what, shown = "key column", [k.name for k in self.scope_sources[next(iter(self.scope_sources))].key_columns]
        plural = "s" if len(shown) > 1 else ""
        types = what + plural
        joined = " and ".join(shown) if len(shown) <= 2 else ", ".join(shown[:-1]) + " and " + shown[-1]
        raise StatementError(f"Key{plural} missing from projection (ie, SELECT).\nThe query used to build `{sink}` must include "
                             f"the {types} {joined} in its projection (eg, SELECT {', '.join(shown)}...).")

    def _expand_projection(self, resolver: ExpressionResolver, joins: list[AnalyzedJoin],
                           partition_by: tuple[exp.Expr, ...] = (),
                           synthetic_key: str | None = None) -> list[tuple[str, exp.Expr, exp.Expr]]:
        """(output name, resolved expression, original expression) per output column."""
        gen = _AliasGenerator(self.scope_sources)
        is_join = bool(joins)
        clashing = self._clashing_names()
        out: list[tuple[str, exp.Expr, exp.Expr]] = []
        for item in self.query.select.expressions:
            if isinstance(item, exp.Star) and partition_by and not is_join:
                out.extend(self._star_repartitioned(partition_by))
                continue
            if isinstance(item, exp.Star):
                if synthetic_key is not None:
                    # ksqlDB's SELECT * over a join with a synthetic key starts with that key
                    syn = resolver.resolve(exp.column(synthetic_key, quoted=True))
                    out.append((synthetic_key, syn, syn))
                for alias in self.scope_sources:
                    out.extend(self._star(alias, is_join))
                continue
            if isinstance(item, exp.Column) and isinstance(item.this, exp.Star):
                alias = item.table
                if alias not in self.scope_sources:
                    raise unknown_qualifier(alias)
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

    def _star_repartitioned(self, partition_by: tuple[exp.Expr, ...]) -> list[tuple[str, exp.Expr, exp.Expr]]:
        """``SELECT *`` after ``PARTITION BY``, as ksqlDB lays the repartitioned schema out: the
        new key columns (named after the column, pseudo column or struct field, else
        ``KSQL_COL_<n>``), the
        value and header columns not moved into the key, then the old key columns."""
        gen = _AliasGenerator(self.scope_sources)
        alias = next(iter(self.scope_sources))
        info = self.scope_sources[alias]
        out: list[tuple[str, exp.Expr, exp.Expr]] = []
        moved: set[str] = set()
        for p in partition_by:
            if isinstance(p, exp.Column) and not p.meta.get(PSEUDO_KEY):
                name = p.name
                moved.add(p.name)
            elif isinstance(p, exp.Column):
                name = p.name   # a pseudo column keeps its name (partition-by.json "... including ROWTIME")
            elif isinstance(p, exp.Dot):
                name = gen.struct_field(p.expression.name)
            else:
                name = gen.ksql_col()
            out.append((name, p, p))
        for col in (*info.value_columns, *info.header_columns, *info.key_columns):
            if col.name not in moved:
                node = column_ref(col.name, alias, col.type)
                out.append((col.name, node, node))
        return out

    def _clashing_names(self) -> set[str]:
        counts: dict[str, int] = {}
        for info in self.scope_sources.values():
            for col in info.columns:
                counts[col.name] = counts.get(col.name, 0) + 1
        clashing = {n for n, c in counts.items() if c > 1}
        if len(self.scope_sources) > 1:   # every source has the pseudo columns
            clashing |= {catalog.ROWTIME, catalog.ROWPARTITION, catalog.ROWOFFSET}
        return clashing

    def _star(self, alias: str, is_join: bool) -> list[tuple[str, exp.Expr, exp.Expr]]:
        info = self.scope_sources[alias]
        out: list[tuple[str, exp.Expr, exp.Expr]] = []
        cols: list[tuple[str, SqlType]] = [(c.name, c.type) for c in info.key_columns]
        # A persistent query's final projection drops window bounds selected under their own
        # name (ksqlDB's FinalProjectNode): they are in the sink's windowed key. A join names
        # them <ALIAS>_WINDOWSTART, so it keeps them; so does a push query.
        if info.window is not None and (self.sink is None or is_join):
            cols += [(b, t.BIGINT) for b in WINDOW_BOUNDS]
        cols += [(c.name, c.type) for c in info.value_columns]
        # then the header columns (ksqlDB's source schema puts them after the value columns)
        cols += [(c.name, c.type) for c in info.header_columns]
        for name, ty in cols:
            node = column_ref(name, alias, ty)
            out.append((f"{alias}_{name}" if is_join else name, node, node))
        return out


def _filter_resolve(resolver: ExpressionResolver, node: exp.Expr, clause: str) -> exp.Expr:
    """A WHERE or HAVING expression resolved; a type error in it names the clause first, as
    ksqlDB's FilterTypeValidator does (``Error in WHERE expression: Cannot compare ...``)."""
    try:
        return resolver.resolve(node, clause)
    except ExpressionTypeError as e:
        raise StatementError(f"Error in {clause} expression: {e.message}") from None


def _shown(e: exp.Expr) -> str:
    """An expression as ksqlDB prints it in key messages: source qualifiers dropped."""
    copy = e.copy()
    for col in copy.find_all(exp.Column):
        col.set("table", None)
    return ksql_text(copy)


def _type(e: exp.Expr) -> SqlType:
    ty = type_of(e)
    if ty is None:
        # ksqlDB's SelectionUtil words it so, without naming the expression
        raise StatementError("Can't infer a type of null. Please explicitly cast it to a required type, "
                             "e.g. CAST(null AS VARCHAR).")
    return ty


def _default_key_name(k: exp.Expr) -> str:
    return k.name if isinstance(k, exp.Column) else "KSQL_COL_0"
