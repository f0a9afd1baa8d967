"""oncestream: a Kafka-protocol streaming platform built around exactly-once."""

from oncestream.protocol.kio_loading import load_kio

__version__ = "0.1.0"

# Before any module imports kio (oncestream.errors does, first of all): keeps hypothesis out of
# every process's start-up, whatever is imported first (see oncestream/protocol/kio_loading.py).
load_kio()
