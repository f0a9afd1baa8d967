"""``oncestream groups list|describe|reset-offsets|delete|delete-offsets``: the verbs of Kafka's
kafka-consumer-groups.sh and kafka-share-groups.sh in one command, for classic groups, KIP-848
consumer groups and KIP-932 share groups (issue 20).

Everything goes through ``Admin`` (``client/admin/admin_groups.py``). Kafka's rules are kept:
offsets are reset only while the group has no active members (Empty, or Dead: no group yet),
``--dry-run`` is the default and prints the plan only, and a reset target outside the partition's
[earliest, latest] range is moved to the nearer end (``--to-offset``, ``--shift-by``).
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from oncestream.cli_client import admin_session, client_errors
from oncestream.cli_common import CliError
from oncestream.client import Admin, TopicPartition
from oncestream.client.admin.admin_groups import (
    ConsumerGroupDescription,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    MemberDescription,
    ShareGroupDescription,
)

_D = TypeVar("_D", ConsumerGroupDescription, ShareGroupDescription)
_EARLIEST, _LATEST = -2, -1
_NO_OFFSET = -1001
# A reset is allowed only in these states (Kafka's ConsumerGroupCommand: inactive groups).
_INACTIVE = (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD)
_DURATION = re.compile(r"^(-)?P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$", re.IGNORECASE)
_TYPES = ("classic", "consumer", "share")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``groups`` command to the top-level subparsers."""
    g = sub.add_parser("groups", help="list, describe, reset offsets of or delete consumer and share groups")
    verbs = g.add_subparsers(dest="verb", required=True)

    def client_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--bootstrap-server", "-b", default="127.0.0.1:9092")
        p.add_argument("--command-config", metavar="FILE",
                       help="client properties file (key=value, librdkafka names: security.protocol, ssl.*, sasl.*)")

    ls = verbs.add_parser("list", help="every group: GROUP TYPE STATE PROTOCOL")
    ls.add_argument("--type", action="append", choices=_TYPES, help="only groups of this type (repeatable)")
    ls.add_argument("--state", action="append", metavar="STATE",
                    help="only groups in this state, e.g. Stable, Empty (repeatable)")
    client_args(ls)
    ls.set_defaults(func=cmd_list)

    d = verbs.add_parser("describe", help="a group's offsets and lag (default), members or state")
    d.add_argument("group")
    d.add_argument("--offsets", action="store_true", help="committed offset, log end and lag per partition (default)")
    d.add_argument("--members", action="store_true", help="members, their clients, hosts and assignments")
    d.add_argument("--state", action="store_true", help="coordinator, assignor, state and member count")
    client_args(d)
    d.set_defaults(func=cmd_describe)

    r = verbs.add_parser("reset-offsets", help="move an inactive group's offsets (dry run unless --execute)")
    r.add_argument("group")
    which = r.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", action="append", metavar="TOPIC[:P,...]", help="a topic, optionally some partitions")
    which.add_argument("--all-topics", action="store_true", help="every partition the group has an offset for")
    spec = r.add_mutually_exclusive_group(required=True)
    spec.add_argument("--to-earliest", action="store_true")
    spec.add_argument("--to-latest", action="store_true")
    spec.add_argument("--to-current", action="store_true")
    spec.add_argument("--to-offset", type=int, metavar="N")
    spec.add_argument("--shift-by", type=int, metavar="N")
    spec.add_argument("--to-datetime", metavar="ISO", help="e.g. 2026-11-28T12:00:00.000 (local time unless a zone is given)")
    spec.add_argument("--by-duration", metavar="PnDTnHnMnS", help="the offsets of this long ago")
    mode = r.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print the new offsets only (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    client_args(r)
    r.set_defaults(func=cmd_reset_offsets)

    x = verbs.add_parser("delete", help="delete groups (only groups without members)")
    x.add_argument("groups", nargs="+", metavar="GROUP")
    client_args(x)
    x.set_defaults(func=cmd_delete)

    o = verbs.add_parser("delete-offsets", help="delete a group's offsets of topics it is not subscribed to")
    o.add_argument("group")
    o.add_argument("--topic", action="append", required=True, metavar="TOPIC[:P,...]")
    client_args(o)
    o.set_defaults(func=cmd_delete_offsets)


# --- output ------------------------------------------------------------------------------------


def print_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """Columns padded to their widest cell, as Kafka's tools print them."""
    cells = [[str(c) for c in header]] + [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        print(" ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())


def _offset(value: int) -> str:
    return "-" if value < 0 else str(value)


# --- helpers -----------------------------------------------------------------------------------


def parse_topic_partitions(values: Iterable[str]) -> list[tuple[str, list[int] | None]]:
    """``T`` (every partition) or ``T:0,2`` (those), as kafka-consumer-groups' --topic."""
    out: list[tuple[str, list[int] | None]] = []
    for value in values:
        topic, sep, parts = value.partition(":")
        if not topic:
            raise CliError(f"--topic expects TOPIC or TOPIC:P,P..., got {value!r}")
        if not sep:
            out.append((topic, None))
            continue
        try:
            out.append((topic, sorted({int(p) for p in parts.split(",") if p.strip()})))
        except ValueError:
            raise CliError(f"--topic {value!r}: partitions must be numbers") from None
    return out


def parse_duration_ms(text: str) -> int:
    """ISO-8601 ``PnDTnHnMnS`` (Java's Duration format, as --by-duration takes) in ms."""
    m = _DURATION.match(text)
    if m is None or text.upper() in ("P", "PT", "-P", "-PT"):
        raise CliError(f"--by-duration expects PnDTnHnMnS (e.g. PT1H30M), got {text!r}")
    sign, days, hours, minutes, seconds = m.groups()
    ms = int(((int(days or 0) * 24 + int(hours or 0)) * 60 + int(minutes or 0)) * 60_000
             + float(seconds or 0) * 1000)
    return -ms if sign else ms


def parse_datetime_ms(text: str) -> int:
    """An ISO date-time (``YYYY-MM-DDTHH:mm:SS[.sss][zone]``; local time without a zone) in ms."""
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise CliError(f"--to-datetime expects YYYY-MM-DDTHH:mm:SS[.sss][zone], got {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # the local zone, as Kafka's tool reads a zoneless time
    return int(moment.timestamp() * 1000)


def _group_type(args: argparse.Namespace, admin: Admin, group_id: str) -> ConsumerGroupType:
    """The group's type (``Admin.group_type``: ListGroups, else ShareGroupDescribe); CLASSIC when
    neither knows it (no group yet: a classic one is what an admin commit makes)."""
    with client_errors(args, "list groups"):
        found = admin.group_type(group_id)
    return found if found is not None else ConsumerGroupType.CLASSIC


def _described(args: argparse.Namespace, group_id: str, describe: Callable[[list[str]], dict[str, _D]]) -> _D:
    with client_errors(args, f"describe {group_id!r}"):
        described = describe([group_id])[group_id]
    if described.error is not None:
        raise CliError(f"describe {group_id!r}: {described.error.name()}")
    return described


def _describe_consumer(args: argparse.Namespace, admin: Admin, group_id: str) -> ConsumerGroupDescription:
    return _described(args, group_id, admin.describe_consumer_groups)


def _describe_share(args: argparse.Namespace, admin: Admin, group_id: str) -> ShareGroupDescription:
    return _described(args, group_id, admin.describe_share_groups)


def _committed(args: argparse.Namespace, admin: Admin, group_id: str) -> dict[tuple[str, int], int]:
    with client_errors(args, f"offsets of {group_id!r}"):
        fetched = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group_id)])[group_id]
    if fetched.error is not None:
        raise CliError(f"offsets of {group_id!r}: {fetched.error.name()}")
    return {(tp.topic, tp.partition): tp.offset for tp in fetched.topic_partitions or () if tp.offset >= 0}


def _share_starts(args: argparse.Namespace, admin: Admin, group_id: str) -> dict[tuple[str, int], tuple[int, int, int]]:
    """(start offset, leader epoch, lag) of each partition the share group has state for."""
    with client_errors(args, f"offsets of {group_id!r}"):
        found = admin.list_share_group_offsets([ConsumerGroupTopicPartitions(group_id)])[group_id]
    if found.error is not None:
        raise CliError(f"offsets of {group_id!r}: {found.error.name()}")
    return {(p.topic, p.partition): (p.start_offset, p.leader_epoch, p.lag) for p in found.partitions
            if p.error is None}


def _log_offsets(args: argparse.Namespace, admin: Admin, tps: Iterable[tuple[str, int]],
                 spec: int) -> dict[tuple[str, int], int]:
    wanted = {tp: spec for tp in tps}
    if not wanted:
        return {}
    with client_errors(args, "list offsets"):
        return admin.list_offsets(wanted)


def _owners(members: Iterable[MemberDescription]) -> dict[tuple[str, int], MemberDescription]:
    return {(tp.topic, tp.partition): m for m in members for tp in m.assignment.topic_partitions}


def _assignment_text(member: MemberDescription) -> str:
    by_topic: dict[str, list[int]] = {}
    for tp in member.assignment.topic_partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ";".join(f"{t}:{','.join(str(p) for p in sorted(ps))}" for t, ps in sorted(by_topic.items())) or "-"


# --- list --------------------------------------------------------------------------------------


def cmd_list(args: argparse.Namespace) -> int:
    with admin_session(args) as admin, client_errors(args, "list groups"):
        listed = admin.list_consumer_groups(states=args.state or None, types=args.type or None)
    for error in listed.errors:
        print(f"oncestream: a broker could not list its groups: {error.name()}", file=sys.stderr)
    print_table(("GROUP", "TYPE", "STATE", "PROTOCOL"),
                ((g.group_id, g.type.value, g.state.value, g.protocol_type or "-") for g in listed.valid))
    return 1 if listed.errors else 0


# --- describe ----------------------------------------------------------------------------------


def cmd_describe(args: argparse.Namespace) -> int:
    group_id = args.group
    with admin_session(args) as admin:
        if _group_type(args, admin, group_id) is ConsumerGroupType.SHARE:
            _describe_share_group(args, admin, group_id)
        else:
            _describe_consumer_group(args, admin, group_id)
    return 0


def _existing(kind: str, described: ConsumerGroupDescription | ShareGroupDescription) -> str:
    """Fail for a group that does not exist, note one without members (as Kafka's tools); the
    coordinator as ``HOST:PORT (ID)``."""
    if described.state is ConsumerGroupState.DEAD:
        raise CliError(f"{kind} group {described.group_id!r} does not exist")
    if not described.members:
        print(f"{kind.capitalize()} group {described.group_id!r} has no active members.", file=sys.stderr)
    c = described.coordinator
    return f"{c.host}:{c.port} ({c.id})" if c is not None else "-"


def _describe_consumer_group(args: argparse.Namespace, admin: Admin, group_id: str) -> None:
    described = _describe_consumer(args, admin, group_id)
    where = _existing("consumer", described)
    if args.state:
        print_table(("GROUP", "COORDINATOR (ID)", "TYPE", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"),
                    [(group_id, where, described.type.value, described.partition_assignor or "-",
                      described.state.value, len(described.members))])
    if args.members:
        print_table(("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"),
                    [(group_id, m.member_id, m.group_instance_id, m.host, m.client_id,
                      len(m.assignment.topic_partitions), _assignment_text(m)) for m in described.members])
    if args.offsets or not (args.state or args.members):
        committed = _committed(args, admin, group_id)
        owners = _owners(described.members)
        tps = sorted(set(committed) | set(owners))
        ends = _log_offsets(args, admin, tps, _LATEST)
        rows = []
        for tp in tps:
            current, end, owner = committed.get(tp, _NO_OFFSET), ends.get(tp, -1), owners.get(tp)
            lag = end - current if current >= 0 and end >= 0 else -1
            rows.append((group_id, tp[0], tp[1], _offset(current), _offset(end), _offset(lag),
                         owner.member_id if owner else None, owner.host if owner else None,
                         owner.client_id if owner else None))
        print_table(("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                     "HOST", "CLIENT-ID"), rows)


def _describe_share_group(args: argparse.Namespace, admin: Admin, group_id: str) -> None:
    described = _describe_share(args, admin, group_id)
    where = _existing("share", described)
    if args.state:
        print_table(("GROUP", "COORDINATOR (ID)", "TYPE", "STATE", "GROUP-EPOCH", "#MEMBERS"),
                    [(group_id, where, "share", described.state.value, described.group_epoch,
                      len(described.members))])
    if args.members:
        print_table(("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "MEMBER-EPOCH", "#PARTITIONS", "ASSIGNMENT"),
                    [(group_id, m.member_id, m.host, m.client_id, m.member_epoch,
                      len(m.assignment.topic_partitions), _assignment_text(m)) for m in described.members])
    if args.offsets or not (args.state or args.members):
        starts = _share_starts(args, admin, group_id)
        print_table(("GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LAG"),
                    [(group_id, t, p, _offset(epoch), _offset(start), _offset(lag))
                     for (t, p), (start, epoch, lag) in sorted(starts.items())])


# --- reset-offsets -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Group:
    """What reset-offsets and delete-offsets need to know of a group."""

    group_id: str
    share: bool
    state: ConsumerGroupState
    current: dict[tuple[str, int], int]   # committed offsets (share: start offsets)


def _inactive_group(args: argparse.Namespace, admin: Admin, group_id: str) -> _Group:
    share = _group_type(args, admin, group_id) is ConsumerGroupType.SHARE
    if share:
        state = _describe_share(args, admin, group_id).state
        # Only read when the reset needs it (a broker may not serve DescribeShareGroupOffsets).
        needed = args.all_topics or args.to_current or args.shift_by is not None
        current = {tp: start for tp, (start, _e, _l) in _share_starts(args, admin, group_id).items()} if needed else {}
    else:
        state = _describe_consumer(args, admin, group_id).state
        current = _committed(args, admin, group_id)
    if state not in _INACTIVE:
        raise CliError(f"assignments can only be reset if the group {group_id!r} is inactive, "
                       f"but the current state is {state.value}")
    return _Group(group_id, share, state, current)


def _selected_partitions(args: argparse.Namespace, admin: Admin, group: _Group) -> list[tuple[str, int]]:
    if args.all_topics:
        return sorted(group.current)
    out: set[tuple[str, int]] = set()
    for topic, parts in parse_topic_partitions(args.topic):
        if parts is None:
            with client_errors(args, f"topic {topic!r}"):
                described = admin.describe_topics([topic]).get(topic)
            if described is None or described.error is not None:
                name = described.error.name() if described is not None and described.error else "UNKNOWN_TOPIC_OR_PARTITION"
                raise CliError(f"topic {topic!r}: {name}")
            parts = [p.id for p in described.partitions]
        out.update((topic, p) for p in parts)
    return sorted(out)


def plan_reset(args: argparse.Namespace, admin: Admin, group: _Group,
               tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """The new offset of each partition for the reset option given."""
    if args.to_current:
        missing = [tp for tp in tps if tp not in group.current]
        if missing:
            raise CliError(f"no committed offset of {missing[0][0]}[{missing[0][1]}] to reset to")
        return {tp: group.current[tp] for tp in tps}
    earliest = _log_offsets(args, admin, tps, _EARLIEST)
    latest = _log_offsets(args, admin, tps, _LATEST)

    def clamp(tp: tuple[str, int], offset: int) -> int:
        return max(earliest[tp], min(latest[tp], offset))

    if args.to_earliest:
        return earliest
    if args.to_latest:
        return latest
    if args.to_offset is not None:
        return {tp: clamp(tp, args.to_offset) for tp in tps}
    if args.shift_by is not None:
        missing = [tp for tp in tps if tp not in group.current]
        if missing:
            raise CliError(f"cannot shift the offset of {missing[0][0]}[{missing[0][1]}]: "
                           "the group has no committed offset there")
        return {tp: clamp(tp, group.current[tp] + args.shift_by) for tp in tps}
    if args.to_datetime is not None:
        timestamp_ms = parse_datetime_ms(args.to_datetime)
    else:
        now_ms = int(datetime.datetime.now(datetime.UTC).timestamp() * 1000)
        timestamp_ms = now_ms - parse_duration_ms(args.by_duration)
    # ListOffsets by time: the first offset at or after it; none (-1): the log end.
    by_time = _log_offsets(args, admin, tps, timestamp_ms)
    return {tp: by_time[tp] if by_time[tp] >= 0 else latest[tp] for tp in tps}


def cmd_reset_offsets(args: argparse.Namespace) -> int:
    with admin_session(args) as admin:
        group = _inactive_group(args, admin, args.group)
        tps = _selected_partitions(args, admin, group)
        if not tps:
            raise CliError(f"group {args.group!r} has no offsets to reset (name the partitions with --topic)")
        plan = plan_reset(args, admin, group, tps)
        if args.execute:
            _apply_reset(args, admin, group, plan)
    print_table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"),
                [(args.group, t, p, offset) for (t, p), offset in sorted(plan.items())])
    if not args.execute:
        print("(dry run: nothing changed; add --execute to commit these offsets)", file=sys.stderr)
    return 0


def _apply_reset(args: argparse.Namespace, admin: Admin, group: _Group, plan: dict[tuple[str, int], int]) -> None:
    request = ConsumerGroupTopicPartitions(group.group_id, [TopicPartition(t, p, o) for (t, p), o in sorted(plan.items())])
    with client_errors(args, f"reset offsets of {group.group_id!r}"):
        if group.share:
            result = admin.alter_share_group_offsets(request)
        else:
            result = admin.alter_consumer_group_offsets([request])[group.group_id]
    if result.error is not None:
        raise CliError(f"reset offsets of {group.group_id!r}: {result.error.name()}")
    for tp in result.topic_partitions or ():
        if tp.error is not None:
            raise CliError(f"reset offsets of {group.group_id!r} on {tp.topic}[{tp.partition}]: {tp.error.name()}")


# --- delete, delete-offsets --------------------------------------------------------------------


def cmd_delete(args: argparse.Namespace) -> int:
    with admin_session(args) as admin, client_errors(args, "delete groups"):
        results = admin.delete_consumer_groups(args.groups)
    failed = {g: e for g, e in results.items() if e is not None}
    deleted = [g for g in args.groups if g not in failed]
    if deleted:
        print(f"Deletion of requested groups ({', '.join(repr(g) for g in deleted)}) was successful.")
    for group_id, error in sorted(failed.items()):
        print(f"oncestream: group {group_id!r} could not be deleted: {error.name()}", file=sys.stderr)
    return 1 if failed else 0


def cmd_delete_offsets(args: argparse.Namespace) -> int:
    wanted = parse_topic_partitions(args.topic)
    with admin_session(args) as admin:
        if _group_type(args, admin, args.group) is ConsumerGroupType.SHARE:
            return _delete_share_offsets(args, admin, wanted)
        tps: list[TopicPartition] = []
        for topic, parts in wanted:
            if parts is None:
                with client_errors(args, f"topic {topic!r}"):
                    described = admin.describe_topics([topic]).get(topic)
                parts = [p.id for p in described.partitions] if described is not None and described.error is None else []
                if not parts:
                    raise CliError(f"topic {topic!r}: UNKNOWN_TOPIC_OR_PARTITION")
            tps += [TopicPartition(topic, p) for p in parts]
        with client_errors(args, f"delete offsets of {args.group!r}"):
            result = admin.delete_consumer_group_offsets(args.group, tps)
    if result.error is not None:
        raise CliError(f"delete offsets of {args.group!r}: {result.error.name()}")
    done = result.topic_partitions or []
    print_table(("TOPIC", "PARTITION", "STATUS"),
                [(tp.topic, tp.partition, "Successful" if tp.error is None else tp.error.name())
                 for tp in done])
    return 1 if any(tp.error is not None for tp in done) else 0


def _delete_share_offsets(args: argparse.Namespace, admin: Admin, wanted: list[tuple[str, list[int] | None]]) -> int:
    if any(parts is not None for _t, parts in wanted):
        raise CliError("a share group's offsets are deleted per topic: give --topic TOPIC without partitions")
    with client_errors(args, f"delete offsets of {args.group!r}"):
        error, per_topic = admin.delete_share_group_offsets(args.group, [t for t, _p in wanted])
    if error is not None:
        raise CliError(f"delete offsets of {args.group!r}: {error.name()}")
    print_table(("TOPIC", "STATUS"), [(t, "Successful" if e is None else e.name())
                                      for t, e in sorted(per_topic.items())])
    return 1 if any(e is not None for e in per_topic.values()) else 0
