"""Settings of the transaction coordinator, named after the Kafka broker properties."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from oncestream.errors import InvalidConfigError

_INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class TxnCoordinatorConfig:
    """Broker properties the transaction coordinator honours (defaults are Kafka's)."""

    # transaction.max.timeout.ms: the largest transaction.timeout.ms a producer may ask for.
    transaction_max_timeout_ms: int = 900_000
    # transactional.id.expiration.ms: an id without an open transaction that sees no request for
    # this long is removed (Dead + tombstone).
    transactional_id_expiration_ms: int = 604_800_000
    # transaction.two.phase.commit.enable (KIP-939): whether InitProducerId may set enable2Pc.
    two_phase_commit_enable: bool = False
    # transaction.abort.timed.out.transaction.cleanup.interval.ms: how often the embedding layer
    # should call ``tick`` (the coordinator itself never reads a clock).
    abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    # transaction.remove.expired.transaction.cleanup.interval.ms: expiry is checked on every tick;
    # this is the coarsest period at which ticks must still arrive for expiry to happen on time.
    remove_expired_transaction_cleanup_interval_ms: int = 3_600_000

    def __post_init__(self) -> None:
        if not (0 < self.transaction_max_timeout_ms <= _INT32_MAX):
            raise InvalidConfigError(
                f"transaction.max.timeout.ms must be between 1 and {_INT32_MAX}, got {self.transaction_max_timeout_ms}")
        if not (0 < self.transactional_id_expiration_ms <= _INT32_MAX):
            raise InvalidConfigError(
                f"transactional.id.expiration.ms must be between 1 and {_INT32_MAX}, got {self.transactional_id_expiration_ms}")
        if self.abort_timed_out_transaction_cleanup_interval_ms <= 0:
            raise InvalidConfigError(
                f"transaction.abort.timed.out.transaction.cleanup.interval.ms must be positive, "
                f"got {self.abort_timed_out_transaction_cleanup_interval_ms}")
        if self.remove_expired_transaction_cleanup_interval_ms <= 0:
            raise InvalidConfigError(
                f"transaction.remove.expired.transaction.cleanup.interval.ms must be positive, "
                f"got {self.remove_expired_transaction_cleanup_interval_ms}")

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> TxnCoordinatorConfig:
        """Build from Kafka broker property names (unknown names are ignored, bad values raise).

        Raises :class:`InvalidConfigError` when a known property has a value Kafka would reject.
        """
        values: dict[str, object] = {}
        for name, attr in _INT_PROPERTIES.items():
            if name in properties:
                values[attr] = _parse_positive_int(name, properties[name])
        if _TWO_PC_PROPERTY in properties:
            values["two_phase_commit_enable"] = _parse_bool(
                _TWO_PC_PROPERTY, properties[_TWO_PC_PROPERTY]
            )
        return cls(**values)  # type: ignore[arg-type]


_INT_PROPERTIES: Mapping[str, str] = {
    "transaction.max.timeout.ms": "transaction_max_timeout_ms",
    "transactional.id.expiration.ms": "transactional_id_expiration_ms",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (
        "abort_timed_out_transaction_cleanup_interval_ms"
    ),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (
        "remove_expired_transaction_cleanup_interval_ms"
    ),
}
_TWO_PC_PROPERTY = "transaction.two.phase.commit.enable"


def _parse_positive_int(name: str, text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise InvalidConfigError(f"{name}={text!r} is not an integer") from None
    if not 0 < value <= _INT32_MAX:
        raise InvalidConfigError(f"{name}={value} must be in [1, {_INT32_MAX}]")
    return value


def _parse_bool(name: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    raise InvalidConfigError(f"{name}={text!r} is not true or false")
