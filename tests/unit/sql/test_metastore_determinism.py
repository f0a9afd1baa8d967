"""Determinism of the metastore (the property the command-topic protocol relies on): any sequence
of commands, applied by a node that validated them and by a node that only replays the command
topic's records (text parsed again), gives equal metastores; apply never raises, whatever the
sequence (statements that became invalid answer an ERROR result)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from oncestream.sql.errors import StatementError
from oncestream.sql.language.parser import parse
from oncestream.sql.server.commands import Command, command_id, decode, encode
from oncestream.sql.server.metastore import CommandResult, Metastore

TOPICS = {"a": 2, "b": 2}
NAMES = ["S1", "S2", "T1", "T2"]

STATEMENTS = st.one_of(
    st.builds(lambda n, topic: f"CREATE STREAM {n} (ID INT KEY, V STRING, X BIGINT) WITH (KAFKA_TOPIC='{topic}', "
                               "VALUE_FORMAT='JSON');", st.sampled_from(NAMES), st.sampled_from(["a", "b"])),
    st.builds(lambda n: f"CREATE TABLE {n} (ID INT PRIMARY KEY, V STRING) WITH (KAFKA_TOPIC='b', VALUE_FORMAT='JSON');",
              st.sampled_from(NAMES)),
    st.builds(lambda n, src: f"CREATE STREAM {n} AS SELECT ID, V, X FROM {src} WHERE X > 1;",
              st.sampled_from(NAMES), st.sampled_from(NAMES)),
    st.builds(lambda n, src: f"CREATE TABLE {n} AS SELECT V, COUNT(*) AS C FROM {src} GROUP BY V;",
              st.sampled_from(NAMES), st.sampled_from(NAMES)),
    st.builds(lambda n, src: f"INSERT INTO {n} SELECT ID, V, X FROM {src};", st.sampled_from(NAMES), st.sampled_from(NAMES)),
    st.builds(lambda kind, n, delete: f"DROP {kind} IF EXISTS {n}{' DELETE TOPIC' if delete else ''};",
              st.sampled_from(["STREAM", "TABLE"]), st.sampled_from(NAMES), st.booleans()),
    st.builds(lambda q: f"TERMINATE {q};", st.sampled_from(["CSAS_S1_3", "CTAS_T1_4", "INSERTQUERY_5", "ALL"])),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(STATEMENTS, min_size=1, max_size=12))
def test_validating_node_and_replaying_node_agree(texts: list[str]) -> None:
    leader, follower = Metastore(), Metastore()
    offset = 0
    for text in texts:
        (stmt,) = parse(text)
        try:
            cmd = leader.validate(stmt, {}, TOPICS)
        except StatementError:
            # refused statements never reach the command topic; write it anyway, as a racing node
            # would have, to check that apply refuses it the same way everywhere
            cmd = Command(command_id(stmt), stmt.text, statement_ast=stmt)
        leader_effects = leader.apply(cmd, offset)
        follower_effects = follower.apply(decode(*encode(cmd)), offset)
        assert isinstance(leader_effects[-1], CommandResult)
        assert [type(e) for e in leader_effects] == [type(e) for e in follower_effects]
        assert leader_effects[-1] == follower_effects[-1]
        offset += 1
        assert leader == follower, text
    assert leader.describe_all() == follower.describe_all()
