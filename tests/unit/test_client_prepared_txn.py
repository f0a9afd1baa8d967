"""KIP-939 PreparedTxnState: ``"<producerId>:<epoch>"`` round trip, the empty state, validation
(the same rules as Kafka's PreparedTxnState(String))."""

from __future__ import annotations

import pytest

from oncestream.client import PreparedTxnState


def test_round_trip_through_its_string() -> None:
    state = PreparedTxnState(4711, 3)
    text = str(state)
    assert text == "4711:3"
    back = PreparedTxnState.from_string(text)
    assert back == state
    assert hash(back) == hash(state)
    assert back.producer_id == 4711
    assert back.epoch == 3
    assert back.has_transaction()


def test_empty_state_serializes_to_empty_string() -> None:
    empty = PreparedTxnState()
    assert str(empty) == ""
    assert not empty.has_transaction()
    assert not empty
    assert PreparedTxnState.from_string("") == empty
    assert PreparedTxnState.from_string(None) == empty
    assert empty != PreparedTxnState(0, 0)


@pytest.mark.parametrize("bad", ["1", "1:2:3", "a:b", "-1:0", "3:-2", " : "])
def test_malformed_strings_are_rejected(bad: str) -> None:
    with pytest.raises(ValueError, match=r"^invalid (serialized transaction state|producer id and epoch) "):
        PreparedTxnState.from_string(bad)


def test_different_epoch_is_a_different_state() -> None:
    """complete_transaction commits only on an exact match: same id, other epoch is stale."""
    assert PreparedTxnState(7, 1) != PreparedTxnState(7, 2)
    assert PreparedTxnState(7, 1) != PreparedTxnState(8, 1)
