"""The analyzer's rules for lambda functions, with ksqlDB's messages.

Lambda functions (``TRANSFORM``, ``FILTER``, ``REDUCE``): the collection (and REDUCE's initial
state) are resolved first, their types give the lambda's parameters theirs (ARRAY<T>: ``x`` is a
T; MAP<K, V>: ``(k, v)``; REDUCE: the state first, typed as the initial state), then the body is
resolved with the parameters in scope. A reference to a parameter is a quoted ``exp.Identifier``
with its type in ``meta`` (the parser leaves them as bare identifiers, sqlglot's convention), so
the compiler emits it as a Spark lambda variable.

Each resolved ``exp.Lambda`` also carries ``args["null_guard"]``: when true for an element,
ksqlDB's evaluation of the body fails (arithmetic over a NULL operand unboxes a null in its
generated Java) and the whole function call is NULL (``functions_collections`` translates it).
It is the OR of ``operand IS NULL`` over the operands of the body's numeric arithmetic, nested
lambdas excluded (their own guards cover them) and REDUCE's state excluded (it is the previous
step's result, not an element).

Table functions have their rules in ``analyzer_table_functions``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol

from sqlglot import exp

from oncestream.sql.errors import StatementError
from oncestream.sql.language import functions
from oncestream.sql.language import types as t
from oncestream.sql.language.function_catalog import registered_name
from oncestream.sql.language.types import BaseType, SqlType


class ExpressionResolver(Protocol):
    """What the lambda rules need of analyzer_expr.ExpressionResolver (a protocol, so this module
    does not import the resolver that imports it)."""

    lambda_vars: dict[str, SqlType | None]

    @property
    def scope(self) -> _Scope: ...

    def resolve(self, tree: exp.Expr, clause: str = "SELECT") -> exp.Expr: ...


class _SourceColumns(Protocol):
    def column(self, name: str) -> object: ...


class _Scope(Protocol):
    @property
    def sources(self) -> Mapping[str, _SourceColumns]: ...

TYPE_KEY = "ksql_type"          # analyzer_expr.TYPE_KEY
LAMBDA_VAR_KEY = "lambda_var"    # meta flag on a reference to a lambda parameter
NULL_GUARD = "null_guard"        # exp.Lambda arg: see the module docstring
LAMBDA_FUNCTIONS = frozenset({"TRANSFORM", "FILTER", "REDUCE"})
_ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod)


def parameter_name(ident: exp.Identifier) -> str:
    """ksqlDB's name of a lambda parameter (upper-cased unless quoted)."""
    return str(ident.this) if ident.quoted else str(ident.this).upper()


def _type_text(ty: SqlType | None) -> str:
    return "null" if ty is None else ty.ksql_name


def _refused(name: str, parts: Sequence[str]) -> StatementError:
    return StatementError(f"Function '{registered_name(name)}' does not accept parameters ({', '.join(parts)}).")


def resolve_lambda_call(resolver: ExpressionResolver, name: str, args: list[exp.Expr], clause: str) -> exp.Expr:
    """A resolved, typed TRANSFORM / FILTER / REDUCE call (``exp.Anonymous`` with its lambdas)."""
    lambdas = [a for a in args if isinstance(a, exp.Lambda)]
    values = [resolver.resolve(a, clause) if not isinstance(a, exp.Lambda) else None for a in args]
    shown = [("LAMBDA" if v is None else _type_text(v.meta.get(TYPE_KEY))) for v in values]
    collection_ty = values[0].meta.get(TYPE_KEY) if values and values[0] is not None else None
    is_map = collection_ty is not None and collection_ty.base is BaseType.MAP
    is_array = collection_ty is not None and collection_ty.base is BaseType.ARRAY
    expected_lambdas = {"TRANSFORM": 2 if is_map else 1, "FILTER": 1, "REDUCE": 1}[name]
    first_lambda = 2 if name == "REDUCE" else 1
    shape_ok = (is_map or is_array) and len(args) == first_lambda + expected_lambdas and \
        all(isinstance(a, exp.Lambda) for a in args[first_lambda:]) and len(lambdas) == expected_lambdas
    if not shape_ok:
        raise _refused(name, shown)
    assert collection_ty is not None
    element_params: list[SqlType | None] = (
        [collection_ty.key, collection_ty.element] if is_map else [collection_ty.element])
    state_ty = values[1].meta.get(TYPE_KEY) if name == "REDUCE" and values[1] is not None else None
    param_types = ([state_ty] if name == "REDUCE" else []) + element_params
    resolved_lambdas: list[exp.Lambda] = []
    body_types: list[SqlType | None] = []
    for lam in lambdas:
        params = [p for p in lam.expressions if isinstance(p, exp.Identifier)]
        if len(params) != len(param_types):
            lambda_shown = f"LAMBDA ({', '.join(_type_text(p) for p in param_types)})"
            raise _refused(name, [*shown[:first_lambda], *([lambda_shown] * len(lambdas))])
        resolved = _resolve_lambda(resolver, lam, params, param_types, clause,
                                   state=parameter_name(params[0]) if name == "REDUCE" else None)
        resolved_lambdas.append(resolved)
        body_types.append(resolved.this.meta.get(TYPE_KEY))
    if name == "FILTER" and body_types[0] is not None and body_types[0].base is not BaseType.BOOLEAN:
        lambda_shown = f"LAMBDA ({', '.join(_type_text(p) for p in param_types)}) => {_type_text(body_types[0])}"
        raise _refused(name, [shown[0], lambda_shown])
    if name == "TRANSFORM":
        out_ty = t.map_of(body_types[0] or t.STRING, body_types[1] or t.STRING) if is_map else \
            t.array_of(body_types[0] or t.STRING)
    elif name == "FILTER":
        out_ty = collection_ty
    else:
        out_ty = state_ty or body_types[0] or t.STRING
    call_args: list[exp.Expr] = [v for v in values if v is not None]
    call_args.extend(resolved_lambdas)
    out = exp.Anonymous(this=name, expressions=call_args)
    out.meta[TYPE_KEY] = out_ty
    return out


def _resolve_lambda(resolver: ExpressionResolver, lam: exp.Lambda, params: list[exp.Identifier],
                    param_types: list[SqlType | None], clause: str, state: str | None) -> exp.Lambda:
    names = [parameter_name(p) for p in params]
    for n in names:
        if n in resolver.lambda_vars:
            raise StatementError("Reusing lambda arguments in nested lambda is not allowed")
        if any(info.column(n) is not None for info in resolver.scope.sources.values()):
            raise StatementError(f"Lambda function argument can't be a column name: {n}")
    outer = resolver.lambda_vars
    resolver.lambda_vars = {**outer, **dict(zip(names, param_types))}
    try:
        body = resolver.resolve(lam.this, clause)
    finally:
        resolver.lambda_vars = outer
    out = exp.Lambda(this=body, expressions=[exp.to_identifier(n, quoted=True) for n in names])
    guard = null_guard(body, state)
    if guard is not None:
        out.set(NULL_GUARD, guard)
    return out


def lambda_variable(name: str, ty: SqlType | None) -> exp.Expr:
    """A resolved reference to a lambda parameter."""
    node = exp.to_identifier(name, quoted=True)
    node.meta[TYPE_KEY] = ty
    node.meta[LAMBDA_VAR_KEY] = True
    return node


def _outside_lambdas(node: exp.Expr) -> Iterator[exp.Expr]:
    """``node`` and its descendants, not descending into nested lambdas."""
    yield node
    for child in node.iter_expressions():
        if isinstance(child, exp.Lambda):
            continue
        yield from _outside_lambdas(child)


def _mentions(node: exp.Expr, variable: str) -> bool:
    return any(isinstance(n, exp.Identifier) and n.meta.get(LAMBDA_VAR_KEY) and n.name == variable for n in node.walk())


def null_guard(body: exp.Expr, state: str | None) -> exp.Expr | None:
    """The body's failure condition (module docstring), or None when it cannot fail."""
    conditions: list[exp.Expr] = []
    for node in _outside_lambdas(body):
        ty = node.meta.get(TYPE_KEY)
        if not isinstance(node, _ARITHMETIC) or ty is None or not functions.is_numeric(ty):
            continue
        for operand in (node.this, node.expression):
            if isinstance(operand, (exp.Literal, exp.Neg)) and not any(True for _ in operand.find_all(exp.Identifier)):
                continue
            if state is not None and _mentions(operand, state):
                continue
            test = exp.Is(this=operand.copy(), expression=exp.Null())
            test.meta[TYPE_KEY] = t.BOOLEAN
            conditions.append(test)
    if not conditions:
        return None
    guard = conditions[0]
    for c in conditions[1:]:
        guard = exp.Or(this=guard, expression=c)
        guard.meta[TYPE_KEY] = t.BOOLEAN
    return guard
