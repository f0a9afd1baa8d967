"""rsm.config.storage.uri names the object store; the S3 store is configured as the AWS SDKs are
(environment first, then the shared credentials and config files of AWS_PROFILE or ``default``).

Constructing an S3 store sends no request, so these run without a server; the real requests are in
tests/interop/test_object_store_s3.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from oncestream.errors import InvalidConfigError, RemoteStorageError
from oncestream.remote.local_store import LocalObjectStore
from oncestream.remote.object_keys import check_key
from oncestream.remote.object_store import ObjectStore, open_object_store
from oncestream.remote.s3_store import S3ObjectStore, read_profile, s3_config

# --- URIs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "bucket", "prefix", "description"),
    [
        ("s3://tiered", "tiered", "", "s3://tiered"),
        ("s3://tiered/", "tiered", "", "s3://tiered"),
        ("s3://tiered/cluster-1", "tiered", "cluster-1", "s3://tiered/cluster-1"),
        ("s3://tiered/a/b/", "tiered", "a/b", "s3://tiered/a/b"),
        ("s3://tiered/with%20space", "tiered", "with space", "s3://tiered/with space"),
    ],
)
def test_s3_uri_names_bucket_and_prefix(uri: str, bucket: str, prefix: str, description: str) -> None:
    store = open_object_store(uri, {"AWS_REGION": "eu-west-1"})
    assert isinstance(store, S3ObjectStore)
    assert isinstance(store, ObjectStore)
    assert (store.bucket, store.prefix, store.description) == (bucket, prefix, description)


def test_file_uri_names_a_directory_created_on_open(tmp_path: Path) -> None:
    root = tmp_path / "remote" / "store"
    for uri in (root.as_uri(), f"file://localhost{root}"):
        store = open_object_store(uri, {})
        assert isinstance(store, LocalObjectStore)
        assert isinstance(store, ObjectStore)
        assert store.root == root
        assert root.is_dir()
        assert store.description == root.as_uri()


@pytest.mark.parametrize(
    ("uri", "words"),
    [
        ("s3://", "no bucket"),
        ("s3:///prefix", "no bucket"),
        ("s3://KEY:hunter2@bucket/p", "credentials do not belong in the uri"),
        ("s3://KEY:hunter2@bucket/p?x=1", "credentials do not belong in the uri"),
        ("s3://bucket/p?region=x", "no query or fragment"),
        ("file://otherhost/data", "local path"),
        ("file:relative/dir", "absolute path"),
        ("file:///", "absolute path other than /"),
        ("gs://bucket/p", "scheme must be s3:// or file://"),
        ("/plain/path", "scheme must be s3:// or file://"),
    ],
)
def test_uri_that_names_no_store_is_a_config_error(uri: str, words: str) -> None:
    with pytest.raises(InvalidConfigError, match=words) as raised:
        open_object_store(uri, {})
    assert "hunter2" not in str(raised.value)  # a credential typed into the uri is never echoed


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "a/./b", "../up", "a/..", "a/", "tab\there", "back\\slash"])
def test_keys_must_be_relative_paths_of_names(key: str) -> None:
    with pytest.raises(RemoteStorageError, match="on s3://b"):
        check_key(key, "s3://b")


def test_ordinary_segment_keys_are_accepted() -> None:
    check_key("orders-AAAAAAAAAAAAAAAAAAAAAA/0/00000000000000000042-3f1c.log", "s3://b")
    check_key("t/0/00000000000000000000-x.leader-epoch-checkpoint", "s3://b")


# --- S3 configuration: environment -------------------------------------------------------------


def test_environment_gives_endpoint_region_and_credentials_path_style(tmp_path: Path) -> None:
    config = s3_config({
        "HOME": str(tmp_path),
        "AWS_ENDPOINT_URL": "http://127.0.0.1:8333",
        "AWS_REGION": "eu-central-1",
        "AWS_DEFAULT_REGION": "us-west-2",
        "AWS_ACCESS_KEY_ID": "AKID",
        "AWS_SECRET_ACCESS_KEY": "SECRET",
        "AWS_SESSION_TOKEN": "TOKEN",
    })
    assert config == {
        "endpoint": "http://127.0.0.1:8333",
        "virtual_hosted_style_request": False,
        "region": "eu-central-1",
        "access_key_id": "AKID",
        "secret_access_key": "SECRET",
        "session_token": "TOKEN",
    }


def test_service_specific_endpoint_and_default_region(tmp_path: Path) -> None:
    config = s3_config({
        "HOME": str(tmp_path),
        "AWS_ENDPOINT_URL": "http://generic:1",
        "AWS_ENDPOINT_URL_S3": "http://s3-only:2",
        "AWS_DEFAULT_REGION": "us-west-2",
    })
    assert config == {"endpoint": "http://s3-only:2", "virtual_hosted_style_request": False, "region": "us-west-2"}


def test_no_endpoint_means_aws_with_virtual_hosted_requests(tmp_path: Path) -> None:
    assert s3_config({"HOME": str(tmp_path)}) == {}  # obstore's own chain (web identity, IMDS) then


@pytest.mark.parametrize("present", ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"])
def test_half_a_key_pair_is_a_config_error(tmp_path: Path, present: str) -> None:
    missing = "AWS_SECRET_ACCESS_KEY" if present == "AWS_ACCESS_KEY_ID" else "AWS_ACCESS_KEY_ID"
    with pytest.raises(InvalidConfigError, match=f"{missing} is missing"):
        s3_config({"HOME": str(tmp_path), present: "x"})


# --- S3 configuration: the AWS shared files ----------------------------------------------------

CREDENTIALS = """\
[default]
aws_access_key_id = DEFAULT_KEY
aws_secret_access_key = DEFAULT_SECRET

[tiering]
aws_access_key_id = TIER_KEY
aws_secret_access_key = TIER_SECRET
aws_session_token = TIER_TOKEN
"""

CONFIG = """\
[default]
region = ap-south-1

[profile tiering]
region = eu-north-1
endpoint_url = http://seaweed.internal:8333

[tiering]
region = not-read-config-sections-are-named-profile-x
"""


def _aws_home(tmp_path: Path) -> Path:
    (tmp_path / ".aws").mkdir()
    (tmp_path / ".aws" / "credentials").write_text(CREDENTIALS)
    (tmp_path / ".aws" / "config").write_text(CONFIG)
    return tmp_path


def test_default_profile_of_the_files_under_home(tmp_path: Path) -> None:
    config = s3_config({"HOME": str(_aws_home(tmp_path))})
    assert config == {"region": "ap-south-1", "access_key_id": "DEFAULT_KEY", "secret_access_key": "DEFAULT_SECRET"}


def test_aws_profile_picks_the_named_sections(tmp_path: Path) -> None:
    config = s3_config({"HOME": str(_aws_home(tmp_path)), "AWS_PROFILE": "tiering"})
    assert config == {
        "endpoint": "http://seaweed.internal:8333",
        "virtual_hosted_style_request": False,
        "region": "eu-north-1",
        "access_key_id": "TIER_KEY",
        "secret_access_key": "TIER_SECRET",
        "session_token": "TIER_TOKEN",
    }


def test_environment_wins_over_the_files(tmp_path: Path) -> None:
    config = s3_config({
        "HOME": str(_aws_home(tmp_path)),
        "AWS_PROFILE": "tiering",
        "AWS_ACCESS_KEY_ID": "ENV_KEY",
        "AWS_SECRET_ACCESS_KEY": "ENV_SECRET",
        "AWS_REGION": "us-east-2",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
    })
    assert config == {
        "endpoint": "http://127.0.0.1:9",
        "virtual_hosted_style_request": False,
        "region": "us-east-2",
        "access_key_id": "ENV_KEY",
        "secret_access_key": "ENV_SECRET",
    }  # no session token of the profile mixed with the environment's keys


def test_file_locations_from_the_environment(tmp_path: Path) -> None:
    credentials, config_file = tmp_path / "creds.ini", tmp_path / "conf.ini"
    credentials.write_text("[ops]\naws_access_key_id = OPS_KEY\naws_secret_access_key = OPS_SECRET\n")
    config_file.write_text("[profile ops]\nregion = sa-east-1\n")
    config = s3_config({
        "HOME": str(tmp_path / "nobody"),
        "AWS_SHARED_CREDENTIALS_FILE": str(credentials),
        "AWS_CONFIG_FILE": str(config_file),
        "AWS_PROFILE": "ops",
    })
    assert config == {"region": "sa-east-1", "access_key_id": "OPS_KEY", "secret_access_key": "OPS_SECRET"}


def test_keys_in_the_config_file_count_when_the_credentials_file_has_none(tmp_path: Path) -> None:
    (tmp_path / ".aws").mkdir()
    (tmp_path / ".aws" / "config").write_text("[default]\naws_access_key_id = C_KEY\naws_secret_access_key = C_SECRET\n")
    config = s3_config({"HOME": str(tmp_path)})
    assert config == {"access_key_id": "C_KEY", "secret_access_key": "C_SECRET"}


def test_missing_profile_or_file_reads_as_empty(tmp_path: Path) -> None:
    _aws_home(tmp_path)
    assert read_profile(tmp_path / ".aws" / "credentials", "absent", config_style=False) == {}
    assert read_profile(tmp_path / "no-such-file", "default", config_style=False) == {}


def test_a_file_that_is_not_ini_is_a_config_error(tmp_path: Path) -> None:
    broken = tmp_path / "credentials"
    broken.write_text("aws_access_key_id = before any section\n")
    with pytest.raises(InvalidConfigError, match=str(broken)):
        s3_config({"HOME": str(tmp_path), "AWS_SHARED_CREDENTIALS_FILE": str(broken)})
