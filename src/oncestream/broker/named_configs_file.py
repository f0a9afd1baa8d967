"""A JSON file of named config maps (``{name: {config: value}}``), the durable form of the broker's
per-resource configs kept outside the log: share-group configs (``share_group_configs.py``) and
KIP-714 ClientMetrics subscriptions (``telemetry/subscriptions.py``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from oncestream.durable_files import write_file_atomically
from oncestream.errors import StorageError


def load_named_configs(path: Path) -> dict[str, dict[str, str]]:
    """Every resource's configs as last written (empty without the file); StorageError when unreadable."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise StorageError(f"cannot read {path}: {exc}") from exc
    return {str(name): {str(k): str(v) for k, v in configs.items()} for name, configs in data.items()}


def save_named_configs(path: Path, configs: Mapping[str, Mapping[str, str]]) -> None:
    """Write every resource's configs durably (for the disk threads); a resource without configs is left out."""
    body = json.dumps({name: dict(c) for name, c in sorted(configs.items()) if c}, sort_keys=True, indent=1)
    write_file_atomically(path, body.encode())
