"""Cluster mode in the sans-io group coordinator: partitions another broker owns answer
NOT_COORDINATOR, loading ones COORDINATOR_LOAD_IN_PROGRESS, and neither hides the others."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from oncestream.coordinator.group.messages import OffsetFetchRequest
from tests.unit.test_group_offsets import T0, make

E = ErrorCode


def test_a_foreign_partition_answers_not_coordinator_until_it_is_loaded() -> None:
    coordinator, h = make()
    h.commit("g", {T0: 5}, now_ms=0)
    partition = coordinator.partition_for("g")
    coordinator.disown_partition(partition)
    assert not coordinator.owns_partition(partition)
    assert h.commit("g", {T0: 6}, now_ms=1).partitions == {T0: E.not_coordinator}
    assert coordinator.fetch_offsets(OffsetFetchRequest("g"), 1).error == E.not_coordinator
    assert h.heartbeat("g", "m", 1, now_ms=1) == E.not_coordinator
    coordinator.begin_loading(partition)
    assert coordinator.owns_partition(partition)
    assert h.commit("g", {T0: 6}, now_ms=2).partitions == {T0: E.coordinator_load_in_progress}
    coordinator.load([], now_ms=3, partitions=[partition])
    assert h.commit("g", {T0: 7}, now_ms=4).partitions == {T0: E.none}


def test_list_groups_ignores_foreign_partitions_but_reports_loading_ones() -> None:
    coordinator, h = make()
    h.commit("mine", {T0: 1}, now_ms=0)
    mine = coordinator.partition_for("mine")
    for partition in range(coordinator.num_partitions):
        if partition != mine:
            coordinator.disown_partition(partition)
    listed = coordinator.list_groups()
    assert (listed.error, [g.group_id for g in listed.groups]) == (E.none, ["mine"])
    coordinator.unload_partition(mine)  # a failed append: reloading
    assert coordinator.list_groups().error == E.coordinator_load_in_progress
