"""Prometheus metrics shared by the broker and the SQL server: the ``/metrics`` endpoint
(``endpoint.py``). What each process exports lives with it (``broker/metrics/``,
``sql/server/metrics.py``)."""
