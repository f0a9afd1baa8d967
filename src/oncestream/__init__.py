"""oncestream: a Kafka-protocol streaming platform built around exactly-once."""

__version__ = "0.1.0"
