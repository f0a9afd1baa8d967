"""Durable ACL storage: one JSON file, ``DATA_DIR/acls.json``, replaced atomically.

Written with ``oncestream.durable_files.write_file_atomically`` (temp file, fsync, rename, directory
fsync) before a CreateAcls/DeleteAcls answer leaves the broker, so an acknowledged change
survives SIGKILL and power loss, and a crash mid-write leaves the previous set. A file was
chosen over a compacted internal topic because ACL changes are rare, the whole set is small, and
a file needs no replay order or compaction. A file that cannot be read refuses the broker's
start (``AclStoreError``): silently dropping stored DENY ACLs would grant access.
"""

from __future__ import annotations

import json
from pathlib import Path

from oncestream.durable_files import write_file_atomically
from oncestream.errors import StorageError
from oncestream.protocol.acl import AclBinding

ACL_FILE_NAME = "acls.json"
_FORMAT_VERSION = 1


class AclStoreError(StorageError):
    """The stored ACL file is unreadable or of an unknown format."""


class AclStore:
    """Reads and replaces the broker's ACL file."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / ACL_FILE_NAME

    def load(self) -> list[AclBinding]:
        """The stored ACLs (none if the file does not exist yet)."""
        if not self.path.exists():
            return []
        try:
            doc = json.loads(self.path.read_bytes())
            if doc.get("version") != _FORMAT_VERSION:
                raise AclStoreError(f"{self.path}: unknown ACL file version {doc.get('version')!r}")
            return [AclBinding.from_json(entry) for entry in doc["acls"]]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise AclStoreError(f"{self.path}: unreadable ACL file: {exc}") from exc

    def save(self, acls: list[AclBinding]) -> None:
        """Replace the stored set with ``acls``, durably (OSError if the disk refuses)."""
        doc = {"version": _FORMAT_VERSION, "acls": [acl.to_json() for acl in acls]}
        write_file_atomically(self.path, json.dumps(doc, sort_keys=True).encode())
