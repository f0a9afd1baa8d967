"""The interfaces a broker is built with instead of reading test switches from its properties.

Production passes none of them and gets the shipped behaviour; a caller that builds the broker
through its Python entry (``BrokerState``, ``server.run_broker``) may pass its own, as trio's
MockClock or Kafka's ``MockTime`` are passed in. Tests do exactly that from the test tree (e.g.
tests/support/broker_with_faults.py), so no shipped code reads a fault or identity switch.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from oncestream.broker.internal_topic import InternalAppender
from oncestream.broker.principal import KafkaPrincipalBuilder
from oncestream.broker.tls_pump import BytePumpFactory
from oncestream.broker.txn_service import TxnStepObserver
from oncestream.log.flush_job import FdatasyncFn
from oncestream.remote.object_store import ObjectStore

# A loop run beside the broker's own: started with it, cancelled and awaited when it stops.
BackgroundLoop = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class BrokerSeams:
    """Injected interfaces; ``None`` means the shipped one."""

    # Who a connection is; None: the class ``principal.builder.class`` names (broker/principal.py).
    principal_builder: KafkaPrincipalBuilder | None = None
    # Told each step of a committing transaction (txn_service.TXN_STEPS); None: nobody is told.
    txn_steps: TxnStepObserver | None = None
    # Appends coordinator records to __consumer_offsets / __transaction_state; None: the log's.
    internal_appender: InternalAppender | None = None
    # Replaces os.fdatasync on the disk threads (tests stall or fail the disk); None: os's.
    fdatasync: FdatasyncFn | None = None
    # Loops started beside the broker's own (cleaner, timers, housekeeping) and stopped like them.
    background_loops: tuple[BackgroundLoop, ...] = ()
    # The tiered storage's object store (tests wrap one to fail or stall it); None: the one
    # ``rsm.config.storage.uri`` names, configured from the environment (remote/object_store.py).
    object_store: ObjectStore | None = None
    # Moves each TLS connection's bytes after its handshake; None: tls_pump.default_byte_pump()
    # (the C pump when built and usable, else the Python one).
    tls_byte_pump: BytePumpFactory | None = None
