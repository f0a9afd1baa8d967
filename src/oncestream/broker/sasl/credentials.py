"""The durable SCRAM credential store: ``DATA_DIR/scram-credentials.json``.

One small JSON file holding, per user and mechanism, the salt, StoredKey, ServerKey and
iteration count (base64), never a password. Every change rewrites it with
``oncestream.durable_files.write_file_atomically`` (temp file, fsync, rename, directory fsync) before
the change is acknowledged, so an acknowledged AlterUserScramCredentials or ``oncestream users
add`` survives a SIGKILL or power cut, and a crash mid-write leaves the previous version. A file
rather than an internal topic: the set is tiny, read whole at start, and the offline CLI
(``oncestream users add --data-dir``) can bootstrap the first admin before any broker ran, as
``kafka-storage format --add-scram`` does.
"""

from __future__ import annotations

import base64
import binascii
import json
from pathlib import Path

from oncestream.broker.sasl.scram import MECHANISMS, ScramCredential
from oncestream.cluster.pg.scram import PgScramCredentialStore
from oncestream.durable_files import write_file_atomically
from oncestream.errors import StorageError

FILE_NAME = "scram-credentials.json"
_FORMAT_VERSION = 1


class ScramCredentialStore:
    """user -> mechanism -> credential, persisted on every change."""

    def __init__(self, path: Path, users: dict[str, dict[str, ScramCredential]]) -> None:
        self.path = path
        self._users = users

    @classmethod
    def open(cls, data_dir: Path) -> ScramCredentialStore:
        """Load the store of ``data_dir`` (empty if it has none); StorageError if unreadable."""
        path = data_dir / FILE_NAME
        if not path.exists():
            return cls(path, {})
        try:
            doc = json.loads(path.read_bytes())
            if doc.get("version") != _FORMAT_VERSION:
                raise ValueError(f"unknown version {doc.get('version')!r}")
            users = {
                user: {mech: ScramCredential(
                    salt=base64.b64decode(c["salt"]), stored_key=base64.b64decode(c["stored_key"]),
                    server_key=base64.b64decode(c["server_key"]), iterations=int(c["iterations"]))
                    for mech, c in mechs.items() if mech in MECHANISMS}
                for user, mechs in doc["users"].items()
            }
        except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as exc:
            raise StorageError(f"{path}: unreadable SCRAM credentials: {exc}") from exc
        return cls(path, users)

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        """The credential of ``user`` for ``mechanism``, or None."""
        return self._users.get(user, {}).get(mechanism)

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        """A copy of every user's credentials, by mechanism name."""
        return {user: dict(mechs) for user, mechs in self._users.items()}

    def apply(self, upserts: list[tuple[str, str, ScramCredential]],
              deletions: list[tuple[str, str]]) -> None:
        """Apply changes and persist them in one atomic rewrite; on a write failure nothing
        changes in memory either (OSError propagates)."""
        users = self.users()
        for user, mech in deletions:
            mechs = users.get(user)
            if mechs is not None:
                mechs.pop(mech, None)
                if not mechs:
                    del users[user]
        for user, mech, credential in upserts:
            users.setdefault(user, {})[mech] = credential
        self._write(users)
        self._users = users

    def _write(self, users: dict[str, dict[str, ScramCredential]]) -> None:
        def enc(b: bytes) -> str:
            return base64.b64encode(b).decode("ascii")

        doc = {"version": _FORMAT_VERSION, "users": {
            user: {mech: {"salt": enc(c.salt), "stored_key": enc(c.stored_key),
                          "server_key": enc(c.server_key), "iterations": c.iterations}
                   for mech, c in sorted(mechs.items())}
            for user, mechs in sorted(users.items())}}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_file_atomically(self.path, json.dumps(doc, indent=1).encode())


# The credentials a broker authenticates SCRAM against: this file store (single broker), or the
# cluster's table in PostgreSQL (cluster/pg/scram.py; broker/cluster_security.py), which has the
# same ``get``, ``users`` and ``apply``.
ScramCredentials = ScramCredentialStore | PgScramCredentialStore[ScramCredential]
