"""``oncestream sql --server URL``: an interactive SQL shell like ksqlDB's CLI, over the REST API.

- Interactive (prompt-toolkit): a statement may span lines and runs once a ``;`` ends it outside
  quotes and comments; history is kept in a file; results are printed as tables; push queries
  stream their rows until LIMIT or Ctrl-C, which closes the query on the server.
- ``-e STATEMENTS`` / ``-f FILE`` (or statements piped into stdin): run the statements in order
  and exit; the first error is printed (on stderr) and the exit code is 1.
- ``--user NAME`` (``-u``) and ``--password`` (asked on the terminal when omitted), ``--ca-file``
  and ``--client-cert``/``--client-key``: a server secured with HTTPS and Basic authentication
  (ksqlDB's CLI takes ``-u``/``-p``; here ``-p`` stays ``--property``).
- ``SET 'name'='value';`` and ``UNSET 'name';`` are kept by the shell, as ksqlDB's CLI keeps them,
  and sent with every later request (``streamsProperties`` on /ksql, ``properties`` on
  /query-stream); ``RUN SCRIPT 'file.sql';`` runs a file's statements; ``exit``/``quit`` (or
  Ctrl-D) leave.
- ``DEFINE name = 'value';`` / ``UNDEFINE name;`` / ``SHOW VARIABLES;`` are the shell's, as in
  ksqlDB's CLI: it keeps the session's variables and substitutes ``${name}`` in each statement
  before sending it (queries too), with the server's rules and errors.

Statements are cut with the parser's tokenizer (``split_statement_texts``), never parsed: the
server parses them (``${name}`` is replaced on the tokens). Only the first word matters to the
shell (SELECT/PRINT stream; DEFINE/UNDEFINE/SHOW VARIABLES are the shell's; the rest go to /ksql).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from oncestream.sql.errors import ParseError

if TYPE_CHECKING:  # imported lazily at run time: `oncestream --help` must not load httpx / prompt-toolkit / sqlglot
    from prompt_toolkit import PromptSession

    from oncestream.sql.language.parser import Word
    from oncestream.sql.server.rest.client import RestClient

DEFAULT_SERVER = "http://localhost:8088"
HISTORY_ENV = "ONCESTREAM_SQL_HISTORY"
PROMPT = "ksql> "
CONTINUATION_PROMPT = "   > "
QUERY_VERBS = ("SELECT", "PRINT")


# --- words of a statement -------------------------------------------------------------------------------


def _words(statement: str) -> list[Word]:
    """The statement's tokens (the parser's tokenizer); none for text it cannot read, which then
    goes to the server as it is, to be answered with the server's syntax error."""
    from oncestream.sql.language.parser import words_of  # sqlglot: loaded when a statement runs

    try:
        return [w for w in words_of(statement) if w.is_string or w.text != ";"]
    except ParseError:
        return []


def first_word(statement: str) -> str:
    words = _words(statement)
    return words[0].text.upper() if words else ""


def _quoted_words(statement: str) -> list[str]:
    """The 'single-quoted' strings of a statement, in order (``''`` unescaped)."""
    return [w.text for w in _words(statement) if w.is_string]


# --- rendering -----------------------------------------------------------------------------------------


def format_value(value: Any) -> str:
    """A cell as ksqlDB's CLI prints it: null, true/false, JSON for structs, maps and arrays."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def render_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """ksqlDB's CLI table: `` H1 | H2 `` over a dashed line, rows, a closing dashed line."""
    cells = [[format_value(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, cell in enumerate(row[:len(widths)]):
            widths[i] = max(widths[i], len(cell))

    def line(values: Sequence[str]) -> str:
        return "|".join(f" {v:<{w}} " for v, w in zip(values, widths)).rstrip()

    rule = "-" * (sum(widths) + 3 * len(widths) - 1)
    out = [line(headers), rule, *(line(row) for row in cells), rule]
    return "\n".join(out)


def _fields_rows(fields: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for f in fields or []:
        schema = f.get("schema") or {}
        type_ = schema.get("type", "") if isinstance(schema, dict) else str(schema)
        if f.get("type") == "KEY":
            type_ += " (key)"
        elif f.get("type") == "HEADER":   # ksqlDB's CLI: the header key, or all of them
            key = f.get("headerKey")
            type_ = f"{type_:<16} " + ("(headers)" if key is None else f"(header('{key}'))")
        rows.append([f.get("name", ""), type_])
    return rows


def render_entity(entity: dict[str, Any]) -> str:
    """One /ksql entity as ksqlDB's CLI shows it; unknown entities as indented JSON."""
    kind = entity.get("@type")
    text: str
    if kind == "currentStatus":
        text = render_table(["Message"], [[(entity.get("commandStatus") or {}).get("message", "")]])
    elif kind in ("streams", "tables"):
        noun = "Stream" if kind == "streams" else "Table"
        text = render_table([f"{noun} Name", "Kafka Topic", "Key Format", "Value Format", "Windowed"],
                            [[s.get("name"), s.get("topic"), s.get("keyFormat"), s.get("valueFormat"),
                              s.get("isWindowed")] for s in entity.get(kind) or []])
    elif kind == "queries":
        text = render_table(["Query ID", "Query Type", "Status", "Sink Name", "Sink Kafka Topic", "Query String"],
                            [[q.get("id"), q.get("queryType"), q.get("state") or _status_count(q),
                              ",".join(q.get("sinks") or []), ",".join(q.get("sinkKafkaTopics") or []),
                              q.get("queryString")] for q in entity.get("queries") or []])
    elif kind == "properties":
        text = render_table(["Property", "Scope", "Level", "Value"],
                            [[p.get("name"), p.get("scope"), p.get("level"), p.get("value")]
                             for p in entity.get("properties") or []])
    elif kind == "kafka_topics":
        text = render_table(["Kafka Topic", "Partitions", "Partition Replicas"],
                            [[t.get("name"), len(t.get("replicaInfo") or []), ",".join(map(str, t.get("replicaInfo") or []))]
                             for t in entity.get("topics") or []])
    elif kind == "sourceDescription":
        text = _render_source(entity.get("sourceDescription") or {})
    elif kind == "source_descriptions":
        text = "\n\n".join(_render_source(d) for d in entity.get("sourceDescriptions") or [])
    elif kind == "function_names":
        text = render_table(["Function Name", "Category"],
                            [[f.get("name"), f.get("category")] for f in entity.get("functions") or []])
    elif kind == "queryDescription":
        text = _render_query(entity.get("queryDescription") or {})
    elif kind == "variables":
        text = render_table(["Variable Name", "Value"],
                            [[v.get("name"), v.get("value")] for v in entity.get("variables") or []])
    elif kind == "type_list":
        text = render_table(["Type Name", "Schema"],
                            [[name, _schema_text(schema)] for name, schema in (entity.get("types") or {}).items()])
    elif kind == "warning_entity":
        text = f"WARNING: {entity.get('message', '')}"
    else:
        text = json.dumps(entity, indent=2)
    warnings = [w.get("message", str(w)) if isinstance(w, dict) else str(w) for w in entity.get("warnings") or []]
    return "\n".join([text, *(f"WARNING: {w}" for w in warnings)])


def _schema_text(schema: dict[str, Any]) -> str:
    """A SchemaInfo as ksqlDB writes the type (``STRUCT<`A` INTEGER>``)."""
    kind = str(schema.get("type", ""))
    if kind == "ARRAY":
        return f"ARRAY<{_schema_text(schema.get('memberSchema') or {})}>"
    if kind == "MAP":
        return f"MAP<STRING, {_schema_text(schema.get('memberSchema') or {})}>"
    if kind == "STRUCT":
        inner = ", ".join(f"`{f.get('name')}` {_schema_text(f.get('schema') or {})}" for f in schema.get("fields") or [])
        return f"STRUCT<{inner}>"
    if kind == "DECIMAL":
        params = schema.get("parameters") or {}
        return f"DECIMAL({params.get('precision')}, {params.get('scale')})"
    return kind


def _status_count(query: dict[str, Any]) -> str:
    counts = query.get("statusCount") or {}
    return ",".join(f"{state}:{n}" for state, n in counts.items())


def _render_source(d: dict[str, Any]) -> str:
    head = [f"{'Name':<20}: {d.get('name')}",
            f"{'Type':<20}: {d.get('type')}",
            f"{'Timestamp field':<20}: {d.get('timestamp') or 'Not set - using <ROWTIME>'}",
            f"{'Key format':<20}: {d.get('keyFormat')}",
            f"{'Value format':<20}: {d.get('valueFormat')}",
            f"{'Kafka topic':<20}: {d.get('topic')} (partitions: {d.get('partitions')}, "
            f"replication: {d.get('replication')})"]
    if d.get("statement"):
        head.append(f"{'Statement':<20}: {d.get('statement')}")
    parts = ["\n".join(head), "", render_table(["Field", "Type"], _fields_rows(d.get("fields") or []))]
    for title, key in (("Queries that read from this", "readQueries"), ("Queries that write from this", "writeQueries")):
        queries = d.get(key) or []
        if queries:
            parts += ["", f"{title} {d.get('type', 'source').upper()}", "-" * 40,
                      *(f"{q.get('id')} ({q.get('state', '')}) : {q.get('queryString', '')}" for q in queries)]
    return "\n".join(parts)


def _render_query(d: dict[str, Any]) -> str:
    head = [f"{'ID':<20}: {d.get('id')}", f"{'Query type':<20}: {d.get('queryType')}",
            f"{'SQL':<20}: {d.get('statementText')}", f"{'Status':<20}: {d.get('state')}"]
    hosts = d.get("ksqlHostQueryStatus") or {}
    if hosts:
        head.append(f"{'Host Query Status':<20}: {json.dumps(hosts)}")
    parts = ["\n".join(head), "", render_table(["Field", "Type"], _fields_rows(d.get("fields") or [])),
             "", f"Sources that this query reads from: {', '.join(d.get('sources') or [])}",
             f"Sinks that this query writes to: {', '.join(d.get('sinks') or [])}"]
    errors = d.get("queryErrors") or []
    if errors:
        parts += ["", "Query errors:", *(f"  {e.get('errorMessage', e) if isinstance(e, dict) else e}" for e in errors)]
    return "\n".join(parts)


# --- the shell ------------------------------------------------------------------------------------------


class Shell:
    """Runs statements against one server and prints their results to ``out`` (errors to
    ``err``)."""

    def __init__(self, client: RestClient, *, out: TextIO, err: TextIO) -> None:
        self.client = client
        self.out = out
        self.err = err
        from oncestream.sql.language.parser.variables import SessionVariables  # sqlglot: not for `--help`

        self.properties: dict[str, str] = {}
        self.variables = SessionVariables()

    def print(self, text: str = "") -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def run_text(self, text: str) -> bool:
        """Run every complete statement of ``text`` (an unterminated last one too); False at the
        first error."""
        from oncestream.sql.language.parser import split_statement_texts

        statements, rest = split_statement_texts(text)
        if rest.strip():
            statements.append(rest.strip())
        return all(self.run_statement(s) for s in statements)

    def run_statement(self, statement: str) -> bool:
        """Run one statement; print its results or its error. False on error."""
        import httpx

        from oncestream.sql.errors import KsqlError
        from oncestream.sql.language.parser import substitute_variables
        from oncestream.sql.server.rest.client import ServerError

        verb = first_word(statement)
        try:
            if verb in ("DEFINE", "UNDEFINE") or (verb in ("SHOW", "LIST") and self._second_word(statement) == "VARIABLES"):
                return self._variable(statement, verb)
            statement = substitute_variables(statement, self.variables)
            verb = first_word(statement)
            if verb == "SET":
                return self._set(statement)
            if verb == "UNSET":
                return self._unset(statement)
            if verb == "RUN":
                return self._run_script(statement)
            if verb == "PRINT":
                self._print_topic(statement)
            elif verb in QUERY_VERBS:
                self._query(statement)
            else:
                for entity in self.client.ksql(statement, self.properties):
                    self.print(render_entity(entity))
            return True
        except (ServerError, KsqlError) as exc:
            self.err.write(exc.message + "\n")
            self.err.flush()
            return False
        except (httpx.HTTPError, OSError) as exc:  # connection refused or reset, protocol error
            self.err.write(f"Error talking to {self.client.url}: {exc}\n")
            self.err.flush()
            return False

    @staticmethod
    def _second_word(statement: str) -> str:
        words = _words(statement)
        return words[1].text.upper() if len(words) > 1 and not words[1].is_string else ""

    def _variable(self, statement: str, verb: str) -> bool:
        """DEFINE / UNDEFINE / SHOW VARIABLES, answered by the shell (ksqlDB's CLI keeps the
        variables of its session); the value of a DEFINE is substituted first."""
        from oncestream.sql.language import sql_ast
        from oncestream.sql.language.parser import parse, substitute_variables

        (parsed,) = parse(substitute_variables(statement, self.variables) if verb == "DEFINE" else statement)
        if isinstance(parsed, sql_ast.DefineVariable):
            self.variables.define(parsed.name, parsed.value)
        elif isinstance(parsed, sql_ast.UndefineVariable):
            if not self.variables.undefine(parsed.name):
                self.print(f"WARNING: Cannot undefine variable '{parsed.name}' which was never defined")
        else:
            self.print(render_table(["Variable Name", "Value"], [[k, v] for k, v in self.variables.items()]))
        return True

    def _set(self, statement: str) -> bool:
        words = _quoted_words(statement)
        if len(words) != 2:
            self.err.write("Usage: SET '<property>'='<value>';\n")
            return False
        name, value = words
        old = self.properties.get(name)
        self.properties[name] = value
        was = f" from '{old}'" if old is not None else ""
        self.print(f"Successfully changed local property '{name}'{was} to '{value}'.")
        return True

    def _unset(self, statement: str) -> bool:
        words = _quoted_words(statement)
        if len(words) != 1:
            self.err.write("Usage: UNSET '<property>';\n")
            return False
        old = self.properties.pop(words[0], None)
        was = f" (value was '{old}')" if old is not None else ""
        self.print(f"Successfully unset local property '{words[0]}'{was}.")
        return True

    def _run_script(self, statement: str) -> bool:
        """``RUN SCRIPT 'file.sql';`` (ksqlDB's CLI): the file's statements, in order."""
        words = _quoted_words(statement)
        second = [w.text.upper() for w in _words(statement)[1:2]]
        if second != ["SCRIPT"] or len(words) != 1:
            self.err.write("Usage: RUN SCRIPT '<file>';\n")
            return False
        try:
            text = Path(words[0]).read_text(encoding="utf-8")
        except OSError as exc:
            self.err.write(f"Cannot read {words[0]}: {exc.strerror or exc}\n")
            return False
        return self.run_text(text)

    def _print_topic(self, statement: str) -> None:
        """PRINT: the topic's lines as the server writes them, until LIMIT or Ctrl-C, then
        ksqlDB's CLI's closing line."""
        lines = self.client.print_topic(statement, self.properties)
        try:
            for line in lines:
                self.print(line)
        except KeyboardInterrupt:
            pass
        finally:
            lines.close()
        self.print("Topic printing ceased")

    def _query(self, statement: str) -> None:
        """Stream a query's rows as a table until it ends or Ctrl-C (which closes it)."""
        result = self.client.query(statement, self.properties)
        widths = [max(len(c.name), 10) for c in result.columns]
        rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

        def row_line(values: Sequence[str]) -> str:
            return "|" + "|".join(f"{v:<{w + 2}}" for v, w in zip(values, widths)) + "|"

        self.print(rule)
        self.print(row_line([c.name for c in result.columns]))
        self.print(rule)
        try:
            for row in result.rows():
                self.print(row_line([format_value(v) for v in row]))
        except KeyboardInterrupt:
            result.close()
            self.print("Query terminated")
            return
        finally:
            result.close()
        if result.error is not None:
            from oncestream.sql.server.rest.client import ServerError

            raise ServerError(str(result.error.get("message")), status=200, error_code=result.error.get("error_code"),
                              entity=result.error)
        if result.final_message == "Limit Reached":
            self.print("Limit Reached")
        self.print("Query terminated")

    def interactive(self, session: PromptSession[str]) -> int:
        """Read statements until ``exit``/``quit`` or end of input."""
        from oncestream.sql.language.parser import split_statement_texts

        buffer = ""
        while True:
            try:
                line = session.prompt(CONTINUATION_PROMPT if buffer else PROMPT)
            except KeyboardInterrupt:
                buffer = ""  # Ctrl-C at the prompt drops the statement being typed
                continue
            except EOFError:
                return 0
            if not buffer and line.strip().rstrip(";").strip().lower() in ("exit", "quit"):
                return 0
            if not buffer and line.strip().lower() == "help":
                self.print(HELP)
                continue
            buffer = f"{buffer}\n{line}" if buffer else line
            statements, buffer = split_statement_texts(buffer)
            for statement in statements:
                try:
                    self.run_statement(statement)
                except KeyboardInterrupt:
                    self.print("")


HELP = """\
Statements end with ';' and may span lines. Queries (SELECT ... EMIT CHANGES) stream until their
LIMIT or Ctrl-C, as does PRINT 'topic' [FROM BEGINNING] [INTERVAL n] [LIMIT n]; (a topic's
records). SET 'property'='value'; and UNSET 'property'; change the properties sent with
every request. DEFINE name = 'value'; defines a variable, used as ${name} in later statements
(UNDEFINE name;, SHOW VARIABLES;). RUN SCRIPT 'file.sql'; runs the statements of a file. exit or quit (or Ctrl-D)
leaves the shell."""


# --- command line ----------------------------------------------------------------------------------------


def default_history_path() -> Path:
    return Path(os.environ.get(HISTORY_ENV) or Path.home() / ".oncestream_sql_history")


def run(args: argparse.Namespace, *, out: TextIO | None = None, err: TextIO | None = None,
        session_factory: Callable[[Path], PromptSession[str]] | None = None) -> int:
    """The ``oncestream sql`` command."""
    import httpx

    from oncestream.sql.server.rest.client import Credentials, RestClient, ServerError

    out = out or sys.stdout
    err = err or sys.stderr
    # getattr: callers building their Namespace by hand (before these options existed) still work.
    user, password = getattr(args, "user", None), getattr(args, "password", None)
    if user is not None and password is None:
        if not sys.stdin.isatty():
            err.write("--user needs --password when the terminal cannot ask for it\n")
            return 1
        import getpass

        password = getpass.getpass("Password: ")
    credentials = Credentials(user=user, password=password, ca_file=getattr(args, "ca_file", None),
                              client_cert=getattr(args, "client_cert", None),
                              client_key=getattr(args, "client_key", None))
    with RestClient(args.server, credentials=credentials) as client:
        shell = Shell(client, out=out, err=err)
        for item in args.property or []:
            name, sep, value = item.partition("=")
            if not sep:
                err.write(f"--property expects NAME=VALUE, got {item!r}\n")
                return 1
            shell.properties[name.strip()] = value.strip()
        try:
            info = client.info()
        except ServerError as exc:
            if exc.status == 401:  # ksql's CLI says the same when -u/-p do not check
                err.write(f"The SQL server at {args.server} refused the credentials (HTTP 401: {exc}); "
                          "give --user and --password\n")
            else:
                err.write(f"Cannot reach the SQL server at {args.server}: {exc}\n")
            return 1
        except (httpx.HTTPError, OSError) as exc:
            err.write(f"Cannot reach the SQL server at {args.server}: {exc}\n")
            return 1
        if args.execute is not None or args.file is not None:
            try:
                text = args.execute if args.execute is not None else Path(args.file).read_text(encoding="utf-8")
            except OSError as exc:
                err.write(f"Cannot read {args.file}: {exc.strerror or exc}\n")
                return 1
            return 0 if shell.run_text(text) else 1
        if session_factory is None and not sys.stdin.isatty():
            # Statements piped in (`oncestream sql < script.sql`): a script, as with -f.
            return 0 if shell.run_text(sys.stdin.read()) else 1
        shell.print(f"Server {info.get('version', '?')} at {args.server} (service id {info.get('ksqlServiceId', '?')})")
        shell.print("Statements end with ';'. Type help for help, exit to leave.")
        history = Path(args.history_file) if args.history_file else default_history_path()
        session = (session_factory or _prompt_session)(history)
        return shell.interactive(session)


def _prompt_session(history: Path) -> PromptSession[str]:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.history import FileHistory

    history.parent.mkdir(parents=True, exist_ok=True)
    return PromptSession(history=FileHistory(str(history)))


def register(sub: Any) -> None:
    """Add ``oncestream sql`` to the CLI's subcommands."""
    p = sub.add_parser("sql", help="SQL shell for an oncestream SQL server (ksqlDB's CLI)")
    p.add_argument("--server", default=DEFAULT_SERVER, help=f"the server's URL (default {DEFAULT_SERVER})")
    source = p.add_mutually_exclusive_group()
    source.add_argument("-e", "--execute", metavar="STATEMENTS", help="run these statements and exit")
    source.add_argument("-f", "--file", metavar="FILE", help="run the statements of FILE and exit")
    p.add_argument("--property", "-p", action="append", metavar="NAME=VALUE",
                   help="a property sent with every request (as SET would)")
    p.add_argument("--history-file", help=f"history file (default ${HISTORY_ENV} or ~/.oncestream_sql_history)")
    p.add_argument("--user", "-u", help="user name for HTTP Basic authentication")
    p.add_argument("--password", help="password for --user (asked on the terminal when omitted)")
    p.add_argument("--ca-file", help="PEM CA certificate(s) to verify an https:// server with")
    p.add_argument("--client-cert", help="PEM client certificate (and key) for a listener asking for one")
    p.add_argument("--client-key", help="PEM key of --client-cert, if in its own file")
    p.set_defaults(func=run)
