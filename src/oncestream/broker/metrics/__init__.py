"""The broker's Prometheus metrics (docs/metrics.md): ``recorder.py`` counts on the hot path
(bytes and messages per topic, requests, latencies, errors, connections, flushes),
``collector.py`` reads the broker's state at scrape time (logs, transactions, groups, memory pool).
Kafka's JMX names, as the Prometheus JMX exporter's example Kafka rules map them, are in
``names.py``."""
