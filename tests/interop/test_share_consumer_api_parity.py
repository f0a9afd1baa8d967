"""oncestream's ShareConsumer answers wrong and edge-case calls as confluent-kafka's does.

Both consumers get the same calls (no broker needed: the bootstrap address has no listener); what
each returns, or the name of the exception it raises, must be the same. Messages differ and are
not compared."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import confluent_kafka
import pytest

import oncestream.client
from tests.support.ports import free_tcp_port

pytestmark = pytest.mark.interop

Step = tuple[str, Callable[[Any], Any]]

IMPLICIT: list[Step] = [
    ("poll before subscribe", lambda c: c.poll(0.1)),
    ("subscription before subscribe", lambda c: c.subscription()),
    ("subscribe to a string", lambda c: c.subscribe("t")),
    ("subscribe to a name twice", lambda c: c.subscribe(["t", "t"])),
    ("subscribe to an empty name", lambda c: c.subscribe([""])),
    ("commit_sync with nothing pending", lambda c: c.commit_sync(1)),
    ("commit_async with nothing pending", lambda c: c.commit_async()),
    ("commit_sync with a string timeout", lambda c: c.commit_sync("x")),
    ("acknowledge_offset in implicit mode", lambda c: c.acknowledge_offset("t", 0, 5)),
    ("acknowledge_offset of a bad type in implicit mode", lambda c: c.acknowledge_offset("t", 0, 5, 9)),
    ("acknowledge_offset of a negative partition", lambda c: c.acknowledge_offset("t", -1, 5)),
    ("acknowledge a string", lambda c: c.acknowledge("x")),
    ("subscribe", lambda c: c.subscribe(["t"])),
    ("subscription", lambda c: c.subscription()),
    ("subscribe to nothing", lambda c: c.subscribe([])),
    ("subscription after subscribing to nothing", lambda c: c.subscription()),
    ("a callback that is not callable", lambda c: c.set_acknowledgement_commit_callback(5)),
    ("close", lambda c: c.close()),
    ("close again", lambda c: c.close()),
    ("poll after close", lambda c: c.poll(0.1)),
]

EXPLICIT: list[Step] = [
    ("acknowledge_offset of a record never delivered", lambda c: c.acknowledge_offset("t", 0, 5)),
    ("acknowledge_offset of type 9", lambda c: c.acknowledge_offset("t", 0, 5, 9)),
    ("acknowledge_offset of type GAP", lambda c: c.acknowledge_offset("t", 0, 5, 0)),
    ("acknowledge_offset of type RENEW", lambda c: c.acknowledge_offset("t", 0, 5, 4)),
    ("close", lambda c: c.close()),
]


def _outcome(step: Callable[[Any], Any], consumer: Any) -> str:
    try:
        return f"returns {step(consumer)!r}"
    except Exception as exc:  # noqa: BLE001 - any exception: its class name is what is compared
        return f"raises {type(exc).__name__}"


def _run(make: Callable[[dict[str, Any]], Any], conf: dict[str, Any], steps: list[Step]) -> list[str]:
    consumer = make(conf)
    return [f"{name}: {_outcome(step, consumer)}" for name, step in steps]


@pytest.mark.parametrize(("mode", "steps"), [("implicit", IMPLICIT), ("explicit", EXPLICIT)])
def test_same_answers_as_confluent_kafka(mode: str, steps: list[Step]) -> None:
    conf = {"bootstrap.servers": f"127.0.0.1:{free_tcp_port()}", "group.id": "parity",
            "share.acknowledgement.mode": mode}
    theirs = _run(confluent_kafka.ShareConsumer, conf, steps)
    ours = _run(oncestream.client.ShareConsumer, conf, steps)
    assert ours == theirs


def test_missing_group_id_is_refused_alike() -> None:
    conf = {"bootstrap.servers": f"127.0.0.1:{free_tcp_port()}"}
    outcomes = []
    for make in (confluent_kafka.ShareConsumer, oncestream.client.ShareConsumer):
        with pytest.raises(ValueError, match=r"group\.id") as caught:
            make(conf)
        outcomes.append(type(caught.value).__name__)
    assert outcomes[0] == outcomes[1]
