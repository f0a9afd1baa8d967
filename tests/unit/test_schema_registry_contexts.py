"""Schema contexts as Confluent's registry has them: qualified subjects (``:.staging:orders``),
an id space per context, references read in the referrer's context, settings per context between
the subject's and the global ones, the id lookup rules of ``GET /schemas/ids/{id}?subject=``, and
the ``/contexts/{context}/...`` URL forms (Confluent's ContextFilter), through the ASGI app."""

from __future__ import annotations

import json

import pytest

from oncestream.schema_registry import records
from oncestream.schema_registry.contexts import context_of, prefix, qualify, rewrite, split
from oncestream.schema_registry.errors import RegistryError
from oncestream.schema_registry.registry import Registry
from oncestream.schema_registry.state import RegistryState
from tests.unit.test_schema_registry_http import AVRO_V1, AVRO_V2, run
from tests.unit.test_schema_registry_registry import MemoryLog, avro


@pytest.fixture
def reg() -> Registry:
    state = RegistryState()
    return Registry(state, MemoryLog(state))


def test_qualified_subjects_split_as_confluents_qualified_subject():
    assert split(":.staging:orders-value") == (".staging", "orders-value")
    assert split("orders-value") == (".", "orders-value")
    assert split(":.staging:") == (".staging", "")
    assert context_of(":.a.b:x") == ".a.b"
    assert prefix("staging") == prefix(".staging") == prefix(":.staging:") == ":.staging:"
    assert prefix(".") == ""
    assert qualify(".staging", "x") == ":.staging:x"
    assert qualify(".staging", ":.other:x") == ":.other:x"


def test_context_urls_become_qualified_requests():
    assert rewrite(["contexts", ".staging", "subjects", "s", "versions"], {}) == (
        ["subjects", ":.staging:s", "versions"], {})
    assert rewrite(["contexts", "staging", "subjects"], {}) == (["subjects"], {"subjectPrefix": [":.staging:"]})
    assert rewrite(["contexts", ".staging", "schemas", "ids", "1"], {}) == (
        ["schemas", "ids", "1"], {"subject": [":.staging:"]})
    assert rewrite(["contexts", ".staging", "schemas", "ids", "1"], {"subject": ["s"]})[1] == {"subject": [":.staging:s"]}
    assert rewrite(["contexts", ".staging", "config"], {}) == (["config", ":.staging:"], {})
    assert rewrite(["contexts", ".staging", "config", "s"], {}) == (["config", ":.staging:s"], {})
    assert rewrite(["contexts", ".staging", "mode"], {}) == (["mode", ":.staging:"], {})
    assert rewrite(["contexts"], {}) == (["contexts"], {})
    assert rewrite(["subjects", "s"], {}) == (["subjects", "s"], {})


def test_each_context_has_its_own_ids(reg: Registry) -> None:
    plain = reg.register("orders-value", {"schema": avro(("a", "int"))})
    other = reg.register("other-value", {"schema": avro(("b", "int"))})
    staged = reg.register(":.staging:orders-value", {"schema": avro(("b", "int"))})
    assert (plain["id"], other["id"], staged["id"]) == (1, 2, 1)
    # the same schema in the same context: the same id; in another context: that context's next
    assert reg.register(":.staging:more-value", {"schema": avro(("b", "int"))})["id"] == 1
    assert reg.register(":.prod:orders-value", {"schema": avro(("a", "int"))})["id"] == 1
    assert reg.schema(1).schema == avro(("a", "int"))
    assert reg.schema(1, ".staging").schema == avro(("b", "int"))
    assert reg.schema(1).guid != reg.schema(1, ".staging").guid
    assert reg.state.contexts() == [".", ".prod", ".staging"]
    # GET /schemas/ids/{id}?subject=: the subject's context; an unqualified subject found in another
    assert reg.schema_for_id(1, ":.staging:orders-value").context == ".staging"
    assert reg.schema_for_id(1, ":.staging:").context == ".staging"
    assert reg.schema_for_id(1, None).context == "."
    assert reg.schema_for_id(2, "other-value").context == "."
    assert reg.schema_for_id(1, "more-value").context == ".staging"
    with pytest.raises(RegistryError) as exc:
        reg.schema_for_id(2, ":.staging:orders-value")
    assert exc.value.error_code == 40403
    # hard deletes keep a context's ids unused, after a rebuild from the compacted topic too
    reg.delete_subject(":.prod:orders-value", permanent=False)
    reg.delete_subject(":.prod:orders-value", permanent=True)
    assert isinstance(reg.log, MemoryLog)
    rebuilt = RegistryState()
    for key, value in reg.log.compacted():
        rebuilt.apply(records.decode(key, value))
    assert (rebuilt.next_id(".prod"), rebuilt.next_id(), rebuilt.next_id(".staging")) == (2, 3, 2)


def test_references_are_read_in_the_referrers_context(reg: Registry) -> None:
    inner = json.dumps({"type": "record", "name": "Inner", "fields": [{"name": "x", "type": "int"}]})
    outer = json.dumps({"type": "record", "name": "Outer", "fields": [{"name": "i", "type": "Inner"}]})
    reg.register(":.staging:inner", {"schema": inner})
    got = reg.register(":.staging:outer", {"schema": outer, "references": [
        {"name": "Inner", "subject": "inner", "version": 1}]})
    assert reg.state.referenced_by(":.staging:inner", 1) == [got["id"]]
    with pytest.raises(RegistryError) as exc:   # no "inner" in the default context
        reg.register("outer", {"schema": outer, "references": [{"name": "Inner", "subject": "inner", "version": 1}]})
    assert exc.value.error_code == 42201
    with pytest.raises(RegistryError) as exc:
        reg.delete_subject(":.staging:inner", permanent=False)
    assert exc.value.error_code == 42206


def test_a_contexts_settings_sit_between_the_subjects_and_the_global_ones(reg: Registry) -> None:
    reg.set_config(":.staging:", {"compatibility": "NONE", "defaultMetadata": {"properties": {"env": "staging"}}})
    assert reg.compatibility_level(":.staging:s") == "NONE"
    assert reg.compatibility_level("s") == "BACKWARD"
    first = reg.register(":.staging:s", {"schema": avro(("a", "int"))})
    assert first["metadata"] == {"properties": {"env": "staging"}}
    reg.register(":.staging:s", {"schema": avro(("a", "string"))})   # NONE: an incompatible change is taken
    reg.set_config(":.staging:s", {"compatibility": "FULL"})
    assert reg.compatibility_level(":.staging:s") == "FULL"
    reg.set_mode(":.staging:", {"mode": "READONLY"}, force=False)
    with pytest.raises(RegistryError) as exc:
        reg.register(":.staging:t", {"schema": avro(("a", "int"))})
    assert exc.value.error_code == 42205
    reg.register("t", {"schema": avro(("a", "int"))})


def test_context_routes_through_the_app() -> None:
    r = run([("POST", "/contexts/.staging/subjects/orders/versions", {"schema": AVRO_V1}),
             ("POST", "/subjects/orders/versions", {"schema": AVRO_V2}),
             ("POST", "/subjects/plain/versions", {"schema": AVRO_V1}),
             ("GET", "/contexts/.staging/subjects", None),
             ("GET", "/subjects/:.staging:orders/versions/1", None),
             ("GET", "/contexts/.staging/schemas/ids/1", None),
             ("GET", "/schemas/ids/1?subject=:.staging:orders", None),
             ("GET", "/schemas/ids/1", None),
             ("PUT", "/contexts/.staging/config", {"compatibility": "FORWARD"}),
             ("GET", "/config/:.staging:", None),
             ("GET", "/contexts/.staging/config/orders?defaultToGlobal=true", None),
             ("GET", "/contexts", None),
             ("GET", "/schemas/ids/1/subjects?subject=:.staging:", None),
             ("GET", "/schemas/ids/1/subjects", None)])
    assert [x.status_code for x in r] == [200] * len(r), [x.text for x in r]
    assert r[0].json()["id"] == 1
    assert r[1].json()["id"] == 1          # the default context's first id
    assert r[2].json()["id"] == 2
    assert r[3].json() == [":.staging:orders"]
    assert r[4].json()["schema"] == AVRO_V1
    assert r[5].json()["schema"] == AVRO_V1
    assert r[6].json()["schema"] == AVRO_V1
    assert r[7].json()["schema"] == AVRO_V2
    assert r[8].json() == {"compatibility": "FORWARD"}
    assert r[9].json() == {"compatibilityLevel": "FORWARD"}
    assert r[10].json()["compatibilityLevel"] == "FORWARD"
    assert r[11].json() == [".", ".staging"]
    assert r[12].json() == [":.staging:orders"]
    assert r[13].json() == ["orders"]


def test_a_context_outlives_its_subjects_until_deleted(reg: Registry) -> None:
    """Confluent's ContextKey: written with a context's first schema, kept after its subjects'
    hard deletes (after a rebuild from the compacted topic too), removed by DELETE
    /contexts/{context} only once no subject is left in it, soft-deleted ones included (42211)."""
    reg.register(":.staging:orders-value", {"schema": avro(("a", "int"))})
    reg.register("plain-value", {"schema": avro(("a", "int"))})
    with pytest.raises(RegistryError) as exc:
        reg.delete_context(":.staging:")
    assert (exc.value.http_status, exc.value.error_code) == (422, 42211)
    assert exc.value.message == "The specified context ':.staging:' is not empty."
    reg.delete_subject(":.staging:orders-value", permanent=False)
    with pytest.raises(RegistryError):   # a soft-deleted subject still holds the context
        reg.delete_context(".staging")
    reg.delete_subject(":.staging:orders-value", permanent=True)
    assert reg.state.contexts() == [".", ".staging"]
    assert isinstance(reg.log, MemoryLog)
    rebuilt = RegistryState()
    for key, value in reg.log.compacted():
        rebuilt.apply(records.decode(key, value))
    assert rebuilt.contexts() == [".", ".staging"]
    reg.delete_context(":.staging:")
    assert reg.state.contexts() == ["."]
    reg.delete_context(":.never:")   # an unknown context: deleted all the same, as Confluent's
    with pytest.raises(RegistryError):   # the default context holds plain-value
        reg.delete_context(".")
    # registering in the context again brings it back, ids going on (never reused)
    assert reg.register(":.staging:orders-value", {"schema": avro(("b", "int"))})["id"] == 2
    assert reg.state.contexts() == [".", ".staging"]


def test_the_context_wildcard_lists_every_contexts_subjects(reg: Registry) -> None:
    """``subjectPrefix=:*:`` (Confluent's CONTEXT_WILDCARD, the default of GET /subjects):
    subjects of every context; ``:*:rest``: those whose unqualified name starts with ``rest``."""
    for subject in ("orders-value", "users-value", ":.staging:orders-value", ":.prod:orders-key"):
        reg.register(subject, {"schema": avro(("a", "int"))})
    assert reg.subjects(prefix=":*:") == [":.prod:orders-key", ":.staging:orders-value", "orders-value", "users-value"]
    assert reg.subjects(prefix=":*:orders") == [":.prod:orders-key", ":.staging:orders-value", "orders-value"]
    assert reg.subjects(prefix=":*:orders-v") == [":.staging:orders-value", "orders-value"]
    assert reg.subjects(prefix=":.staging:") == [":.staging:orders-value"]
    assert reg.subjects(prefix="orders") == ["orders-value"]


def test_delete_context_through_the_app() -> None:
    r = run([("POST", "/contexts/.staging/subjects/orders/versions", {"schema": AVRO_V1}),
             ("DELETE", "/contexts/:.staging:", None),
             ("GET", "/subjects?subjectPrefix=:*:", None),
             ("DELETE", "/subjects/:.staging:orders", None),
             ("DELETE", "/subjects/:.staging:orders?permanent=true", None),
             ("DELETE", "/contexts/:.staging:", None),
             ("GET", "/contexts", None)])
    assert [x.status_code for x in r] == [200, 422, 200, 200, 200, 204, 200], [x.text for x in r]
    assert r[1].json() == {"error_code": 42211, "message": "The specified context ':.staging:' is not empty."}
    assert r[2].json() == [":.staging:orders"]
    assert r[5].content == b""
    assert r[6].json() == ["."]
