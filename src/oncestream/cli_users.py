"""``oncestream users add|delete|list``: SCRAM users (issue 14 point 3).

Offline with ``--data-dir DIR`` (a stopped broker's data directory, or a new empty one: how the
first admin is bootstrapped, as ``kafka-storage format --add-scram``), writing the broker's
durable credential store directly under the data directory's lock. Online with
``--bootstrap-server HOST:PORT`` through KIP-554's DescribeUserScramCredentials /
AlterUserScramCredentials, authenticating with the librdkafka properties of
``--command-config FILE`` (``security.protocol``, ``sasl.mechanism``, ``sasl.username``,
``sasl.password``). Either way the password never leaves this process: only the salt and the
salted password (online) or StoredKey/ServerKey (offline) do.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from oncestream.broker.sasl.credentials import ScramCredentialStore
from oncestream.broker.sasl.scram import (
    MAX_ITERATIONS,
    MECHANISMS,
    MIN_ITERATIONS,
    TYPE_BY_NAME,
    make_credential,
)
from oncestream.cli_common import CliError, read_command_config
from oncestream.client.common.connection import BrokerConnection, parse_bootstrap
from oncestream.client.common.sasl import SaslCredentials
from oncestream.client.common.tls import ssl_context_for
from oncestream.protocol.api_keys import ALTER_USER_SCRAM_CREDENTIALS, DESCRIBE_USER_SCRAM_CREDENTIALS

_NAME_BY_TYPE = {t: name for name, t in TYPE_BY_NAME.items()}


class UsersCliError(Exception):
    """A user-facing failure of ``oncestream users``."""


def register(sub: Any) -> None:
    """Add the ``users`` command to the top-level subparsers."""
    u = sub.add_parser("users", help="add, delete or list SCRAM users (offline --data-dir or online)")
    u.add_argument("action", choices=["add", "delete", "list"])
    u.add_argument("--user")
    u.add_argument("--mechanism", choices=sorted(MECHANISMS))
    u.add_argument("--password", help="for add (default: $ONCESTREAM_USER_PASSWORD)")
    u.add_argument("--iterations", type=int, default=MIN_ITERATIONS)
    where = u.add_mutually_exclusive_group(required=True)
    where.add_argument("--data-dir", help="offline: a stopped broker's data directory")
    where.add_argument("--bootstrap-server", "-b", help="online: HOST:PORT of a running broker")
    u.add_argument("--command-config", metavar="FILE",
                   help="client properties file for online use (security.protocol, ssl.*, sasl.*)")
    u.set_defaults(func=cmd_users)


def cmd_users(args: argparse.Namespace) -> int:
    try:
        _check_args(args)
        if args.data_dir:
            lines = _offline(args)
        else:
            lines = _online(args)
    except UsersCliError as exc:
        print(f"oncestream: {exc}", file=sys.stderr)
        return 1
    for line in lines:
        print(line)
    return 0


def _check_args(args: argparse.Namespace) -> None:
    if args.action in ("add", "delete") and not args.user:
        raise UsersCliError(f"users {args.action} needs --user")
    if args.action == "add":
        if not args.mechanism:
            raise UsersCliError("users add needs --mechanism")
        if args.password is None:
            args.password = os.environ.get("ONCESTREAM_USER_PASSWORD")
        if not args.password:
            raise UsersCliError("users add needs --password (or $ONCESTREAM_USER_PASSWORD)")
        if not MIN_ITERATIONS <= args.iterations <= MAX_ITERATIONS:
            raise UsersCliError(f"--iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}")


def _offline(args: argparse.Namespace) -> list[str]:
    from oncestream.broker.state import DataDirInUseError, DataDirLock

    data_dir = Path(args.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        lock = DataDirLock(data_dir)  # a running broker would overwrite (or miss) our change
    except DataDirInUseError as exc:
        raise UsersCliError(f"{exc}; use --bootstrap-server while it runs") from None
    try:
        store = ScramCredentialStore.open(data_dir)
        if args.action == "add":
            mech = MECHANISMS[args.mechanism]
            store.apply([(args.user, mech.name, make_credential(mech, args.password, args.iterations))], [])
            return [f"added {args.user} {mech.name}"]
        if args.action == "delete":
            users = store.users()
            mechs = [args.mechanism] if args.mechanism else sorted(users.get(args.user, {}))
            if not mechs or any(m not in users.get(args.user, {}) for m in mechs):
                raise UsersCliError(f"no {args.mechanism or 'SCRAM'} credential for user {args.user}")
            store.apply([], [(args.user, m) for m in mechs])
            return [f"deleted {args.user} {m}" for m in mechs]
        return [f"{user} {mech} iterations={cred.iterations}"
                for user, mechs in sorted(store.users().items()) for mech, cred in sorted(mechs.items())]
    finally:
        lock.release()


def _online(args: argparse.Namespace) -> list[str]:
    try:
        # The same properties as every other tool: TLS (ssl.*) first, then SASL (sasl.*).
        props = read_command_config(args.command_config) if args.command_config else {}
        sasl = SaslCredentials.from_config(props)
        host, port = parse_bootstrap(args.bootstrap_server)
        conn = BrokerConnection(host, port, client_id="oncestream-users", sasl=sasl,
                                ssl_context=ssl_context_for(props))
    except (ValueError, OSError, CliError) as exc:
        raise UsersCliError(f"cannot connect to {args.bootstrap_server}: {exc}") from None
    with conn:
        if args.action == "list":
            response = conn.call(DESCRIBE_USER_SCRAM_CREDENTIALS, lambda m: m.DescribeUserScramCredentialsRequest(
                users=(m.UserName(name=args.user),) if args.user else None))
            if response.error_code != 0:
                raise UsersCliError(f"describe failed: error {int(response.error_code)} {response.error_message or ''}")
            lines = []
            for result in response.results:
                if result.error_code != 0:
                    raise UsersCliError(f"{result.user}: error {int(result.error_code)} {result.error_message or ''}")
                lines += [f"{result.user} {_NAME_BY_TYPE.get(int(i.mechanism), i.mechanism)} iterations={i.iterations}"
                          for i in result.credential_infos]
            return lines
        if args.action == "add":
            mech = MECHANISMS[args.mechanism]
            salt = os.urandom(32)
            salted = mech.salted_password(args.password, salt, args.iterations)

            def make(m: Any) -> Any:
                return m.AlterUserScramCredentialsRequest(deletions=(), upsertions=(m.ScramCredentialUpsertion(
                    name=args.user, mechanism=TYPE_BY_NAME[mech.name], iterations=args.iterations,
                    salt=salt, salted_password=salted),))
            done = [f"added {args.user} {mech.name}"]
        else:
            mechs = [args.mechanism] if args.mechanism else sorted(MECHANISMS)
            if not args.mechanism:  # every mechanism the user has
                described = conn.call(DESCRIBE_USER_SCRAM_CREDENTIALS, lambda m: m.DescribeUserScramCredentialsRequest(
                    users=(m.UserName(name=args.user),)))
                mechs = [_NAME_BY_TYPE[int(i.mechanism)] for r in described.results for i in r.credential_infos
                         if int(i.mechanism) in _NAME_BY_TYPE]
                if not mechs:
                    raise UsersCliError(f"no SCRAM credential for user {args.user}")

            def make(m: Any) -> Any:
                return m.AlterUserScramCredentialsRequest(upsertions=(), deletions=tuple(
                    m.ScramCredentialDeletion(name=args.user, mechanism=TYPE_BY_NAME[name]) for name in mechs))
            done = [f"deleted {args.user} {name}" for name in mechs]
        response = conn.call(ALTER_USER_SCRAM_CREDENTIALS, make)
        for result in response.results:
            if result.error_code != 0:
                raise UsersCliError(f"{result.user}: error {int(result.error_code)} {result.error_message or ''}")
        return done
