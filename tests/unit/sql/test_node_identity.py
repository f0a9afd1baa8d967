"""KIP-345 for the query-assignment group, the parts that need no broker: the node's
``group.instance.id`` (kept in its state dir, configurable, validated) and how a restarted static
member reads the assignment computed for its previous incarnation (``Assignment.taken_over``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from oncestream.sql.server.assignment import Assignment, MemberInfo
from oncestream.sql.server.node_identity import INSTANCE_ID_PROPERTY, NODE_ID_FILE, NodeIdentityError, node_instance_id


def test_instance_id_is_created_once_and_kept_in_the_state_dir(tmp_path: Path) -> None:
    first = node_instance_id({}, tmp_path)
    assert first is not None
    assert first.startswith("node-")
    assert (tmp_path / NODE_ID_FILE).read_text().strip() == first
    assert node_instance_id({}, tmp_path) == first                       # a restart: the same id
    other = tmp_path / "other"
    other.mkdir()
    assert node_instance_id({}, other) not in (None, first)              # another node: another id


def test_configured_instance_id_wins_and_empty_means_dynamic(tmp_path: Path) -> None:
    assert node_instance_id({INSTANCE_ID_PROPERTY: "sql-node-1"}, tmp_path) == "sql-node-1"
    assert node_instance_id({INSTANCE_ID_PROPERTY: ""}, tmp_path) is None
    assert not (tmp_path / NODE_ID_FILE).exists()
    with pytest.raises(NodeIdentityError):
        node_instance_id({INSTANCE_ID_PROPERTY: "has space"}, tmp_path)
    (tmp_path / NODE_ID_FILE).write_text("bad/id\n")
    with pytest.raises(NodeIdentityError):
        node_instance_id({}, tmp_path)


def test_member_metadata_carries_the_instance_id() -> None:
    info = MemberInfo("m-1", "http://a", ("Q1",), 4, (), "node-a")
    assert MemberInfo.decode("m-1", info.encode()) == info
    dynamic = MemberInfo("m-2", "http://b")
    assert b"instanceId" not in dynamic.encode()
    assert MemberInfo.decode("m-2", dynamic.encode()) == dynamic


def _generation_7(member_id: str) -> Assignment:
    return Assignment(7, member_id, "http://b:1", {"old-b": "http://b:1", "a-1": "http://a:1"},
                      {"old-b": ("Q2", "Q3"), "a-1": ("Q1",)}, 12, {"Q3": "boom"}, {"old-b": "node-b", "a-1": "node-a"})


def test_restarted_static_member_takes_its_previous_incarnations_share() -> None:
    """KIP-345: the coordinator gives the new process (member id ``new-b``) the generation's
    assignment, computed for ``old-b``; it is ``node-b``'s share, now at the new URL."""
    seen = Assignment.decode("new-b", _generation_7("new-b").encode()).taken_over("node-b", "http://b:2")
    assert seen.mine == ("Q2", "Q3")
    assert seen.generation == 7
    assert seen.urls == {"new-b": "http://b:2", "a-1": "http://a:1"}
    assert seen.leader_url == "http://b:2"                    # it led that generation
    assert seen.owner_url("Q1") == "http://a:1"
    assert seen.errors == {"Q3": "boom"}
    assert seen.instances == {"new-b": "node-b", "a-1": "node-a"}


def test_taken_over_changes_nothing_for_others() -> None:
    current = _generation_7("a-1")
    assert current.taken_over("node-a", "http://a:9") is current          # its own id is there
    fresh = _generation_7("new-c")
    assert fresh.taken_over(None, "http://c:1") is fresh                  # dynamic member
    assert fresh.taken_over("node-c", "http://c:1").mine == ()            # nobody had its id
    twice = Assignment(7, "new-b", "http://x", {"b1": "u1", "b2": "u2"}, {"b1": ("Q1",), "b2": ("Q2",)},
                       instances={"b1": "node-b", "b2": "node-b"})
    assert twice.taken_over("node-b", "http://b:2") is twice              # ambiguous: take nothing
