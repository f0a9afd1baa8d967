"""The REST API's routes, bodies, error codes and content type, through the ASGI app over an
in-memory registry (the wire to the brokers is the interop tests' part)."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import httpx

from oncestream.schema_registry.http_app import CONTENT_TYPE, Cluster, SchemaRegistryApp
from oncestream.schema_registry.registry import Registry
from oncestream.schema_registry.state import RegistryState
from tests.unit.test_schema_registry_registry import MemoryLog

AVRO_V1 = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]})
AVRO_V2 = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"},
                                                                 {"name": "b", "type": "string", "default": ""}]})
AVRO_BAD = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "string"}]})


class Primary(Cluster):
    def __init__(self, log: MemoryLog) -> None:
        self.log = log

    def is_primary(self) -> bool:
        return True

    def primary_url(self) -> str | None:
        return None

    def position(self) -> int:
        return len(self.log.written)

    def wait_for(self, offset: int, timeout_s: float) -> bool:
        return True


class Orphan(Primary):
    """An instance that is not the primary and knows no primary."""

    def is_primary(self) -> bool:
        return False


def run(calls: list[tuple[str, str, Any]], cluster: type[Primary] = Primary,
        users: dict[str, str] | None = None) -> list[httpx.Response]:
    state = RegistryState()
    log = MemoryLog(state)

    async def authenticate(header: str | None) -> str | None:
        if header is None or not header.startswith("Basic "):
            return None
        user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        return user if users is not None and users.get(user) == password else None

    app = SchemaRegistryApp(Registry(state, log), cluster(log), authenticate if users is not None else None)

    async def go() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
        out = []
        async with httpx.AsyncClient(transport=transport, base_url="http://registry") as client:
            for method, path, body in calls:
                kwargs: dict[str, Any] = {}
                if isinstance(body, dict) and "_auth" in body:
                    kwargs["auth"] = body.pop("_auth")
                extra_headers = body.pop("_headers", {}) if isinstance(body, dict) else {}
                if body is not None:
                    kwargs["content"] = json.dumps(body) if not isinstance(body, str) else body
                    kwargs["headers"] = {"Content-Type": CONTENT_TYPE, **extra_headers}
                out.append(await client.request(method, path, **kwargs))
        return out

    return asyncio.run(go())


def test_register_read_back_and_content_type() -> None:
    r = run([("POST", "/subjects/orders-value/versions", {"schema": AVRO_V1}),
             ("POST", "/subjects/orders-value/versions", {"schema": AVRO_V1}),
             ("GET", "/subjects", None),
             ("GET", "/subjects/orders-value/versions", None),
             ("GET", "/subjects/orders-value/versions/latest", None),
             ("GET", "/subjects/orders-value/versions/1/schema", None),
             ("GET", "/schemas/ids/1", None),
             ("GET", "/schemas/ids/1/subjects", None),
             ("GET", "/schemas/ids/1/versions", None),
             ("GET", "/schemas/types", None),
             ("POST", "/subjects/orders-value", {"schema": AVRO_V1}),
             ("GET", "/schemas/guids/00000000-0000-0000-0000-000000000000", None)])
    guid = r[0].json()["guid"]
    assert run([("POST", "/subjects/x/versions", {"schema": AVRO_V1}),
                ("GET", f"/schemas/guids/{guid}", None)])[1].json()["schema"] == AVRO_V1
    assert r.pop().json()["error_code"] == 40403
    assert [x.status_code for x in r] == [200] * len(r)
    assert all(x.headers["content-type"] == CONTENT_TYPE for x in r)
    assert r[0].json()["id"] == r[1].json()["id"] == 1
    assert r[2].json() == ["orders-value"]
    assert r[3].json() == [1]
    assert r[4].json()["subject"] == "orders-value"
    assert r[4].json()["version"] == 1
    assert r[4].json()["id"] == 1
    assert json.loads(r[5].text) == json.loads(AVRO_V1)
    assert r[6].json()["schema"] == AVRO_V1
    assert "schemaType" not in r[6].json()
    assert r[7].json() == ["orders-value"]
    assert r[8].json() == [{"subject": "orders-value", "version": 1}]
    assert sorted(r[9].json()) == ["AVRO", "JSON", "PROTOBUF"]
    assert r[10].json()["version"] == 1


def test_confluent_error_bodies() -> None:
    r = run([("GET", "/subjects/none/versions", None),
             ("POST", "/subjects/s/versions", {"schema": AVRO_V1}),
             ("GET", "/subjects/s/versions/9", None),
             ("GET", "/schemas/ids/42", None),
             ("POST", "/subjects/s/versions", {"schema": "{not json"}),
             ("POST", "/subjects/s/versions", {"schema": AVRO_BAD}),
             ("POST", "/subjects/s/versions", "[[["),
             ("PUT", "/config", {"compatibility": "LOOSE"}),
             ("GET", "/config/s", None),
             ("GET", "/nowhere", None),
             ("PATCH", "/subjects", None),
             ("GET", "/subjects/s/versions/latest", None)])
    got = [(x.status_code, x.json().get("error_code") if isinstance(x.json(), dict) else None) for x in r]
    assert got == [(404, 40401), (200, None), (404, 40402), (404, 40403), (422, 42201), (409, 409), (400, 400),
                   (422, 42203), (404, 40408), (404, 404), (405, 405), (200, None)]
    assert all(isinstance(x.json().get("message"), str) for x in r if x.status_code >= 400)


def test_compatibility_config_and_mode_routes() -> None:
    r = run([("POST", "/subjects/s/versions", {"schema": AVRO_V1}),
             ("POST", "/compatibility/subjects/s/versions/latest?verbose=true", {"schema": AVRO_V2}),
             ("POST", "/compatibility/subjects/s/versions/latest?verbose=true", {"schema": AVRO_BAD}),
             ("POST", "/compatibility/subjects/s/versions", {"schema": AVRO_BAD}),
             ("PUT", "/config/s", {"compatibility": "NONE"}),
             ("GET", "/config/s", None),
             ("GET", "/config", None),
             ("POST", "/subjects/s/versions", {"schema": AVRO_BAD}),
             ("DELETE", "/config/s", None),
             ("GET", "/config/s?defaultToGlobal=true", None),
             ("PUT", "/mode", {"mode": "READONLY"}),
             ("GET", "/mode", None),
             ("POST", "/subjects/s/versions", {"schema": AVRO_V2}),
             ("PUT", "/mode", {"mode": "READWRITE"})])
    assert r[1].json() == {"is_compatible": True, "messages": []}
    assert r[2].json()["is_compatible"] is False
    assert r[2].json()["messages"]
    assert r[3].json() == {"is_compatible": False}
    assert r[4].json() == {"compatibility": "NONE"}
    assert r[5].json() == {"compatibilityLevel": "NONE"}
    assert r[6].json() == {"compatibilityLevel": "BACKWARD"}
    assert r[7].json()["version"] == 2
    assert r[8].json() == {"compatibilityLevel": "NONE"}
    assert r[9].json() == {"compatibilityLevel": "BACKWARD"}
    assert r[11].json() == {"mode": "READONLY"}
    assert (r[12].status_code, r[12].json()["error_code"]) == (422, 42205)


def test_deletes() -> None:
    r = run([("POST", "/subjects/s/versions", {"schema": AVRO_V1}),
             ("DELETE", "/subjects/s?permanent=true", None),
             ("DELETE", "/subjects/s", None),
             ("GET", "/subjects", None),
             ("GET", "/subjects?deleted=true", None),
             ("DELETE", "/subjects/s/versions/1?permanent=true", None),
             ("GET", "/schemas/ids/1", None),
             ("POST", "/subjects/s/versions", {"schema": AVRO_V2})])
    assert r[1].json()["error_code"] == 40405
    assert r[2].json() == [1]
    assert r[3].json() == []
    assert r[4].json() == ["s"]
    assert r[5].json() == 1
    assert r[6].json()["error_code"] == 40403
    assert r[7].json()["id"] == 2  # id 1 is never handed out again


def test_subject_names_are_percent_decoded() -> None:
    r = run([("POST", "/subjects/a%2Fb%20c/versions", {"schema": AVRO_V1}), ("GET", "/subjects", None),
             ("GET", "/subjects/a%2Fb%20c/versions/1", None)])
    assert r[1].json() == ["a/b c"]
    assert r[2].json()["subject"] == "a/b c"


def test_writes_without_a_primary_are_refused_reads_answered() -> None:
    r = run([("POST", "/subjects/s/versions", {"schema": AVRO_V1}), ("GET", "/subjects", None)], cluster=Orphan)
    assert (r[0].status_code, r[0].json()["error_code"]) == (500, 50004)
    assert r[1].json() == []


class Follower(Orphan):
    """An instance that is not the primary but believes another one is."""

    def primary_url(self) -> str | None:
        return "http://127.0.0.1:9"


def test_a_forwarded_write_is_not_forwarded_again() -> None:
    r = run([("POST", "/subjects/s/versions", {"schema": AVRO_V1, "_headers": {"x-oncestream-forwarded": "1"}})],
            cluster=Follower)
    assert (r[0].status_code, r[0].json()["error_code"]) == (500, 50003)
    assert "not the primary" in r[0].json()["message"]  # refused here, not sent to 127.0.0.1:9


def test_basic_auth() -> None:
    r = run([("GET", "/subjects", None), ("GET", "/subjects", {"_auth": ("alice", "wrong")}),
             ("GET", "/subjects", {"_auth": ("alice", "secret")})], users={"alice": "secret"})
    assert [x.status_code for x in r] == [401, 401, 200]
    assert r[0].json()["error_code"] == 401
    assert r[0].headers["www-authenticate"].startswith("Basic")
