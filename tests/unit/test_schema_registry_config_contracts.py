"""Confluent's merge rules for data contracts (Metadata.mergeMetadata, RuleSet.mergeRuleSets,
ConfigValue.update, Config.mergeConfigs), sans-io."""

from __future__ import annotations

import pytest

from oncestream.schema_registry.config_contracts import (
    contract_with_defaults,
    in_scope,
    merge_metadata,
    merge_rule_sets,
    update_config,
)
from oncestream.schema_registry.errors import RegistryError


def rule(name: str, expr: str = "true") -> dict[str, str]:
    return {"name": name, "kind": "CONDITION", "mode": "WRITE", "type": "CEL", "expr": expr}


def test_metadata_newer_entries_win_and_sensitive_is_the_union():
    old = {"properties": {"a": "1", "b": "1"}, "tags": {"f": ["PII"]}, "sensitive": ["x"]}
    new = {"properties": {"b": "2"}, "tags": {"g": ["PUBLIC"]}, "sensitive": ["w"]}
    assert merge_metadata(old, new) == {"properties": {"a": "1", "b": "2"}, "tags": {"f": ["PII"], "g": ["PUBLIC"]},
                                        "sensitive": ["w", "x"]}
    assert merge_metadata(None, new) == new
    assert merge_metadata(old, None) == old
    assert merge_metadata(None, None) is None


def test_rule_sets_merge_by_rule_name():
    old = {"domainRules": [rule("a"), rule("b")], "migrationRules": [rule("m")], "enableAt": "SERVER"}
    new = {"domainRules": [rule("b", "false"), rule("c")]}
    assert merge_rule_sets(old, new) == {"domainRules": [rule("a"), rule("b", "false"), rule("c")],
                                         "migrationRules": [rule("m")], "enableAt": "SERVER"}


def test_defaults_request_or_previous_then_overrides():
    config = {"defaultMetadata": {"properties": {"owner": "p", "tier": "gold"}},
              "overrideMetadata": {"properties": {"tier": "silver"}}, "defaultRuleSet": {"domainRules": [rule("a")]}}
    got = contract_with_defaults(config, {"metadata": {"properties": {"owner": "q"}}}, None)
    assert got == {"metadata": {"properties": {"owner": "q", "tier": "silver"}}, "ruleSet": {"domainRules": [rule("a")]}}
    inherited = contract_with_defaults(config, {}, {"ruleSet": {"domainRules": [rule("z")]}})
    assert inherited["ruleSet"] == {"domainRules": [rule("a"), rule("z")]}
    assert contract_with_defaults({}, {}, None) == {}


def test_a_put_changes_the_fields_it_names():
    doc = update_config(None, {"compatibility": "full", "defaultMetadata": {"properties": {"a": "1"}}})
    assert doc == {"compatibilityLevel": "FULL", "defaultMetadata": {"properties": {"a": "1"}}}
    assert update_config(doc, {"normalize": True}) == {**doc, "normalize": True}
    assert update_config(doc, {"defaultMetadata": None}) == {"compatibilityLevel": "FULL"}
    with pytest.raises(RegistryError):
        update_config(doc, {"overrideRuleSet": ["not", "an", "object"]})
    with pytest.raises(RegistryError):
        update_config(None, {"compatibility": "SIDEWAYS"})


def test_the_subjects_config_in_scope_keeps_the_global_level_when_it_sets_none():
    glob = {"compatibilityLevel": "FULL", "defaultMetadata": {"properties": {"g": "1"}}}
    assert in_scope({"overrideMetadata": {"properties": {"s": "1"}}}, glob) == {
        "overrideMetadata": {"properties": {"s": "1"}}, "compatibilityLevel": "FULL"}
    assert in_scope(None, glob) == glob
