"""Server-side assignors of consumer groups (KIP-848): ``uniform`` (the default) and ``range``.

An assignor computes the group's *target* assignment from the members' subscriptions (resolved to
topic ids) and the subscribed topics' partition counts; reconciliation.py then moves each member
towards it. Both are deterministic (same input, same output) so a target recomputed after a
restart does not move partitions for nothing.

* ``uniform``: every partition of a subscribed topic goes to one member subscribed to it, the
  counts of members that could take a partition differ by at most one, and a partition stays with
  its current target owner whenever the balance allows (sticky).
* ``range``: per topic, the members subscribed to it (in member id order) take contiguous ranges,
  the first ``partitions % members`` one partition more (Kafka's RangeAssignor).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from oncestream.coordinator.group.consumer.records import Assignment, freeze
from oncestream.errors import InvalidConfigError

UNIFORM = "uniform"
RANGE = "range"


@dataclass(frozen=True)
class MemberSpec:
    """What an assignor knows of one member."""

    subscribed_topic_ids: frozenset[uuid.UUID]
    current_target: Assignment


class Assignor(Protocol):
    """A server-side assignor: member id -> its target partitions."""

    name: str

    def assign(
        self, members: Mapping[str, MemberSpec], partitions_per_topic: Mapping[uuid.UUID, int]
    ) -> dict[str, dict[uuid.UUID, frozenset[int]]]: ...


class UniformAssignor:
    """Balanced and sticky (see the module docstring)."""

    name = UNIFORM

    def assign(
        self, members: Mapping[str, MemberSpec], partitions_per_topic: Mapping[uuid.UUID, int]
    ) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
        ids = sorted(members)
        owner: dict[tuple[uuid.UUID, int], str] = {}
        counts = dict.fromkeys(ids, 0)
        eligible: dict[uuid.UUID, list[str]] = {
            t: [m for m in ids if t in members[m].subscribed_topic_ids] for t in sorted(partitions_per_topic)
        }
        # Keep what each member already has in the target, if it still subscribes to it.
        for m in ids:
            for t, ps in sorted(members[m].current_target.items()):
                if t not in partitions_per_topic or t not in members[m].subscribed_topic_ids:
                    continue
                for p in sorted(ps):
                    if p < partitions_per_topic[t] and (t, p) not in owner:
                        owner[(t, p)] = m
                        counts[m] += 1
        # Give every unowned partition to the least loaded member that may take it.
        for t, candidates in eligible.items():
            if not candidates:
                continue
            for p in range(partitions_per_topic[t]):
                if (t, p) not in owner:
                    m = min(candidates, key=lambda c: (counts[c], c))
                    owner[(t, p)] = m
                    counts[m] += 1
        # Even out: move partitions from a member to an eligible one with two fewer or less.
        moved = True
        while moved:
            moved = False
            for tp in sorted(owner, key=lambda k: (-counts[owner[k]], str(k[0]), -k[1])):
                src = owner[tp]
                dst = min(eligible[tp[0]], key=lambda c: (counts[c], c))
                if counts[dst] + 1 < counts[src]:
                    owner[tp] = dst
                    counts[src] -= 1
                    counts[dst] += 1
                    moved = True
                    break
        return _collect(ids, owner)


class RangeAssignor:
    """Contiguous ranges per topic (see the module docstring)."""

    name = RANGE

    def assign(
        self, members: Mapping[str, MemberSpec], partitions_per_topic: Mapping[uuid.UUID, int]
    ) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
        ids = sorted(members)
        owner: dict[tuple[uuid.UUID, int], str] = {}
        for t in sorted(partitions_per_topic):
            subscribed = [m for m in ids if t in members[m].subscribed_topic_ids]
            if not subscribed:
                continue
            n = partitions_per_topic[t]
            per, extra = divmod(n, len(subscribed))
            start = 0
            for i, m in enumerate(subscribed):
                size = per + (1 if i < extra else 0)
                for p in range(start, start + size):
                    owner[(t, p)] = m
                start += size
        return _collect(ids, owner)


def _collect(ids: list[str], owner: Mapping[tuple[uuid.UUID, int], str]) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    out: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in ids}
    for (t, p), m in owner.items():
        out[m].setdefault(t, set()).add(p)
    return {m: freeze(a) for m, a in out.items()}


_KNOWN: dict[str, type[UniformAssignor] | type[RangeAssignor]] = {UNIFORM: UniformAssignor, RANGE: RangeAssignor}


def assignors_from(names_csv: str) -> dict[str, Assignor]:
    """The assignors of ``group.consumer.assignors`` (comma-separated; the first is the
    default), by name."""
    names = [n.strip() for n in names_csv.split(",") if n.strip()]
    if not names:
        raise InvalidConfigError("group.consumer.assignors must name at least one assignor")
    out: dict[str, Assignor] = {}
    for name in names:
        # Kafka also accepts the class names of its own assignors.
        short = name.rsplit(".", 1)[-1].lower().removesuffix("assignor")
        if short not in _KNOWN:
            raise InvalidConfigError(f"group.consumer.assignors: unknown assignor {name!r} (known: uniform, range)")
        out[short] = _KNOWN[short]()
    return out
