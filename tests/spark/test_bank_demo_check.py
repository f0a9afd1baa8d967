"""The bank demo's final check (``bank_demo.find_violations`` and ``report``), without Spark or a
broker: each kind of broken outcome is reported as a violation and makes the demo exit non-zero,
and a consistent outcome passes."""

from __future__ import annotations

import sqlite3

import pytest

from oncestream.demos import bank_transfers as bank_demo
from oncestream.demos.bank_transfers import ACCOUNTS, INITIAL_BALANCE, find_violations, report

pytestmark = pytest.mark.spark

VALID = {"t000001": (0, 1, 50), "t000002": (2, 3, 10), "t000003": (1, 2, 7)}
INVALID = {"t000004"}


def _entries(transfers: dict[str, tuple[int, int, int]]) -> list[dict]:
    """The ledger a correct run writes: one debit and one credit per valid transfer."""
    out = []
    for tid, (src, dst, amount) in transfers.items():
        out.append({"transfer_id": tid, "account": src, "delta": -amount})
        out.append({"transfer_id": tid, "account": dst, "delta": amount})
    return out


def _balances(ledger: list[dict]) -> dict[int, int]:
    balances = {i: INITIAL_BALANCE for i in range(ACCOUNTS)}
    for e in ledger:
        balances[e["account"]] += e["delta"]
    return balances


def _outcome(ledger: list[dict], *, balances: dict[int, int] | None = None) -> dict:
    """What a run would leave if the database and the applied topic followed ``ledger`` exactly."""
    return {
        "valid": VALID,
        "invalid": INVALID,
        "ledger": ledger,
        "applied_log": list(ledger),
        "balances": _balances(ledger) if balances is None else balances,
        "applied_db": [(e["transfer_id"], e["account"], e["delta"]) for e in ledger],
    }


def test_consistent_outcome_has_no_violation_and_exits_zero(capsys):
    """Every valid transfer once in the ledger, the database and the applied topic: no violation,
    exit code 0 and the OK line."""
    problems = find_violations(**_outcome(_entries(VALID)))
    assert problems == []
    assert report(problems) == 0
    assert "OK:" in capsys.readouterr().out


def test_duplicated_transfer_is_a_violation():
    """A transfer whose debit and credit are in the ledger twice (and applied twice, so balances
    still match a replay and the total is conserved) is reported as duplicated."""
    ledger = _entries(VALID) + _entries({"t000002": VALID["t000002"]})
    problems = find_violations(**_outcome(ledger))
    assert any(p.startswith("ledger: 0 entries missing, 2 duplicated") for p in problems), problems
    assert any(p.startswith("database: 0 entries not applied, 2 applied twice") for p in problems), problems


def test_missing_transfer_is_a_violation():
    """A valid transfer that never reached the ledger (nor the database) is reported as missing."""
    ledger = _entries({k: v for k, v in VALID.items() if k != "t000003"})
    problems = find_violations(**_outcome(ledger))
    assert any(p.startswith("ledger: 2 entries missing, 0 duplicated") for p in problems), problems
    assert any(p.startswith("database: 2 entries not applied") for p in problems), problems


def test_balances_differing_from_the_ledger_replay_is_a_violation():
    """Ledger, applied entries and applied topic all correct, but the database's balances moved 5
    from account 0 to account 1 (total conserved): exactly the replay comparison fails."""
    ledger = _entries(VALID)
    balances = _balances(ledger)
    balances[0] -= 5
    balances[1] += 5
    problems = find_violations(**_outcome(ledger, balances=balances))
    assert len(problems) == 1, problems
    assert problems[0].startswith("database balances differ from a replay of the ledger")
    assert "0: (" in problems[0]
    assert "1: (" in problems[0]


def test_invalid_transfer_in_the_ledger_is_a_violation_not_a_crash():
    """An invalid request (destination outside the bank) that got into the ledger is reported,
    including its account the replay does not know, instead of stopping the check."""
    ledger = [*_entries(VALID), {"transfer_id": "t000004", "account": ACCOUNTS + 5, "delta": 9}]
    problems = find_violations(**_outcome(ledger, balances=_balances(_entries(VALID))))
    assert "ledger holds entries of invalid transfers" in problems
    assert any(p.startswith("database balances differ from a replay") for p in problems), problems


def test_violations_make_the_demo_exit_non_zero(capsys):
    """The demo's exit path: any violation prints a VIOLATION line each and returns 1."""
    problems = ["ledger: 2 entries missing, 0 duplicated or foreign", "total balance 1 != 20000"]
    assert report(problems) == 1
    out = capsys.readouterr().out
    assert out.count("VIOLATION:") == 2
    assert "OK:" not in out


def test_check_reads_the_run_and_reports_through_find_violations(monkeypatch, tmp_path):
    """``check`` feeds the topics and the SQLite database it reads to ``find_violations``: a
    database whose balances differ from the ledger is reported (no broker: the topic reader is
    replaced by the ledger itself)."""
    ledger = _entries(VALID)
    monkeypatch.setattr(bank_demo, "_read_topic", lambda _bootstrap, _topic: list(ledger))
    db_path = tmp_path / "bank.db"
    bank_demo._init_database(db_path)
    with sqlite3.connect(db_path) as conn:
        conn.executemany("INSERT INTO applied (transfer_id, account, delta, batch_id) VALUES (?, ?, ?, 0)",
                         [(e["transfer_id"], e["account"], e["delta"]) for e in ledger])
        # The ledger was applied to the entries table but never to the balances.
    problems = bank_demo.check("unused:0", db_path, VALID, INVALID)
    assert len(problems) == 1, problems
    assert problems[0].startswith("database balances differ from a replay"), problems


def test_torn_transfer_is_a_violation():
    """Half a transfer visible (its debit committed, its credit not: a torn transaction) is
    reported as a missing ledger entry, an entry not applied and a total balance not conserved."""
    src, _dst, amount = VALID["t000003"]
    ledger = _entries({k: v for k, v in VALID.items() if k != "t000003"})
    ledger.append({"transfer_id": "t000003", "account": src, "delta": -amount})
    problems = find_violations(**_outcome(ledger))
    assert any(p.startswith("ledger: 1 entries missing, 0 duplicated") for p in problems), problems
    assert any(p.startswith("database: 1 entries not applied") for p in problems), problems
    assert f"total balance {ACCOUNTS * INITIAL_BALANCE - amount} != {ACCOUNTS * INITIAL_BALANCE}" in problems
    assert report(problems) == 1


def test_applied_topic_disagreeing_with_the_database_is_a_violation():
    """The dual write torn the other way: the database committed a batch whose Kafka transaction
    (the 'applied' topic) was aborted. Ledger and database agree; only the applied topic lacks it."""
    ledger = _entries(VALID)
    outcome = _outcome(ledger)
    outcome["applied_log"] = _entries({k: v for k, v in VALID.items() if k != "t000001"})
    problems = find_violations(**outcome)
    assert problems == ["the 'applied' topic and the database's applied entries disagree"]
    assert report(problems) == 1
