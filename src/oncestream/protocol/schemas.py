"""Lookup of kio's generated schema modules and classes by (api key, version).

The one place broker, client and CLI find the kio request/response dataclasses for a version.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from kio.index import load_entity_module
from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType


@functools.cache
def kio_versions(api_key: int) -> tuple[int, int]:
    """Lowest and highest version kio has schemas for."""
    versions = sorted(schema_name_map[api_key_map[api_key]])
    return versions[0], versions[-1]


@functools.cache
def request_module(api_key: int, version: int) -> ModuleType:
    """kio request module of (api, version), holding the request and its nested classes."""
    return load_entity_module(api_key_map[api_key], version, EntityType.request)


@functools.cache
def response_module(api_key: int, version: int) -> ModuleType:
    """kio response module of (api, version), holding the response and its nested classes."""
    return load_entity_module(api_key_map[api_key], version, EntityType.response)


def _payload(module: ModuleType, entity_type: EntityType) -> type:
    for value in vars(module).values():
        if isinstance(value, type) and getattr(value, "__type__", None) == entity_type:
            return value
    raise LookupError(f"no {entity_type.name} class in {module.__name__}")


@functools.cache
def request_class(api_key: int, version: int) -> type[Any]:
    """The kio request dataclass of (api, version)."""
    return _payload(request_module(api_key, version), EntityType.request)


@functools.cache
def response_class(api_key: int, version: int) -> type[Any]:
    """The kio response dataclass of (api, version)."""
    return _payload(response_module(api_key, version), EntityType.response)
