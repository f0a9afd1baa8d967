"""Config documents and the data-contract defaults they carry, as Confluent's registry merges them
(sans-io).

A config (``/config``, ``/config/{subject}``) is a JSON document: ``compatibilityLevel`` and the
fields below, stored whole in the schemas topic's CONFIG record. A PUT changes the fields its body
names (a field given as null is cleared) and keeps the others (Confluent's
``ConfigValue.update``); the body names the level ``compatibility`` (or ``compatibilityLevel``).

The config in scope of a subject is the subject's own when it has one (its level falling back to
the global one, Confluent's ``Config.mergeConfigs``), else the global one.

On register, outside IMPORT mode, the new schema's ``metadata`` and ``ruleSet`` become (Confluent's
``AbstractSchemaRegistry.maybeSetMetadataRuleSet``)::

    merge(merge(config.defaultMetadata, specific), config.overrideMetadata)

where ``specific`` is the request's, or when it has none the subject's latest version's; rule sets
alike. ``merge_metadata``: ``properties`` and ``tags`` maps with the newer entries winning,
``sensitive`` the union. ``merge_rule_sets``: per rule list (``migrationRules``, ``domainRules``,
``encodingRules``) the older rules whose names the newer list lacks, then the newer rules;
``enableAt`` the newer one's if set.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oncestream.schema_registry import errors
from oncestream.schema_registry.compatibility import normalize_level

LEVEL = "compatibilityLevel"
METADATA_FIELDS = ("defaultMetadata", "overrideMetadata")
RULE_SET_FIELDS = ("defaultRuleSet", "overrideRuleSet")
# Config fields kept as given (Confluent's ConfigUpdateRequest; validation of rules is not done).
PLAIN_FIELDS = ("alias", "normalize", "validateFields", "compatibilityGroup")
RULE_LISTS = ("migrationRules", "domainRules", "encodingRules")


def update_config(old: Mapping[str, Any] | None, body: Mapping[str, Any]) -> dict[str, Any]:
    """The config after a PUT of ``body`` onto ``old`` (module docstring); 42203 for an unknown
    level, 42201-style 422 for a metadata or rule set that is not a JSON object."""
    new = dict(old or {})
    raw_level = body.get("compatibility", body.get("compatibilityLevel"))
    if "compatibility" in body or "compatibilityLevel" in body:
        if raw_level is None:
            new.pop(LEVEL, None)
        else:
            new[LEVEL] = normalize_level(raw_level)
    for name in (*METADATA_FIELDS, *RULE_SET_FIELDS, *PLAIN_FIELDS):
        if name not in body:
            continue
        value = body[name]
        if value is None:
            new.pop(name, None)
            continue
        if name in METADATA_FIELDS + RULE_SET_FIELDS and not isinstance(value, dict):
            raise errors.unprocessable(f"Invalid {name}: a JSON object was expected")
        new[name] = value
    if not new:
        raise errors.unprocessable("the config names no field to set")
    return new


def in_scope(subject_config: Mapping[str, Any] | None, global_config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The config that applies to a subject (module docstring)."""
    if subject_config is None:
        return dict(global_config or {})
    merged = dict(subject_config)
    for name in (LEVEL, "normalize", "validateFields", "compatibilityGroup"):
        if name not in merged and global_config and name in global_config:
            merged[name] = global_config[name]
    return merged


def update_answer(config: Mapping[str, Any]) -> dict[str, Any]:
    """A PUT's answer (Confluent's ConfigUpdateRequest: the level named ``compatibility``)."""
    out = {("compatibility" if k == LEVEL else k): v for k, v in config.items()}
    return out


def merge_metadata(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Confluent's ``Metadata.mergeMetadata`` (module docstring)."""
    if old is None:
        return None if new is None else dict(new)
    if new is None:
        return dict(old)
    out: dict[str, Any] = {}
    for name in ("tags", "properties"):
        a, b = old.get(name) or {}, new.get(name) or {}
        if a or b:
            out[name] = dict(sorted({**a, **b}.items()))
    a_set, b_set = old.get("sensitive") or [], new.get("sensitive") or []
    if a_set or b_set:
        out["sensitive"] = sorted({*a_set, *b_set})
    return out


def _merge_rules(old: list[Any] | None, new: list[Any] | None) -> list[Any] | None:
    if not old:
        return new
    if not new:
        return old
    names = {r.get("name") for r in new if isinstance(r, Mapping)}
    return [r for r in old if not (isinstance(r, Mapping) and r.get("name") in names)] + list(new)


def merge_rule_sets(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Confluent's ``RuleSet.mergeRuleSets`` (module docstring)."""
    if old is None:
        return None if new is None else dict(new)
    if new is None:
        return dict(old)
    out: dict[str, Any] = {}
    for name in RULE_LISTS:
        rules = _merge_rules(old.get(name), new.get(name))
        if rules:
            out[name] = rules
    enable_at = new.get("enableAt") if new.get("enableAt") is not None else old.get("enableAt")
    if enable_at is not None:
        out["enableAt"] = enable_at
    return out


def contract_with_defaults(config: Mapping[str, Any], requested: Mapping[str, Any],
                           previous: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``metadata`` and ``ruleSet`` a registered schema gets: the request's (or the previous
    version's) merged with the config's defaults and overrides (module docstring). ``requested``
    and ``previous`` are ``{"metadata": ..., "ruleSet": ...}`` documents (fields may be absent)."""
    prior = previous or {}
    specific_md = requested.get("metadata") if requested.get("metadata") is not None else prior.get("metadata")
    specific_rs = requested.get("ruleSet") if requested.get("ruleSet") is not None else prior.get("ruleSet")
    metadata = merge_metadata(merge_metadata(config.get("defaultMetadata"), specific_md), config.get("overrideMetadata"))
    rule_set = merge_rule_sets(merge_rule_sets(config.get("defaultRuleSet"), specific_rs), config.get("overrideRuleSet"))
    out: dict[str, Any] = {}
    if metadata is not None:
        out["metadata"] = metadata
    if rule_set is not None:
        out["ruleSet"] = rule_set
    return out
