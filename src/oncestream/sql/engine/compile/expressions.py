"""ksqlDB expressions (sqlglot trees as the parser leaves them) translated into Spark SQL text.

Column references are rewritten to the compiled frame's internal column names (a ``Scope`` says
which); ksqlDB's own constructs are mapped to Spark's: a 1-based array index ``a[1]`` becomes
``try_element_at(a, 1)`` (null when out of range, as ksqlDB), ksqlDB-only functions and
aggregates get their Spark equivalents, and the rest is sqlglot's Spark dialect generator.

The semantics are ksqlDB's, the same as the pull-query evaluator's (``language.evaluate``;
tests/spark/sql/test_expression_agreement.py runs both on one table of expressions): where Spark's
operators differ they are rewritten (``_operator``): an integer division truncates as Java's does
(Spark's ``/`` gives a DOUBLE), ``STRING + STRING`` concatenates (Spark casts to numbers), an
array subscript 0 is NULL (Spark fails the query), a comparison with a NULL operand is false (Spark:
NULL), and MAP equality and complex-value CASTs follow ``complex_values``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sqlglot import exp

from oncestream.sql.engine.compile import complex_values
from oncestream.sql.errors import StatementError
from oncestream.sql.language import functions
from oncestream.sql.language.analyzer_functions import NULL_GUARD
from oncestream.sql.language.catalog import ROWOFFSET, ROWPARTITION, ROWTIME, WINDOWEND, WINDOWSTART, SourceInfo
from oncestream.sql.language.comparable_form import map_free
from oncestream.sql.language.types import BaseType, holds_map

PSEUDO_COLUMNS = (ROWTIME, ROWPARTITION, ROWOFFSET)
TYPE_KEY = "ksql_type"  # the analyzer's type annotation on every expression node (analyzer_expr.TYPE_KEY)

# Fallback names for calls the function catalog does not know (expressions built without the
# analyzer); the catalog (``oncestream.sql.language.functions``) is the reference.
_SCALAR_RENAMES = {
    "ARRAY_LENGTH": "size",
    "RANDOM": "rand",
    "LCASE": "lower",
    "UCASE": "upper",
    "INITCAP": "initcap",
    "CHR": "chr",
    "MAP_KEYS": "map_keys",
    "MAP_VALUES": "map_values",
    "ARRAY_CONTAINS": "array_contains",
    "ARRAY_DISTINCT": "array_distinct",
    "ARRAY_MAX": "array_max",
    "ARRAY_MIN": "array_min",
    "ARRAY_SORT": "array_sort",
    "ENCODE": "encode",
}

AGGREGATES = frozenset({"COUNT", "SUM", "MIN", "MAX", "AVG", "COUNT_DISTINCT", "COLLECT_LIST", "COLLECT_SET",
                        "LATEST_BY_OFFSET", "EARLIEST_BY_OFFSET"})


@dataclass
class Scope:
    """Where columns live in the frame an expression is evaluated over.

    ``sources`` maps each alias to its source; ``qualified`` is True when the frame holds several
    sources (a join), whose columns are then named ``<ALIAS>__<COLUMN>``. ``window_column`` names
    the window struct of a windowed aggregation (WINDOWSTART/WINDOWEND read from it), and
    ``overrides`` maps a column name to replacement SQL (e.g. a source's WINDOWSTART)."""

    sources: Mapping[str, SourceInfo]
    qualified: bool = False
    window_column: str | None = None
    overrides: dict[str, str] = field(default_factory=dict)

    def internal(self, alias: str, column: str) -> str:
        """The frame's name for ``alias.column``."""
        return f"{alias}__{column}" if self.qualified else column

    def resolve(self, name: str, table: str | None) -> str | None:
        """The frame column a reference names, or None when no source has it."""
        if table:
            source = self.sources.get(table)
            if source is None:
                # The analyzer may qualify with the source name where an alias exists.
                alias = next((a for a, s in self.sources.items() if s.name == table), None)
                if alias is None:
                    return None
                table, source = alias, self.sources[alias]
            if source.column(name) is not None or name in PSEUDO_COLUMNS or \
                    (source.window is not None and name in (WINDOWSTART, WINDOWEND)):
                return self.internal(table, name)
            return None
        for alias, source in self.sources.items():
            if source.column(name) is not None:
                return self.internal(alias, name)
        if name in PSEUDO_COLUMNS or name in (WINDOWSTART, WINDOWEND):
            first = next(iter(self.sources))
            return self.internal(first, name)
        return None


def quote(name: str) -> str:
    """A Spark SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def _column_name(node: exp.Column) -> tuple[str, str | None]:
    return node.name, (node.table or None)


def _post_order(node: exp.Expression, fun: Callable[[exp.Expression], exp.Expression]) -> exp.Expression:
    """Rewrite children first, then the node (sqlglot's own ``transform`` is pre-order and does
    not descend into a replaced node)."""
    for key, value in list(node.args.items()):
        if isinstance(value, exp.Expression):
            node.set(key, _post_order(value, fun))
        elif isinstance(value, list):
            node.set(key, [_post_order(v, fun) if isinstance(v, exp.Expression) else v for v in value])
    return fun(node)


def _call(name: str, *args: exp.Expression) -> exp.Expression:
    return exp.Anonymous(this=name, expressions=list(args))


def _function_call(node: exp.Anonymous, scope: Scope) -> exp.Expression:
    """A ksqlDB function call (the analyzer leaves every call as ``exp.Anonymous`` with its
    ksqlDB name) in Spark SQL, by the function catalog's translation; the arguments are already
    translated."""
    name = str(node.this).upper()
    args = list(node.expressions)
    if name == "AS_VALUE" and len(args) == 1:
        return args[0]
    definition = functions.lookup(name)
    if definition is None:
        if name in _SCALAR_RENAMES:
            return _call(_SCALAR_RENAMES[name], *args)
        raise StatementError(functions.unknown_function_message(name))
    offset = scope.resolve(ROWOFFSET, None) or ROWOFFSET
    values = [a for a in args if not isinstance(a, exp.Lambda)]
    lambdas = [_lambda_site(a) for a in args if isinstance(a, exp.Lambda)]
    site = functions.CallSite(args=[a.sql(dialect="spark") for a in values],
                              types=[a.meta.get(TYPE_KEY) for a in values], order_sql=quote(offset), lambdas=lambdas)
    # The catalog gives Spark SQL text; it is spliced in as is, parenthesised against precedence.
    return exp.Paren(this=exp.Var(this=definition.spark(site)))


def _lambda_site(node: exp.Lambda) -> functions.LambdaSite:
    """A translated lambda argument: parameters, body and null guard (analyzer_functions) as Spark SQL."""
    guard = node.args.get(NULL_GUARD)
    return functions.LambdaSite(params=tuple(p.sql(dialect="spark") for p in node.expressions),
                                body=node.this.sql(dialect="spark"),
                                null_guard=guard.sql(dialect="spark") if isinstance(guard, exp.Expression) else None)


_INTEGRAL_SPARK_TYPES = {BaseType.INTEGER: "INT", BaseType.BIGINT: "BIGINT"}
_ARRAY_INDEX = "oncestream_array_index"   # meta flag: a subscript of an ARRAY (not of a MAP)


_EQUALITY = (exp.EQ, exp.NEQ, exp.NullSafeEQ, exp.NullSafeNEQ)
_NULL_IS_FALSE = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between)


def _map_equality(node: exp.Expression) -> exp.Expression | None:
    """``=``, ``<>`` and ``IS [NOT] DISTINCT FROM`` over values holding MAPs (``comparable_form``)."""
    if not isinstance(node, _EQUALITY):
        return None
    sides = [(side, side.meta.get(TYPE_KEY)) for side in (node.this, node.expression)]
    if not any(holds_map(t) for _, t in sides):
        return None
    left, right = (_spliced(map_free(side.sql(dialect="spark"), t)) if t is not None else side
                   for side, t in sides)
    return type(node)(this=left, expression=right)


def _spliced(sql: str) -> exp.Expression:
    """Spark SQL text as a node, parenthesised against precedence."""
    return exp.Paren(this=exp.Var(this=sql))


def _complex_cast(node: exp.Expression) -> exp.Expression | None:
    """A CAST of an ARRAY, MAP or STRUCT where ksqlDB's differs from Spark's (``complex_values``)."""
    if not isinstance(node, exp.Cast):
        return None
    target = node.meta.get(TYPE_KEY)
    if target is None:
        return None
    sql = complex_values.cast(node.this.sql(dialect="spark"), node.this.meta.get(TYPE_KEY), target)
    return None if sql is None else _spliced(sql)


_DAY_MS = 86_400_000


def _parsed_time(text_sql: str) -> str:
    """A STRING parsed as ksqlDB's ``SqlTimeTypes.parseTime`` (``LocalTime.parse``: ``HH:mm``,
    ``HH:mm:ss``, ``HH:mm:ss.SSS``) into the millis of the day a TIME holds here; NULL if it is
    not a time (Spark's CAST with ANSI off)."""
    return f"CAST(unix_millis(CAST(concat('1970-01-01T', {text_sql}) AS TIMESTAMP)) AS INT)"


def _temporal_cast(node: exp.Expression) -> exp.Expression | None:
    """CASTs of the time types where Spark's differs from ksqlDB's (a TIME is an INT of millis of
    the day in the frames, Spark's CAST would treat it as a number or a TIMESTAMP):

    - to STRING, as ksqlDB's ``SqlTimeTypes`` formats: a TIMESTAMP as ``yyyy-MM-dd'T'HH:mm:ss.SSS``
      in UTC (Spark writes ``yyyy-MM-dd HH:mm:ss``), a TIME as Java's
      ``LocalTime.ofSecondOfDay(ms / 1000).toString()``: ``HH:mm``, then ``:ss`` unless 0;
    - to TIME: a STRING parsed (``_parsed_time``), a TIMESTAMP's time of day (``floorMod``);
    - a TIME to TIMESTAMP: that time on 1970-01-01."""
    if not isinstance(node, exp.Cast):
        return None
    target = getattr(node.meta.get(TYPE_KEY), "base", None)
    source = getattr(node.this.meta.get(TYPE_KEY), "base", None)
    value = node.this.sql(dialect="spark")
    if target is BaseType.STRING and source is BaseType.TIMESTAMP:
        return _spliced(f"date_format({value}, 'yyyy-MM-dd\\'T\\'HH:mm:ss.SSS')")
    if target is BaseType.STRING and source is BaseType.TIME:
        clock = f"timestamp_millis(CAST({value} AS BIGINT))"
        seconds = f"CASE WHEN second({clock}) = 0 THEN '' ELSE date_format({clock}, ':ss') END"
        return _spliced(f"CASE WHEN {value} IS NULL THEN NULL ELSE concat(date_format({clock}, 'HH:mm'), {seconds}) END")
    if target is BaseType.TIME and source is BaseType.STRING:
        return _spliced(_parsed_time(value))
    if target is BaseType.TIME and source is BaseType.TIMESTAMP:
        return _spliced(f"CAST(pmod(unix_millis({value}), {_DAY_MS}) AS INT)")
    if target is BaseType.TIME and source is BaseType.TIME:
        return node.this
    if target is BaseType.TIMESTAMP and source is BaseType.TIME:
        return _spliced(f"timestamp_millis(CAST({value} AS BIGINT))")
    return None


def _time_comparison(node: exp.Expression) -> exp.Expression | None:
    """A comparison (or BETWEEN) of a TIME with a STRING: ksqlDB parses the string as a time;
    Spark would compare the TIME's millis with the string cast to a number."""
    if not isinstance(node, _NULL_IS_FALSE):
        return None
    parts = ("this", "low", "high") if isinstance(node, exp.Between) else ("this", "expression")
    bases = {part: getattr(node.args[part].meta.get(TYPE_KEY), "base", None) for part in parts}
    if BaseType.TIME not in bases.values() or BaseType.STRING not in bases.values():
        return None
    out = node.copy()
    for part, base in bases.items():
        if base is BaseType.STRING:
            out.set(part, _spliced(_parsed_time(node.args[part].sql(dialect="spark"))))
    return out


def _operator(node: exp.Expression) -> exp.Expression | None:
    """ksqlDB's arithmetic and comparisons where Spark's differ, by the types the analyzer gave
    ``node`` and its operands; None where Spark's own operator already means the same."""
    if isinstance(node, _NULL_IS_FALSE):
        # ksqlDB checks a comparison's operands for null first and answers false (its generated
        # code's nullCheckPrefix, its interpreter's ComparisonInterpreter); Spark answers NULL,
        # which NOT would keep NULL where ksqlDB's NOT gives true
        compared = _map_equality(node) or _time_comparison(node) or node
        return _call("coalesce", compared, exp.false())
    special = _map_equality(node) or _complex_cast(node) or _temporal_cast(node)
    if special is not None:
        return special
    ty = node.meta.get(TYPE_KEY)
    base = getattr(ty, "base", None)
    if isinstance(node, exp.Div) and base in _INTEGRAL_SPARK_TYPES:
        # Java's integer division (truncates toward zero); a division by zero is NULL (ANSI off)
        divided = exp.IntDiv(this=node.this, expression=node.expression)
        return exp.Cast(this=divided, to=exp.DataType.build(_INTEGRAL_SPARK_TYPES[base]))
    if isinstance(node, exp.Add) and base is BaseType.STRING:
        return _call("concat", node.this, node.expression)
    return None


def translate(expression: exp.Expression, scope: Scope) -> str:
    """Spark SQL text for a ksqlDB expression evaluated over ``scope``'s frame."""

    def rewrite(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column):
            name, table = node.name, (node.table or None)
            if name in scope.overrides and (table is None or name in (WINDOWSTART, WINDOWEND)):
                return exp.maybe_parse(scope.overrides[name], dialect="spark")
            if name in (WINDOWSTART, WINDOWEND) and scope.window_column is not None:
                part = "start" if name == WINDOWSTART else "end"
                return exp.maybe_parse(f"unix_millis({quote(scope.window_column)}.{part})", dialect="spark")
            internal = scope.resolve(name, table)
            if internal is None and table is not None and scope.resolve(table, None) is not None:
                # ``col.field`` written with a dot: a struct field of a column, not a source alias.
                struct = exp.column(exp.to_identifier(str(scope.resolve(table, None)), quoted=True))
                return exp.Dot(this=struct, expression=exp.to_identifier(name, quoted=True))
            if internal is None:
                raise StatementError(f"Column '{(table + '.') if table else ''}{name}' cannot be resolved.")
            return exp.column(exp.to_identifier(internal, quoted=True))
        if isinstance(node, exp.Dot) and isinstance(node.expression, exp.Identifier):
            # Struct field access: keep the field name's case (ksqlDB upper-cases unquoted names).
            node.expression.set("quoted", True)
            return node
        if isinstance(node, exp.Bracket) and node.expressions:
            # ksqlDB indexes arrays from 1 (negative from the end) and answers null out of range.
            index = node.expressions[0]
            element = _call("try_element_at", node.this, index)
            if not node.meta.get(_ARRAY_INDEX):
                return element
            # and null for index 0 too, which Spark refuses even in try_element_at (INVALID_INDEX_OF_ZERO)
            zero = exp.EQ(this=index.copy(), expression=exp.Literal.number(0))
            return exp.Case(ifs=[exp.If(this=zero, true=exp.Null())], default=element)
        if isinstance(node, exp.Anonymous):
            return _function_call(node, scope)
        return _operator(node) or node

    tree = expression.copy()
    for bracket in tree.find_all(exp.Bracket):
        # marked before the rewrite, which replaces the container's node (and its type)
        if getattr(bracket.this.meta.get(TYPE_KEY), "base", None) is BaseType.ARRAY:
            bracket.meta[_ARRAY_INDEX] = True
    def typed_rewrite(node: exp.Expression) -> exp.Expression:
        # the replacement keeps the analyzer's type: the catalog's rules read their arguments'
        # types (CallSite.types), and a column's replacement is a new node
        out = rewrite(node)
        if out is not node and TYPE_KEY in node.meta and TYPE_KEY not in out.meta:
            out.meta[TYPE_KEY] = node.meta[TYPE_KEY]
        return out

    return _post_order(tree, typed_rewrite).sql(dialect="spark")


def is_aggregate(expression: exp.Expression) -> bool:
    """Whether the expression contains an aggregate call."""
    for node in expression.walk():
        if isinstance(node, exp.AggFunc):
            return True
        if isinstance(node, exp.Anonymous) and functions.is_aggregate(str(node.this).upper()):
            return True
    return False


def output_name(item: exp.Expression, index: int) -> str:
    """ksqlDB's name for a select item: its alias, a column's name, a struct field's name, else
    ``KSQL_COL_<index>``."""
    if isinstance(item, exp.Alias):
        return item.alias
    if isinstance(item, exp.Column):
        return item.name
    if isinstance(item, exp.Dot) and isinstance(item.expression, exp.Identifier):
        return item.expression.name
    return f"KSQL_COL_{index}"
