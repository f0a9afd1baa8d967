"""Classes named in configuration (``module:Class`` or ``module.Class``), as Kafka names its
pluggable classes (``principal.builder.class``, ``interceptor.classes``): one loader for the
broker's principal builder and the Spark connector's plugins."""

from __future__ import annotations

import importlib
from typing import Any


class NamedClassError(ValueError):
    """A configured class name that is malformed or cannot be imported; the message says which."""


def load_named(name: str) -> Any:
    """The object ``name`` (``module:Class`` or ``module.Class``) refers to, imported now."""
    module_name, sep, attr = name.partition(":")
    if not sep:
        module_name, _, attr = name.rpartition(".")
    if not module_name or not attr:
        raise NamedClassError(f"expected module:Class or module.Class, not {name!r}")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise NamedClassError(f"cannot load {name!r}: {exc}") from None
