"""The S3 object store (``s3://BUCKET/PREFIX``): any S3 API through obstore.

Why obstore: it is the Python binding of the Rust ``object_store`` crate (Apache Arrow's), one
compiled wheel with no Python dependencies. Its calls release the GIL while the request runs, so
the broker's remote threads upload and read in parallel with the event loop; it does ranged GETs,
multipart uploads with concurrent parts and aborts a failed one, signs SigV4 itself, retries with
backoff, and maps 404/403 to typed errors. boto3 would bring botocore's large import, a GIL-held
request path and its own thread pool for transfers; aiobotocore would put the transfers on the
broker's event loop.

Configuration, as the AWS SDKs read it (``environ`` is the broker's environment):

- endpoint: ``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL`` or the profile's ``endpoint_url``;
  when one is given (SeaweedFS, MinIO, Ceph...) requests are path-style
  (``ENDPOINT/BUCKET/KEY``, ``virtual_hosted_style_request=False``): such servers rarely resolve
  bucket host names; ``http://`` endpoints are allowed.
- region: ``AWS_REGION``, ``AWS_DEFAULT_REGION`` or the profile's ``region``.
- credentials: ``AWS_ACCESS_KEY_ID`` + ``AWS_SECRET_ACCESS_KEY`` (+ ``AWS_SESSION_TOKEN``); when
  absent, the profile (``AWS_PROFILE``, else ``default``) of the shared credentials file
  (``AWS_SHARED_CREDENTIALS_FILE``, else ``~/.aws/credentials``) and then of the config file
  (``AWS_CONFIG_FILE``, else ``~/.aws/config``, section ``[profile NAME]``). obstore itself does
  not read these files (it covers the environment, web identity, ECS and the instance metadata
  service, which remain the fall-backs when no key is found), hence the small reader below:
  static keys from two INI files are all it takes (stdlib ``configparser``); SSO and
  ``credential_process`` profiles are out of its scope.

Timeouts and retries (``ClientConfig`` / ``RetryConfig``) are set so that a dead or unreachable
store fails a call in seconds: connect timeout 2 s, read timeout 30 s, whole request 120 s, at
most 3 retries with backoff 100 ms..1 s and no retry started after 10 s. The read timeout counts
time without a byte from the server, and while a request body is sent none arrives: so a PUT or a
multipart part (5 MiB) must be sent within 30 s (above ~175 KB/s). A refused connection fails in
well under a second of retries, an unreachable host in about 4 x 2 s, a server that accepts and
never answers in about 30 s (a timed-out PUT is not retried). The remote log manager retries later with its own
capped backoff, so nothing is gained by obstore waiting minutes (its defaults: 10 retries within
3 minutes).
"""

from __future__ import annotations

import builtins
import configparser
import re
from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, NoReturn

import obstore
from obstore.exceptions import BaseError, PermissionDeniedError, UnauthenticatedError
from obstore.store import S3Store

from oncestream.errors import (
    InvalidConfigError,
    RemoteAccessDeniedError,
    RemoteObjectNotFoundError,
    RemoteStorageError,
)
from oncestream.remote.object_keys import check_key

if TYPE_CHECKING:
    from obstore.store import ClientConfig, RetryConfig, S3Config

PART_SIZE_BYTES = 5 << 20
"""Multipart part size of uploads, and the size up to which an upload is one PUT (obstore's
default; S3's minimum part): a 1 GiB segment is 205 parts, far below S3's 10000."""
PART_CONCURRENCY = 12
"""Parts of one upload in flight at once (obstore's default): at most 60 MiB of a segment in
memory per upload. 8 MiB x 8 uploaded no faster (bench/object_store_upload.py, docs/benchmarks.md)."""


CLIENT_OPTIONS: ClientConfig = {
    "connect_timeout": timedelta(seconds=2),
    "read_timeout": timedelta(seconds=30),
    "timeout": timedelta(seconds=120),
}
RETRY_CONFIG: RetryConfig = {
    "max_retries": 3,
    "retry_timeout": timedelta(seconds=10),
    "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=1), "base": 2},
}

# What obstore raises: its own BaseError family, FileNotFoundError for a missing key, ValueError for
# arguments it refuses, RuntimeError from its runtime. Our own RemoteStorageError (a short file in
# put_file) passes through obstore unchanged and is not caught again.
_FAILURES = (BaseError, OSError, ValueError, RuntimeError)
_STATUS = re.compile(r"status code: (\d{3})([^:]*)")
_XML_CODE = re.compile(r"<Code>([^<]*)</Code>")
_XML_MESSAGE = re.compile(r"<Message>([^<]*)</Message>")


class S3ObjectStore:
    """The ``ObjectStore`` of one S3 bucket under a key prefix; thread-safe (obstore's store is)."""

    def __init__(
        self,
        bucket: str,
        prefix: str,
        environ: Mapping[str, str],
        *,
        client_options: ClientConfig | None = None,
        retry_config: RetryConfig | None = None,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.description = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        config = s3_config(environ)
        options: ClientConfig = {**CLIENT_OPTIONS, **(client_options or {})}
        if config.get("endpoint", "").startswith("http://"):
            options["allow_http"] = True
        try:
            self._store = S3Store(
                bucket,
                prefix=self.prefix or None,
                config=config,
                client_options=options,
                retry_config=retry_config if retry_config is not None else RETRY_CONFIG,
            )
        except (BaseError, ValueError) as exc:
            raise InvalidConfigError(f"object store {self.description}: {_summary(exc)}") from exc

    def put(self, key: str, data: bytes | memoryview) -> None:
        """One PUT (multipart above PART_SIZE_BYTES): the object appears whole or not at all."""
        check_key(key, self.description)
        try:
            obstore.put(self._store, key, data, chunk_size=PART_SIZE_BYTES, max_concurrency=PART_CONCURRENCY)
        except _FAILURES as exc:
            self._raise(exc, key, "put")

    def put_file(self, key: str, file: BinaryIO, size: int) -> None:
        """The next ``size`` bytes of ``file``: one PUT up to PART_SIZE_BYTES, else a multipart
        upload of PART_SIZE_BYTES parts, PART_CONCURRENCY at once (aborted if anything fails,
        a short file included)."""
        check_key(key, self.description)
        if size < 0:
            raise ValueError(f"put_file of {key!r}: size {size} is negative")
        try:
            if size <= PART_SIZE_BYTES:
                data = _read_exactly(file, size, key)
                obstore.put(self._store, key, data, use_multipart=False)
            else:
                obstore.put(
                    self._store,
                    key,
                    _chunks(file, size, key),
                    use_multipart=True,
                    chunk_size=PART_SIZE_BYTES,
                    max_concurrency=PART_CONCURRENCY,
                )
        except _FAILURES as exc:
            self._raise(exc, key, "put")

    def get(self, key: str) -> bytes:
        """The whole object (one GET)."""
        check_key(key, self.description)
        try:
            return bytes(obstore.get(self._store, key).bytes())
        except _FAILURES as exc:
            self._raise(exc, key, "get")

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` (a ranged GET); short where the object ends first, empty when it
        ends at or before ``start`` (S3 answers 416 then)."""
        check_key(key, self.description)
        if start < 0 or end < start:
            raise ValueError(f"get_range of {key!r}: bad range [{start}, {end})")
        if start == end:
            return b""
        try:
            return bytes(obstore.get_range(self._store, key, start=start, end=end))
        except _FAILURES as exc:
            if _status(exc) == 416:  # Range Not Satisfiable: the object ends at or before start
                return b""
            self._raise(exc, key, "get range of")

    def size(self, key: str) -> int:
        """The object's length (one HEAD)."""
        check_key(key, self.description)
        try:
            return int(obstore.head(self._store, key)["size"])
        except _FAILURES as exc:
            self._raise(exc, key, "head")

    def delete(self, key: str) -> None:
        """One DELETE; S3 answers a missing key with success too."""
        check_key(key, self.description)
        try:
            obstore.delete(self._store, key)
        except FileNotFoundError:
            return
        except _FAILURES as exc:
            self._raise(exc, key, "delete")

    def list(self, prefix: str) -> builtins.list[str]:
        """Keys starting with ``prefix`` (plain string prefix), sorted. obstore matches whole
        path segments, so the listing asks for the directory part and filters the rest."""
        directory, _, _ = prefix.rpartition("/")
        try:
            stream = obstore.list(self._store, directory or None, chunk_size=1000)
            keys = [meta["path"] for chunk in stream for meta in chunk]
        except _FAILURES as exc:
            self._raise(exc, prefix, "list")
        return sorted(key for key in keys if key.startswith(prefix))

    def _raise(self, exc: Exception, key: str, action: str) -> NoReturn:
        where = f"{key!r} on {self.description}"
        if isinstance(exc, FileNotFoundError):
            raise RemoteObjectNotFoundError(f"no object {where} ({action}): {_summary(exc)}") from exc
        status = _status(exc)
        message = f"{action} {where}: {_summary(exc)}"
        if isinstance(exc, (PermissionDeniedError, UnauthenticatedError)) or status in (401, 403):
            raise RemoteAccessDeniedError(message) from exc
        raise RemoteStorageError(message) from exc


def s3_config(environ: Mapping[str, str]) -> S3Config:
    """obstore's S3 settings from the environment and the AWS shared files (module docstring)."""
    profile_name = environ.get("AWS_PROFILE") or "default"
    home = Path(environ["HOME"]) if environ.get("HOME") else Path.home()
    credentials_file = Path(environ.get("AWS_SHARED_CREDENTIALS_FILE") or home / ".aws" / "credentials")
    config_file = Path(environ.get("AWS_CONFIG_FILE") or home / ".aws" / "config")
    from_credentials = read_profile(credentials_file, profile_name, config_style=False)
    from_config = read_profile(config_file, profile_name, config_style=True)
    profile = {**from_config, **from_credentials}  # the credentials file wins, as in the AWS CLI

    config: dict[str, Any] = {}
    endpoint = environ.get("AWS_ENDPOINT_URL_S3") or environ.get("AWS_ENDPOINT_URL") or profile.get("endpoint_url")
    if endpoint:
        config["endpoint"] = endpoint
        config["virtual_hosted_style_request"] = False
    region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or profile.get("region")
    if region:
        config["region"] = region
    key_id, secret = environ.get("AWS_ACCESS_KEY_ID"), environ.get("AWS_SECRET_ACCESS_KEY")
    if key_id or secret:
        if not (key_id and secret):
            missing = "AWS_SECRET_ACCESS_KEY" if key_id else "AWS_ACCESS_KEY_ID"
            raise InvalidConfigError(f"S3 credentials: {missing} is missing (both or neither must be set)")
        config["access_key_id"], config["secret_access_key"] = key_id, secret
        if environ.get("AWS_SESSION_TOKEN"):
            config["session_token"] = environ["AWS_SESSION_TOKEN"]
    elif profile.get("aws_access_key_id") and profile.get("aws_secret_access_key"):
        config["access_key_id"] = profile["aws_access_key_id"]
        config["secret_access_key"] = profile["aws_secret_access_key"]
        if profile.get("aws_session_token"):
            config["session_token"] = profile["aws_session_token"]
    return config  # type: ignore[return-value]  # the keys above are S3Config's


def read_profile(path: Path, profile_name: str, *, config_style: bool) -> dict[str, str]:
    """The keys of one profile in an AWS shared file: ``[NAME]`` in the credentials file,
    ``[profile NAME]`` (or ``[default]``) in the config file; empty when the file or the section
    does not exist. InvalidConfigError for a file that is not INI."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        with open(path, encoding="utf-8") as file:
            parser.read_file(file)
    except FileNotFoundError:
        return {}
    except (OSError, configparser.Error, UnicodeDecodeError) as exc:
        raise InvalidConfigError(f"AWS shared file {path}: {exc}") from exc
    section = profile_name if not config_style or profile_name == "default" else f"profile {profile_name}"
    if not parser.has_section(section):
        return {}
    return {name: value.strip() for name, value in parser.items(section)}


def _read_exactly(file: BinaryIO, size: int, key: str) -> bytes:
    data = file.read(size)
    if len(data) != size:
        raise RemoteStorageError(f"put_file of {key!r}: the file ended after {len(data)} of the {size} bytes promised")
    return data


def _chunks(file: BinaryIO, size: int, key: str) -> Iterator[bytes]:
    remaining = size
    while remaining:
        chunk = file.read(min(PART_SIZE_BYTES, remaining))
        if not chunk:
            raise RemoteStorageError(
                f"put_file of {key!r}: the file ended {remaining} bytes before the {size} bytes promised"
            )
        remaining -= len(chunk)
        yield chunk


def _status(exc: BaseException) -> int | None:
    match = _STATUS.search(str(exc))
    return int(match.group(1)) if match else None


def _summary(exc: BaseException) -> str:
    """obstore's message without its debug dump; an S3 error body shortened to status, code and message."""
    text = str(exc).split("\n\nDebug source:", 1)[0]
    status, code, message = _STATUS.search(text), _XML_CODE.search(text), _XML_MESSAGE.search(text)
    if code and message:
        head = text.split(" - Server returned", 1)[0]
        status_text = f"{status.group(1)}{status.group(2)}".strip() if status else "error"
        text = f"{head}: {status_text}: {code.group(1)}: {message.group(1)}"
    return " ".join(text.split()).rstrip(" :")
