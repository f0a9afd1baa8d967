"""A stream's records whose value is null, through a compiled query, as ksqlDB treats them.

A record of a STREAM whose value is null (a Kafka tombstone in form; in a stream it deletes
nothing) reaches the query as ksqlDB's null row (``SourceBuilder``'s ``AddKeyAndPseudoColumns``
forwards it unchanged). What each operator does with it, from ksqlDB's processors:

- projection (``SELECT *`` or any SELECT list, CSAS and INSERT INTO): written through, with a null
  value (``SelectValueMapper`` maps a null row to null) and the record's key and timestamp;
- ``WHERE``: dropped, whatever the condition (``SqlPredicate`` gives no row for a null value, so
  ``WHERE x IS NULL`` does not keep it);
- ``PARTITION BY``: written through with a null value; each new key column is its expression
  evaluated on the record's key when the expression reads key columns only (or none: a literal),
  else null (``PartitionByParamsFactory`` evaluates it on the null row, which fails and is logged
  as null), so ``PARTITION BY K + 2`` gives ``K + 2`` while ``PARTITION BY NAME IS NULL`` or
  ``PARTITION BY ROWTIME`` give null;
- table functions (``EXPLODE``...): dropped (``KudtfFlatMapper`` returns no rows);
- aggregations (GROUP BY, with or without a window): ignored (``StreamGroupByBuilderBase`` filters
  null values out before grouping; a GROUP BY on the key alike: Kafka Streams' aggregate skips
  them);
- stream-stream and stream-table joins: dropped (Kafka Streams' join processors skip a record
  whose value is null);
- push queries (``SELECT ... EMIT CHANGES``): not shown (``TransientQuerySinkProcessor`` drops a
  stream's null values).

A table's null-valued record is a tombstone that deletes its key; tables are not this module's.
This module holds the one rule the plan cannot express with a filter: which output key columns
are computed for a null-valued record (``key_only``).
"""

from __future__ import annotations

from collections.abc import Collection

from sqlglot import exp

from oncestream.sql.engine.compile.expressions import Scope


def key_only(expression: exp.Expr, scope: Scope, key_columns: Collection[str]) -> bool:
    """Whether ``expression`` reads no column but the source's key columns (``key_columns``,
    the frame's names for them under ``scope``): such a key expression is evaluated for a
    null-valued record, any other gives null. A pseudo column (ROWTIME, ROWPARTITION...) is
    carried in ksqlDB's value, so it counts as a value column. A name no source has (a lambda's
    variable) reads nothing from the record."""
    for node in expression.find_all(exp.Column):
        resolved = scope.resolve(node.name, node.table or None)
        if resolved is not None and resolved not in key_columns:
            return False
    return True
