"""ksqlDB's PRINT statement (SqlBase.g4 ``PRINT resourceName printClause``): the topic name keeps
its case, FROM BEGINNING, INTERVAL (or SAMPLE) and LIMIT in that order, integers only."""

from __future__ import annotations

import pytest

from oncestream.sql.errors import ParseError
from oncestream.sql.language import sql_ast
from oncestream.sql.language.parser import parse


def printed(text: str) -> sql_ast.PrintTopic:
    (statement,) = parse(text)
    assert isinstance(statement, sql_ast.PrintTopic)
    return statement


def test_print_defaults_start_at_the_end_every_record_no_limit() -> None:
    s = printed("PRINT pageViews;")
    assert (s.topic, s.from_beginning, s.interval, s.limit) == ("pageViews", False, 1, None)
    assert s.text == "PRINT pageViews;"


def test_print_topic_name_keeps_its_case_quoted_or_not() -> None:
    # AstBuilder.getResourceName reads the identifier case-sensitively: Kafka topic names are.
    assert printed("print Mixed_Case;").topic == "Mixed_Case"
    assert printed("PRINT `Back`;").topic == "Back"
    assert printed('PRINT "Dq";').topic == "Dq"
    assert printed("PRINT 'my-topic.v1';").topic == "my-topic.v1"
    assert printed("PRINT 'it''s';").topic == "it's"


def test_print_all_clauses() -> None:
    s = printed("PRINT 't' FROM BEGINNING INTERVAL 3 LIMIT 10;")
    assert (s.topic, s.from_beginning, s.interval, s.limit) == ("t", True, 3, 10)
    s = printed("print t from beginning sample 2;")
    assert (s.from_beginning, s.interval, s.limit) == (True, 2, None)
    assert printed("PRINT t LIMIT 5;").limit == 5


def test_print_negative_numbers_parse_and_are_refused_when_run() -> None:
    # The grammar's ``number`` takes a minus; TopicStreamWriter refuses an INTERVAL below one.
    assert printed("PRINT t INTERVAL -1;").interval == -1


@pytest.mark.parametrize(("text", "message"), [
    ("PRINT;", "line 1:6: Syntax Error\nmismatched input ';' expecting an identifier"),
    ("PRINT t FROM x;", "line 1:14: Syntax Error\nmismatched input 'x' expecting 'BEGINNING'"),
    ("PRINT t LIMIT 2 INTERVAL 3;", "line 1:17: Syntax Error\nmismatched input 'INTERVAL' expecting ';'"),
    ("PRINT t LIMIT 1.5;", "line 1:15: Value must be integer for command: LIMIT"),
    ("PRINT t INTERVAL 0.5;", "line 1:18: Value must be integer for command: INTERVAL"),
])
def test_print_syntax_errors(text: str, message: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse(text)
    assert caught.value.message == message
