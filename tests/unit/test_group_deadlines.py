"""The group coordinator's deadline heap: one live deadline per key, stale entries skipped and
eventually compacted, due keys popped earliest first."""

from __future__ import annotations

from oncestream.coordinator.group.deadlines import DeadlineHeap


def test_pop_due_returns_only_keys_whose_deadline_passed_earliest_first():
    heap: DeadlineHeap[str] = DeadlineHeap()
    heap.schedule("b", 20)
    heap.schedule("a", 10)
    heap.schedule("c", 30)
    assert heap.next_ms() == 10
    assert heap.pop_due(20) == ["a", "b"]
    assert heap.next_ms() == 30
    assert len(heap) == 1


def test_moving_or_clearing_a_deadline_leaves_no_live_stale_entry():
    heap: DeadlineHeap[str] = DeadlineHeap()
    heap.schedule("g", 10)
    heap.schedule("g", 50)  # a heartbeat moved it later
    assert heap.pop_due(20) == []
    assert heap.next_ms() == 50
    heap.schedule("g", None)
    assert heap.next_ms() is None
    assert heap.pop_due(100) == []


def test_stale_entries_are_compacted():
    heap: DeadlineHeap[str] = DeadlineHeap()
    for deadline in range(10_000):
        heap.schedule("g", deadline)
    assert len(heap) == 1
    assert heap.entries < 100
    assert heap.pop_due(10_000) == ["g"]
