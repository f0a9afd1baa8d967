"""ksqlDB queries compiled into Spark Structured Streaming plans (docs/sql-on-spark.md).

- ``plan``           ``compile_query(spark, query, analyzed, settings) -> CompiledQuery``: the whole
                     plan (projection, aggregation, windows, HAVING, table changelogs) and its
                     ``records(layout)`` (key/value for the sink) and ``rows()`` (push queries).
- ``sources``        one source read through ``format("oncestream")`` and deserialized, with
                     ROWTIME/ROWPARTITION/ROWOFFSET.
- ``joins``          stream-stream (time-bounded Spark join) and stream-table (state store) joins.
- ``table_aggregation`` GROUP BY over a TABLE: retract/add through two ``transformWithState``
                     operators (``table_state``: the processors; ``table_udafs``: ksqlDB's
                     undoable aggregates and the per-key steps, pure Python).
- ``having_gate``    HAVING after an update-mode stream aggregation: a failing result is a
                     tombstone only over a key whose last written result passed (one flag of
                     state per key, ``transformWithState``).
- ``table_joins``    table-table joins on the primary keys (state store); their per-key rules in
                     ``table_join_steps`` (plain Python).
- ``expressions``    ksqlDB expressions (sqlglot trees) to Spark SQL, with the function catalog.
- ``null_values``    ksqlDB's rules for a stream's records whose value is null (module docstring).
- ``serde_columns``  the Spark column form of ``oncestream.sql.engine.serde``'s formats.
- ``update_sink``    exactly-once writes of update-mode results through ``foreachBatch``.
"""
