"""Which records a share consumer holds and what it will tell the broker about them (KIP-932).

Sans-io: no sockets, no clock. ``ShareConsumer`` (share_consumer.py) feeds it what a ShareFetch
acquired, what ``poll`` handed out and what the application acknowledged; it answers with the
acknowledgements to piggy-back on the next ShareFetch or to send in a ShareAcknowledge, encoded as
Kafka's acknowledgement batches (``ack_batches``).

One record's life, per (topic, partition, offset)::

    state         event                                   next state
    -----------   -------------------------------------   -------------------------------------
    (absent)      acquired by a ShareFetch                BUFFERED
    (absent)      acquired offset with no record (gap)    READY(GAP)
    BUFFERED      handed out by poll                      DELIVERED
    BUFFERED      released (close, unsubscribe, revoke)   READY(RELEASE)
    DELIVERED     acknowledge(type)  [explicit mode]      ACKED(type)
    DELIVERED     next poll          [implicit mode]      READY(ACCEPT)
    DELIVERED     commit, close      [implicit mode]      COMMITTING(ACCEPT)
    DELIVERED     released (close, unsubscribe)           READY(RELEASE)
    ACKED(t)      acknowledge(type)  [explicit mode]      ACKED(type)  (changed before it is sent)
    ACKED(t)      next poll                               READY(t)
    ACKED(t)      commit, close                           COMMITTING(t)
    READY(t)      taken for a ShareFetch or ShareAck.     SENDING
    COMMITTING(t) taken for a ShareAcknowledge            SENDING
    SENDING       response (any outcome)                  (absent); the outcome is reported

The three waiting states say which request carries the acknowledgement: an application's
acknowledgement leaves with the next poll (READY: piggy-backed on a ShareFetch) or in the commit
that submitted it (COMMITTING: a ShareAcknowledge, whose answer ``commit_sync`` returns), never
with a ShareFetch the client sends on its own in between (confluent-kafka's and Kafka's contract).
A record acknowledged once it is READY, COMMITTING or SENDING, or no longer held, is an error
(``NotInFlightError``), as in librdkafka ("the message is no longer in-flight"). A failed
acknowledgement is not retried with a new session: the broker redelivers the record when its
acquisition lock expires (Kafka's ShareConsumeRequestManager does the same). When the share
session that acquired records is lost, every record of its partitions is forgotten (``forget``):
the broker has released them or will, and an acknowledgement sent in a later session could
land on a new acquisition of the same offset.

The acknowledgement commit callback hears about the records the application received (what it
acknowledged, what poll's implicit ACCEPT or close's RELEASE covered), never about a BUFFERED
record the consumer gives back on its own (``release``: partitions no longer assigned, a rejoin
after the group forgot the member, close). Such a RELEASE often rides on the ShareFetch that
acquires the same offset again: reported as a completed acknowledgement, it would tell the
application a record was acknowledged just before handing it that record (``reportable``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

TP = tuple[str, int]

# Acknowledge types on the wire (ShareFetch/ShareAcknowledge AcknowledgementBatch.AcknowledgeTypes).
ACK_GAP = 0
ACK_ACCEPT = 1
ACK_RELEASE = 2
ACK_REJECT = 3


class AcknowledgeType(enum.IntEnum):
    """How the broker treats an acknowledged record (confluent-kafka's ``AcknowledgeType``)."""

    #: Processed: never delivered again.
    ACCEPT = ACK_ACCEPT
    #: Not processed: give it back for another delivery attempt.
    RELEASE = ACK_RELEASE
    #: Cannot be processed: never delivered again (archived).
    REJECT = ACK_REJECT


class RecordState(enum.Enum):
    """Where a held record is in the table of the module docstring."""

    BUFFERED = "buffered"
    DELIVERED = "delivered"
    ACKED = "acked"
    READY = "ready"
    COMMITTING = "committing"
    SENDING = "sending"


class NotInFlightError(Exception):
    """An acknowledgement for a record this consumer does not hold (never acquired, already sent)."""


@dataclass(frozen=True, slots=True)
class AckBatch:
    """One AcknowledgementBatch: offsets first..last inclusive, one type for all of them or one
    per offset (Kafka's encoding)."""

    first_offset: int
    last_offset: int
    types: tuple[int, ...]


def ack_batches(acks: Mapping[int, int]) -> list[AckBatch]:
    """Offset -> acknowledge type as Kafka's acknowledgement batches: one batch per run of
    consecutive offsets, carrying a single type when the whole run shares it (as Kafka's
    ``Acknowledgements.getAcknowledgementBatches`` does)."""
    out: list[AckBatch] = []
    run: list[tuple[int, int]] = []
    for offset in sorted(acks):
        if run and offset != run[-1][0] + 1:
            out.append(_batch(run))
            run = []
        run.append((offset, acks[offset]))
    if run:
        out.append(_batch(run))
    return out


def _batch(run: list[tuple[int, int]]) -> AckBatch:
    types = tuple(t for _, t in run)
    if len(set(types)) == 1:
        types = types[:1]
    return AckBatch(run[0][0], run[-1][0], types)


class AckOutcome:
    """What a response said about acknowledgements sent for some partitions: per partition the
    offsets sent and the error code (0: applied)."""

    __slots__ = ("errors", "offsets")

    def __init__(self) -> None:
        self.offsets: dict[TP, set[int]] = {}
        self.errors: dict[TP, int] = {}


class InFlightRecords:
    """The records one share consumer holds, per partition (see the module's state table)."""

    def __init__(self) -> None:
        self._state: dict[TP, dict[int, RecordState]] = {}
        self._type: dict[TP, dict[int, int]] = {}  # ack type of ACKED and SENDING records
        self._delivered: list[tuple[TP, int]] = []  # handed out by the last poll, in order
        # Offsets given back (RELEASE) before poll handed them out: acknowledged to the broker, not
        # reported to the application, which never had them (until that RELEASE is answered).
        self._unseen: dict[TP, set[int]] = {}

    # --- arrivals -----------------------------------------------------------------------------

    def acquired(self, tp: TP, offsets: Iterable[int], gaps: Iterable[int] = ()) -> None:
        """A ShareFetch acquired ``offsets`` (records to hand out) and ``gaps`` (acquired offsets
        with no record to hand out: control records, compacted away; acknowledged as GAP)."""
        states = self._state.setdefault(tp, {})
        types = self._type.setdefault(tp, {})
        unseen = self._unseen.get(tp, set())
        for offset in offsets:
            if states.get(offset) is not RecordState.SENDING:
                unseen.discard(offset)  # a RELEASE never sent (its lock expired): nothing to hide
            states[offset] = RecordState.BUFFERED
            types.pop(offset, None)
        for offset in gaps:
            states[offset] = RecordState.READY
            types[offset] = ACK_GAP

    def handed_out(self, tp: TP, offset: int) -> None:
        """``poll`` returned this record to the application."""
        states = self._state.get(tp)
        if states is None or states.get(offset) is not RecordState.BUFFERED:
            raise NotInFlightError(f"{tp[0]}[{tp[1]}]@{offset} is not buffered")
        states[offset] = RecordState.DELIVERED
        self._delivered.append((tp, offset))

    # --- acknowledging ------------------------------------------------------------------------

    def acknowledge(self, tp: TP, offset: int, ack_type: int) -> None:
        """The application's acknowledgement (explicit mode): DELIVERED or ACKED -> ACKED(type)."""
        if ack_type not in (ACK_ACCEPT, ACK_RELEASE, ACK_REJECT):
            raise ValueError(f"acknowledge type {ack_type} is not ACCEPT (1), RELEASE (2) or REJECT (3)")
        states = self._state.get(tp)
        state = states.get(offset) if states is not None else None
        if states is not None and state is RecordState.READY and self._type[tp][offset] == ACK_GAP:
            raise NotInFlightError(f"{tp[0]}[{tp[1]}]@{offset} is a gap, not a record")
        if states is None or state not in (RecordState.DELIVERED, RecordState.ACKED):
            raise NotInFlightError(f"{tp[0]}[{tp[1]}]@{offset} is not in flight (never delivered or already committed)")
        states[offset] = RecordState.ACKED
        self._type[tp][offset] = ack_type

    def accept_delivered(self, *, commit: bool = False) -> None:
        """Implicit mode: every record the last poll handed out and the application did not
        acknowledge otherwise is ACCEPTed (for a commit's ShareAcknowledge when ``commit``)."""
        target = RecordState.COMMITTING if commit else RecordState.READY
        for tp, offset in self._delivered:
            states = self._state.get(tp)
            if states is not None and states.get(offset) is RecordState.DELIVERED:
                states[offset] = target
                self._type[tp][offset] = ACK_ACCEPT
        self._delivered = []

    def unacknowledged_delivered(self) -> list[tuple[TP, int]]:
        """Records the last poll handed out that are still waiting for an acknowledgement."""
        return [(tp, o) for tp, o in self._delivered
                if self._state.get(tp, {}).get(o) is RecordState.DELIVERED]

    def release(self, tps: Iterable[TP] | None = None, *, delivered: bool = True) -> None:
        """RELEASE every BUFFERED record (and DELIVERED ones when ``delivered``) of ``tps``
        (None: all partitions): the consumer gives them back (close, unsubscribe, partitions
        no longer assigned)."""
        wanted = set(self._state) if tps is None else set(tps)
        releasable = (RecordState.BUFFERED, RecordState.DELIVERED) if delivered else (RecordState.BUFFERED,)
        for tp in wanted:
            states = self._state.get(tp, {})
            for offset, state in states.items():
                if state in releasable:
                    if state is RecordState.BUFFERED:
                        self._unseen.setdefault(tp, set()).add(offset)
                    states[offset] = RecordState.READY
                    self._type[tp][offset] = ACK_RELEASE

    def submit(self, *, commit: bool = False) -> None:
        """The application's acknowledgements leave: with the next ShareFetch (poll: ACKED ->
        READY) or in a commit's ShareAcknowledge (``commit``: ACKED -> COMMITTING)."""
        target = RecordState.COMMITTING if commit else RecordState.READY
        for states in self._state.values():
            for offset, state in states.items():
                if state is RecordState.ACKED:
                    states[offset] = target

    # --- sending ------------------------------------------------------------------------------

    def take_acks(self, tps: Iterable[TP] | None = None, *, commit: bool = False) -> dict[TP, dict[int, int]]:
        """READY (and COMMITTING when ``commit``) -> SENDING for ``tps`` (None: all); returns
        offset -> type per partition."""
        wanted = (RecordState.READY, RecordState.COMMITTING) if commit else (RecordState.READY,)
        out: dict[TP, dict[int, int]] = {}
        for tp in (list(self._state) if tps is None else tps):
            states = self._state.get(tp)
            if not states:
                continue
            types = self._type[tp]
            taken = {o: types[o] for o, s in states.items() if s in wanted}
            if taken:
                for offset in taken:
                    states[offset] = RecordState.SENDING
                out[tp] = taken
        return out

    def reportable(self, sent: Mapping[TP, Mapping[int, int]]) -> dict[TP, set[int]]:
        """The offsets of ``sent`` whose outcome the application hears about: all but the
        records given back before it received them (see the module docstring). Ask before
        ``finished``."""
        out: dict[TP, set[int]] = {}
        for tp, offsets in sent.items():
            shown = set(offsets) - self._unseen.get(tp, set())
            if shown:
                out[tp] = shown
        return out

    def finished(self, sent: Mapping[TP, Mapping[int, int]]) -> None:
        """The request carrying ``sent`` was answered (or failed): SENDING -> absent. The caller
        reports the outcome; a failed acknowledgement is left to the lock's expiry."""
        for tp, offsets in sent.items():
            unseen = self._unseen.get(tp)
            if unseen is not None:
                unseen.difference_update(offsets)
                if not unseen:
                    del self._unseen[tp]
            states = self._state.get(tp)
            if states is None:
                continue
            types = self._type[tp]
            for offset in offsets:
                if states.get(offset) is RecordState.SENDING:
                    del states[offset]
                    types.pop(offset, None)
            if not states:
                del self._state[tp]
                del self._type[tp]

    def handed_out_offsets(self, tps: Iterable[TP]) -> dict[TP, set[int]]:
        """Records of ``tps`` the application has or had (handed out, not yet sent): what a lost
        share session takes from it before they are forgotten."""
        out: dict[TP, set[int]] = {}
        held = (RecordState.DELIVERED, RecordState.ACKED, RecordState.READY, RecordState.COMMITTING)
        for tp in tps:
            types = self._type.get(tp, {})
            offsets = {o for o, s in self._state.get(tp, {}).items() if s in held and types.get(o) != ACK_GAP}
            if offsets:
                out[tp] = offsets
        return out

    def forget(self, tps: Iterable[TP]) -> None:
        """Drop every record of ``tps`` (their share session is gone: the broker will not accept
        acknowledgements for them any more; their locks expire and they are redelivered)."""
        tps = list(tps)
        for tp in tps:
            self._state.pop(tp, None)
            self._type.pop(tp, None)
            self._unseen.pop(tp, None)
        gone = set(tps)
        self._delivered = [(tp, o) for tp, o in self._delivered if tp not in gone]

    # --- questions ----------------------------------------------------------------------------

    def state(self, tp: TP, offset: int) -> RecordState | None:
        """The record's state (None: not held)."""
        return self._state.get(tp, {}).get(offset)

    def has_acks(self, tps: Iterable[TP] | None = None, *, commit: bool = False) -> bool:
        """Whether some READY (or, when ``commit``, COMMITTING) record waits to be sent."""
        wanted = (RecordState.READY, RecordState.COMMITTING) if commit else (RecordState.READY,)
        for tp in (list(self._state) if tps is None else tps):
            if any(s in wanted for s in self._state.get(tp, {}).values()):
                return True
        return False

    def partitions(self) -> list[TP]:
        """Partitions with held records."""
        return list(self._state)

    def held(self) -> int:
        """Number of records held in any state."""
        return sum(len(s) for s in self._state.values())
