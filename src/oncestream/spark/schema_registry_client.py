"""A small client of a Schema Registry (Confluent's REST API v1), for the Spark connector's
``from_avro``/``to_avro`` (``oncestream.spark.registry_formats``) and the SQL server's AVRO and
JSON_SR formats (ksqlDB's ``ksql.schema.registry.url``).

With Confluent's framing of a record (``frame`` / ``unframe``: magic byte 0, the 4-byte
big-endian schema id, the body). No PySpark import here (the SQL server's per-row serde uses it).

Three calls are all they need: the latest version of a
subject (columns inferred on CREATE without columns), a schema by id (the writer's schema of a
framed record) and registering a schema (a CSAS/CTAS sink's subject). Answers are cached: an id
names one schema forever, and registering the same schema again answers the same id.

Our own client over the standard library rather than confluent-kafka's ``SchemaRegistryClient``:
that one needs the ``schemaregistry`` extra's dependencies (httpx, authlib, cachetools, attrs) in
every Spark worker and SQL server, for three GETs/POSTs. It lives in the Spark layer because both
the connector and the SQL server (a layer above) use it; neither may import
``oncestream.schema_registry`` (the server, a layer above both).
"""

from __future__ import annotations

import base64
import json
import struct
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from oncestream.spark.errors import OnceStreamSparkError

REGISTRY_URL = "ksql.schema.registry.url"
REGISTRY_USER_INFO = "ksql.schema.registry.basic.auth.user.info"
_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryError(OnceStreamSparkError):
    """The registry could not be reached or refused a request (its error code and message)."""

    def __init__(self, message: str, *, registry_code: int | None = None) -> None:
        super().__init__(message)
        self.registry_code = registry_code


MAGIC_BYTE = 0
HEADER_BYTES = 5


class FramingError(OnceStreamSparkError):
    """A record that is not in Confluent's framing (no magic byte, too short)."""


def frame(schema_id: int, body: bytes) -> bytes:
    """Confluent's wire format: magic byte, 4-byte id, body."""
    return struct.pack(">bI", MAGIC_BYTE, schema_id) + body


def unframe(data: bytes) -> tuple[int, bytes]:
    """(schema id, body) of a framed record."""
    if len(data) < HEADER_BYTES or data[0] != MAGIC_BYTE:
        raise FramingError("Unknown magic byte!" if data else "the record is empty: no schema id")
    (schema_id,) = struct.unpack(">I", data[1:HEADER_BYTES])
    return schema_id, bytes(data[HEADER_BYTES:])


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
        self._headers = {"Content-Type": _CONTENT_TYPE, "Accept": _CONTENT_TYPE}
        if user_info:
            self._headers["Authorization"] = "Basic " + base64.b64encode(user_info.encode()).decode()
        self._by_id: dict[int, RegisteredSchema] = {}
        self._registered: dict[tuple[str, str, str], int] = {}
        self._serialized: dict[int, str] = {}
        self._lock = threading.Lock()

    # Picklable: Spark ships the client to its Python workers (its caches start empty there).
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
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=self._headers)
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s) as response:
                status, text = response.status, response.read()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read()
        except (urllib.error.URLError, OSError) as e:
            raise RegistryError(f"Schema Registry at {self.url} is unreachable: {e}") from None
        try:
            answer = json.loads(text)
        except ValueError:
            answer = None
        if status >= 400:
            code = answer.get("error_code") if isinstance(answer, dict) else None
            message = answer.get("message") if isinstance(answer, dict) else text.decode(errors="replace")
            raise RegistryError(f"Schema Registry refused {method} {path}: {message}", registry_code=code)
        return answer

    def latest(self, subject: str) -> RegisteredSchema | None:
        """The latest version of ``subject``; None if the subject does not exist."""
        try:
            got = self._call("GET", f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/latest")
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

    def serialized(self, schema_id: int) -> str:
        """A PROTOBUF schema's ``FileDescriptorProto``, base64 (``format=serialized``): what the
        SQL server's PROTOBUF format builds its messages from (it parses no ``.proto`` text)."""
        with self._lock:
            cached = self._serialized.get(schema_id)
        if cached is not None:
            return cached
        got = str(self._call("GET", f"/schemas/ids/{schema_id}?format=serialized")["schema"])
        with self._lock:
            self._serialized[schema_id] = got
        return got

    def references(self, schema_id: int) -> list[dict[str, Any]]:
        """The references of the schema ``schema_id`` (Confluent's ``[{"name", "subject", "version"}]``)."""
        got = self._call("GET", f"/schemas/ids/{schema_id}")
        return [dict(r) for r in got.get("references") or []]

    def dependencies(self, schema_id: int) -> list[tuple[str, str]]:
        """The files a PROTOBUF schema imports through references, each as (the import's name, its
        base64 ``FileDescriptorProto``), the imports of an import before it: what a descriptor pool
        needs besides the schema itself."""
        out: list[tuple[str, str]] = []
        seen: set[str] = set()

        def visit(references: list[dict[str, Any]]) -> None:
            for ref in references:
                name = str(ref["name"])
                if name in seen:
                    continue
                seen.add(name)
                version = self._call("GET", f"/subjects/{urllib.parse.quote(str(ref['subject']), safe='')}/versions/"
                                            f"{ref['version']}")
                visit([dict(r) for r in version.get("references") or []])
                out.append((name, self.serialized(int(version["id"]))))

        visit(self.references(schema_id))
        return out

    def register(self, subject: str, schema_type: str, schema: str,
                 references: list[dict[str, Any]] | None = None) -> int:
        """Register ``schema`` under ``subject`` (the same schema again: the same id);
        ``references``: Confluent's ``[{"name", "subject", "version"}]``."""
        key = (subject, schema_type, schema + (json.dumps(references) if references else ""))
        with self._lock:
            cached = self._registered.get(key)
        if cached is not None:
            return cached
        body: dict[str, Any] = {"schema": schema}
        if schema_type != "AVRO":
            body["schemaType"] = schema_type
        if references:
            body["references"] = references
        schema_id = int(self._call("POST", f"/subjects/{urllib.parse.quote(subject, safe='')}/versions", body)["id"])
        with self._lock:
            self._registered[key] = schema_id
            self._by_id.setdefault(schema_id, RegisteredSchema(schema_id, schema_type, schema))
        return schema_id
