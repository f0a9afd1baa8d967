"""Property test (hypothesis): random put/delete/write-batch/put_many/commit/crash/scan
sequences against a model dict.

The model keeps two dicts: ``committed`` (what a reopen must give back) and ``working`` (what
the writer reads). A crash is "close without commit and reopen": the store must equal
``committed`` exactly, with the offsets of the last commit.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oncestream.state import StateStore, WriteBatch

KEYS = st.binary(min_size=0, max_size=3)  # few distinct keys: overwrites and deletes collide
VALUES = st.binary(max_size=8)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), KEYS, VALUES),
        st.tuples(st.just("delete"), KEYS),
        st.tuples(st.just("commit")),
        st.tuples(st.just("crash")),
        st.tuples(st.just("scan"), KEYS, KEYS),
        st.tuples(st.just("batch"), st.lists(st.tuples(KEYS, st.none() | VALUES), max_size=5)),
        st.tuples(st.just("put_many"), st.lists(st.tuples(KEYS, st.none() | VALUES), max_size=5)),
    ),
    max_size=60,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_store_matches_model_through_commits_and_crashes(ops):
    base = Path(tempfile.mkdtemp(prefix="state-model-"))
    directory = base / "store"
    committed: dict[bytes, bytes] = {}
    working: dict[bytes, bytes] = {}
    offset = 0
    store = StateStore(directory)
    try:
        for op in ops:
            kind = op[0]
            if kind == "put":
                store.put(op[1], op[2])
                working[op[1]] = op[2]
            elif kind == "delete":
                store.delete(op[1])
                working.pop(op[1], None)
            elif kind in ("batch", "put_many"):
                if kind == "batch":
                    batch = WriteBatch()
                    for key, value in op[1]:
                        batch.put(key, value) if value is not None else batch.delete(key)
                    store.write(batch)
                else:
                    assert store.put_many(op[1]) == (len(op[1]), 0)
                for key, value in op[1]:
                    if value is None:
                        working.pop(key, None)
                    else:
                        working[key] = value
            elif kind == "commit":
                offset += 1
                store.commit({("changelog", 0): offset})
                committed = dict(working)
            elif kind == "crash":
                store.close()
                store = StateStore(directory)
                working = dict(committed)
                assert dict(store.range()) == committed
                assert list(store.range()) == sorted(committed.items())
                assert store.committed_offsets() == ({("changelog", 0): offset} if offset else {})
            else:
                lo, hi = min(op[1], op[2]), max(op[1], op[2])
                expected = sorted((k, v) for k, v in working.items() if lo <= k < hi)
                assert list(store.range(lo, hi)) == expected
                reader = store.reader("read_committed")
                assert list(reader.range(lo, hi)) == sorted(
                    (k, v) for k, v in committed.items() if lo <= k < hi)
                reader.close()
            touched = [k for k, _ in op[1]] if kind in ("batch", "put_many") else [op[1]] if len(op) > 1 else []
            for key in touched:
                assert store.get(key) == working.get(key)
        assert list(store.range()) == sorted(working.items())
    finally:
        store.close()
        shutil.rmtree(base)
