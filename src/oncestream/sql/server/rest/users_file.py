"""The users file of the REST API's HTTP Basic authentication (``authentication.method=BASIC``).

ksqlDB checks Basic credentials through a JAAS login module, usually Jetty's
``PropertyFileLoginModule`` over a ``user: password,role`` file. We keep one file too, but of
salted password hashes only, one user a line::

    # comments and blank lines are ignored
    alice:$scrypt$ln=14,r=8,p=1$<salt>$<hash>

The hash is a PHC string (the format passlib and the PHC reference use): ``$scrypt$``, the cost
parameters (``ln`` = log2 N, block size ``r``, parallelism ``p``), then the salt and the derived
key in unpadded standard base64. Keys are derived with ``hashlib.scrypt`` (OpenSSL's): memory-hard,
so a stolen file is expensive to brute-force. ``oncestream sql-users add`` writes lines of this
format (server_main registers the command).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from dataclasses import dataclass
from pathlib import Path

from oncestream.durable_files import write_file_atomically

# scrypt cost: N = 2**14, r = 8 (16 MiB, ~50 ms a check), the parameters RFC 7914 and OWASP cite
# as the interactive-login minimum.
DEFAULT_LOG2_N = 14
DEFAULT_R = 8
DEFAULT_P = 1
SALT_BYTES = 16
KEY_BYTES = 32
# Bounds on parameters read from a file: a typo must not make every check allocate gigabytes.
MAX_LOG2_N = 20
MAX_R = 32
MAX_P = 16

_PHC = re.compile(r"^\$scrypt\$ln=(\d+),r=(\d+),p=(\d+)\$([A-Za-z0-9+/]+)\$([A-Za-z0-9+/]+)$")


class UsersFileError(ValueError):
    """The users file cannot be read or has a malformed line (the message names the line)."""


@dataclass(frozen=True)
class PasswordHash:
    """One user's salted scrypt hash."""

    log2_n: int
    r: int
    p: int
    salt: bytes
    key: bytes

    @classmethod
    def create(cls, password: str, *, log2_n: int = DEFAULT_LOG2_N, r: int = DEFAULT_R,
               p: int = DEFAULT_P) -> PasswordHash:
        """A new hash of ``password`` with a fresh random salt."""
        salt = os.urandom(SALT_BYTES)
        return cls(log2_n, r, p, salt, _derive(password, salt, log2_n, r, p, KEY_BYTES))

    @classmethod
    def parse(cls, text: str) -> PasswordHash:
        """Read a PHC string; UsersFileError if it is not ``$scrypt$ln=..,r=..,p=..$salt$key``."""
        match = _PHC.match(text.strip())
        if match is None:
            raise UsersFileError("expected $scrypt$ln=N,r=R,p=P$SALT$HASH")
        log2_n, r, p = (int(match.group(i)) for i in (1, 2, 3))
        if not (1 <= log2_n <= MAX_LOG2_N and 1 <= r <= MAX_R and 1 <= p <= MAX_P):
            raise UsersFileError(f"scrypt parameters out of range (ln<={MAX_LOG2_N}, r<={MAX_R}, p<={MAX_P})")
        salt, key = _b64decode(match.group(4)), _b64decode(match.group(5))
        if len(key) < 16:
            raise UsersFileError("hash shorter than 16 bytes")
        return cls(log2_n, r, p, salt, key)

    def phc(self) -> str:
        return f"$scrypt$ln={self.log2_n},r={self.r},p={self.p}${_b64encode(self.salt)}${_b64encode(self.key)}"

    def verify(self, password: str) -> bool:
        """Whether ``password`` derives this hash (compared in constant time). Costs one scrypt."""
        derived = _derive(password, self.salt, self.log2_n, self.r, self.p, len(self.key))
        return hmac.compare_digest(derived, self.key)


def _derive(password: str, salt: bytes, log2_n: int, r: int, p: int, length: int) -> bytes:
    n = 1 << log2_n
    # OpenSSL refuses when N*r*128 exceeds maxmem (32 MiB by default): allow what the bounds allow.
    maxmem = 2 * 128 * r * (n + p + 1)
    return hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p, maxmem=maxmem, dklen=length)


def _b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii").rstrip("=")


def _b64decode(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4))


def parse_users(text: str, *, source: str = "users file") -> dict[str, PasswordHash]:
    """The ``user:hash`` lines of ``text``; UsersFileError naming the first bad line."""
    users: dict[str, PasswordHash] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, encoded = line.partition(":")
        name = name.strip()
        if not sep or not name:
            raise UsersFileError(f"{source} line {number}: expected USER:$scrypt$...")
        if name in users:
            raise UsersFileError(f"{source} line {number}: user {name!r} appears twice")
        try:
            users[name] = PasswordHash.parse(encoded)
        except (UsersFileError, ValueError) as exc:
            raise UsersFileError(f"{source} line {number} (user {name!r}): {exc}") from None
    return users


def load_users(path: str | Path) -> dict[str, PasswordHash]:
    """Read the users file at ``path``."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsersFileError(f"cannot read the users file {path}: {exc.strerror or exc}") from None
    return parse_users(text, source=str(path))


def set_user(path: str | Path, user: str, password: str) -> bool:
    """Add ``user`` to the file at ``path`` (created, mode 0600, if missing) or replace its hash;
    True if the user was new. Other lines are kept as they are. The file is replaced whole
    (durable_files), so a server reading it never sees half a line."""
    if not user or ":" in user or user != user.strip() or "\n" in user:
        raise UsersFileError(f"user name {user!r} must be non-empty, without ':' or surrounding spaces")
    if not password:
        raise UsersFileError("the password must not be empty")
    target = Path(path)
    lines = target.read_text(encoding="utf-8").splitlines() if target.exists() else []
    parse_users("\n".join(lines), source=str(target))  # refuse to rewrite a file we cannot read
    entry = f"{user}:{PasswordHash.create(password).phc()}"
    new = True
    for index, line in enumerate(lines):
        if line.strip().partition(":")[0].strip() == user and not line.strip().startswith("#"):
            lines[index] = entry
            new = False
    if new:
        lines.append(entry)
    write_file_atomically(target, ("\n".join(lines) + "\n").encode("utf-8"), mode=0o600)
    return new
