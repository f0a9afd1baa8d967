"""Broker-side TLS: server SSL contexts from Kafka's PEM store properties, and the principal a
client certificate maps to.

Properties (Kafka's names; each may be overridden per listener as
``listener.name.<listener lower case>.<property>``, looked up first):

- ``ssl.keystore.type=PEM`` with ``ssl.keystore.location``: a PEM file holding the private key
  and the certificate chain (``ssl.key.password`` if the key is encrypted). Other store types
  (JKS, PKCS12) are refused at start rather than misread.
- ``ssl.truststore.type=PEM`` with ``ssl.truststore.location``: the CAs trusted for client
  certificates.
- ``ssl.client.auth=none|requested|required`` (default none). ``requested``: a client may send no
  certificate, but one it sends must verify or the handshake fails, as in Kafka.
- ``ssl.enabled.protocols`` (default ``TLSv1.2,TLSv1.3``): nothing older than TLS 1.2 is accepted.

The principal follows Kafka's default ``ssl.principal.mapping.rules=DEFAULT``: ``User:`` and the
subject's distinguished name in RFC 2253 form (``User:CN=alice``; ``User:CN=alice,OU=eng,O=acme``
with more RDNs, most specific first). No certificate (or ``ssl.client.auth=none``) leaves the
connection ``User:ANONYMOUS``.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping

from oncestream.errors import InvalidConfigError

CLIENT_AUTH_MODES = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}
_PROTOCOL_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}



def listener_property(props: Mapping[str, str], listener_name: str, key: str, default: str | None = None) -> str | None:
    """``listener.name.<listener>.<key>`` if set, else ``<key>``, else ``default`` (Kafka's lookup)."""
    override = props.get(f"listener.name.{listener_name.lower()}.{key}")
    if override is not None:
        return override
    return props.get(key, default)


def enabled_versions(text: str) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    """The lowest and highest TLS version of ``ssl.enabled.protocols`` (server and inter-broker client)."""
    versions = []
    for item in text.split(","):
        name = item.strip()
        if not name:
            continue
        if name not in _PROTOCOL_VERSIONS:
            raise InvalidConfigError(
                f"ssl.enabled.protocols: {name!r} is not supported (TLS 1.2 or newer: TLSv1.2, TLSv1.3)"
            )
        versions.append(_PROTOCOL_VERSIONS[name])
    if not versions:
        raise InvalidConfigError("ssl.enabled.protocols is empty")
    return min(versions), max(versions)


def server_ssl_context(props: Mapping[str, str], listener_name: str) -> ssl.SSLContext:
    """The SSL context of one SSL/SASL_SSL listener; raises ``InvalidConfigError`` for a missing
    or unreadable store, a store type other than PEM, or an unknown ``ssl.client.auth``."""

    def get(key: str, default: str | None = None) -> str | None:
        return listener_property(props, listener_name, key, default)

    for store in ("keystore", "truststore"):
        store_type = (get(f"ssl.{store}.type") or "PEM").strip().upper()
        if store_type != "PEM":
            raise InvalidConfigError(f"ssl.{store}.type={store_type}: only PEM stores are supported")
    keystore = get("ssl.keystore.location")
    if not keystore:
        raise InvalidConfigError(f"listener {listener_name} uses TLS but ssl.keystore.location is not set")
    auth_text = (get("ssl.client.auth") or "none").strip().lower()
    if auth_text not in CLIENT_AUTH_MODES:
        raise InvalidConfigError(f"ssl.client.auth={auth_text}: expected none, requested or required")
    truststore = get("ssl.truststore.location")
    if auth_text != "none" and not truststore:
        raise InvalidConfigError(f"ssl.client.auth={auth_text} needs ssl.truststore.location (the trusted CAs)")
    lowest, highest = enabled_versions(get("ssl.enabled.protocols") or "TLSv1.2,TLSv1.3")

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = lowest
    ctx.maximum_version = highest
    try:
        ctx.load_cert_chain(keystore, password=get("ssl.key.password"))
    except (OSError, ssl.SSLError) as exc:
        raise InvalidConfigError(f"ssl.keystore.location={keystore}: cannot load key and certificate chain: {exc}") from exc
    if truststore:
        try:
            ctx.load_verify_locations(cafile=truststore)
        except (OSError, ssl.SSLError) as exc:
            raise InvalidConfigError(f"ssl.truststore.location={truststore}: cannot load CAs: {exc}") from exc
    ctx.verify_mode = CLIENT_AUTH_MODES[auth_text]
    return ctx
