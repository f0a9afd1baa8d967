"""Client-side SASL with librdkafka's configuration names: the sans-io exchange lives in
protocol/sasl_client.py (a cluster broker authenticates to its peers with it too, and the
broker may not import the client); these are its names as the client has always used them."""

from oncestream.protocol.sasl_client import (
    MECHANISMS,
    REAUTH_AT_LIFETIME_SHARE,
    SASL_PROTOCOLS,
    SaslClientError,
    SaslCredentials,
    ScramClient,
    authenticate_async,
    authenticate_blocking,
)

__all__ = ["MECHANISMS", "REAUTH_AT_LIFETIME_SHARE", "SASL_PROTOCOLS", "SaslClientError", "SaslCredentials",
           "ScramClient", "authenticate_async", "authenticate_blocking"]
