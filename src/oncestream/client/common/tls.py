"""Client-side TLS with librdkafka's property names and meaning.

- ``security.protocol``: ``ssl`` (or ``sasl_ssl``) wraps every broker connection in TLS 1.2+.
- ``ssl.ca.location``: a PEM file (or directory) of CAs that verify the broker; unset: the
  system's default CAs, as librdkafka does.
- ``ssl.certificate.location`` / ``ssl.key.location`` (``ssl.key.password``): the client
  certificate for mutual TLS.
- ``ssl.endpoint.identification.algorithm``: ``https`` (librdkafka's default since 2.0) checks
  that the broker certificate names the host we connect to; ``none`` does not.
- ``enable.ssl.certificate.verification=false`` accepts any broker certificate (testing only).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

TLS_PROTOCOLS = ("ssl", "sasl_ssl")

# Properties the TLS layer reads, with their defaults (client/common/config.py registers them).
TLS_PROPERTIES: dict[str, Any] = {
    "ssl.ca.location": None,
    "ssl.certificate.location": None,
    "ssl.key.location": None,
    "ssl.key.password": None,
    "ssl.endpoint.identification.algorithm": "https",
    "enable.ssl.certificate.verification": True,
}


def check_endpoint_algorithm(value: Any) -> str:
    """``https`` or ``none`` (librdkafka's only values)."""
    text = str(value).strip().lower()
    if text not in ("https", "none", ""):
        raise ValueError("ssl.endpoint.identification.algorithm must be https or none")
    return text or "none"


def uses_tls(config: Mapping[str, Any]) -> bool:
    """True when ``security.protocol`` asks for TLS."""
    return str(config.get("security.protocol") or "plaintext").strip().lower() in TLS_PROTOCOLS


def ssl_context_for(config: Mapping[str, Any]) -> ssl.SSLContext | None:
    """The client SSL context for ``config`` (client property names), or None for a plaintext
    protocol. Unreadable files raise ``ValueError`` naming the property."""
    if not uses_tls(config):
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    verify = config.get("enable.ssl.certificate.verification", True)
    verify = verify if isinstance(verify, bool) else str(verify).strip().lower() in ("true", "1", "yes", "on")
    ca = config.get("ssl.ca.location")
    try:
        if ca:
            if Path(str(ca)).is_dir():
                ctx.load_verify_locations(capath=str(ca))
            else:
                ctx.load_verify_locations(cafile=str(ca))
        else:
            ctx.load_default_certs()
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"ssl.ca.location={ca}: {exc}") from exc
    cert, key = config.get("ssl.certificate.location"), config.get("ssl.key.location")
    if cert or key:
        try:
            ctx.load_cert_chain(str(cert or key), str(key) if key else None,
                                password=config.get("ssl.key.password") or None)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"ssl.certificate.location={cert}, ssl.key.location={key}: {exc}") from exc
    algorithm = check_endpoint_algorithm(config.get("ssl.endpoint.identification.algorithm", "https"))
    ctx.check_hostname = verify and algorithm == "https"
    if not verify:
        ctx.verify_mode = ssl.CERT_NONE
    return ctx
