"""KIP-714 client metrics on the broker: ClientMetrics subscriptions (``subscriptions``), the
per-client-instance state and push rules (``manager``), OTLP decoding (``otlp``) and the received
values on ``/metrics`` (``exported``)."""
