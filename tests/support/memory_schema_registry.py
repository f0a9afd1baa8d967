"""An in-memory Schema Registry behind the SQL server's registry client calls (``register``,
``by_id``, ``latest``) for tests of the pure serde and planning: picklable, so Spark's Python
workers get a copy of what the driver registered."""

from __future__ import annotations

from dataclasses import dataclass

from oncestream.spark.schema_registry_client import RegisteredSchema, RegistryError


@dataclass
class MemoryRegistry:
    """The registry client's calls over dicts (ids from 1, the same schema the same id)."""

    schemas: dict[int, RegisteredSchema]
    subjects: dict[str, list[int]]

    @classmethod
    def empty(cls) -> MemoryRegistry:
        return cls({}, {})

    def register(self, subject: str, schema_type: str, schema: str, references: list[dict[str, object]] | None = None) -> int:
        assert not references, "the in-memory registry keeps no references"
        found = next((i for i, s in self.schemas.items() if (s.schema_type, s.schema) == (schema_type, schema)), None)
        schema_id = found if found is not None else len(self.schemas) + 1
        self.schemas[schema_id] = RegisteredSchema(schema_id, schema_type, schema)
        versions = self.subjects.setdefault(subject, [])
        if schema_id not in versions:
            versions.append(schema_id)
        return schema_id

    def by_id(self, schema_id: int) -> RegisteredSchema:
        if schema_id not in self.schemas:
            raise RegistryError("Schema 99 not found", registry_code=40403)
        return self.schemas[schema_id]

    def latest(self, subject: str) -> RegisteredSchema | None:
        versions = self.subjects.get(subject)
        return self.schemas[versions[-1]] if versions else None

    def references(self, schema_id: int) -> list[dict[str, object]]:
        """No schema here has references."""
        del schema_id
        return []

    def dependencies(self, schema_id: int) -> list[tuple[str, str]]:
        del schema_id
        return []

    def serialized(self, schema_id: int) -> str:
        """A PROTOBUF schema as the registry's ``format=serialized`` answers it (base64
        FileDescriptorProto), parsed from its text by the registry's own parser."""
        import base64

        from oncestream.schema_registry.proto_text import parse_proto_text

        return base64.b64encode(parse_proto_text(self.by_id(schema_id).schema).SerializeToString()).decode()
