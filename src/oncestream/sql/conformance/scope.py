"""Which QTT cases are out of scope, and in which family (sans-io).

A family is either excluded from issue 24's goal (connectors, ksqlDB's test UDF plugins, features
docs/sql-reference.md lists under "Not supported") or one the runner cannot run yet
(``counts_toward_goal``: the goal's denominator keeps those cases, so a runner gap never improves
the ratio; none today). The registry formats' cases (AVRO, PROTOBUF, PROTOBUF_NOSR, JSON_SR, and
CREATE without columns that reads them from the registry) run: the runner starts a Schema
Registry (``registry_records``); ``registry_formats`` names a case's, for per-format counts.
``static_family`` decides from the case's text before anything runs; ``refusal_family`` from the
engine's answer (a construct our parser names as "... is not supported", the list
docs/sql-reference.md keeps).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from oncestream.sql.conformance.qtt_format import QttCase


@dataclass(frozen=True)
class Family:
    """An out-of-scope family: its name (printed and kept in docs/sql-conformance.md) and whether
    its cases still count toward the 90% goal's denominator."""

    name: str
    counts_toward_goal: bool = False


CONNECTORS = Family("connectors (CREATE SOURCE|SINK CONNECTOR)")
UDF_PLUGINS = Family("UDF plugins (functions of ksqlDB's test jars)")
OLDER_VERSIONS = Family("cases bounded to older ksqlDB versions (versions.max)")

REGISTRY_FORMAT_NAMES = ("AVRO", "PROTOBUF", "PROTOBUF_NOSR", "JSON_SR")

# Functions ksqlDB's functional tests load from its engine's test classes and example UDF jars
# (ksqldb-engine/src/test): not ksqlDB built-ins, so no user has them.
TEST_UDF_NAMES = frozenset(name.upper() for name in (
    "test_udf", "test_udaf", "test_udtf", "bad_test_udf", "bad_test_udaf", "bad_test_udtf", "bad_udf",
    "throwing_udtf", "badReturnUdtf", "WhenCondition", "WhenResult", "ComplexFunction", "ConfigurableUdf",
    "DecimalStruct", "KsqlStructUdf", "ReturnDecimal", "ReturnIncompatible", "SomeFunction", "rawListReturn",
    "bigDecimalNoSchemaProvider", "FIVE_ARG", "FOUR_ARG", "GENERIC_VAR_ARG", "MID_VAR_ARG", "MULTI_ARG",
    "OBJ_COL_ARG", "VAR_ARG", "multiply", "tolist", "tomap", "tostring", "tostruct", "backwardconcat",
))

_CONNECTOR = re.compile(r"\b(CREATE\s+(SOURCE|SINK)\s+CONNECTOR|DROP\s+CONNECTOR)\b", re.IGNORECASE)
_CALL = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*\(")
_FORMAT_PROP = re.compile(r"\b(?:KEY_|VALUE_)?FORMAT\s*=\s*'([A-Za-z_]+)'", re.IGNORECASE)
_CREATE_WITHOUT_COLUMNS = re.compile(
    r"^\s*CREATE\s+(?:OR\s+REPLACE\s+)?(?:SOURCE\s+)?(?:STREAM|TABLE)\s+(?:IF\s+NOT\s+EXISTS\s+)?[`\"\w.]+\s+WITH\b",
    re.IGNORECASE)
_NOT_SUPPORTED = re.compile(r"^line \d+:\d+: (?:The )?(.+?) is not supported")


def registry_formats(case: QttCase) -> list[str]:
    """The registry formats (AVRO, PROTOBUF, PROTOBUF_NOSR, JSON_SR) the case reads or writes, in
    REGISTRY_FORMAT_NAMES order: its format variant, its statements' FORMAT properties, its
    default-format properties."""
    found = set()
    if case.format is not None:
        found.add(case.format.upper())
    for statement in case.statements:
        found.update(m.upper() for m in _FORMAT_PROP.findall(statement))
    found.update(str(v).upper() for k, v in case.properties.items() if k.startswith("ksql.persistence.default.format"))
    return [name for name in REGISTRY_FORMAT_NAMES if name in found]


def uses_registry_format(case: QttCase) -> bool:
    """The case reads or writes AVRO, PROTOBUF, PROTOBUF_NOSR or JSON_SR (``registry_formats``)."""
    return bool(registry_formats(case))


def infers_schema(case: QttCase) -> bool:
    """A CREATE STREAM/TABLE without a column list in a registry format: columns from the registry."""
    return uses_registry_format(case) and any(_CREATE_WITHOUT_COLUMNS.match(s) for s in case.statements)


def static_family(case: QttCase) -> Family | None:
    """The out-of-scope family of ``case`` read from its text alone, or None (run it)."""
    if case.versions.get("max"):
        return OLDER_VERSIONS
    text = "\n".join(case.statements)
    if _CONNECTOR.search(text):
        return CONNECTORS
    if any(name.upper() in TEST_UDF_NAMES for name in _CALL.findall(text)):
        return UDF_PLUGINS
    return None


def refusal_family(message: str) -> Family | None:
    """The family of a statement our parser refuses as valid ksqlDB it lacks (``<construct> is not
    supported``, docs/sql-reference.md "Not supported"), or None for any other error."""
    match = _NOT_SUPPORTED.search(message)
    if match is None:
        return None
    return Family(f"documented not supported: {match.group(1).strip()}")
