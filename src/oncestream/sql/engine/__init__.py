"""Running analyzed queries.

- ``interface``      what the REST layer calls (``SqlEngine``) and what queries hand back
                     (``QueryStream``, ``ColumnHeader``).
- ``serde``          the record formats (JSON, DELIMITED, KAFKA, windowed keys) in Python.
- ``compile/``       queries compiled to Spark Structured Streaming plans.
- ``runtime``        the SparkSession and the persistent and push queries running on it.
- ``pull/``          tables materialized into state stores and pull queries answered from them.
- ``insert_values``  the record an ``INSERT ... VALUES`` writes.
"""
