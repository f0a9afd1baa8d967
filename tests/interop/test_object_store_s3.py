"""The ObjectStore contract against a real S3 server (SeaweedFS, tests/support/seaweedfs.py) and,
through the same tests, against the directory store: what KIP-405's RemoteStorageManager needs
(whole and ranged reads of segments and indexes, streamed uploads of segments up to 1 GiB,
idempotent deletes, listing for orphan cleanup), and the typed failures the remote log manager
acts on (missing object, refused credentials, store down, store back).
"""

from __future__ import annotations

import io
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from oncestream.errors import RemoteAccessDeniedError, RemoteObjectNotFoundError, RemoteStorageError
from oncestream.remote.object_store import ObjectStore, open_object_store
from oncestream.remote.s3_store import PART_SIZE_BYTES
from tests.support.seaweedfs import SeaweedServer, clean_environ

pytestmark = pytest.mark.interop

CALL_BOUND_S = 60.0  # a call to a dead store must end well within this (seconds in practice)


@pytest.fixture(params=["s3", "local"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    """A fresh, empty store: a new key prefix in the session's SeaweedFS bucket, or a new directory."""
    if request.param == "s3":
        server: SeaweedServer = request.getfixturevalue("seaweedfs")
        return open_object_store(server.uri(f"contract-{uuid.uuid4().hex}"), clean_environ(**server.env()))
    return open_object_store((tmp_path / "store").as_uri(), clean_environ())


def _call_within(bound_s: float, call: Callable[[], Any]) -> BaseException | None:
    """Run ``call`` on a thread (as the broker's remote threads do); its exception, None if it
    returned. Fails the test if it has not ended within ``bound_s``."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001  (handed to the test thread)
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(bound_s)
    assert outcome, f"the call did not end within {bound_s} s"
    return outcome[0]


# --- the contract ------------------------------------------------------------------------------


def test_put_then_get_whole_object(store: ObjectStore) -> None:
    store.put("t-0/0/00000000000000000000-a.log", b"segment bytes")
    store.put("t-0/0/00000000000000000000-a.index", memoryview(b"index bytes"))
    assert store.get("t-0/0/00000000000000000000-a.log") == b"segment bytes"
    assert store.get("t-0/0/00000000000000000000-a.index") == b"index bytes"
    assert store.size("t-0/0/00000000000000000000-a.log") == len(b"segment bytes")


def test_put_replaces_an_object_whole(store: ObjectStore) -> None:
    store.put("k", b"first version, longer")
    store.put("k", b"second")
    assert store.get("k") == b"second"
    assert store.size("k") == 6


def test_empty_object(store: ObjectStore) -> None:
    store.put("empty.txnindex", b"")
    assert store.get("empty.txnindex") == b""
    assert store.size("empty.txnindex") == 0
    assert store.get_range("empty.txnindex", 0, 10) == b""


def test_get_range_is_half_open_and_short_at_the_end(store: ObjectStore) -> None:
    data = bytes(range(256)) * 40  # 10240 bytes
    store.put("seg.log", data)
    assert store.get_range("seg.log", 0, 1) == data[:1]
    assert store.get_range("seg.log", 100, 4196) == data[100:4196]
    assert store.get_range("seg.log", 10000, 10240) == data[10000:]
    assert store.get_range("seg.log", 10000, 20000) == data[10000:]  # past the end: the rest
    assert store.get_range("seg.log", 10240, 10300) == b""  # starts at the end
    assert store.get_range("seg.log", 50000, 60000) == b""  # starts past the end
    assert store.get_range("seg.log", 7, 7) == b""  # empty range


def test_get_range_refuses_a_backwards_range(store: ObjectStore) -> None:
    store.put("seg.log", b"0123456789")
    with pytest.raises(ValueError, match="bad range"):
        store.get_range("seg.log", 5, 4)
    with pytest.raises(ValueError, match="bad range"):
        store.get_range("seg.log", -1, 4)


def test_list_is_a_plain_string_prefix_sorted(store: ObjectStore) -> None:
    keys = [
        "orders-X/0/00000000000000000100-b.log",
        "orders-X/0/00000000000000000000-a.log",
        "orders-X/0/00000000000000000000-a.index",
        "orders-X/1/00000000000000000000-c.log",
        "orders-X/10/00000000000000000000-d.log",
        "orders-Y/0/00000000000000000000-e.log",
        "top-level",
    ]
    for key in keys:
        store.put(key, key.encode())
    assert store.list("") == sorted(keys)
    assert store.list("orders-X/0/") == sorted(keys[:3])
    assert store.list("orders-X/1") == [keys[3], keys[4]]  # "1" is a prefix of "10" too
    assert store.list("orders-X/1/") == [keys[3]]
    assert store.list("orders-X/0/00000000000000000000-a.") == [keys[2], keys[1]]
    assert store.list("orders-") == sorted(keys[:6])
    assert store.list("orders-Z/") == []
    assert store.list("nothing-here") == []


def test_delete_removes_and_a_missing_key_is_fine(store: ObjectStore) -> None:
    store.put("a/seg.log", b"x")
    store.put("a/seg.index", b"y")
    store.delete("a/seg.log")
    assert store.list("a/") == ["a/seg.index"]
    with pytest.raises(RemoteObjectNotFoundError):
        store.get("a/seg.log")
    store.delete("a/seg.log")  # again: orphan cleanup after a crash repeats deletes
    store.delete("never/written.log")
    store.delete("a/seg.index/below-a-file")


def test_missing_object_is_typed_and_named(store: ObjectStore) -> None:
    for read in (
        lambda: store.get("t-0/0/missing.log"),
        lambda: store.get_range("t-0/0/missing.log", 0, 10),
        lambda: store.size("t-0/0/missing.log"),
    ):
        with pytest.raises(RemoteObjectNotFoundError) as raised:
            read()
        assert "t-0/0/missing.log" in str(raised.value)
        assert store.description in str(raised.value)
        assert isinstance(raised.value, RemoteStorageError)


def test_keys_that_leave_the_root_are_refused(store: ObjectStore) -> None:
    for key in ("../escape", "/absolute", "a//b", ""):
        with pytest.raises(RemoteStorageError, match="not a relative path"):
            store.put(key, b"x")


@pytest.fixture
def segment_file(tmp_path: Path) -> Iterator[tuple[io.BufferedReader, bytes]]:
    """A file of about 23 MiB on disk (four multipart parts and a short fifth), positioned after a
    100-byte header that is not part of the upload."""
    payload = os.urandom(4 * PART_SIZE_BYTES + 3 * 1024 * 1024 + 17)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"h" * 100 + payload + b"trailing bytes past the size")
    with open(path, "rb") as file:
        file.seek(100)
        yield file, payload


def test_put_file_streams_the_next_size_bytes(store: ObjectStore, segment_file: tuple[io.BufferedReader, bytes]) -> None:
    file, payload = segment_file
    store.put_file("t-0/0/00000000000000000000-a.log", file, len(payload))
    assert file.tell() == 100 + len(payload)  # read exactly size bytes, not to the end
    assert store.size("t-0/0/00000000000000000000-a.log") == len(payload)
    assert store.get("t-0/0/00000000000000000000-a.log") == payload
    middle = PART_SIZE_BYTES - 10  # a range across the first part boundary
    assert store.get_range("t-0/0/00000000000000000000-a.log", middle, middle + 20) == payload[middle : middle + 20]


def test_put_file_of_a_small_file(store: ObjectStore) -> None:
    store.put_file("small.index", io.BytesIO(b"0123456789abcdef"), 10)
    assert store.get("small.index") == b"0123456789"


@pytest.mark.parametrize("size_over", [1, PART_SIZE_BYTES + 1])
def test_put_file_of_a_file_shorter_than_promised_stores_nothing(store: ObjectStore, size_over: int) -> None:
    data = os.urandom(PART_SIZE_BYTES + 5)
    with pytest.raises(RemoteStorageError, match="the file ended"):
        store.put_file("short.log", io.BytesIO(data), len(data) + size_over)
    with pytest.raises(RemoteObjectNotFoundError):
        store.get("short.log")
    assert store.list("") == []


def test_threads_share_one_store(store: ObjectStore) -> None:
    """The broker's remote threads (copier pool, reader pool) call one store at once."""
    errors: list[BaseException] = []

    def work(thread_index: int) -> None:
        try:
            for round_index in range(5):
                key = f"t/{thread_index}/{round_index}"
                store.put(key, key.encode() * 100)
                assert store.get_range(key, 0, len(key)) == key.encode()
        except BaseException as exc:  # noqa: BLE001  (reported by the test thread)
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(CALL_BOUND_S)
    assert not errors
    assert len(store.list("t/")) == 40


# --- S3 only: credentials and a store that goes away -------------------------------------------


@pytest.mark.parametrize("wrong", ["AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID"])
def test_wrong_credentials_are_access_denied_naming_key_store_and_s3_error(seaweedfs: SeaweedServer, wrong: str) -> None:
    good = open_object_store(seaweedfs.uri("denied"), clean_environ(**seaweedfs.env()))
    good.put("seg.log", b"readable with the right key")
    bad = open_object_store(seaweedfs.uri("denied"), clean_environ(**{**seaweedfs.env(), wrong: "wrong-value"}))
    s3_codes = ("SignatureDoesNotMatch", "InvalidAccessKeyId")
    for call, answer_has_body in (
        (lambda: bad.get("seg.log"), True),
        (lambda: bad.get_range("seg.log", 0, 4), True),
        (lambda: bad.size("seg.log"), False),  # HEAD: the status is all S3 answers
        (lambda: bad.put("seg.log", b"overwrite"), True),
        (lambda: bad.delete("seg.log"), True),
        (lambda: bad.list(""), True),
    ):
        with pytest.raises(RemoteAccessDeniedError) as raised:
            call()
        message = str(raised.value)
        assert "s3://oncestream-tiered/denied" in message
        assert "'seg.log'" in message or message.startswith("list"), message
        assert "403 Forbidden" in message, message
        assert any(code in message for code in s3_codes) or not answer_has_body, message
    assert good.get("seg.log") == b"readable with the right key"


def test_credentials_from_the_shared_files_under_home(seaweedfs: SeaweedServer, tmp_path: Path) -> None:
    """No AWS_ACCESS_KEY_ID in the environment: the profile of ~/.aws/credentials signs the requests."""
    env = seaweedfs.env()
    (tmp_path / ".aws").mkdir()
    (tmp_path / ".aws" / "credentials").write_text(
        f"[tiering]\naws_access_key_id = {env['AWS_ACCESS_KEY_ID']}\naws_secret_access_key = {env['AWS_SECRET_ACCESS_KEY']}\n"
    )
    (tmp_path / ".aws" / "config").write_text(
        f"[profile tiering]\nregion = {env['AWS_REGION']}\nendpoint_url = {env['AWS_ENDPOINT_URL']}\n"
    )
    store = open_object_store(seaweedfs.uri("from-files"), clean_environ(HOME=str(tmp_path), AWS_PROFILE="tiering"))
    store.put("k", b"signed with the profile's key")
    assert store.get("k") == b"signed with the profile's key"


@pytest.mark.chaos
@pytest.mark.parametrize("how", ["stop", "kill"])
def test_store_down_fails_in_bounded_time_then_works_when_back(
    seaweedfs_factory: Callable[..., SeaweedServer], how: str
) -> None:
    server = seaweedfs_factory()
    store = open_object_store(server.uri("outage"), clean_environ(**server.env()))
    store.put("before.log", b"written before the outage")
    getattr(server, how)()

    for call in (
        lambda: store.get("before.log"),
        lambda: store.get_range("before.log", 0, 7),
        lambda: store.put("during.log", b"x"),
        lambda: store.put_file("during.log", io.BytesIO(b"y" * 100), 100),
        lambda: store.list(""),
        lambda: store.delete("before.log"),
    ):
        failure = _call_within(CALL_BOUND_S, call)
        assert type(failure) is RemoteStorageError, failure  # neither "not found" nor "denied"
        assert "s3://oncestream-tiered/outage" in str(failure)

    server.start()
    assert store.get("before.log") == b"written before the outage"  # same store object, same data
    store.put("after.log", b"written after the restart")
    assert store.list("") == ["after.log", "before.log"]


@pytest.mark.chaos
@pytest.mark.slow  # 30 s idle on the shipped read timeout; stop/kill below show a dead store by default
def test_a_server_that_accepts_and_never_answers_fails_within_the_read_timeout(tmp_path: Path) -> None:
    """The connection is made (the kernel accepts into the backlog) but no byte ever comes back:
    the shipped read timeout (30 s, no retry started after 10 s) ends the call, where obstore's
    defaults (no read timeout, 30 s per attempt, 10 retries within 3 minutes) would hold the
    remote thread for minutes."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        store = open_object_store("s3://silent/p", clean_environ(
            HOME=str(tmp_path), AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="k", AWS_SECRET_ACCESS_KEY="s",
            AWS_REGION="us-east-1"))
        failure = _call_within(CALL_BOUND_S + 30, lambda: store.get("seg.log"))
    assert type(failure) is RemoteStorageError, failure
    assert "'seg.log' on s3://silent/p" in str(failure)
