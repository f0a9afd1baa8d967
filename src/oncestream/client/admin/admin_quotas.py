"""The client quota methods of ``Admin`` (DescribeClientQuotas, AlterClientQuotas; KIP-546).

confluent-kafka 2.16 has no client quota API, so the shapes are Kafka's Java AdminClient's in
Python spelling: ``ClientQuotaEntity`` (entity type -> name, None for the default entity),
``ClientQuotaAlteration`` of ``ClientQuotaOp`` (a value of None removes the key),
``ClientQuotaFilter`` of ``ClientQuotaFilterComponent`` (``of_entity``, ``of_default_entity``,
``of_entity_type``; ``contains`` / ``contains_only`` / ``all``). As the rest of ``Admin``, the
methods return results instead of futures."""

from __future__ import annotations

from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from oncestream.client.common.cluster import Cluster
from oncestream.client.common.errors import BrokerResponseError, KafkaError
from oncestream.protocol.api_keys import ALTER_CLIENT_QUOTAS, DESCRIBE_CLIENT_QUOTAS
from oncestream.protocol.codec import build

T = TypeVar("T")

USER = "user"
CLIENT_ID = "client-id"
# DescribeClientQuotas' match types.
_MATCH_EXACT, _MATCH_DEFAULT, _MATCH_SPECIFIED = 0, 1, 2


@dataclass(frozen=True)
class ClientQuotaEntity:
    """A quota entity: ((entity type, name or None for ``<default>``), ...), user first (Kafka's
    order), then any other type by name."""

    parts: tuple[tuple[str, str | None], ...]

    @classmethod
    def of(cls, entries: Mapping[str, str | None]) -> ClientQuotaEntity:
        """``ClientQuotaEntity.of({"user": "alice", "client-id": None})``."""
        return cls(tuple(sorted(entries.items(), key=lambda item: (item[0] != USER, item[0]))))

    def entries(self) -> dict[str, str | None]:
        """Entity type -> name (None: the default entity)."""
        return dict(self.parts)

    def __str__(self) -> str:
        return ", ".join(f"{kind}={'<default>' if name is None else name}" for kind, name in self.parts)


@dataclass(frozen=True)
class ClientQuotaOp:
    """Set ``key`` to ``value``, or remove it (``value`` None)."""

    key: str
    value: float | None


@dataclass(frozen=True)
class ClientQuotaAlteration:
    """The operations on one entity."""

    entity: ClientQuotaEntity
    ops: tuple[ClientQuotaOp, ...]


@dataclass(frozen=True)
class ClientQuotaFilterComponent:
    """Match an entity type's exact name (``of_entity``), its default (``of_default_entity``) or
    any name it has (``of_entity_type``)."""

    entity_type: str
    match_type: int
    match: str | None

    @classmethod
    def of_entity(cls, entity_type: str, name: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, _MATCH_EXACT, name)

    @classmethod
    def of_default_entity(cls, entity_type: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, _MATCH_DEFAULT, None)

    @classmethod
    def of_entity_type(cls, entity_type: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, _MATCH_SPECIFIED, None)


@dataclass(frozen=True)
class ClientQuotaFilter:
    """Components every described entity matches; ``strict``: and no other entity type."""

    components: tuple[ClientQuotaFilterComponent, ...] = ()
    strict: bool = False

    @classmethod
    def contains(cls, components: Iterable[ClientQuotaFilterComponent]) -> ClientQuotaFilter:
        return cls(tuple(components), False)

    @classmethod
    def contains_only(cls, components: Iterable[ClientQuotaFilterComponent]) -> ClientQuotaFilter:
        return cls(tuple(components), True)

    @classmethod
    def all(cls) -> ClientQuotaFilter:
        return cls((), False)


class QuotaAdmin:
    """Mixed into ``Admin``; uses its ``_run`` and ``_controller``."""

    _cluster: Cluster

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None) -> T:  # provided by Admin
        raise NotImplementedError

    async def _controller(self) -> int | None:  # provided by Admin
        raise NotImplementedError

    def describe_client_quotas(self, quota_filter: ClientQuotaFilter | None = None,
                               timeout: float | None = None) -> dict[ClientQuotaEntity, dict[str, float]]:
        """The quotas of the entities the filter selects (all of them without one); raises
        ``KafkaException`` when the broker refuses (CLUSTER_AUTHORIZATION_FAILED without
        DESCRIBE_CONFIGS on the cluster, INVALID_REQUEST for a bad filter)."""
        wanted = quota_filter or ClientQuotaFilter.all()

        async def run() -> dict[ClientQuotaEntity, dict[str, float]]:
            def make(m: Any, version: int) -> Any:
                return build(m.DescribeClientQuotasRequest, strict=wanted.strict, components=tuple(
                    build(m.ComponentData, entity_type=c.entity_type, match_type=c.match_type, match=c.match)
                    for c in wanted.components))

            response = await self._cluster.send(await self._controller(), DESCRIBE_CLIENT_QUOTAS, make)
            if response.error_code:
                raise BrokerResponseError(int(response.error_code), response.error_message or "")
            return {ClientQuotaEntity.of({e.entity_type: e.entity_name for e in entry.entity}):
                    {v.key: float(v.value) for v in entry.values} for entry in response.entries or ()}

        return self._run(run(), timeout)

    def alter_client_quotas(self, alterations: Iterable[ClientQuotaAlteration], validate_only: bool = False,
                            timeout: float | None = None) -> dict[ClientQuotaEntity, KafkaError | None]:
        """Apply each alteration; per entity None (done) or the error (INVALID_REQUEST with the
        broker's reason, CLUSTER_AUTHORIZATION_FAILED without ALTER_CONFIGS on the cluster)."""
        wanted = list(alterations)

        async def run() -> dict[ClientQuotaEntity, KafkaError | None]:
            def make(m: Any, version: int) -> Any:
                return build(m.AlterClientQuotasRequest, validate_only=validate_only, entries=tuple(
                    build(m.EntryData,
                          entity=tuple(build(m.EntityData, entity_type=kind, entity_name=name)
                                       for kind, name in a.entity.parts),
                          ops=tuple(build(m.OpData, key=op.key, value=0.0 if op.value is None else float(op.value),
                                          remove=op.value is None) for op in a.ops))
                    for a in wanted))

            response = await self._cluster.send(await self._controller(), ALTER_CLIENT_QUOTAS, make)
            return {a.entity: None if not r.error_code else KafkaError(int(r.error_code), r.error_message or None)
                    for a, r in zip(wanted, response.entries)}

        return self._run(run(), timeout)
