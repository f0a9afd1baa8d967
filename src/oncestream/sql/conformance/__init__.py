"""``oncestream sql-conformance``: ksqlDB's query-validation tests (QTT) run through this SQL engine.

The case files stay in the user's ksqlDB checkout (the path is given on the command line; nothing
of them is shipped here). ``qtt_format`` reads them (sans-io), ``scope`` says which cases are out
of scope and why, ``records`` writes inputs and reads outputs as the formats' bytes,
``case_runner`` runs one case on Spark against a real broker, ``report`` counts and prints, and
``command`` is the CLI entry. docs/sql-conformance.md keeps the latest totals.
"""
