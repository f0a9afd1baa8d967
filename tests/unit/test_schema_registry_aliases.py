"""Subject aliases (Confluent's AliasFilter): which parts of a request an alias replaces, and the
ASGI app following one."""

from __future__ import annotations

from oncestream.schema_registry.aliases import follow
from tests.unit.test_schema_registry_http import AVRO_V1, run

ALIASES = {"old": "new", ":.ctx:old": "new", "hop": "old"}


def _follow(segments: list[str], query: dict[str, list[str]] | None = None):
    return follow(segments, query or {}, ALIASES.get)


def test_the_segment_after_subjects_and_the_id_lookups_subject_are_replaced():
    assert _follow(["subjects", "old", "versions", "latest"]) == (["subjects", "new", "versions", "latest"], {})
    assert _follow(["compatibility", "subjects", "old", "versions"])[0] == ["compatibility", "subjects", "new", "versions"]
    assert _follow(["schemas", "ids", "3"], {"subject": ["old"]}) == (["schemas", "ids", "3"], {"subject": ["new"]})
    # an unqualified alias is in the aliasing subject's context
    assert _follow(["subjects", ":.ctx:old"])[0] == ["subjects", ":.ctx:new"]


def test_config_mode_listings_and_unaliased_subjects_stay():
    assert _follow(["config", "old"])[0] == ["config", "old"]
    assert _follow(["mode", "old"])[0] == ["mode", "old"]
    assert _follow(["subjects"])[0] == ["subjects"]
    assert _follow(["subjects", "other", "versions"])[0] == ["subjects", "other", "versions"]
    assert _follow(["schemas", "ids", "3"], {"subject": [""]})[1] == {"subject": [""]}
    # one step only, as Confluent's filter: an alias of an alias is not followed further
    assert _follow(["subjects", "hop"])[0] == ["subjects", "old"]


def test_the_app_reads_and_registers_through_an_alias():
    responses = run([
        ("POST", "/subjects/orders/versions", {"schema": AVRO_V1}),
        ("PUT", "/config/renamed", {"alias": "orders"}),
        ("GET", "/subjects/renamed/versions/latest", None),
        ("GET", "/config/renamed", None),
        ("GET", "/schemas/ids/1/versions?subject=renamed", None),
        ("DELETE", "/config/renamed", None),
        ("GET", "/subjects/renamed/versions/latest", None),
    ])
    assert [r.status_code for r in responses] == [200, 200, 200, 200, 200, 200, 404]
    assert responses[2].json()["subject"] == "orders"
    assert responses[3].json()["alias"] == "orders"
    assert responses[4].json() == [{"subject": "orders", "version": 1}]
    assert responses[6].json()["error_code"] == 40401
