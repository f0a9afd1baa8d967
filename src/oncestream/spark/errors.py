"""Typed errors of the Spark connector (they reach the user through Spark's query exception)."""

from __future__ import annotations


class OnceStreamSparkError(RuntimeError):
    """Base of the connector's errors."""


class OptionError(OnceStreamSparkError, ValueError):
    """An option is missing, malformed or not allowed in this mode."""


class DataLossError(OnceStreamSparkError):
    """Offsets the query needs are gone (deleted partition, retention, topic recreated).

    Raised only with ``failOnDataLoss=true`` (the default), as Spark's Kafka source does.
    """


class TwoPhaseCommitUnsupportedError(OnceStreamSparkError):
    """The broker cannot do KIP-939 two-phase commit, which the exactly-once sink needs."""


class BrokerRequestError(OnceStreamSparkError):
    """A broker answered a request with an error code the connector cannot handle."""


class CommitResolutionError(OnceStreamSparkError):
    """A prepared transaction could not be completed the way the commit record demands."""
