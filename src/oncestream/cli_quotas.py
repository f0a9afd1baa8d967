"""``oncestream quotas describe|alter``: client quotas (KIP-546), with the options of Kafka's
``kafka-configs.sh`` for client quotas.

Entities are named by ``--entity-type user|client-id`` followed by ``--entity-name NAME`` or
``--entity-default``; give both types (each with its name or default) for a (user, client-id)
entity. ``alter`` takes ``--add-config 'k1=v1,k2=v2'`` and ``--delete-config 'k1,k2'`` (both
repeatable). ``describe`` lists the entities matching what is given (a type without a name or
default: every named entity of that type; nothing: every entity), one line each, as
kafka-configs prints them::

    Quota configs for user-principal 'alice', the default client-id are producer_byte_rate=1048576.0
"""

from __future__ import annotations

import argparse
from typing import Any

from oncestream.cli_client import admin_session, client_errors
from oncestream.cli_common import CliError
from oncestream.client.admin.admin_quotas import (
    CLIENT_ID,
    USER,
    ClientQuotaAlteration,
    ClientQuotaEntity,
    ClientQuotaFilter,
    ClientQuotaFilterComponent,
    ClientQuotaOp,
)

_ENTITY_TYPES = {"user": USER, "users": USER, "client-id": CLIENT_ID, "clients": CLIENT_ID}
_LABEL = {USER: "user-principal", CLIENT_ID: "client-id"}


class _EntityPart(argparse.Action):
    """Keeps --entity-type / --entity-name / --entity-default in the order given, so each name
    pairs with the type before it (as kafka-configs pairs them)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        parts = list(getattr(namespace, self.dest) or [])
        parts.append((self.const, values))
        setattr(namespace, self.dest, parts)


def register(sub: Any) -> None:
    """Add the ``quotas`` command to the top-level subparsers."""
    q = sub.add_parser("quotas", help="describe or alter client quotas (KIP-546; kafka-configs' options)")
    q.add_argument("action", choices=["describe", "alter"])
    q.add_argument("--entity-type", dest="entity", action=_EntityPart, const="type", choices=sorted(_ENTITY_TYPES),
                   help="user or client-id (give it twice, each with its name or default, for both)")
    q.add_argument("--entity-name", dest="entity", action=_EntityPart, const="name", metavar="NAME")
    q.add_argument("--entity-default", dest="entity", action=_EntityPart, const="default", nargs=0,
                   help="the <default> entity of the type before it")
    q.add_argument("--add-config", action="append", default=[], metavar="K=V[,K=V]",
                   help="producer_byte_rate, consumer_byte_rate, request_percentage, controller_mutation_rate")
    q.add_argument("--delete-config", action="append", default=[], metavar="K[,K]")
    q.add_argument("--bootstrap-server", "-b", default="127.0.0.1:9092")
    q.add_argument("--command-config", metavar="FILE",
                   help="client properties file (key=value, librdkafka names: security.protocol, ssl.*, sasl.*)")
    q.set_defaults(func=cmd_quotas)


def _entity_spec(parts: list[tuple[str, Any]]) -> list[tuple[str, str | None, bool]]:
    """(entity type, name, named) triples: named False with name None means 'any name'."""
    out: list[tuple[str, str | None, bool]] = []
    for kind, value in parts:
        if kind == "type":
            entity_type = _ENTITY_TYPES[value]
            if any(t == entity_type for t, _, _ in out):
                raise CliError(f"--entity-type {value} given twice")
            out.append((entity_type, None, False))
            continue
        if not out or out[-1][2] or out[-1][1] is not None:
            raise CliError(f"--entity-{kind} must follow an --entity-type")
        entity_type = out[-1][0]
        out[-1] = (entity_type, value if kind == "name" else None, True)
    return out


def _describe_entity(entity: ClientQuotaEntity) -> str:
    return ", ".join(f"the default {_LABEL.get(kind, kind)}" if name is None else f"{_LABEL.get(kind, kind)} '{name}'"
                     for kind, name in entity.parts)


def _add_ops(items: list[str]) -> list[ClientQuotaOp]:
    ops = []
    for item in items:
        for pair in filter(None, (p.strip() for p in item.split(","))):
            key, sep, value = pair.partition("=")
            if not sep:
                raise CliError(f"--add-config expects key=value, got {pair!r}")
            try:
                ops.append(ClientQuotaOp(key.strip(), float(value)))
            except ValueError:
                raise CliError(f"--add-config {key.strip()}: not a number: {value!r}") from None
    return ops


def cmd_quotas(args: argparse.Namespace) -> int:
    spec = _entity_spec(args.entity or [])
    if args.action == "alter":
        return _alter(args, spec)
    if args.add_config or args.delete_config:
        raise CliError("--add-config and --delete-config belong to alter")
    components = [ClientQuotaFilterComponent.of_entity_type(kind) if not named
                  else ClientQuotaFilterComponent.of_default_entity(kind) if name is None
                  else ClientQuotaFilterComponent.of_entity(kind, name)
                  for kind, name, named in spec]
    # kafka-configs: a fully named entity is described exactly (strict), a partial one loosely.
    quota_filter = ClientQuotaFilter.contains_only(components) if spec and all(n for _, _, n in spec) \
        else ClientQuotaFilter.contains(components)
    with admin_session(args) as admin, client_errors(args, "describe client quotas"):
        found = admin.describe_client_quotas(quota_filter)
    for entity in sorted(found, key=str):
        values = ", ".join(f"{key}={value!r}" for key, value in sorted(found[entity].items()))
        print(f"Quota configs for {_describe_entity(entity)} are {values}")
    return 0


def _alter(args: argparse.Namespace, spec: list[tuple[str, str | None, bool]]) -> int:
    if not spec or not all(named for _, _, named in spec):
        raise CliError("alter needs --entity-type with --entity-name or --entity-default for each type")
    ops = _add_ops(args.add_config)
    ops += [ClientQuotaOp(key.strip(), None) for item in args.delete_config for key in item.split(",") if key.strip()]
    if not ops:
        raise CliError("alter needs --add-config or --delete-config")
    entity = ClientQuotaEntity.of({kind: name for kind, name, _ in spec})
    with admin_session(args) as admin, client_errors(args, "alter client quotas"):
        result = admin.alter_client_quotas([ClientQuotaAlteration(entity, tuple(ops))])
    error = result.get(entity)
    if error is not None:
        raise CliError(f"alter client quotas of {_describe_entity(entity)}: {error.name()}: {error.str()}")
    print(f"Completed updating config for {_describe_entity(entity)}.")
    return 0
