"""Foreign-key table-table join rules (``compile.fk_join_steps``) on ksqlDB's own
query-validation cases (fk-join.json "Should support inner/left join with left value-column
expression"): the records go through the two steps one record per micro-batch (as ksqlDB's test
driver processes them) and all in one micro-batch; and a left key moving between foreign keys
within one batch ends with its last write."""

from __future__ import annotations

import json
from typing import Any

import pytest

from oncestream.sql.engine.compile.fk_join_steps import Message, foreign_key_step, subscriptions

Record = tuple[str, int, dict[str, Any] | None]      # "L"/"R", key, value


def _run(kind: str, records: list[Record], batched: bool) -> list[tuple[int, dict[str, Any] | None]]:
    """(left key, joined value or None) writes; the joined value: NAME, R_ID, F1."""
    left_state: dict[str, Any] = {}
    groups: dict[str | None, tuple[str | None, dict[str, str]]] = {}
    out: list[tuple[int, dict[str, Any] | None]] = []
    for batch in ([records] if batched else [[r] for r in records]):
        events: dict[str | None, list[tuple[str, Any]]] = {}
        # stage 1 per left key (the batch's order within a key), then stage 2 per foreign key
        for source, key, value in batch:
            if source == "R":
                events.setdefault(str(key), []).append(("RIGHT", None if value is None else json.dumps(value)))
                continue
            fk = None if value is None or value.get("FOREIGN_KEY") is None else str(value["FOREIGN_KEY"])
            messages, left_state[str(key)] = subscriptions(
                str(key), [(None if value is None else json.dumps(value), fk, json.dumps({"ID": key}))],
                left_state.get(str(key)))
            for m in messages:
                events.setdefault(m.group, []).append(("LEFT", m))
        for group, group_events in events.items():
            right, subs = groups.get(group, (None, {}))
            writes, right, subs = foreign_key_step(kind, group_events, right, subs)
            groups[group] = (right, subs)
            for w in writes:
                if w.delete:
                    out.append((int(w.left_key), None))
                    continue
                left = json.loads(w.left) if w.left else {}
                r = json.loads(w.right) if w.right else None
                out.append((int(w.left_key), {"R_ID": int(group) if r is not None and group is not None else None,
                                              "NAME": left.get("NAME"), "F1": r["F1"] if r else None}))
    return out


INNER_INPUTS: list[Record] = [("R", 0, {"F1": "blah", "F2": 4}), ("L", 1, {"NAME": "zero", "FOREIGN_KEY": 0}),
                              ("L", 0, {"NAME": "foo", "FOREIGN_KEY": 100}), ("R", 0, {"F1": "a", "F2": 10}),
                              ("L", 10, {"NAME": "bar", "FOREIGN_KEY": 0}), ("R", 0, None), ("L", 1, None)]
INNER_OUTPUTS = [(1, {"R_ID": 0, "NAME": "zero", "F1": "blah"}), (1, {"R_ID": 0, "NAME": "zero", "F1": "a"}),
                 (10, {"R_ID": 0, "NAME": "bar", "F1": "a"}), (1, None), (10, None), (1, None)]
LEFT_INPUTS: list[Record] = [("L", 1, {"NAME": "zero", "FOREIGN_KEY": 0}), ("R", 0, {"F1": "blah", "F2": 4}),
                             ("L", 1, {"NAME": "zero", "FOREIGN_KEY": 0}), ("L", 0, {"NAME": "foo", "FOREIGN_KEY": 100}),
                             ("R", 0, {"F1": "a", "F2": 10}), ("L", 10, {"NAME": "bar", "FOREIGN_KEY": 0}),
                             ("R", 0, None), ("L", 1, None), ("L", 0, None)]
LEFT_OUTPUTS = [(1, {"R_ID": None, "NAME": "zero", "F1": None}), (1, {"R_ID": 0, "NAME": "zero", "F1": "blah"}),
                (1, {"R_ID": 0, "NAME": "zero", "F1": "blah"}), (0, {"R_ID": None, "NAME": "foo", "F1": None}),
                (1, {"R_ID": 0, "NAME": "zero", "F1": "a"}), (10, {"R_ID": 0, "NAME": "bar", "F1": "a"}),
                (1, {"R_ID": None, "NAME": "zero", "F1": None}), (10, {"R_ID": None, "NAME": "bar", "F1": None}),
                (1, None), (0, None)]


@pytest.mark.parametrize(("kind", "inputs", "outputs"), [("INNER", INNER_INPUTS, INNER_OUTPUTS),
                                                          ("LEFT", LEFT_INPUTS, LEFT_OUTPUTS)])
def test_ksqldb_fk_join_cases_record_at_a_time(kind: str, inputs: list[Record], outputs: list[Any]) -> None:
    assert _run(kind, inputs, batched=False) == outputs


def _last_per_key(writes: list[tuple[int, Any]]) -> dict[int, Any]:
    return {k: v for k, v in writes}


@pytest.mark.parametrize(("kind", "inputs"), [("INNER", INNER_INPUTS), ("LEFT", LEFT_INPUTS)])
def test_one_batch_ends_with_each_key_s_last_value(kind: str, inputs: list[Record]) -> None:
    assert _last_per_key(_run(kind, inputs, batched=True)) == _last_per_key(_run(kind, inputs, batched=False))


def test_a_key_moving_between_foreign_keys_in_one_batch_is_written_by_its_last_group_only() -> None:
    records: list[Record] = [("R", 1, {"F1": "one"}), ("R", 2, {"F1": "two"}), ("L", 5, {"NAME": "n", "FOREIGN_KEY": 1})]
    assert _run("INNER", records, batched=True) == [(5, {"R_ID": 1, "NAME": "n", "F1": "one"})]
    moves: list[Record] = [*records, ("L", 5, {"NAME": "n", "FOREIGN_KEY": 2}), ("R", 1, {"F1": "uno"}),
                           ("L", 5, {"NAME": "m", "FOREIGN_KEY": 2})]
    writes = _run("INNER", moves, batched=True)
    assert writes[-2:] == [(5, {"R_ID": 2, "NAME": "n", "F1": "two"}), (5, {"R_ID": 2, "NAME": "m", "F1": "two"})]
    assert all(v is None or v["R_ID"] == 2 for _k, v in writes)      # group 1's writes for key 5 dropped


def test_messages_say_which_group_holds_the_last_one() -> None:
    messages, state = subscriptions("5", [('{"a":1}', "1", None), ('{"a":2}', "2", None), (None, "2", '{"k":5}')],
                                    None)
    assert [(m.group, m.kind, m.final) for m in messages] == [
        ("1", "SUB", False), ("1", "UNSUB", False), ("2", "SUB", True), ("2", "DELETE", True)]
    assert state is None
    assert messages[-1].row == '{"a":2}'      # the deleted row: the tombstone's key comes from it
    assert isinstance(messages[0], Message)


def test_each_write_names_the_event_that_caused_it() -> None:
    """A foreign-key join's write is stamped with the ROWTIME of the record that caused it (Kafka
    Streams forwards that timestamp through KIP-213's subscription and response topics): a right
    tombstone's writes name it, not the subscriptions before it."""
    sub = [Message("0", "SUB", "1", '{"NAME":"zero"}', False, True), Message("0", "SUB", "10", '{"NAME":"bar"}', False, True)]
    events: list[tuple[str, Any]] = [("RIGHT", '{"F1":"a"}'), ("LEFT", sub[0]), ("LEFT", sub[1]), ("RIGHT", None)]
    writes, _right, _subs = foreign_key_step("INNER", events, None, {})
    assert [(w.left_key, w.delete, w.event) for w in writes] == [("1", False, 1), ("10", False, 2), ("1", True, 3),
                                                                 ("10", True, 3)]
