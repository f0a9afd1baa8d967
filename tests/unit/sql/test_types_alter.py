"""CREATE TYPE / DROP TYPE and ALTER STREAM|TABLE ... ADD COLUMN: parsed by the real parser,
validated and applied by the metastore with ksqlDB's rules and messages, and replayed from their
command-topic records alone (decoded commands carry no AST: type names are resolved again with
the types the earlier commands registered)."""

from __future__ import annotations

import pytest

from oncestream.sql.errors import ParseError, StatementError
from oncestream.sql.language import sql_ast
from oncestream.sql.language import types as t
from oncestream.sql.language.parser import parse, parse_request
from oncestream.sql.server.commands import command_id, decode, encode
from oncestream.sql.server.metastore import CommandResult, Metastore

ADDRESS = t.struct_of(("NUMBER", t.INTEGER), ("STREET", t.STRING))


def statement(ms: Metastore, text: str) -> sql_ast.Statement:
    (only,) = parse(text, ms.custom_types())
    return only


def run(ms: Metastore, text: str, offset: int) -> CommandResult:
    command = ms.validate(statement(ms, text), {}, {"orders": 1})
    last = ms.apply(command, offset)[-1]
    assert isinstance(last, CommandResult)
    return last


def test_create_type_then_use_it_in_a_column_list() -> None:
    ms = Metastore()
    created = run(ms, "CREATE TYPE address AS STRUCT<number INT, street STRING>;", 0)
    assert created.message == ("Registered custom type with name 'ADDRESS' and SQL type "
                               "STRUCT<`NUMBER` INTEGER, `STREET` STRING>")
    run(ms, "CREATE STREAM orders (id INT KEY, home ADDRESS, past ARRAY<address>) "
            "WITH (kafka_topic='orders', value_format='json');", 1)
    source = ms.source("ORDERS")
    assert source is not None
    assert [c.type for c in source.columns] == [t.INTEGER, ADDRESS, t.array_of(ADDRESS)]


def test_type_rules_and_messages() -> None:
    ms = Metastore()
    run(ms, "CREATE TYPE address AS STRUCT<number INT, street STRING>;", 0)
    with pytest.raises(StatementError) as again:
        ms.validate(statement(ms, "CREATE TYPE ADDRESS AS INT;"))
    assert again.value.message == ("Cannot register custom type 'ADDRESS' since it is already registered with type: "
                                   "STRUCT<`NUMBER` INTEGER, `STREET` STRING>")
    assert run(ms, "CREATE TYPE IF NOT EXISTS address AS INT;", 1).message.startswith("ADDRESS is already registered")
    assert run(ms, "DROP TYPE address;", 2).message == "Dropped type 'ADDRESS'"
    with pytest.raises(StatementError, match=r"^Type ADDRESS does not exist\.$"):
        ms.validate(statement(ms, "DROP TYPE address;"))
    assert run(ms, "DROP TYPE IF EXISTS address;", 3).message == "Type 'ADDRESS' does not exist"
    with pytest.raises(ParseError, match="Unknown type: ADDRESS"):
        statement(ms, "CREATE STREAM s (a ADDRESS) WITH (kafka_topic='orders', value_format='json');")


def test_a_request_may_use_a_type_it_creates_earlier() -> None:
    ms = Metastore()
    first, second = parse_request("CREATE TYPE address AS STRUCT<number INT>; "
                                  "CREATE STREAM s (a ADDRESS) WITH (kafka_topic='orders', value_format='json');")
    assert second.names_types
    ms.apply(ms.validate(first.resolve({}, ms.custom_types())), 0)
    create = second.resolve({}, ms.custom_types())
    assert isinstance(create, sql_ast.CreateSource)
    assert create.columns[0].type == t.struct_of(("NUMBER", t.INTEGER))


def test_alter_adds_value_columns_at_the_end() -> None:
    ms = Metastore()
    run(ms, "CREATE STREAM orders (id INT KEY, a STRING) WITH (kafka_topic='orders', value_format='json');", 0)
    altered = run(ms, "ALTER STREAM orders ADD COLUMN b BIGINT, ADD c ARRAY<STRING>;", 1)
    assert altered.message == "Stream ORDERS altered."
    source = ms.source("ORDERS")
    assert source is not None
    assert [(c.name, c.type) for c in source.columns] == [("ID", t.INTEGER), ("A", t.STRING), ("B", t.BIGINT),
                                                          ("C", t.array_of(t.STRING))]
    assert command_id(statement(ms, "ALTER TABLE x ADD y INT;")) == "table/X/alter"


@pytest.mark.parametrize(("setup", "alter", "message"), [
    ("CREATE STREAM orders (id INT KEY, a STRING) WITH (kafka_topic='orders', value_format='json');",
     "ALTER STREAM orders ADD COLUMN a INT;",
     "Cannot add column `A` to schema. A column with the same name already exists."),
    ("CREATE STREAM orders (id INT KEY, a STRING) WITH (kafka_topic='orders', value_format='json');",
     "ALTER TABLE orders ADD COLUMN b INT;", "Incompatible data source type is STREAM, but statement was ALTER TABLE"),
    ("CREATE SOURCE STREAM orders (id INT KEY, a STRING) WITH (kafka_topic='orders', value_format='json');",
     "ALTER STREAM orders ADD COLUMN b INT;",
     "Cannot alter stream 'ORDERS': ALTER operations are not supported on source streams."),
    ("CREATE STREAM orders (id INT KEY, a STRING) WITH (kafka_topic='orders', value_format='json');",
     "ALTER STREAM nope ADD COLUMN b INT;", "Source NOPE does not exist."),
])
def test_alter_rules(setup: str, alter: str, message: str) -> None:
    ms = Metastore()
    run(ms, setup, 0)
    with pytest.raises(StatementError) as refused:
        ms.validate(statement(ms, alter))
    assert refused.value.message == message


def test_alter_is_refused_on_a_create_as_select_sink() -> None:
    ms = Metastore()
    run(ms, "CREATE STREAM orders (id INT KEY, a STRING) WITH (kafka_topic='orders', value_format='json');", 0)
    run(ms, "CREATE STREAM big AS SELECT * FROM orders;", 1)
    with pytest.raises(StatementError, match=r"^ALTER command is not supported for CREATE \.\.\. AS statements\.$"):
        ms.validate(statement(ms, "ALTER STREAM big ADD COLUMN b INT;"))


def test_types_and_alters_replay_from_the_command_records_alone() -> None:
    live, replayed = Metastore(), Metastore()
    texts = ["CREATE TYPE address AS STRUCT<number INT, street STRING>;",
             "CREATE STREAM orders (id INT KEY, home ADDRESS) WITH (kafka_topic='orders', value_format='json');",
             "ALTER STREAM orders ADD COLUMN work ADDRESS;",
             "DROP TYPE address;"]
    for offset, text in enumerate(texts):
        command = live.validate(statement(live, text), {}, {"orders": 1})
        live.apply(command, offset)
        last = replayed.apply(decode(*encode(command)), offset)[-1]
        assert isinstance(last, CommandResult)
        assert last.status == "SUCCESS", last.message
    assert replayed.describe_all() == live.describe_all()
    source = replayed.source("ORDERS")
    assert source is not None
    assert [c.type for c in source.columns][1:] == [ADDRESS, ADDRESS]
    assert replayed.custom_types() == {}
