"""ksqlDB's expression syntax on sqlglot's expression parser.

sqlglot parses the standard part (operators, CASE, IN, BETWEEN, LIKE, function calls, literals,
``arr[1]`` and ``m['k']`` as ``exp.Bracket``); this layer changes what differs in ksqlDB:

- ``a->b`` is struct field access, ``exp.Dot(this=a, expression=Identifier(B))`` (sqlglot reads
  ``->`` as JSON extraction);
- lambdas are written ``x => expr`` / ``(x, y) => expr`` (sqlglot reads ``=>`` as a named argument);
- every function call is ``exp.Anonymous(this=<UPPER NAME>, expressions=[args])`` as written
  (``COUNT(*)`` has ``exp.Star`` as its argument): the function catalog gives calls their meaning;
- ``CAST(x AS type)`` takes ksqlDB's type grammar (``typeparse``), the target kept as ``exp.DataType``;
- the constructors ``ARRAY[a, b]`` -> ``exp.Array``, ``MAP(k := v, ...)`` -> ``exp.VarMap`` (keys and
  values as ``exp.Array``), ``STRUCT(name := v, ...)`` -> ``exp.Struct`` of ``exp.PropertyEQ``;
- names are normalised: unquoted identifiers and function names upper-cased, quoted ones kept;
- sub-queries, ``*`` outside COUNT(*) and other standard-SQL-only forms are refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from sqlglot import exp
from sqlglot.errors import ParseError as SqlglotParseError
from sqlglot.errors import SqlglotError
from sqlglot.parser import Parser
from sqlglot.tokens import Token, TokenType

from oncestream.sql.language.parser.base import number_value
from oncestream.sql.language.parser.syntax import SyntaxIssue, describe_token, mismatched, unsupported
from oncestream.sql.language.parser.typeparse import TypeParser, to_data_type


def _normalised(identifier: exp.Identifier) -> str:
    return identifier.this if identifier.quoted else identifier.this.upper()


def _build_lambda(self: Parser, expressions: list[exp.Expr]) -> exp.Expr:
    """``(x, y) => body``: references to the lambda's variables in ``body`` become bare
    ``exp.Identifier`` nodes (sqlglot's convention), matched by ksqlDB's name rules (``X => x + 1``
    refers to its variable). sqlglot's own replacement is not used: it matches names
    case-sensitively and would swallow ``x->field`` whole."""
    body = self._parse_disjunction()
    names = {_normalised(e) for e in expressions if isinstance(e, exp.Identifier)}
    if body is not None:
        for column in list(body.find_all(exp.Column)):
            ident = column.this
            if column.args.get("table") is None and isinstance(ident, exp.Identifier) and _normalised(ident) in names:
                replacement = exp.Identifier(this=ident.this, quoted=ident.quoted)
                if column is body:
                    body = replacement
                else:
                    column.replace(replacement)
    return self.expression(exp.Lambda(this=body, expressions=expressions))


def _closed(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """sqlglot's special function parsers (CAST, SUBSTRING, TRIM...) leave the closing ``)``
    optional; ksqlDB's grammar requires it."""

    def parse_closed(self: ExpressionParser) -> Any:
        result = parse(self)
        if not self.is_type(TokenType.R_PAREN):
            self.fail("')'")
        return result

    return parse_closed


def normalise_names(tree: exp.Expr) -> exp.Expr:
    """Upper-case unquoted identifiers and function names in place (ksqlDB is case-insensitive for
    them); back-quoted and double-quoted identifiers keep their case. SQL comments that sqlglot
    attached to nodes are dropped: they are not part of the statement's meaning and must not
    travel into the SQL the compiler generates."""
    for node in tree.walk():
        if node.comments:
            node.pop_comments()
        if isinstance(node, exp.Identifier) and not node.quoted:
            node.set("this", node.this.upper())
        elif isinstance(node, exp.Anonymous) and isinstance(node.this, str):
            node.set("this", node.this.upper())
    return tree


# Standard-SQL forms that sqlglot accepts inside an expression but ksqlDB's grammar has not.
_REFUSED: tuple[tuple[type[exp.Expr], str], ...] = (
    (exp.Query, "A sub-query"),
    (exp.Subquery, "A sub-query"),
    (exp.Window, "A window function (OVER)"),
    (exp.Parameter, "A parameter"),
    (exp.Placeholder, "A placeholder"),
)


# The deepest expression tree accepted: the compiler and sqlglot's generator walk trees
# recursively, so a deeper one (``1 + 1 + ... + 1`` ten thousand times) would fail later, far from
# the request that caused it.
MAX_EXPRESSION_DEPTH = 200


def _depth(tree: exp.Expr) -> int:
    deepest = 0
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in node.iter_expressions())
    return deepest


class ExpressionParser(TypeParser):
    """Adds ``parse_value_expression()``: one ksqlDB expression at the cursor."""

    COLUMN_OPERATORS: ClassVar[dict[Any, Any]] = {
        k: v for k, v in Parser.COLUMN_OPERATORS.items()
        if k not in (TokenType.ARROW, TokenType.DARROW, TokenType.HASH_ARROW, TokenType.DHASH_ARROW,
                     TokenType.PLACEHOLDER, TokenType.DOTCOLON)
    }
    # ``->`` must stop sqlglot's bare-column fast path so that ``_parse_column_ops`` sees it.
    COLUMN_POSTFIX_TOKENS: ClassVar[frozenset[Any]] = Parser.COLUMN_POSTFIX_TOKENS | {TokenType.ARROW}
    # ALTER is reserved in sqlglot, not in ksqlDB (its nonReserved rule): a column may be named ALTER.
    ID_VAR_TOKENS: ClassVar[set[Any]] = Parser.ID_VAR_TOKENS | {TokenType.ALTER}
    LAMBDAS: ClassVar[dict[Any, Any]] = {TokenType.FARROW: _build_lambda}
    # Every function call is ``exp.Anonymous(this=<NAME>, expressions=[args])`` as written: what a
    # ksqlDB function means (and its arity) is the function catalog's business, not sqlglot's
    # (sqlglot would turn INSTR, SUBSTRING, TRANSFORM... into its own nodes with its own argument
    # rules). Only ksqlDB's own syntax gets special nodes: CAST, CASE and the constructors.
    FUNCTIONS: ClassVar[dict[str, Any]] = {}
    NO_PAREN_FUNCTIONS: ClassVar[dict[Any, Any]] = {}
    NO_PAREN_FUNCTION_PARSERS: ClassVar[dict[str, Any]] = {"CASE": Parser.NO_PAREN_FUNCTION_PARSERS["CASE"]}
    FUNCTION_PARSERS: ClassVar[dict[str, Any]] = {
        "CAST": _closed(lambda self: self._parse_ksql_cast()),
        "MAP": _closed(lambda self: self._parse_map_constructor()),
        "STRUCT": _closed(lambda self: self._parse_struct_constructor()),
    }

    def _parse_ksql_cast(self) -> exp.Expr:
        this = self._parse_disjunction()
        if this is None:
            self.fail("an expression")
        self.expect("AS")
        to = to_data_type(self.sql_type())
        cast = exp.Cast(this=this, to=to)
        cast.meta[KSQL_BUILT] = True
        return self.expression(cast)

    def _assignments(self, key: Callable[[], exp.Expr | None]) -> list[tuple[exp.Expr, exp.Expr]]:
        """``key := value, ...`` (possibly none) up to the closing parenthesis."""
        pairs: list[tuple[exp.Expr, exp.Expr]] = []
        if self.is_type(TokenType.R_PAREN):
            return pairs
        while True:
            k = key()
            if k is None:
                self.fail("an expression")
            self.expect_type(TokenType.COLON_EQ, "':='")
            v = self._parse_disjunction()
            if v is None:
                self.fail("an expression")
            pairs.append((k, v))
            if not self._match(TokenType.COMMA):
                return pairs

    def _parse_map_constructor(self) -> exp.Expr:
        """ksqlDB's ``MAP(k := v, ...)`` as sqlglot's ``VarMap`` (keys and values as arrays)."""
        pairs = self._assignments(self._parse_disjunction)
        return self.expression(exp.VarMap(keys=exp.Array(expressions=[k for k, _ in pairs]),
                                          values=exp.Array(expressions=[v for _, v in pairs])))

    def _parse_struct_constructor(self) -> exp.Expr:
        """ksqlDB's ``STRUCT(name := v, ...)`` as ``exp.Struct`` of ``PropertyEQ(Identifier, v)``."""
        pairs = self._assignments(self._struct_field_name)
        struct = exp.Struct(expressions=[exp.PropertyEQ(this=k, expression=v) for k, v in pairs])
        struct.meta[KSQL_BUILT] = True
        return self.expression(struct)

    def _struct_field_name(self) -> exp.Expr:
        token = self.name_token()
        return exp.to_identifier(token.text, quoted=token.token_type == TokenType.IDENTIFIER)

    def _parse_column_ops(self, this: exp.Expr | None) -> exp.Expr | None:
        this = super()._parse_column_ops(this)
        while this is not None and self._match(TokenType.ARROW):
            if self.is_type(TokenType.STAR):
                raise unsupported(self._prev, "Selecting all fields of a struct (->*)")
            if not self.is_name():
                self.fail("a field name")
            self._advance()
            quoted = self._prev.token_type == TokenType.IDENTIFIER
            field = exp.to_identifier(self._prev.text, quoted=quoted)
            this = super()._parse_column_ops(self.expression(exp.Dot(this=this, expression=field)))
        return this

    def _issue_from_sqlglot(self, error: SqlglotError) -> SyntaxIssue:
        """sqlglot's "Expecting )" becomes ANTLR's "mismatched input 'X' expecting ')'"; other
        complaints of sqlglot's (about its own tree invariants) become ksqlDB's
        "Syntax error at or near 'X'"."""
        token = self.token()
        description = ""
        if isinstance(error, SqlglotParseError) and error.errors:
            description = str(error.errors[0].get("description") or "")
        for prefix in ("Expecting ", "Expected "):
            if description.startswith(prefix):
                wanted = description[len(prefix):].strip().rstrip(".")
                if len(wanted) <= 3:    # a punctuation mark: ')', ']', '>'
                    return mismatched(token, [f"'{wanted}'"])
        return SyntaxIssue(token, f"Syntax error at or near {describe_token(token)}")

    def parse_value_expression(self, *, allow_tuple: bool = False, operand_only: bool = False) -> exp.Expression:
        """One expression (ksqlDB's ``expression`` rule), names normalised. Raises SyntaxIssue.
        ``allow_tuple``: a parenthesised list ``(a, b)`` is accepted as the whole expression (the
        ``GROUP BY (a, b)`` form). ``operand_only``: ksqlDB's ``valueExpression`` (GROUP BY and
        PARTITION BY items): arithmetic and calls, no comparison or AND/OR outside parentheses,
        so those stop the expression where ksqlDB's grammar stops it."""
        start = self.token()
        try:
            tree = self._parse_bitwise() if operand_only else self._parse_disjunction()
        except SqlglotError as e:
            raise self._issue_from_sqlglot(e) from e
        if not isinstance(tree, exp.Expression):
            self.fail("an expression")
        if _depth(tree) > MAX_EXPRESSION_DEPTH:
            raise SyntaxIssue(start, f"Expression nested deeper than {MAX_EXPRESSION_DEPTH} levels", syntax=False)
        for node in tree.walk():
            if isinstance(node, exp.Tuple):
                if node is tree and allow_tuple:
                    continue
                # ksqlDB's grammar has no row values: `(a, b)` is a parenthesised expression that
                # ANTLR finds unclosed at the first comma (group-by.json "with groupings").
                raise SyntaxIssue(self._comma_in(node, start), "missing ')' at ','")
            _check_node(node, start)
        tree = _negations_as_not(tree)
        normalise_names(tree)
        return tree


    def _comma_in(self, row: exp.Tuple, fallback: Token | None) -> Token | None:
        """The comma after the first element of the row value ``row`` (sqlglot keeps the places
        of names and literals, not of commas: the last comma before the second element)."""
        if len(row.expressions) < 2:
            return fallback
        starts = [n.meta["start"] for n in row.expressions[1].walk() if "start" in n.meta]
        if not starts:
            return fallback
        commas = [t for t in self._tokens if t.token_type == TokenType.COMMA and t.start < min(starts)]
        return commas[-1] if commas else fallback


# What ksqlDB's expression grammar has, as sqlglot nodes. Anything else sqlglot can parse
# (bitwise operators, DIV, ILIKE, INTERVAL, '::' casts, typed literals, x.y.z names...) is refused.
_ALLOWED: tuple[type[exp.Expr], ...] = (
    exp.Column, exp.Identifier, exp.Star, exp.Literal, exp.Boolean, exp.Null, exp.Neg, exp.Paren,
    exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.DPipe,
    exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ,
    exp.And, exp.Or, exp.Not, exp.Is, exp.Between, exp.In, exp.Like, exp.Escape,
    exp.Case, exp.If, exp.Cast, exp.DataType, exp.DataTypeParam, exp.ColumnDef,
    exp.Anonymous, exp.Lambda, exp.Dot, exp.Bracket, exp.Array, exp.VarMap, exp.Struct, exp.PropertyEQ,
    exp.AtTimeZone,
)

# Marks the nodes this parser built itself from ksqlDB syntax (sqlglot builds nodes of the same
# classes from other dialects' syntax: typed literals as Cast, {...} as Struct).
KSQL_BUILT = "ksql_built"


# How refusals read for the standard-SQL forms sqlglot knows and ksqlDB has not.
_REFUSED_NAMES: dict[type[exp.Expr], str] = {
    exp.IntDiv: "DIV", exp.Interval: "INTERVAL", exp.ILike: "ILIKE", exp.SimilarTo: "SIMILAR TO",
    exp.RegexpLike: "RLIKE / REGEXP", exp.Glob: "GLOB", exp.Collate: "COLLATE", exp.Slice: "An array slice [a:b]",
    exp.BitwiseAnd: "A bitwise operator", exp.BitwiseOr: "A bitwise operator", exp.BitwiseXor: "A bitwise operator",
    exp.BitwiseNot: "A bitwise operator", exp.BitwiseLeftShift: "A bitwise operator",
    exp.BitwiseRightShift: "A bitwise operator", exp.Alias: "AS inside an expression",
    exp.Exists: "EXISTS",
}


def _refusal(node: exp.Expr) -> str:
    if isinstance(node, exp.Column):
        return "A name of more than two parts (a.b.c; struct fields are reached with ->)"
    if isinstance(node, exp.Cast):
        return "A '::' cast or a typed literal (use CAST(x AS type))"
    if isinstance(node, exp.Struct):
        return "A {...} struct literal (use STRUCT(name := value, ...))"
    if isinstance(node, exp.Is):
        return "IS other than IS [NOT] NULL / IS [NOT] DISTINCT FROM"
    if isinstance(node, exp.DataType):
        return "A type outside CAST"
    for cls, name in _REFUSED_NAMES.items():
        if isinstance(node, cls):
            return name
    return f"The {type(node).__name__} expression"


def _position_in(node: exp.Expr, fallback: Token | None) -> Token | None:
    """A token-like marker at the first character of ``node`` that sqlglot recorded, so that the
    error points into the expression rather than at its start."""
    starts = [(n.meta["start"], n.meta.get("line", 1), n.meta.get("col", 1)) for n in node.walk() if "start" in n.meta]
    if not starts:
        return fallback
    offset, line, col = min(starts)
    return Token(TokenType.VAR, "", line=line, col=col, start=offset, end=offset)


def _check_node(node: exp.Expr, start: Token | None) -> None:
    for cls, what in _REFUSED:
        if isinstance(node, cls):
            raise unsupported(_position_in(node, start), what)
    if isinstance(node, exp.Distinct):
        raise unsupported(_position_in(node, start), "DISTINCT inside a function call (ksqlDB has COUNT_DISTINCT)")
    if isinstance(node, exp.Star):
        # ksqlDB's grammar reads `name(*)` as a call (COUNT(*) counts rows; another function
        # then has no arguments: GREATEST(*) is refused as GREATEST())
        parent = node.parent
        if not (isinstance(parent, exp.Anonymous) and len(parent.expressions) == 1):
            raise SyntaxIssue(start, "'*' is only allowed as a select item or in COUNT(*)")
        return
    if isinstance(node, exp.In) and not node.expressions and not any(node.args.get(k) for k in ("query", "unnest", "field")):
        # ksqlDB's grammar: IN '(' expression (',' expression)* ')'
        raise SyntaxIssue(_position_in(node, start), "An IN list needs at least one value")
    if isinstance(node, exp.Literal) and not node.is_string and number_value(node.this) is None:
        raise SyntaxIssue(_position_in(node, start), f"Syntax error at or near '{node.this}'")
    refused = (
        not isinstance(node, _ALLOWED)
        or (isinstance(node, exp.Column) and (node.args.get("db") is not None or node.args.get("catalog") is not None))
        or (isinstance(node, (exp.Cast, exp.Struct)) and not node.meta.get(KSQL_BUILT))
        or (isinstance(node, exp.DataType) and not isinstance(node.parent, (exp.Cast, exp.DataType, exp.ColumnDef)))
        or (isinstance(node, exp.Is) and not isinstance(node.expression, exp.Null))
    )
    if refused:
        raise unsupported(_position_in(node, start), _refusal(node))


def _negations_as_not(tree: exp.Expression) -> exp.Expression:
    """sqlglot writes ``a NOT LIKE b`` as ``Like(negate=True)``; the trees hold ``Not(Like)`` like
    every other negated predicate, so that no reader can miss the negation. Returns the root."""
    for node in list(tree.find_all(exp.Like)):
        if node.args.get("negate"):
            node.set("negate", None)
            target = node.parent if isinstance(node.parent, exp.Escape) else node
            negated = exp.Not(this=target.copy())
            if target is tree:
                tree = negated
            else:
                target.replace(negated)
    return tree
