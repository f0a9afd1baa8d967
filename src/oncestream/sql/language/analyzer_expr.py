"""Expression resolution and typing for the analyzer (``oncestream.sql.language.analyzer``).

``ExpressionResolver.resolve(tree, clause)`` returns a *copy* of a parsed expression where:

- every column reference is qualified: ``exp.Column(this=Identifier(NAME, quoted), table=
  Identifier(ALIAS, quoted))``; pseudo columns (ROWTIME, ROWPARTITION, ROWOFFSET, WINDOWSTART,
  WINDOWEND) carry ``meta["pseudo"] = True``;
- every function call is ``exp.Anonymous(this=<ksqlDB name>, expressions=[args])`` whatever typed
  node sqlglot built for it (``COUNT(*)`` keeps ``exp.Star`` as its argument);
- every node carries its ksqlDB type in ``meta["ksql_type"]`` (``None`` for a NULL literal).

Errors are ``StatementError`` with ksqlDB's wording.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sqlglot import exp

from oncestream.sql.errors import ExpressionTypeError, StatementError
from oncestream.sql.language import catalog, functions, functions_time
from oncestream.sql.language import types as t
from oncestream.sql.language.analyzer_functions import (
    LAMBDA_FUNCTIONS,
    lambda_variable,
    parameter_name,
    resolve_lambda_call,
)
from oncestream.sql.language.catalog import SourceInfo
from oncestream.sql.language.coercion import cast_to, common_type
from oncestream.sql.language.in_list_types import Mismatch, list_type
from oncestream.sql.language.parser import typeparse
from oncestream.sql.language.parser.typeparse import UnknownDataTypeError
from oncestream.sql.language.partial_timestamp import partial_timestamp_millis
from oncestream.sql.language.types import BaseType, SqlType

TYPE_KEY = "ksql_type"
PSEUDO_KEY = "pseudo"

PSEUDO_TYPES: dict[str, SqlType] = {
    catalog.ROWTIME: t.BIGINT,
    catalog.ROWPARTITION: t.INTEGER,
    catalog.ROWOFFSET: t.BIGINT,
}
WINDOW_BOUNDS = (catalog.WINDOWSTART, catalog.WINDOWEND)


def type_of(node: exp.Expr) -> SqlType | None:
    """The ksqlDB type the resolver put on a node (None: NULL literal)."""
    ty = node.meta.get(TYPE_KEY)
    return ty if isinstance(ty, SqlType) else None


def ksql_text(node: exp.Expr) -> str:
    """An expression as ksqlDB prints it in messages (unquoted, qualified names as written)."""
    copy = node.copy()
    for ident in copy.find_all(exp.Identifier):
        ident.set("quoted", False)
    return copy.sql()


_FORMAT_OPS: dict[type, str] = {
    exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%", exp.EQ: "=", exp.NEQ: "<>", exp.GT: ">",
    exp.GTE: ">=", exp.LT: "<", exp.LTE: "<=", exp.And: "AND", exp.Or: "OR", exp.Like: "LIKE",
    exp.NullSafeEQ: "IS NOT DISTINCT FROM", exp.NullSafeNEQ: "IS DISTINCT FROM",
}


def ksql_format(node: exp.Expr, *, qualify: bool = False) -> str:
    """An expression as ksqlDB's ExpressionFormatter prints it in messages: binary operations in
    parentheses (``(F1 + F2)``), calls as ``NAME(args)``, struct access ``A->B``; column names
    unqualified unless ``qualify``."""
    def f(n: exp.Expr) -> str:
        return ksql_format(n, qualify=qualify)

    if isinstance(node, exp.Column):
        if isinstance(node.this, exp.Star):
            return f"{node.table}.*" if node.table else "*"
        return f"{node.table}.{node.name}" if qualify and node.table else node.name
    if isinstance(node, exp.Paren):
        return f(node.this)
    for cls, op in _FORMAT_OPS.items():
        if type(node) is cls:
            return f"({f(node.args['this'])} {op} {f(node.args['expression'])})"
    if isinstance(node, exp.Not):
        inner = node.this
        if isinstance(inner, exp.Is):
            return f"({f(inner.this)} IS NOT NULL)"
        return f"(NOT {f(inner)})"
    if isinstance(node, exp.Is):
        return f"({f(node.this)} IS NULL)"
    if isinstance(node, exp.Neg):
        return f"-{f(node.this)}"
    if isinstance(node, exp.Dot):
        return f"{f(node.this)}->{node.expression.name}"
    if isinstance(node, exp.Bracket):
        return f"{f(node.this)}[{', '.join(f(e) for e in node.expressions)}]"
    if isinstance(node, exp.Literal):
        return f"'{node.this}'" if node.is_string else str(node.this)
    if isinstance(node, exp.Boolean):
        return "true" if node.this else "false"
    if isinstance(node, exp.Null):
        return "null"
    if isinstance(node, exp.Star):
        return "*"
    if isinstance(node, exp.Cast):
        to = node.to
        try:
            target = sql_type_of(to).ksql_name
        except StatementError:
            target = to.sql()
        return f"CAST({f(node.this)} AS {target})"
    if isinstance(node, exp.Between):
        return f"({f(node.this)} BETWEEN {f(node.args['low'])} AND {f(node.args['high'])})"
    if isinstance(node, exp.In):
        return f"({f(node.this)} IN ({', '.join(f(e) for e in node.expressions)}))"
    if isinstance(node, exp.Case):
        words = ["(CASE"] + ([f(node.this)] if node.this is not None else [])
        for branch in node.args.get("ifs") or []:
            words.append(f"WHEN {f(branch.this)} THEN {f(branch.args['true'])}")
        if node.args.get("default") is not None:
            words.append(f"ELSE {f(node.args['default'])}")
        return " ".join(words) + " END)"
    if isinstance(node, exp.Array):
        return f"ARRAY[{', '.join(f(e) for e in node.expressions)}]"
    if isinstance(node, exp.VarMap):
        pairs = zip(node.args["keys"].expressions, node.args["values"].expressions)
        return f"MAP({', '.join(f'{f(k)}:={f(v)}' for k, v in pairs)})"
    if isinstance(node, exp.Struct) and all(isinstance(e, exp.PropertyEQ) for e in node.expressions):
        return f"STRUCT({', '.join(f'{e.this.name}:={f(e.expression)}' for e in node.expressions)})"
    call = call_parts(node)
    if call is not None:
        return f"{call[0]}({', '.join(f(a) for a in call[1])})"
    return ksql_text(node)


def unparen(node: exp.Expr) -> exp.Expr:
    """A copy without parentheses (ksqlDB's trees have none: ``(a + b)`` and ``a + b`` are the
    same GROUP BY / PARTITION BY expression)."""
    copy = node.copy()
    for paren in list(copy.find_all(exp.Paren)):
        if paren is copy:
            copy = paren.this
        else:
            paren.replace(paren.this)
    while isinstance(copy, exp.Paren):
        copy = copy.this
    return copy


def same_expression(a: exp.Expr, b: exp.Expr) -> bool:
    """Structural equality of two resolved expressions, parentheses ignored."""
    return unparen(a) == unparen(b)


def sql_type_of(dt: exp.DataType) -> SqlType:
    """The ksqlDB type of a CAST target (``exp.DataType``), the parser's own reading
    (``typeparse.sql_type_of``) with a type ksqlDB does not have as a statement error."""
    try:
        return typeparse.sql_type_of(dt)
    except UnknownDataTypeError as e:
        raise StatementError(str(e)) from None


def column_ref(name: str, alias: str | None, ty: SqlType) -> exp.Column:
    """A resolved column reference: quoted name, quoted source alias (None for a synthetic join
    key), its type in ``meta``; pseudo columns marked ``meta["pseudo"]``."""
    node = exp.Column(this=exp.to_identifier(name, quoted=True),
                      table=exp.to_identifier(alias, quoted=True) if alias else None)
    node.meta[TYPE_KEY] = ty
    if name in PSEUDO_TYPES or name in WINDOW_BOUNDS:
        node.meta[PSEUDO_KEY] = True
    return node


# sqlglot builds typed nodes for standard functions; these do not carry ksqlDB's name directly.
def _typed_call(node: exp.Func) -> tuple[str, list[exp.Expr]]:
    if isinstance(node, exp.Trim):
        pos = str(node.args.get("position") or "").upper()
        name = {"LEADING": "LTRIM", "TRAILING": "RTRIM"}.get(pos, "TRIM")
        return name, [node.this]
    if isinstance(node, exp.Pad):
        name = "LPAD" if node.args.get("is_left") else "RPAD"
        return name, [a for a in (node.this, node.args.get("expression"), node.args.get("fill_pattern")) if a is not None]
    if isinstance(node, exp.Initcap):
        return "INITCAP", [node.this]
    if isinstance(node, exp.Count):
        this = node.this
        return "COUNT", [] if this is None else [this]
    special = {exp.StrPosition: "INSTR", exp.ArraySize: "ARRAY_LENGTH", exp.Length: "LEN", exp.Rand: "RANDOM",
               exp.Pow: "POWER", exp.Upper: "UCASE", exp.Lower: "LCASE"}
    found = next((v for k, v in special.items() if isinstance(node, k)), None)
    if found is None:
        names = list(type(node).sql_names())
        found = next((n for n in names if functions.lookup(n) is not None), names[0] if names else node.key.upper())
    fname: str = found
    args: list[exp.Expr] = []
    for key in node.arg_types:
        value = node.args.get(key)
        if isinstance(value, exp.Expr):
            args.append(value)
        elif isinstance(value, list):
            args.extend(v for v in value if isinstance(v, exp.Expr))
    return fname, args


def unknown_qualifier(name: str) -> StatementError:
    """``name.col`` or ``name.*`` where no source or alias of the FROM clause is ``name``
    (ksqlDB's AstBuilder raises it while the statement is prepared, hence the heading)."""
    return StatementError(f"Failed to prepare statement: '{name}' is not a valid stream/table name or alias.")


def call_parts(node: exp.Expr) -> tuple[str, list[exp.Expr]] | None:
    """(ksqlDB function name, arguments) if ``node`` is a function call, else None."""
    if isinstance(node, exp.Anonymous):
        return str(node.this).upper(), list(node.expressions)
    if isinstance(node, exp.Func) and not isinstance(node, (exp.Case, exp.Cast, exp.If, exp.Array, exp.Struct,
                                                             exp.VarMap, exp.Map, exp.Bracket)):
        return _typed_call(node)
    return None


def is_aggregate_call(node: exp.Expr) -> bool:
    parts = call_parts(node)
    return parts is not None and functions.is_aggregate(parts[0])


@dataclass(frozen=True)
class Scope:
    """What column names resolve to: sources by alias (FROM first), plus extra names (a synthetic
    join key, window bounds of a windowed aggregation)."""

    sources: Mapping[str, SourceInfo]
    windowed: bool = False
    extra: Mapping[str, SqlType] | None = None
    default_alias: str | None = None


_ARITH = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod)
_COMPARE = {exp.EQ: "EQUAL", exp.NEQ: "NOT_EQUAL", exp.GT: "GREATER_THAN", exp.GTE: "GREATER_THAN_OR_EQUAL",
            exp.LT: "LESS_THAN", exp.LTE: "LESS_THAN_OR_EQUAL", exp.NullSafeEQ: "IS_NOT_DISTINCT_FROM",
            exp.NullSafeNEQ: "IS_DISTINCT_FROM"}
# ARRAY, MAP and STRUCT values only compare for (in)equality
_EQUALITY_OPS = (exp.EQ, exp.NEQ, exp.NullSafeEQ, exp.NullSafeNEQ)


def _comparable(a: SqlType | None, b: SqlType | None) -> bool:
    if a is None or b is None:
        return True
    if functions.is_numeric(a) and functions.is_numeric(b):
        return True
    if a.base in (BaseType.ARRAY, BaseType.MAP, BaseType.STRUCT):
        # same kind, parts comparable (an ARRAY<INTEGER> compares with an ARRAY<BIGINT>)
        if a.base is not b.base:
            return False
        if a.base is BaseType.STRUCT:
            theirs = {f.name: f.type for f in b.fields}
            return all(f.name not in theirs or _comparable(f.type, theirs[f.name]) for f in a.fields)
        return _comparable(a.element, b.element) and _comparable(a.key, b.key)
    time_like = (BaseType.TIMESTAMP, BaseType.DATE, BaseType.TIME)
    # ksqlDB compares a TIMESTAMP/DATE/TIME with a STRING literal by parsing the string.
    if (a.base in time_like and b.base in (*time_like, BaseType.STRING)) or (b.base in time_like and a.base is BaseType.STRING):
        return True
    return a.base is b.base


def castable(source: SqlType, target: SqlType) -> bool:
    """ksqlDB's CAST rules: primitives convert through STRING and between numerics, TIMESTAMP /
    DATE / TIME from and to STRING (and TIMESTAMP <-> DATE / TIME); ARRAY, MAP and STRUCT only to
    the same kind with castable parts (or to STRING)."""
    complex_types = (BaseType.ARRAY, BaseType.MAP, BaseType.STRUCT)
    if source == target or (target.base is BaseType.STRING and source.base is not BaseType.BYTES):
        return True
    if target.base in complex_types or source.base in complex_types:
        if source.base is not target.base:
            return False
        if target.base is BaseType.ARRAY:
            return source.element is not None and target.element is not None and castable(source.element, target.element)
        if target.base is BaseType.MAP:
            return (source.element is not None and target.element is not None and source.key is not None
                    and target.key is not None and castable(source.key, target.key) and castable(source.element, target.element))
        src_fields = {f.name: f.type for f in source.fields}
        return all(f.name not in src_fields or castable(src_fields[f.name], f.type) for f in target.fields)
    if functions.is_numeric(source) and functions.is_numeric(target):
        return True
    if source.base is BaseType.STRING or target.base is BaseType.STRING:
        return BaseType.BYTES not in (source.base, target.base)
    time_like = (BaseType.TIMESTAMP, BaseType.DATE, BaseType.TIME)
    if source.base in time_like and target.base in time_like:
        return not (source.base is BaseType.DATE and target.base is BaseType.TIME) and \
            not (source.base is BaseType.TIME and target.base is BaseType.DATE)
    return False


def arithmetic_type(op: exp.Expr, a: SqlType | None, b: SqlType | None) -> SqlType | None:
    """ksqlDB's result type of ``a <op> b`` (INTEGER < BIGINT < DECIMAL < DOUBLE; STRING + STRING
    concatenates); None if either side is a NULL literal and the other unknown."""
    if isinstance(op, exp.Add) and (a is None or a.base is BaseType.STRING) and (b is None or b.base is BaseType.STRING) \
            and (a is not None or b is not None):
        return t.STRING
    if not (functions.is_numeric(a) and functions.is_numeric(b)):
        raise StatementError(f"Unsupported arithmetic types. {a.base.value if a else 'NULL'} {b.base.value if b else 'NULL'}")
    if a is None or b is None:
        return a or b
    if BaseType.DOUBLE in (a.base, b.base):
        return t.DOUBLE
    if BaseType.DECIMAL in (a.base, b.base):
        da, db = functions.decimal_of(a), functions.decimal_of(b)
        p1, s1, p2, s2 = da.precision or 0, da.scale or 0, db.precision or 0, db.scale or 0
        if isinstance(op, (exp.Add, exp.Sub)):
            scale = max(s1, s2)
            precision = scale + max(p1 - s1, p2 - s2) + 1
        elif isinstance(op, exp.Mul):
            precision, scale = p1 + p2 + 1, s1 + s2
        elif isinstance(op, exp.Div):
            scale = max(6, s1 + p2 + 1)
            precision = p1 - s1 + s2 + scale
        else:
            scale = max(s1, s2)
            precision = min(p1 - s1, p2 - s2) + scale
        return t.decimal(min(38, precision), min(38, scale))
    if BaseType.BIGINT in (a.base, b.base):
        return t.BIGINT
    return t.INTEGER


def literal_type(node: exp.Literal) -> SqlType:
    """ksqlDB's literal typing: 'x' STRING, 1 INTEGER (BIGINT beyond 32 bits), 1.5 DECIMAL(2, 1),
    1.5E0 DOUBLE."""
    if node.is_string:
        return t.STRING
    return number_type(str(node.this))


def number_type(text: str) -> SqlType:
    """The type of a numeric literal's text (a leading '-' allowed)."""
    if "e" in text.lower():
        if float(text) in (float("inf"), float("-inf")):
            raise StatementError(f"Number overflows DOUBLE: {text}")
        return t.DOUBLE
    if "." in text:
        digits = text.lstrip("-").replace(".", "")
        whole, _, frac = text.lstrip("-").partition(".")
        precision = max(len(digits.lstrip("0")) if whole.strip("0") else len(frac), len(frac), 1)
        return t.decimal(precision, len(frac))
    value = int(text)
    if not -(2 ** 63) <= value < 2 ** 63:
        raise StatementError(f"Invalid numeric literal: {text}")
    return t.INTEGER if -(2 ** 31) <= value < 2 ** 31 else t.BIGINT


class ExpressionResolver:
    """Resolves and types expressions against a ``Scope`` (see module docstring)."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        # the parameters of the lambdas being resolved (analyzer_functions), by name
        self.lambda_vars: dict[str, SqlType | None] = {}

    def _in_list_type(self, this: exp.Expr, items: list[exp.Expr], written: list[exp.Expr], clause: str) -> SqlType | None:
        """The IN list's common type (None: all NULL), or the statement is refused as ksqlDB's code
        generation refuses it (``in_list_types``; ``Invalid Predicate: operator does not exist:
        INTEGER = BOOLEAN (true)``)."""
        heading = _CODEGEN_HEADING.get(clause, "")
        try:
            common = list_type(type_of(this), items, type_of, _comparable)
        except StatementError as e:
            raise StatementError(heading + e.message) from None
        if isinstance(common, Mismatch):
            raise StatementError(f"{heading}operator does not exist: {common.common.ksql_name} = "
                                 f"{common.item_type.ksql_name} ({self._operand_text(written[common.index])})\n"
                                 "Hint: You might need to add explicit type casts.")
        return common

    def _operand_text(self, node: exp.Expr) -> str:
        """``node`` (as written) as ksqlDB prints it in a type error: ``ksql_format``'s text,
        and in a join, where ksqlDB has rewritten ``I1.BAR`` to the joined schema's ``I1_BAR``,
        qualified columns so named."""
        if len(self.scope.sources) < 2:
            return ksql_format(node)
        def joined_name(n: exp.Expr) -> exp.Expr:
            if isinstance(n, exp.Column) and n.table and not isinstance(n.this, exp.Star):
                return exp.column(f"{n.table}_{n.name}")
            return n

        return ksql_format(node.transform(joined_name))

    # -- columns ------------------------------------------------------------------------------

    def lookup_column(self, name: str, qualifier: str | None, clause: str, shown: str) -> exp.Column:
        sources = self.scope.sources
        if qualifier is not None:
            info = sources.get(qualifier)
            if info is None:
                raise unknown_qualifier(qualifier)
            ty = self._column_type(info, name)
            if ty is None:
                raise StatementError(f"{clause} column '{shown}' cannot be resolved.")
            return column_ref(name, qualifier, ty)
        extra = self.scope.extra or {}
        if name in extra:
            return column_ref(name, None, extra[name])
        matches = [alias for alias, info in sources.items() if info.column(name) is not None]
        if len(matches) > 1:
            could = " or ".join(f"{a}.{name}" for a in matches)
            raise StatementError(f"Column '{name}' is ambiguous. Could be {could}.")
        if matches:
            col = sources[matches[0]].column(name)
            assert col is not None
            return column_ref(name, matches[0], col.type)
        alias = self.scope.default_alias or next(iter(sources), None)
        if alias is not None:
            ty = self._column_type(sources[alias], name)
            if ty is not None:
                return column_ref(name, alias, ty)
        raise StatementError(f"{clause} column '{shown}' cannot be resolved.")

    def _column_type(self, info: SourceInfo, name: str) -> SqlType | None:
        col = info.column(name)
        if col is not None:
            return col.type
        if name in PSEUDO_TYPES:
            return PSEUDO_TYPES[name]
        if name in WINDOW_BOUNDS and (info.window is not None or self.scope.windowed):
            return t.BIGINT
        return None

    # -- expressions --------------------------------------------------------------------------

    def resolve(self, tree: exp.Expr, clause: str = "SELECT") -> exp.Expr:
        """A resolved, typed copy of ``tree`` (see the module docstring)."""
        return self._resolve(tree.copy(), clause)

    def _typed(self, node: exp.Expr, ty: SqlType | None) -> exp.Expr:
        node.meta[TYPE_KEY] = ty
        return node

    def _resolve(self, node: exp.Expr, clause: str) -> exp.Expr:
        if isinstance(node, exp.Column):
            if isinstance(node.this, exp.Star):
                raise StatementError("'*' is only allowed as a select item or in COUNT(*)")
            qualifier = node.table or None
            return self.lookup_column(node.name, qualifier, clause, ksql_text(node))
        if isinstance(node, exp.Paren):
            inner = self._resolve(node.this, clause)
            return self._typed(exp.Paren(this=inner), type_of(inner))
        if isinstance(node, exp.Literal):
            return self._typed(node, literal_type(node))
        if isinstance(node, exp.Boolean):
            return self._typed(node, t.BOOLEAN)
        if isinstance(node, exp.Null):
            return self._typed(node, None)
        if isinstance(node, exp.Neg):
            if isinstance(node.this, exp.Literal) and not node.this.is_string:
                # a negative literal: its bounds are those of the negated text (-2^63 is a BIGINT)
                negated = exp.Neg(this=node.this.copy())
                literal_ty = number_type("-" + str(node.this.this))
                negated.this.meta[TYPE_KEY] = literal_ty
                return self._typed(negated, literal_ty)
            inner = self._resolve(node.this, clause)
            if not functions.is_numeric(type_of(inner)):
                raise StatementError(f"Unsupported arithmetic types. {_tname(type_of(inner))}")
            return self._typed(exp.Neg(this=inner), type_of(inner))
        if isinstance(node, _ARITH):
            left, right = self._resolve(node.left, clause), self._resolve(node.right, clause)
            out = type(node)(this=left, expression=right)
            try:
                result = arithmetic_type(node, type_of(left), type_of(right))
            except StatementError as e:
                # ksqlDB's ExpressionTypeManager names the operation it could not type
                raise ExpressionTypeError(f"Error processing expression: {self._operand_text(node)}. {e.message}") from None
            return self._typed(out, result)
        if isinstance(node, exp.DPipe):
            left, right = self._resolve(node.left, clause), self._resolve(node.right, clause)
            return self._typed(exp.Anonymous(this="CONCAT", expressions=[left, right]), t.STRING)
        for cls, op_name in _COMPARE.items():
            if isinstance(node, cls):
                left, right = self._resolve(node.left, clause), self._resolve(node.right, clause)
                complex_types = (BaseType.ARRAY, BaseType.MAP, BaseType.STRUCT)
                lt, rt = type_of(left), type_of(right)
                if isinstance(left, exp.Null) and isinstance(right, exp.Null):
                    raise StatementError(f"Comparison with NULL not supported: NULL {_FORMAT_OPS.get(cls, op_name)} NULL")
                ordering_complex = not isinstance(node, _EQUALITY_OPS) and any(
                    x is not None and x.base in complex_types for x in (lt, rt))
                if not ordering_complex and not _comparable(lt, rt):
                    # ROWTIME > '2020-01-01T00:00:00': the string becomes epoch milliseconds here
                    left, right = _timestamp_string_as_millis(left, right), _timestamp_string_as_millis(right, left)
                    lt, rt = type_of(left), type_of(right)
                if ordering_complex or not _comparable(lt, rt):
                    raise ExpressionTypeError(f"Cannot compare {self._operand_text(node.left)} ({_tname(type_of(left))}) to "
                                              f"{self._operand_text(node.right)} ({_tname(type_of(right))}) with {op_name}.")
                return self._typed(cls(this=left, expression=right), t.BOOLEAN)
        if isinstance(node, (exp.And, exp.Or)):
            left, right = self._resolve(node.left, clause), self._resolve(node.right, clause)
            for side, orig in ((left, node.left), (right, node.right)):
                self._require_boolean(side, orig, clause)
            return self._typed(type(node)(this=left, expression=right), t.BOOLEAN)
        if isinstance(node, exp.Not):
            inner = self._resolve(node.this, clause)
            self._require_boolean(inner, node.this, clause)
            return self._typed(exp.Not(this=inner), t.BOOLEAN)
        if isinstance(node, exp.Is):
            inner = self._resolve(node.this, clause)
            return self._typed(exp.Is(this=inner, expression=node.expression.copy()), t.BOOLEAN)
        if isinstance(node, (exp.Like, exp.ILike)):
            left, right = self._resolve(node.this, clause), self._resolve(node.expression, clause)
            if not (functions.is_string(type_of(left)) and functions.is_string(type_of(right))):
                raise StatementError(f"Unsupported type for LIKE: {_tname(type_of(left))} LIKE {_tname(type_of(right))}")
            like = type(node)(this=left, expression=right)
            if node.args.get("escape") is not None:
                like.set("escape", node.args["escape"].copy())
            return self._typed(like, t.BOOLEAN)
        if isinstance(node, exp.Escape):
            inner_like = self._resolve(node.this, clause)
            return self._typed(exp.Escape(this=inner_like, expression=node.expression.copy()), t.BOOLEAN)
        if isinstance(node, exp.In):
            this = self._resolve(node.this, clause)
            items = [self._resolve(e, clause) for e in node.expressions]
            # ksqlDB coerces IN literals to the tested column's type; the tree gets the coerced literal
            common = self._in_list_type(this, items, node.expressions, clause)
            if common is not None and common.base in (BaseType.ARRAY, BaseType.MAP, BaseType.STRUCT):
                # one type for Spark's IN: complex values cast (STRUCTs by field name) to the list's
                this, items = cast_to(this, common), [cast_to(item, common) for item in items]
                if t.holds_map(common):
                    # Spark's IN cannot compare MAPs: one equality per item, which the compiler
                    # rewrites as ksqlDB's Map.equals (a NULL side is false, as in IN)
                    return self._any_equal(this, items)
            else:
                items = [_coerce_in_literal(type_of(this), item) for item in items]
            return self._typed(exp.In(this=this, expressions=items), t.BOOLEAN)
        if isinstance(node, exp.Between):
            this = self._resolve(node.this, clause)
            low, high = self._resolve(node.args["low"], clause), self._resolve(node.args["high"], clause)
            low, high = _timestamp_string_as_millis(low, this), _timestamp_string_as_millis(high, this)
            for bound in (low, high):
                if not _comparable(type_of(this), type_of(bound)):
                    raise ExpressionTypeError(f"Cannot compare {self._operand_text(node.this)} ({_tname(type_of(this))}) to "
                                              f"{ksql_text(bound)} ({_tname(type_of(bound))}) with BETWEEN.")
            return self._typed(exp.Between(this=this, low=low, high=high), t.BOOLEAN)
        if isinstance(node, exp.Case):
            return self._resolve_case(node, clause)
        if isinstance(node, exp.If) and not isinstance(node.parent, exp.Case):
            case = exp.Case(ifs=[exp.If(this=node.this, true=node.args["true"])], default=node.args.get("false"))
            return self._resolve_case(case, clause)
        if isinstance(node, (exp.Cast, exp.TryCast)):
            inner = self._resolve(node.this, clause)
            target = sql_type_of(node.to)
            source_type = type_of(inner)
            if source_type is not None and not castable(source_type, target):
                prefix = "Invalid Select: " if clause == "SELECT" else ""
                raise StatementError(f"{prefix}Cast of {source_type.ksql_name} to {target.ksql_name} is not supported")
            return self._typed(exp.Cast(this=inner, to=node.to.copy()), target)
        if isinstance(node, exp.Dot):
            return self._resolve_dot(node, clause)
        if isinstance(node, exp.Bracket):
            return self._resolve_bracket(node, clause)
        if isinstance(node, exp.Array):
            items = [self._resolve(e, clause) for e in node.expressions]
            if not items:
                raise StatementError("Array constructor cannot be empty. Please supply at least one element "
                                     "(see https://github.com/confluentinc/ksql/issues/4239).")
            if all(type_of(i) is None for i in items):
                raise StatementError("Cannot construct an array with all NULL elements "
                                     "(see https://github.com/confluentinc/ksql/issues/4239). As a workaround, you may cast a "
                                     "NULL value to the desired type.")
            element = common_type(items, "ARRAY")      # coerces items, before they are placed
            return self._typed(exp.Array(expressions=items), t.array_of(element))
        if isinstance(node, exp.VarMap):
            keys_node, values_node = node.args.get("keys"), node.args.get("values")
            key_items = [self._resolve(e, clause) for e in (keys_node.expressions if keys_node is not None else [])]
            value_items = [self._resolve(e, clause) for e in (values_node.expressions if values_node is not None else [])]
            if not key_items:
                raise StatementError("Map constructor cannot be empty. Please supply at least one key value pair "
                                     "(see https://github.com/confluentinc/ksql/issues/4239).")
            if all(type_of(k) is None for k in key_items):
                raise StatementError("Cannot construct a map with all NULL keys")
            if all(type_of(v) is None for v in value_items):
                raise StatementError("Cannot construct a map with all NULL values")
            map_type = t.map_of(common_type(key_items, "MAP key"), common_type(value_items, "MAP value"))
            out_map = exp.VarMap(keys=exp.Array(expressions=key_items), values=exp.Array(expressions=value_items))
            return self._typed(out_map, map_type)
        if isinstance(node, exp.Struct):
            field_nodes: list[exp.Expr] = []
            field_types: list[tuple[str, SqlType]] = []
            for item in node.expressions:
                if not isinstance(item, (exp.PropertyEQ, exp.Alias)):
                    raise StatementError(f"Unsupported STRUCT constructor field: {ksql_text(item)}")
                fname = item.this.name if isinstance(item, exp.PropertyEQ) else item.alias
                value = self._resolve(item.expression if isinstance(item, exp.PropertyEQ) else item.this, clause)
                vtype = type_of(value)
                if vtype is None:
                    raise StatementError(f"Can't infer a type of null for STRUCT field {fname}: cast it to a type")
                if any(existing == fname for existing, _ in field_types):
                    raise StatementError("Duplicate field names found in STRUCT")
                field_types.append((fname, vtype))
                field_nodes.append(exp.PropertyEQ(this=exp.to_identifier(fname, quoted=True), expression=value))
            return self._typed(exp.Struct(expressions=field_nodes), t.struct_of(*field_types))
        if isinstance(node, exp.Lambda):
            raise StatementError("Lambda functions are only supported as arguments of TRANSFORM, FILTER and REDUCE.")
        if isinstance(node, exp.Identifier):
            # a lambda parameter (the parser leaves them as bare identifiers)
            name = parameter_name(node)
            if name not in self.lambda_vars:
                raise StatementError(f"{clause} column '{name}' cannot be resolved.")
            return lambda_variable(name, self.lambda_vars[name])
        if isinstance(node, exp.Star):
            raise StatementError("'*' is only allowed as a select item or in COUNT(*)")
        parts = call_parts(node)
        if parts is not None:
            return self._resolve_call(node, parts[0], parts[1], clause)
        raise StatementError(f"Unsupported expression: {ksql_text(node)}")

    def _any_equal(self, this: exp.Expr, items: list[exp.Expr]) -> exp.Expr:
        """``this = i1 OR this = i2 ...`` (NULL items left out: they never match), typed."""
        compared = [self._typed(exp.EQ(this=this.copy(), expression=item), t.BOOLEAN)
                    for item in items if type_of(item) is not None]
        if not compared:
            return self._typed(exp.false(), t.BOOLEAN)
        out = compared[0]
        for eq in compared[1:]:
            out = self._typed(exp.Or(this=out, expression=eq), t.BOOLEAN)
        return out

    def _require_boolean(self, resolved: exp.Expr, orig: exp.Expr, clause: str) -> None:
        ty = type_of(resolved)
        if ty is not None and ty.base is not BaseType.BOOLEAN:
            raise StatementError(f"Type mismatch in {clause}: {ksql_text(orig)} is {ty.ksql_name}, it should be a BOOLEAN.")

    def _resolve_case(self, node: exp.Case, clause: str) -> exp.Expr:
        operand = self._resolve(node.this, clause) if node.this is not None else None
        ifs: list[exp.Expr] = []
        results: list[exp.Expr] = []
        for branch in node.args.get("ifs") or []:
            cond = self._resolve(branch.this, clause)
            if operand is None:
                ty = type_of(cond)
                if ty is not None and ty.base is not BaseType.BOOLEAN:
                    raise StatementError(f"WHEN operand type should be boolean.{chr(10)}Type for '{ksql_text(branch.this)}' "
                                         f"is {ty.ksql_name}")
            then = self._resolve(branch.args["true"], clause)
            results.append(then)
            ifs.append(exp.If(this=cond, true=then))
        default = node.args.get("default")
        resolved_default = self._resolve(default, clause) if default is not None else None
        if resolved_default is not None:
            results.append(resolved_default)
        out_type: SqlType | None = None
        for r in results:
            ty = type_of(r)
            if ty is None:
                continue
            if out_type is None:
                out_type = ty
            elif functions.is_numeric(out_type) and functions.is_numeric(ty) and out_type.base is ty.base:
                out_type = functions.wider_numeric(out_type, ty)
            elif out_type != ty:
                raise StatementError("Invalid Case expression. Type for all 'THEN' clauses should be the same."
                                     f"{chr(10)}THEN expression '{ksql_text(r)}' has type: {ty.ksql_name}. "
                                     f"Previous THEN expression(s) type: {out_type.ksql_name}.")
        if out_type is None:
            raise StatementError("Invalid Case expression. All case branches have NULL type")
        out = exp.Case(this=operand, ifs=ifs, default=resolved_default)
        return self._typed(out, out_type)

    def _resolve_dot(self, node: exp.Dot, clause: str) -> exp.Expr:
        base = self._resolve(node.this, clause)
        field_node = node.expression
        field_name = field_node.name if isinstance(field_node, (exp.Identifier, exp.Column, exp.Var)) else str(field_node)
        ty = type_of(base)
        if ty is None or ty.base is not BaseType.STRUCT:
            raise StatementError(f"Expected STRUCT type, got: {_tname(ty)}")
        match = next((f for f in ty.fields if f.name == field_name), None)
        if match is None:
            raise StatementError(f"Could not find field '{field_name}' in '{ksql_text(node.this)}'.")
        out = exp.Dot(this=base, expression=exp.to_identifier(field_name, quoted=True))
        return self._typed(out, match.type)

    def _resolve_bracket(self, node: exp.Bracket, clause: str) -> exp.Expr:
        base = self._resolve(node.this, clause)
        if len(node.expressions) != 1:
            raise StatementError(f"Unsupported subscript: {ksql_text(node)}")
        index = self._resolve(node.expressions[0], clause)
        ty = type_of(base)
        if ty is not None and ty.base is BaseType.ARRAY:
            if not functions.is_integral(type_of(index)):
                raise StatementError(f"Array index must be an integer, got {_tname(type_of(index))}")
            elem = ty.element
        elif ty is not None and ty.base is BaseType.MAP:
            if not _comparable(ty.key, type_of(index)):
                raise StatementError(f"Map key must be {_tname(ty.key)}, got {_tname(type_of(index))}")
            elem = ty.element
        else:
            raise StatementError(f"Subscript expression can only be used on an ARRAY or MAP, got {_tname(ty)}")
        out = exp.Bracket(this=base, expressions=[index])
        return self._typed(out, elem)

    def _resolve_call(self, node: exp.Expr, name: str, args: list[exp.Expr], clause: str) -> exp.Expr:
        fd = functions.lookup(name)
        if fd is None:
            raise StatementError(functions.unknown_function_message(name))
        if fd.name in LAMBDA_FUNCTIONS:
            return resolve_lambda_call(self, fd.name, args, clause)
        if fd.name == "COUNT" and args and isinstance(args[0], exp.Star):
            out = exp.Anonymous(this="COUNT", expressions=[exp.Star()])
            return self._typed(out, t.BIGINT)
        if len(args) == 1 and isinstance(args[0], exp.Star):
            args = []           # ksqlDB: name(*) of another function is a call without arguments
        if fd.name in functions_time.UNIT_FUNCTIONS:
            # TIMESTAMPADD(MILLISECONDS, n, ts): the unit is a keyword, not a column
            rest = [self._resolve(a, clause) for a in args[1:]]
            if not (args and functions_time.is_unit_keyword(args[0])):
                first = [self._resolve(args[0], clause)] if args else []
                functions_time.unit_argument(fd.name, args, [type_of(a) for a in first + rest])
            resolved = [functions_time.unit_argument(fd.name, args, []), *rest]
        else:
            resolved = [self._resolve(a, clause) for a in args]
        if fd.aggregate and fd.name in _LITERAL_PARAMETERS:
            start = _first_literal_parameter(fd.name, len(resolved))
            for i, (arg, orig) in enumerate(zip(resolved[start:], args[start:]), start=start + 1):
                if not isinstance(arg, (exp.Literal, exp.Boolean, exp.Neg)):
                    raise StatementError(f"Parameter {i} passed to function {fd.name} must be a literal constant, but was "
                                         f"expression: '{ksql_format(orig)}'")
        if fd.aggregate:
            for arg in resolved:
                nested = next((n for n in arg.walk() if is_aggregate_call(n)), None)
                if nested is not None:
                    raise StatementError(f"Aggregate functions can not be nested: {fd.name}({ksql_text(nested)})")
        try:
            ty = fd.result_type([type_of(a) for a in resolved])
        except functions.FunctionTypeError as e:
            raise StatementError(str(e)) from e
        out = exp.Anonymous(this=fd.name, expressions=resolved)
        return self._typed(out, ty)


def _timestamp_string_as_millis(node: exp.Expr, other: exp.Expr) -> exp.Expr:
    """A string literal compared with ROWTIME / WINDOWSTART / WINDOWEND (by a comparison or
    BETWEEN): ksqlDB reads it as a possibly partial timestamp ('2018', '2020-01-01',
    '2020-01-01T10:00:00.000+0200'; ``partial_timestamp``) and compares epoch milliseconds.
    Other nodes are returned unchanged."""
    time_column = isinstance(other, exp.Column) and bool(other.meta.get(PSEUDO_KEY)) and \
        other.name in (catalog.ROWTIME, *WINDOW_BOUNDS)
    if not (time_column and isinstance(node, exp.Literal) and node.is_string):
        return node
    millis = partial_timestamp_millis(str(node.this))
    if millis is None:
        return node
    out = exp.Literal.number(millis)
    out.meta[TYPE_KEY] = t.BIGINT
    return out


# ksqlDB's CodeGenRunner names the clause whose expression failed to compile
_CODEGEN_HEADING = {"WHERE": "Invalid Predicate: ", "SELECT": "Invalid Select: "}


def _coerce_in_literal(column: SqlType | None, item: exp.Expr) -> exp.Expr:
    """ksqlDB's IN coerces literals to the tested column's type: a string literal to a number or
    boolean column (when it parses), any primitive literal to a STRING column."""
    if column is None or not isinstance(item, (exp.Literal, exp.Boolean)):
        return item
    is_string_literal = isinstance(item, exp.Literal) and item.is_string
    if column.base is BaseType.STRING:
        if is_string_literal:
            return item
        text = ("true" if item.this else "false") if isinstance(item, exp.Boolean) else str(item.this)
        out: exp.Expr = exp.Literal.string(text)
        out.meta[TYPE_KEY] = t.STRING
        return out
    if not is_string_literal:
        return item
    text = str(item.this).strip()
    if column.base is BaseType.BOOLEAN:
        # ksqlDB's SqlBooleans: any prefix of true / false / yes / no
        lowered = text.lower()
        if not lowered or not any(word.startswith(lowered) for word in ("true", "false", "yes", "no")):
            raise StatementError(f'Invalid Predicate: invalid input syntax for type BOOLEAN: "{text}".')
        out = exp.Boolean(this=any(word.startswith(lowered) for word in ("true", "yes")))
        out.meta[TYPE_KEY] = t.BOOLEAN
        return out
    if functions.is_numeric(column):
        try:
            float(text)
        except ValueError:
            raise StatementError(f'Invalid Predicate: invalid input syntax for type {column.base.value}: "{text}".') from None
        out = exp.Literal.number(text)
        out.meta[TYPE_KEY] = number_type(text)
        return out
    return item


# aggregates whose arguments after the first are parameters (n, ignoreNulls, k), fixed per query
_LITERAL_PARAMETERS = frozenset({"LATEST_BY_OFFSET", "EARLIEST_BY_OFFSET", "TOPK", "TOPKDISTINCT"})


def _first_literal_parameter(name: str, arg_count: int) -> int:
    """The index of the first argument that must be a literal: TOPK(x, other columns..., k)
    takes columns up to its last argument, k."""
    if name == "TOPK" and arg_count > 2:
        return arg_count - 1
    return 1


def _tname(ty: SqlType | None) -> str:
    return "NULL" if ty is None else ty.ksql_name


def no_map_key(e: exp.Expr, name: str | None = None) -> None:
    """ksqlDB refuses key columns whose type holds a MAP (their serialization is not stable);
    ``name`` is the key column's (default: the column's, else the expression's text)."""
    ty = type_of(e)

    def has_map(x: SqlType | None) -> bool:
        if x is None:
            return False
        if x.base is BaseType.MAP:
            return True
        return has_map(x.element) or any(has_map(f.type) for f in x.fields)

    if has_map(ty):
        assert ty is not None
        if name is None:
            name = e.name if isinstance(e, exp.Column) else ksql_format(e)
        raise StatementError("Map keys, including types that contain maps, are not supported as they may lead to unexpected "
                             f"behavior due to inconsistent serialization. Key column name: `{name}`. Column type: "
                             f"{ty.ksql_name}. See https://github.com/confluentinc/ksql/issues/6621 for more.")
