"""Does the cluster let this SQL server's queries write exactly once? Asked of the broker itself.

Every persistent query writes through the connector's exactly-once sink, which needs KIP-939
two-phase commit: ``InitProducerId`` with ``enable2Pc``. A Kafka broker grants that only with
``transaction.two.phase.commit.enable=true`` (and, with ACLs, the principal's TWO_PHASE_COMMIT
permission on the transactional id); otherwise it answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
A broker without InitProducerId v6 cannot grant it at all.

``two_phase_commit_refusal`` makes exactly that request, the one the sink's tasks make, under a
transactional id of the service's own (no transaction is ever begun under it), and returns why the
broker refused, in words naming the setting to change, or None when it granted it. Any other
failure (broker unreachable, timed out) proves nothing either way: it is raised, and the caller
decides. The server asks at start (and says so loudly, server_main) and again before each
persistent query starts (the query is shown ERROR at once instead of RUNNING without writing).
"""

from __future__ import annotations

from collections.abc import Mapping

from kio.schema.errors import ErrorCode

from oncestream.client import KafkaError, KafkaException, Producer

BROKER_SETTING = "transaction.two.phase.commit.enable=true"
PROBE_TIMEOUT_S = 15.0

# The broker's refusal, and the client's "this broker has no InitProducerId v6".
_REFUSALS = (int(ErrorCode.transactional_id_authorization_failed), KafkaError._UNSUPPORTED_FEATURE)


class TwoPhaseCommitRefused(Exception):
    """The broker refused KIP-939 two-phase commit: persistent queries cannot write."""


def probe_transactional_id(service_id: str) -> str:
    """The transactional id the check uses: one per service (the nodes of a service share it; a
    check only initializes it, so one node's check fencing another's is harmless)."""
    return f"oncestream-sql-{service_id}-two-phase-commit-check"


def refusal_text(bootstrap_servers: str, cause: str) -> str:
    """What the operator reads: who refused, why, and the broker setting that fixes it."""
    return (f"the broker at {bootstrap_servers} refuses KIP-939 two-phase commit, which every persistent "
            f"query's exactly-once sink needs ({cause}); start the broker with {BROKER_SETTING} "
            "(with ACLs, also grant this server's principal TWO_PHASE_COMMIT on its transactional ids)")


def two_phase_commit_refusal(bootstrap_servers: str, client_properties: Mapping[str, str], service_id: str,
                             timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """None when the broker grants two-phase commit to this server; else the refusal in words.

    Raises ``KafkaException`` when the broker could not be asked (unreachable, timed out)."""
    producer = Producer({
        **dict(client_properties),
        "bootstrap.servers": bootstrap_servers,
        "transactional.id": probe_transactional_id(service_id),
        "transaction.two.phase.commit.enable": True,
        "enable.idempotence": True,
        "acks": "all",
    })
    try:
        producer.init_transactions(timeout_s)
    except KafkaException as exc:
        error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        if error is not None and error.code() in _REFUSALS:
            return refusal_text(bootstrap_servers, f"{error.name()}: {error.str()}")
        raise
    finally:
        producer.close(5)
    return None
