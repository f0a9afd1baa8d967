"""Client quota entities and their configured values (KIP-13, KIP-55, KIP-546), sans-io.

An entity is a user, a client id, or both; either part may be the ``<default>`` entity (a
``None`` name on the wire). A client is matched against eight levels, highest first (Kafka's
``DefaultQuotaCallback``)::

    1 user=U,         client-id=C        5 user=<default>, client-id=<default>
    2 user=U,         client-id=<default> 6 user=<default>
    3 user=U                              7 client-id=C
    4 user=<default>, client-id=C        8 client-id=<default>

Each quota type is matched on its own: the first level with a value for that key wins. The level
also says who shares one measurement (Kafka's quota metric tags): levels 1, 2, 4 and 5 measure
each (user, client id) pair, 3 and 6 all the user's clients together, 7 and 8 all connections with
that client id together.

``ClientQuotaConfigs`` holds the values and answers AlterClientQuotas' validation and
DescribeClientQuotas' filters; ``encode`` / ``decode`` are the durable store's content.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from oncestream.errors import InvalidRequestError, StorageError

USER = "user"
CLIENT_ID = "client-id"
ENTITY_TYPES = (USER, CLIENT_ID)

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
# Kafka's QuotaConfig: the byte rates are LONG (whole numbers), the others DOUBLE.
QUOTA_KEYS: Mapping[str, bool] = {  # key -> whole numbers only
    PRODUCER_BYTE_RATE: True,
    CONSUMER_BYTE_RATE: True,
    REQUEST_PERCENTAGE: False,
    CONTROLLER_MUTATION_RATE: False,
}

# Kafka's describe filter match types.
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

_FILE_VERSION = 1
# quota_for answers are kept per (user, client id, key) until the configs change (a change makes
# a new ClientQuotaConfigs); bounded so that a stream of new client ids cannot grow it forever.
_MAX_CACHED_LOOKUPS = 10_000


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """``user`` / ``client_id``: absent (``ABSENT``), the default entity (``None``) or a name."""

    user: str | _Absent | None
    client_id: str | _Absent | None

    def parts(self) -> list[tuple[str, str | None]]:
        """(entity type, name or None for the default), in Kafka's order: user first."""
        out: list[tuple[str, str | None]] = []
        if not isinstance(self.user, _Absent):
            out.append((USER, self.user))
        if not isinstance(self.client_id, _Absent):
            out.append((CLIENT_ID, self.client_id))
        return out

    def describe(self) -> str:
        """``user=alice, client-id=<default>``: how kafka-configs prints an entity."""
        return ", ".join(f"{kind}={'<default>' if name is None else name}" for kind, name in self.parts())

    @classmethod
    def from_parts(cls, parts: Iterable[tuple[str, str | None]]) -> QuotaEntity:
        """The entity of wire (type, name) pairs; INVALID_REQUEST for an unknown or repeated type,
        or no type at all (Kafka's messages)."""
        found: dict[str, str | None] = {}
        for kind, name in parts:
            if kind not in ENTITY_TYPES:
                raise InvalidRequestError(f"Unhandled client quota entity type: {kind}")
            if kind in found:
                raise InvalidRequestError(f"Duplicate {kind} entity in the quota entity")
            if name is not None and name == "":
                raise InvalidRequestError(f"The {kind} entity name must not be empty (null names the default)")
            found[kind] = name
        if not found:
            raise InvalidRequestError("Invalid empty client quota entity")
        return cls(found.get(USER, ABSENT), found.get(CLIENT_ID, ABSENT))


class _Absent:
    """The entity has no such part (distinct from the default entity, ``None``)."""

    _instance: _Absent | None = None

    def __new__(cls) -> _Absent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = _Absent()


def matching_levels(user: str, client_id: str) -> list[tuple[QuotaEntity, tuple[str, str]]]:
    """The eight entities a client matches, highest precedence first, each with the key of the
    measurement it shares (Kafka's quota metric tags: user tag, client-id tag)."""
    return [
        (QuotaEntity(user, client_id), (user, client_id)),
        (QuotaEntity(user, None), (user, client_id)),
        (QuotaEntity(user, ABSENT), (user, "")),
        (QuotaEntity(None, client_id), (user, client_id)),
        (QuotaEntity(None, None), (user, client_id)),
        (QuotaEntity(None, ABSENT), (user, "")),
        (QuotaEntity(ABSENT, client_id), ("", client_id)),
        (QuotaEntity(ABSENT, None), ("", client_id)),
    ]


@dataclass(frozen=True, slots=True)
class QuotaOp:
    """One AlterClientQuotas operation: set ``key`` to ``value``, or remove it."""

    key: str
    value: float
    remove: bool


def _checked_value(key: str, value: float) -> float:
    whole = QUOTA_KEYS.get(key)
    if whole is None:
        raise InvalidRequestError(f"Invalid configuration key {key}")
    if math.isnan(value) or math.isinf(value) or value <= 0:
        raise InvalidRequestError(f"Quota {key} must be a positive number, got {value}")
    if whole and value != int(value):
        raise InvalidRequestError(f"Quota {key} must be a whole number of bytes per second, got {value}")
    return float(value)


class ClientQuotaConfigs:
    """The configured quotas: entity -> {quota key: value}."""

    def __init__(self, entries: Mapping[QuotaEntity, Mapping[str, float]] | None = None) -> None:
        self._entries: dict[QuotaEntity, dict[str, float]] = {e: dict(v) for e, v in (entries or {}).items() if v}
        self._lookups: dict[tuple[str, str, str], tuple[float, tuple[str, str]] | None] = {}

    def value(self, entity: QuotaEntity, key: str) -> float | None:
        """The value ``entity`` has for ``key``, if any."""
        values = self._entries.get(entity)
        return None if values is None else values.get(key)

    def quota_for(self, user: str, client_id: str, key: str) -> tuple[float, tuple[str, str]] | None:
        """The quota ``key`` applying to (user, client id) and the measurement key it shares, or
        None: unlimited (the first of the eight levels with a value wins)."""
        if not self._entries:
            return None
        lookup = (user, client_id, key)
        if lookup in self._lookups:
            return self._lookups[lookup]
        found: tuple[float, tuple[str, str]] | None = None
        for entity, metric_key in matching_levels(user, client_id):
            values = self._entries.get(entity)
            if values is not None and key in values:
                found = values[key], metric_key
                break
        if len(self._lookups) >= _MAX_CACHED_LOOKUPS:
            self._lookups.clear()
        self._lookups[lookup] = found
        return found

    def altered(self, entity: QuotaEntity, ops: Iterable[QuotaOp]) -> ClientQuotaConfigs:
        """A copy with ``ops`` applied to ``entity``; INVALID_REQUEST for an unknown key, a key
        named twice or a value that is not positive (or not whole, for the byte rates)."""
        values = dict(self._entries.get(entity, {}))
        seen: set[str] = set()
        for op in ops:
            if op.key in seen:
                raise InvalidRequestError(f"Duplicate quota configuration key {op.key}")
            seen.add(op.key)
            if op.remove:
                if op.key not in QUOTA_KEYS:
                    raise InvalidRequestError(f"Invalid configuration key {op.key}")
                values.pop(op.key, None)
            else:
                values[op.key] = _checked_value(op.key, op.value)
        entries = dict(self._entries)
        if values:
            entries[entity] = values
        else:
            entries.pop(entity, None)
        return ClientQuotaConfigs(entries)

    def describe(self, components: Iterable[tuple[str, int, str | None]], strict: bool
                 ) -> list[tuple[QuotaEntity, dict[str, float]]]:
        """DescribeClientQuotas: the entities matching every (entity type, match type, match)
        component; ``strict`` leaves out entities with a type no component names."""
        wanted: dict[str, tuple[int, str | None]] = {}
        for kind, match_type, match in components:
            if kind not in ENTITY_TYPES:
                raise InvalidRequestError(f"Custom entity type {kind} not supported")
            if kind in wanted:
                raise InvalidRequestError(f"Duplicate {kind} filter component entity type")
            if match_type == MATCH_EXACT and match is None:
                raise InvalidRequestError(f"Exact match of {kind} needs a name to match")
            if match_type in (MATCH_DEFAULT, MATCH_SPECIFIED) and match is not None:
                raise InvalidRequestError(f"Match type {match_type} of {kind} takes no name")
            if match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
                raise InvalidRequestError(f"Unexpected match type {match_type}")
            wanted[kind] = (match_type, match)
        out = []
        for entity, values in self._entries.items():
            parts = dict(entity.parts())
            if strict and set(parts) != set(wanted):
                continue
            if all(_matches(kind in parts, parts.get(kind), *wanted[kind]) for kind in wanted):
                out.append((entity, dict(values)))
        out.sort(key=lambda item: item[0].describe())
        return out

    def is_empty(self) -> bool:
        """No quota configured anywhere (the broker then measures nothing)."""
        return not self._entries

    def entries(self) -> dict[QuotaEntity, dict[str, float]]:
        """Every entity with its values (a copy)."""
        return {entity: dict(values) for entity, values in self._entries.items()}

    # --- the store ---------------------------------------------------------------------------------

    def encode(self) -> bytes:
        """The store file's content."""
        rows = [{"entity": {kind: name for kind, name in entity.parts()}, "quotas": values}
                for entity, values in sorted(self._entries.items(), key=lambda item: item[0].describe())]
        return json.dumps({"version": _FILE_VERSION, "entries": rows}, sort_keys=True, indent=1).encode()

    @classmethod
    def decode(cls, raw: bytes, where: str) -> ClientQuotaConfigs:
        """The configs of a store file; StorageError when it is not one (the file is written
        atomically, so that is damage, not a torn write)."""
        try:
            data = json.loads(raw)
            if data.get("version") != _FILE_VERSION:
                raise ValueError(f"unsupported version {data.get('version')!r}")
            entries: dict[QuotaEntity, dict[str, float]] = {}
            for row in data["entries"]:
                entity = QuotaEntity.from_parts((str(k), None if v is None else str(v)) for k, v in row["entity"].items())
                entries[entity] = {str(k): _checked_value(str(k), float(v)) for k, v in row["quotas"].items()}
        except (ValueError, KeyError, TypeError, AttributeError, InvalidRequestError) as exc:
            raise StorageError(f"client quotas {where} are unreadable: {exc}") from exc
        return cls(entries)


def _matches(present: bool, name: str | None, match_type: int, match: str | None) -> bool:
    if not present:
        return False
    if match_type == MATCH_EXACT:
        return name == match
    if match_type == MATCH_DEFAULT:
        return name is None
    return name is not None  # MATCH_SPECIFIED
