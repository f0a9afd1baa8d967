"""Finding a group's or a transactional id's coordinator the way Kafka's clients do.

Raw-wire tests that talk about a group or a transaction must talk to its coordinator: on one
broker that is the broker itself, on a cluster the owner of the key's coordinator-partition lease
(the others answer NOT_COORDINATOR, as Kafka's brokers do). ``find_coordinator`` asks the first
broker of ``bootstrap`` (FindCoordinator), retrying while the coordinator is not known yet.
"""

from __future__ import annotations

import time

from kio.schema.errors import ErrorCode

from oncestream.client.common.connection import BrokerConnection, parse_bootstrap
from oncestream.protocol.api_keys import FIND_COORDINATOR

GROUP_KEY = 0
TRANSACTION_KEY = 1
FIND_TIMEOUT_S = 60.0  # a bound on a hang only: a cluster assigns every lease within its session timeout
_RETRIABLE = (ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress)


class CoordinatorNotFoundError(Exception):
    """FindCoordinator answered an error that is not retriable, or kept answering a retriable one."""


def find_coordinator(bootstrap: str, key: str, key_type: int = GROUP_KEY,
                     client_id: str = "coordinator-tests") -> tuple[str, int]:
    """``(host, port)`` of the coordinator of ``key`` (a group id, or with ``TRANSACTION_KEY`` a
    transactional id); ``client_id``: a principal that may describe ``key`` where ACLs apply (the
    ACL suites' principal builder reads it, tests/support/principals.py)."""
    host, port = parse_bootstrap(bootstrap)
    deadline = time.monotonic() + FIND_TIMEOUT_S
    with BrokerConnection(host, port, client_id=client_id, timeout_s=30.0) as conn:
        while True:
            answer = conn.call(FIND_COORDINATOR, lambda m: m.FindCoordinatorRequest(
                key_type=key_type, coordinator_keys=(key,)))
            (found,) = answer.coordinators
            if found.error_code == ErrorCode.none:
                return found.host, found.port
            if found.error_code not in _RETRIABLE or time.monotonic() > deadline:
                raise CoordinatorNotFoundError(f"FindCoordinator for {key!r} (key type {key_type}): "
                                               f"{found.error_code.name}")
            time.sleep(0.1)
