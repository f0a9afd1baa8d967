"""Where and how the REST API listens: ksqlDB's ``listeners`` and its HTTPS settings, with PEM files.

``listeners=https://HOST:PORT`` (or ``http://``; ``--listen HOST:PORT`` is the same as
``listeners=http://HOST:PORT``) takes one listener. HTTPS is hypercorn's TLS (Python's ``ssl``),
with HTTP/2 and HTTP/1.1 offered through ALPN. The settings are ksqlDB's, prefixed with
``listener.`` because the unprefixed ``ssl.*`` entries of ``--config`` are the Kafka clients'
(librdkafka's names, docs/sql-security.md), and in PEM where ksqlDB takes Java keystores:

| setting | meaning |
| --- | --- |
| ``listener.ssl.keystore.location`` | PEM: the server certificate (chain), and its key unless below |
| ``listener.ssl.key.location`` | PEM private key, when it is not in the keystore file |
| ``listener.ssl.key.password`` | the private key's passphrase, if it is encrypted |
| ``listener.ssl.truststore.location`` | PEM CA certificates that client certificates must chain to |
| ``listener.ssl.client.authentication`` | ``NONE`` (default), ``REQUESTED`` or ``REQUIRED`` (ksqlDB's |
|  | ``ssl.client.authentication``) |

With ``REQUIRED`` a client without a certificate signed by the truststore's CA fails the TLS
handshake; with ``REQUESTED`` a client may omit its certificate, but one it sends must verify.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from hypercorn.config import Config

LISTENERS = "listeners"
KEYSTORE_LOCATION = "listener.ssl.keystore.location"
KEY_LOCATION = "listener.ssl.key.location"
KEY_PASSWORD = "listener.ssl.key.password"
TRUSTSTORE_LOCATION = "listener.ssl.truststore.location"
CLIENT_AUTHENTICATION = "listener.ssl.client.authentication"
LISTENER_SETTINGS = (LISTENERS, KEYSTORE_LOCATION, KEY_LOCATION, KEY_PASSWORD, TRUSTSTORE_LOCATION,
                     CLIENT_AUTHENTICATION)

# ksqlDB's ssl.client.authentication values and what Python's ssl makes of them.
VERIFY_MODES = {"NONE": ssl.CERT_NONE, "REQUESTED": ssl.CERT_OPTIONAL, "REQUIRED": ssl.CERT_REQUIRED}
DEFAULT_LISTEN = "127.0.0.1:8088"


class ListenerConfigError(ValueError):
    """The listener settings are invalid (the message names the setting)."""


@dataclass(frozen=True)
class TlsSettings:
    """The HTTPS listener's certificate, key and client-certificate policy (PEM files)."""

    keystore_location: str
    key_location: str | None = None
    key_password: str | None = None
    truststore_location: str | None = None
    client_authentication: str = "NONE"

    def server_context(self) -> ssl.SSLContext:
        """An SSL context built from these files; ListenerConfigError naming the setting whose
        file cannot be read. Used at start to fail early (hypercorn builds its own the same way)."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(self.keystore_location, self.key_location or self.keystore_location,
                                    password=self.key_password)
        except (OSError, ssl.SSLError) as exc:
            where = f"{KEYSTORE_LOCATION}={self.keystore_location}" + \
                (f" / {KEY_LOCATION}={self.key_location}" if self.key_location else "")
            raise ListenerConfigError(f"cannot load the listener's certificate and key ({where}): {exc}") from None
        if self.truststore_location:
            try:
                context.load_verify_locations(self.truststore_location)
            except (OSError, ssl.SSLError) as exc:
                raise ListenerConfigError(
                    f"cannot load {TRUSTSTORE_LOCATION}={self.truststore_location}: {exc}") from None
        context.verify_mode = VERIFY_MODES[self.client_authentication]
        return context

    def apply(self, config: Config) -> None:
        """Make hypercorn serve TLS with these files."""
        config.certfile = self.keystore_location
        config.keyfile = self.key_location or self.keystore_location
        config.keyfile_password = self.key_password
        config.ca_certs = self.truststore_location
        config.verify_mode = ssl.VerifyMode(VERIFY_MODES[self.client_authentication])


@dataclass(frozen=True)
class Listener:
    """The REST API's one listener: ``scheme`` is ``http`` or ``https`` (then ``tls`` is set)."""

    scheme: str
    host: str
    port: int
    tls: TlsSettings | None = None

    def url(self, port: int) -> str:
        """The URL clients reach this listener at on ``port`` (wildcard hosts become 127.0.0.1)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"{self.scheme}://{host}:{port}"


def _host_port(text: str, what: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ListenerConfigError(f"{what} expects HOST:PORT, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def listener_from(listen: str | None, props: Mapping[str, str]) -> Listener:
    """The listener from ``--listen`` (None: not given) and the ``listeners`` / ``listener.ssl.*``
    entries of ``--config``; ListenerConfigError when they conflict or are incomplete."""
    listeners = props.get(LISTENERS, "").strip()
    tls_keys = [k for k in LISTENER_SETTINGS[1:] if props.get(k, "").strip()]
    if listeners and listen is not None:
        raise ListenerConfigError(f"give either --listen or {LISTENERS}, not both")
    if not listeners:
        host, port = _host_port(listen or DEFAULT_LISTEN, "--listen")
        if tls_keys:
            raise ListenerConfigError(f"{', '.join(tls_keys)} need an HTTPS listener: set {LISTENERS}=https://HOST:PORT")
        return Listener("http", host, port)
    if "," in listeners:
        raise ListenerConfigError(f"{LISTENERS} takes one listener here, got {listeners!r}")
    parts = urlsplit(listeners)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or parts.path not in ("", "/") or not parts.netloc:
        raise ListenerConfigError(f"{LISTENERS} expects http://HOST:PORT or https://HOST:PORT, got {listeners!r}")
    host, port = _host_port(parts.netloc, LISTENERS)
    if scheme == "http":
        if tls_keys:
            raise ListenerConfigError(f"{', '.join(tls_keys)} need an HTTPS listener, but {LISTENERS}={listeners}")
        return Listener("http", host, port)
    return Listener("https", host, port, _tls_settings(props))


def _tls_settings(props: Mapping[str, str]) -> TlsSettings:
    keystore = props.get(KEYSTORE_LOCATION, "").strip()
    if not keystore:
        raise ListenerConfigError(f"an https listener needs {KEYSTORE_LOCATION} (PEM certificate and key)")
    client_auth = props.get(CLIENT_AUTHENTICATION, "NONE").strip().upper() or "NONE"
    if client_auth not in VERIFY_MODES:
        raise ListenerConfigError(f"{CLIENT_AUTHENTICATION} must be NONE, REQUESTED or REQUIRED, got {client_auth!r}")
    truststore = props.get(TRUSTSTORE_LOCATION, "").strip() or None
    if client_auth != "NONE" and truststore is None:
        raise ListenerConfigError(f"{CLIENT_AUTHENTICATION}={client_auth} needs {TRUSTSTORE_LOCATION} "
                                  "(PEM CA certificates of the clients)")
    for key, location in ((KEYSTORE_LOCATION, keystore), (TRUSTSTORE_LOCATION, truststore)):
        if location is not None and not Path(location).is_file():
            raise ListenerConfigError(f"{key}={location}: no such file")
    settings = TlsSettings(keystore, props.get(KEY_LOCATION, "").strip() or None,
                           props.get(KEY_PASSWORD) or None, truststore, client_auth)
    settings.server_context()  # unreadable files fail here, at start, with the setting's name
    return settings
