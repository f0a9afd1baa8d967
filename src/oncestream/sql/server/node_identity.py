"""A SQL-server node's identity across restarts: the ``group.instance.id`` it joins the
query-assignment group with (KIP-345 static membership, ``oncestream.sql.server.assignment``).

It must be stable (the same node restarted gets the same id, so it takes its slot back without
waiting for its old session to time out) and unique within the service (two live nodes with one
id fence each other). The REST URL is neither when it is bound to port 0, and the service id is
shared by every node; what belongs to exactly one node and survives its restarts is its state
directory. So the id is a random one created the first time a node starts on a state directory
and kept there (``node.id``, written whole by rename), unless the operator names it
(``ksql.query.assignment.instance.id``; empty: no static membership, the node joins as a
dynamic member as before).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from pathlib import Path

INSTANCE_ID_PROPERTY = "ksql.query.assignment.instance.id"
NODE_ID_FILE = "node.id"
_MAX_ID_CHARS = 249   # what Kafka accepts for a group.instance.id (Topic.validate's legal chars and length)
_LEGAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


class NodeIdentityError(ValueError):
    """A configured or stored node id Kafka would refuse as a group.instance.id."""


def _check(instance_id: str, where: str) -> str:
    if not instance_id or len(instance_id) > _MAX_ID_CHARS or not set(instance_id) <= _LEGAL:
        raise NodeIdentityError(f"{where}: {instance_id!r} is not a valid group.instance.id "
                                f"(1 to {_MAX_ID_CHARS} of [a-zA-Z0-9._-])")
    return instance_id


def node_instance_id(properties: Mapping[str, str], state_dir: Path) -> str | None:
    """The node's ``group.instance.id``: the configured one, else the one kept in ``state_dir``
    (created on first use); None when configured empty (dynamic membership)."""
    configured = properties.get(INSTANCE_ID_PROPERTY)
    if configured is not None:
        configured = configured.strip()
        return _check(configured, INSTANCE_ID_PROPERTY) if configured else None
    path = state_dir / NODE_ID_FILE
    if path.exists():
        return _check(path.read_text().strip(), str(path))
    created = f"node-{uuid.uuid4().hex}"
    temp = path.with_name(f"{NODE_ID_FILE}.{os.getpid()}.tmp")
    temp.write_text(created + "\n")
    os.replace(temp, path)
    return created
