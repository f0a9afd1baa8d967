"""The data source's options, spelled and interpreted as Spark's Kafka connector does.

Spark passes options as a case-insensitive map of strings. This module turns them into typed,
validated settings once, so the reader and writer never parse strings themselves:

- ``kafka.bootstrap.servers`` (required) and every other ``kafka.*`` key, handed with the prefix
  removed to every client the connector creates (source tasks and driver planning, sink tasks'
  producers, the driver's commit and journal clients), e.g. ``kafka.client.id``,
  ``kafka.isolation.level``, ``kafka.max.partition.fetch.bytes``, ``kafka.compression.type``.
  Values are checked once, on the driver. Keys the connector must own are refused, as Spark's
  Kafka connector refuses them (see ``SOURCE_OWNED`` and ``SINK_OWNED``);
- exactly one of ``subscribe`` / ``subscribePattern`` / ``assign`` for reads;
- ``startingOffsets`` / ``endingOffsets``: ``earliest``, ``latest`` or JSON per partition
  (``{"topic":{"0":23,"1":-2}}`` with -2 = earliest, -1 = latest);
- ``startingTimestamp`` / ``startingOffsetsByTimestamp`` (and for batch reads ``endingTimestamp`` /
  ``endingOffsetsByTimestamp``): start or stop at the first record whose timestamp is at or after
  the given epoch milliseconds, resolved with ListOffsets by timestamp. Spark's precedence: a global
  timestamp wins over per-partition timestamps, which win over offsets.
  ``startingOffsetsByTimestampStrategy`` (``error``, the default, or ``latest``) decides what a
  partition without such a record starts from; an end without one is the latest offset;
- ``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger`` with ``maxTriggerDelay`` (default 15m),
  ``minPartitions``, ``maxRecordsPerPartition``, ``failOnDataLoss``;
- ``includeHeaders`` (default false, as in Spark: no ``headers`` column unless asked for);
- ``kafka.group.id`` / ``groupIdPrefix``: accepted and unused, since the connector reads by offset
  ranges and never joins a consumer group (Spark uses them only to name its consumers' groups);
- ``topic`` for writes (overrides a ``topic`` column, as in Spark);
- ``exactlyOnce`` (ours): the two-phase-commit sink, default true;
- ``stepObserver`` (ours, sink) and ``triggerClock`` (ours, streaming source): classes plugged in
  by name, with ``stepObserver.*`` / ``triggerClock.*`` options for them (``plugins``).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from oncestream.client.common.config import resolve
from oncestream.client.common.errors import KafkaException
from oncestream.spark.errors import OptionError
from oncestream.spark.log_client import ClientSettings
from oncestream.spark.plugins import STEP_OBSERVER_OPTION, TRIGGER_CLOCK_OPTION, PluginSpec, plugin_spec

log = logging.getLogger("oncestream.spark")

EARLIEST = -2
LATEST = -1

# Option keys (lower case: Spark's option map is case-insensitive).
_BOOTSTRAP = "kafka.bootstrap.servers"

# Client properties the source sets itself. Spark's Kafka source refuses the same ones: offsets
# come from startingOffsets and Spark's checkpoint, records are handed over as bytes, nothing is
# committed to a group, and nothing may rewrite records on the way in.
SOURCE_OWNED = {
    "auto.offset.reset": "set the option startingOffsets to earliest or latest instead",
    "key.deserializer": "keys are always read as bytes; deserialize them with DataFrame operations",
    "value.deserializer": "values are always read as bytes; deserialize them with DataFrame operations",
    "enable.auto.commit": "the source keeps its offsets in Spark's checkpoint, not in a group",
    "interceptor.classes": "interceptors could change records behind the query's back",
}
# Client properties the sink sets itself: Spark's Kafka sink refuses the serializers; exactly-once
# (and the at-least-once mode's no-loss promise) needs an idempotent producer acknowledged by all
# replicas, and the two-phase commit is what makes the transactions the driver's to decide.
SINK_OWNED = {
    "key.serializer": "keys are written as bytes (binary or string column)",
    "value.serializer": "values are written as bytes (binary or string column)",
}
# Owned properties a user may still spell out, as long as the parsed value is the one the sink
# uses (acks=all is -1 once parsed).
_SINK_REQUIRED_VALUES = {
    "enable.idempotence": (True, "the sink's producers must be idempotent"),
    "acks": (-1, "the sink's writes must be acknowledged by all in-sync replicas (acks=all)"),
    "transaction.two.phase.commit.enable": (True, "the exactly-once sink is built on two-phase commit (KIP-939)"),
}


# startingOffsetsByTimestampStrategy: what a partition with no record at or after the starting
# timestamp starts from (Spark's StrategyOnNoMatchStartingOffset).
NO_MATCH_ERROR = "error"
NO_MATCH_LATEST = "latest"
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000  # Spark's default maxTriggerDelay, "15m"


@dataclass(frozen=True)
class OffsetSpec:
    """Where to start or stop: ``earliest``, ``latest``, explicit offsets per partition
    (``json``), one timestamp for every partition (``timestamp``) or a timestamp per partition
    (``timestamp_json``; ``per_partition`` then holds epoch milliseconds, not offsets)."""

    kind: str  # "earliest" | "latest" | "json" | "timestamp" | "timestamp_json"
    per_partition: dict[tuple[str, int], int] = field(default_factory=dict)
    timestamp_ms: int | None = None
    no_match: str = NO_MATCH_ERROR  # startingOffsetsByTimestampStrategy

    @property
    def by_timestamp(self) -> bool:
        """Whether offsets come from ListOffsets by timestamp."""
        return self.kind in ("timestamp", "timestamp_json")

    def offset_for(self, tp: tuple[str, int], default: int) -> int:
        """The requested offset (or EARLIEST/LATEST sentinel) for one partition."""
        if self.kind == "earliest":
            return EARLIEST
        if self.kind == "latest":
            return LATEST
        return self.per_partition.get(tp, default)


@dataclass(frozen=True)
class Subscription:
    """Which partitions to read: a topic list, a topic regex, or explicit partitions."""

    kind: str  # "subscribe" | "subscribePattern" | "assign"
    topics: tuple[str, ...] = ()
    pattern: str = ""
    assigned: tuple[tuple[str, int], ...] = ()

    def matches(self, topic: str) -> bool:
        """Whether a topic belongs to a subscribe/subscribePattern subscription."""
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "subscribePattern":
            return re.fullmatch(self.pattern, topic) is not None
        return any(t == topic for t, _ in self.assigned)


@dataclass(frozen=True)
class SourceOptions:
    """Typed read options."""

    bootstrap_servers: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    read_committed: bool
    fail_on_data_loss: bool
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    max_records_per_partition: int | None
    client: ClientSettings
    client_config: dict[str, str]
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    include_headers: bool = False
    trigger_clock: PluginSpec | None = None  # triggerClock (oncestream.spark.plugins)


@dataclass(frozen=True)
class SinkOptions:
    """Typed write options."""

    bootstrap_servers: str
    topic: str | None
    exactly_once: bool
    transactional_id_prefix: str
    producer_config: dict[str, str]
    client: ClientSettings
    step_observer: PluginSpec | None = None  # stepObserver (oncestream.spark.plugins)


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _bool(opts: dict[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key.lower())
    if raw is None:
        return default
    text = raw.strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise OptionError(f"option {key} must be true or false, not {raw!r}")


def _positive_int(opts: dict[str, str], key: str) -> int | None:
    raw = opts.get(key.lower())
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"option {key} must be an integer, not {raw!r}") from None
    if value <= 0:
        raise OptionError(f"option {key} must be positive, not {value}")
    return value


def kafka_params(options: Mapping[str, str]) -> dict[str, str]:
    """Every ``kafka.*`` option with the prefix removed (client property names)."""
    return {k[len("kafka."):]: v for k, v in _lower(options).items() if k.startswith("kafka.")}


def _client_config(params: Mapping[str, str], role: str) -> tuple[dict, ClientSettings]:
    """Parse the client properties as the client will (names, aliases, value types), so a bad
    value fails on the driver with the option's name instead of in every task. Returns the parsed
    configuration and the part the connector's own protocol client uses."""
    try:
        resolved = resolve({**params, "bootstrap.servers": params.get("bootstrap.servers") or "unused:0"}, role)
        return dict(resolved), ClientSettings.from_config(params)
    except KafkaException as exc:
        raise OptionError(f"invalid kafka.* option: {exc.error.str()}") from None


def bootstrap_servers(options: Mapping[str, str]) -> str:
    """``kafka.bootstrap.servers``; raises OptionError when missing."""
    servers = _lower(options).get(_BOOTSTRAP)
    if not servers:
        raise OptionError("option kafka.bootstrap.servers is required")
    return servers


def parse_offset_spec(raw: str | None, default: str, option: str) -> OffsetSpec:
    """``earliest`` / ``latest`` / ``{"topic":{"0":12}}`` (Spark's startingOffsets syntax)."""
    text = (raw if raw is not None else default).strip()
    if text.lower() in ("earliest", "latest"):
        return OffsetSpec(text.lower())
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        raise OptionError(f"option {option}: expected earliest, latest or JSON, got {text!r}") from None
    if not isinstance(parsed, dict):
        raise OptionError(f"option {option}: JSON must be an object of topics")
    per_partition: dict[tuple[str, int], int] = {}
    for topic, parts in parsed.items():
        if not isinstance(parts, dict):
            raise OptionError(f"option {option}: topic {topic!r} must map partitions to offsets")
        for part, offset in parts.items():
            try:
                per_partition[(str(topic), int(part))] = int(offset)
            except (TypeError, ValueError):
                raise OptionError(f"option {option}: bad offset {offset!r} for {topic}[{part}]") from None
    return OffsetSpec("json", per_partition)


def parse_subscription(opts: dict[str, str]) -> Subscription:
    """Exactly one of subscribe / subscribePattern / assign (Spark refuses zero or several)."""
    given = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k)]
    if len(given) != 1:
        raise OptionError("exactly one of the options subscribe, subscribePattern, assign is required")
    kind = given[0]
    if kind == "subscribe":
        topics = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not topics:
            raise OptionError("option subscribe names no topic")
        return Subscription("subscribe", topics=topics)
    if kind == "subscribepattern":
        pattern = opts["subscribepattern"].strip()
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"option subscribePattern is not a valid regex: {exc}") from None
        return Subscription("subscribePattern", pattern=pattern)
    try:
        parsed = json.loads(opts["assign"])
        assigned = tuple(sorted((str(t), int(p)) for t, ps in parsed.items() for p in ps))
    except (json.JSONDecodeError, AttributeError, TypeError, ValueError):
        raise OptionError('option assign must be JSON like {"topic":[0,1]}') from None
    if not assigned:
        raise OptionError("option assign names no partition")
    return Subscription("assign", assigned=assigned)


_TIME_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000,
                  "d": 86_400_000}


def parse_duration_ms(raw: str, option: str) -> int:
    """A Spark time string (``500``, ``500ms``, ``30s``, ``15m``, ``2h``, ``1d``; no unit means
    milliseconds, as Spark's ``timeStringAsMs``) in milliseconds."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", raw.lower())
    if match is None or match.group(2) not in ("", *_TIME_UNITS_MS):
        raise OptionError(f"option {option} must be a duration like 500ms, 30s or 15m, not {raw!r}")
    return int(int(match.group(1)) * _TIME_UNITS_MS.get(match.group(2) or "ms", 1))


def _timestamp_json(raw: str, option: str) -> dict[tuple[str, int], int]:
    """``{"topic":{"0":1700000000000}}`` -> {(topic, 0): epoch ms}."""
    try:
        parsed = json.loads(raw)
        if not isinstance(parsed, dict) or not all(isinstance(p, dict) for p in parsed.values()):
            raise ValueError
        out = {(str(t), int(p)): int(ts) for t, parts in parsed.items() for p, ts in parts.items()}
    except (json.JSONDecodeError, TypeError, ValueError):
        raise OptionError(f'option {option} must be JSON like {{"topic":{{"0":1700000000000}}}}, '
                          f"got {raw!r}") from None
    if any(ts < 0 for ts in out.values()):
        raise OptionError(f"option {option}: timestamps are epoch milliseconds (>= 0)")
    return out


def parse_range_limit(opts: dict[str, str], *, end: str, default: str, no_match: str) -> OffsetSpec:
    """One end of the read range from ``{end}Timestamp``, ``{end}OffsetsByTimestamp`` or
    ``{end}Offsets``, in Spark's order of preference (``end`` is "starting" or "ending")."""
    global_key, by_ts_key, offsets_key = f"{end}timestamp", f"{end}offsetsbytimestamp", f"{end}offsets"
    if global_key in opts:
        text = opts[global_key].strip()
        try:
            timestamp_ms = int(text)
        except ValueError:
            raise OptionError(f"option {end}Timestamp: expected a single long value, got {text!r}") from None
        if timestamp_ms < 0:
            raise OptionError(f"option {end}Timestamp: expected epoch milliseconds (>= 0), got {timestamp_ms}")
        return OffsetSpec("timestamp", timestamp_ms=timestamp_ms, no_match=no_match)
    if by_ts_key in opts:
        return OffsetSpec("timestamp_json", _timestamp_json(opts[by_ts_key].strip(), f"{end}OffsetsByTimestamp"),
                          no_match=no_match)
    return parse_offset_spec(opts.get(offsets_key), default, f"{end}Offsets")


def source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate and type the read options, refusing what Spark's Kafka source refuses: ending
    offsets or timestamps on a stream, a batch starting at latest or ending at earliest, and
    minOffsetsPerTrigger above maxOffsetsPerTrigger."""
    opts = _lower(options)
    params = kafka_params(options)
    if streaming:
        for key, name in (("endingoffsets", "endingOffsets"), ("endingoffsetsbytimestamp", "endingOffsetsByTimestamp"),
                          ("endingtimestamp", "endingTimestamp")):
            if key in opts:
                raise OptionError(f"{name} is not valid for streaming queries")
    for key, why in SOURCE_OWNED.items():
        if key in params:
            raise OptionError(f"Kafka option kafka.{key} is not supported: {why}")
    if "group.id" in params:
        # Spark warns too (a shared group id lets queries interfere); here nothing joins a group.
        log.warning("option kafka.group.id=%s is accepted but unused: the connector reads offset ranges "
                    "and never joins a consumer group%s", params["group.id"],
                    "; groupIdPrefix is ignored as well" if "groupidprefix" in opts else "")
    isolation = params.get("isolation.level", "read_committed").strip().lower()
    if isolation not in ("read_committed", "read_uncommitted"):
        raise OptionError("kafka.isolation.level must be read_committed or read_uncommitted")
    no_match = opts.get("startingoffsetsbytimestampstrategy", NO_MATCH_ERROR).strip().lower()
    if no_match not in (NO_MATCH_ERROR, NO_MATCH_LATEST):
        raise OptionError("option startingOffsetsByTimestampStrategy must be error or latest, "
                          f"not {opts['startingoffsetsbytimestampstrategy']!r}")
    starting = parse_range_limit(opts, end="starting", default="latest" if streaming else "earliest",
                                 no_match=no_match)
    ending = parse_range_limit(opts, end="ending", default="latest", no_match=no_match)
    if not streaming:
        if starting.kind == "latest" or (starting.kind == "json" and LATEST in starting.per_partition.values()):
            raise OptionError("startingOffsets=latest is not valid for batch queries")
        if ending.kind == "earliest" or (ending.kind == "json" and EARLIEST in ending.per_partition.values()):
            raise OptionError("endingOffsets=earliest is not valid for batch queries")
    max_per_trigger = _positive_int(opts, "maxOffsetsPerTrigger")
    min_per_trigger = _positive_int(opts, "minOffsetsPerTrigger")
    if min_per_trigger and max_per_trigger and min_per_trigger > max_per_trigger:
        raise OptionError(f"the value of minOffsetsPerTrigger ({min_per_trigger}) is higher than "
                          f"maxOffsetsPerTrigger ({max_per_trigger})")
    delay_raw = opts.get("maxtriggerdelay")
    max_trigger_delay_ms = (parse_duration_ms(delay_raw, "maxTriggerDelay") if delay_raw is not None
                            else DEFAULT_MAX_TRIGGER_DELAY_MS)
    if not streaming:
        ignored = [k for k in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay") if k.lower() in opts]
        if ignored:
            log.warning("options %s are ignored in batch queries", ", ".join(ignored))
    _resolved, client = _client_config(params, "consumer")
    return SourceOptions(
        bootstrap_servers=bootstrap_servers(options),
        subscription=parse_subscription(opts),
        starting=starting,
        ending=ending,
        read_committed=isolation == "read_committed",
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        max_offsets_per_trigger=max_per_trigger,
        min_partitions=_positive_int(opts, "minPartitions"),
        max_records_per_partition=_positive_int(opts, "maxRecordsPerPartition"),
        client=client,
        client_config=params,
        min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_ms=max_trigger_delay_ms,
        include_headers=include_headers(options),
        trigger_clock=plugin_spec(options, TRIGGER_CLOCK_OPTION),
    )


def include_headers(options: Mapping[str, str]) -> bool:
    """``includeHeaders``: whether the read schema has the ``headers`` column (default false, as in
    Spark's connector: a query written for ``format("kafka")`` gets the same seven columns)."""
    return _bool(_lower(options), "includeHeaders", False)


def sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Validate and type the write options."""
    opts = _lower(options)
    params = kafka_params(options)
    params.pop("bootstrap.servers", None)
    prefix = params.pop("transactional.id", None) or "oncestream-spark"
    for key, why in SINK_OWNED.items():
        if key in params:
            raise OptionError(f"Kafka option kafka.{key} is not supported: {why}")
    resolved, client = _client_config(params, "producer")
    exactly_once = _bool(opts, "exactlyOnce", True)
    for key, (required, why) in _SINK_REQUIRED_VALUES.items():
        # Judged on the parsed value, so aliases (request.required.acks) and spellings (acks=-1,
        # enable.idempotence=1) count as the client reads them. The two-phase-commit switch is
        # off by default in the client and only matters to the exactly-once sink, so only a value
        # the user gave to that sink is judged.
        if key == "transaction.two.phase.commit.enable" and (key not in params or not exactly_once):
            continue
        if resolved[key] != required:
            raise OptionError(f"Kafka option kafka.{key} cannot be changed here: {why}")
    return SinkOptions(
        bootstrap_servers=bootstrap_servers(options),
        topic=opts.get("topic") or None,
        exactly_once=exactly_once,
        transactional_id_prefix=prefix,
        producer_config=params,
        client=client,
        step_observer=plugin_spec(options, STEP_OBSERVER_OPTION),
    )


def offsets_to_json(offsets: Mapping[tuple[str, int], int]) -> dict[str, dict[str, int]]:
    """{(topic, partition): offset} -> Spark's offset JSON shape {"topic": {"0": offset}}."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def offsets_from_json(data: Mapping[str, Mapping[str, int]]) -> dict[tuple[str, int], int]:
    """Spark's offset JSON shape -> {(topic, partition): offset}."""
    return {(str(t), int(p)): int(o) for t, parts in data.items() for p, o in parts.items()}
