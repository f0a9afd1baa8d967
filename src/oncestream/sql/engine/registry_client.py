"""The SQL server's client of a Schema Registry (ksqlDB's ``ksql.schema.registry.url``).

Three calls of Confluent's REST API v1 are all the SQL formats need: the latest version of a
subject (columns inferred on CREATE without columns), a schema by id (the writer's schema of a
framed record) and registering a schema (a CSAS/CTAS sink's subject). Answers are cached: an id
names one schema forever, and registering the same schema again answers the same id.

Our own small client over httpx (already in the ``sql`` extra) rather than confluent-kafka's
``SchemaRegistryClient``: that one needs the ``schemaregistry`` extra's dependencies (authlib,
cachetools, attrs) in the SQL server's install, for three GETs/POSTs. The SQL layer must not
import ``oncestream.schema_registry`` (a layer above it).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import httpx

from oncestream.sql.errors import KsqlError

REGISTRY_URL = "ksql.schema.registry.url"
REGISTRY_USER_INFO = "ksql.schema.registry.basic.auth.user.info"
_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryError(KsqlError):
    """The registry could not be reached or refused a request (its error code and message)."""

    def __init__(self, message: str, *, registry_code: int | None = None) -> None:
        super().__init__(message)
        self.registry_code = registry_code


@dataclass(frozen=True)
class RegisteredSchema:
    """A schema as the registry holds it: id, type (AVRO, JSON, PROTOBUF) and text."""

    schema_id: int
    schema_type: str
    schema: str
    version: int | None = None


class RegistryClient:
    """A Schema Registry at ``url``; ``user_info`` is ``user:password`` for basic auth."""

    def __init__(self, url: str, *, user_info: str | None = None, timeout_s: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self._user_info, self._timeout_s = user_info, timeout_s
        auth = None
        if user_info:
            user, _, password = user_info.partition(":")
            auth = httpx.BasicAuth(user, password)
        self._http = httpx.Client(auth=auth, timeout=timeout_s, headers={"Content-Type": _CONTENT_TYPE})
        self._by_id: dict[int, RegisteredSchema] = {}
        self._registered: dict[tuple[str, str, str], int] = {}
        self._lock = threading.Lock()

    # Picklable: Spark ships the client to its Python workers, each opens its own connections.
    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "user_info": self._user_info, "timeout_s": self._timeout_s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["url"], user_info=state["user_info"], timeout_s=state["timeout_s"])  # type: ignore[misc]

    @classmethod
    def from_properties(cls, props: dict[str, Any]) -> RegistryClient | None:
        """The client the server properties name (None without ``ksql.schema.registry.url``)."""
        url = props.get(REGISTRY_URL)
        if not url:
            return None
        return cls(str(url), user_info=props.get(REGISTRY_USER_INFO))

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        try:
            response = self._http.request(method, self.url + path, json=body)
        except httpx.HTTPError as e:
            raise RegistryError(f"Schema Registry at {self.url} is unreachable: {e}") from None
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if response.status_code >= 400:
            code = answer.get("error_code") if isinstance(answer, dict) else None
            message = answer.get("message") if isinstance(answer, dict) else response.text
            raise RegistryError(f"Schema Registry refused {method} {path}: {message}", registry_code=code)
        return answer

    def latest(self, subject: str) -> RegisteredSchema | None:
        """The latest version of ``subject``; None if the subject does not exist."""
        try:
            got = self._call("GET", f"/subjects/{subject}/versions/latest")
        except RegistryError as e:
            if e.registry_code in (40401, 40402):
                return None
            raise
        found = RegisteredSchema(int(got["id"]), str(got.get("schemaType", "AVRO")), str(got["schema"]),
                                 int(got["version"]))
        with self._lock:
            self._by_id.setdefault(found.schema_id, found)
        return found

    def by_id(self, schema_id: int) -> RegisteredSchema:
        """The schema with ``schema_id`` (raises ``RegistryError`` if there is none)."""
        with self._lock:
            cached = self._by_id.get(schema_id)
        if cached is not None:
            return cached
        got = self._call("GET", f"/schemas/ids/{schema_id}")
        found = RegisteredSchema(schema_id, str(got.get("schemaType", "AVRO")), str(got["schema"]))
        with self._lock:
            self._by_id[schema_id] = found
        return found

    def register(self, subject: str, schema_type: str, schema: str) -> int:
        """Register ``schema`` under ``subject`` (the same schema again: the same id)."""
        key = (subject, schema_type, schema)
        with self._lock:
            cached = self._registered.get(key)
        if cached is not None:
            return cached
        body: dict[str, Any] = {"schema": schema}
        if schema_type != "AVRO":
            body["schemaType"] = schema_type
        schema_id = int(self._call("POST", f"/subjects/{subject}/versions", body)["id"])
        with self._lock:
            self._registered[key] = schema_id
            self._by_id.setdefault(schema_id, RegisteredSchema(schema_id, schema_type, schema))
        return schema_id

    def close(self) -> None:
        self._http.close()
