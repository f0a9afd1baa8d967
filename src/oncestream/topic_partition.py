"""The broker's one ``(topic, partition)`` type, shared by both coordinators and the handlers.

The group coordinator, the transaction coordinator and the broker handlers used to define their
own identical classes, so a partition named by one could not be compared with, hashed with or
passed to the other (the transaction service converted between them). Now there is one: an
immutable, hashable, ordered value (sorted by topic, then partition) that can key dicts and sets.

Two other "topic partitions" stay separate on purpose:

* ``oncestream.client.TopicPartition`` is the client's *public* class, shaped like
  confluent-kafka's: mutable, with ``offset``, ``metadata``, ``leader_epoch`` and ``error``
  fields and partition -1 meaning "unassigned". Users hold and mutate it; making it the broker's
  key type would let a caller change a dict key under the coordinator.
* ``oncestream.spark.log_client.TopicPartition`` is a plain ``tuple[str, int]`` alias, what Spark
  offsets and Arrow batches carry; this class does not compare equal to a tuple, and Spark code
  has no reason to import broker types.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True, slots=True)
class TopicPartition:
    """A topic name and a partition index."""

    topic: str
    partition: int
