"""A throwaway PKI for the TLS suites, made with ``cryptography``: a CA, a broker certificate for
``localhost`` / ``127.0.0.1``, and client certificates (good, expired, self-signed, signed by
another CA). Everything is written as PEM files in one directory.

Keys are EC P-256: generating them is instant, unlike RSA, so a module fixture costs nothing.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class ClientCert:
    """A client certificate and its key as PEM files."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    """Paths of everything a TLS test needs."""

    dir: Path
    ca: Path  # the trusted CA (broker truststore and client ssl.ca.location)
    server_keystore: Path  # broker key + certificate chain in one PEM file (ssl.keystore.location)
    server_cert: Path
    server_key: Path
    alice: ClientCert  # CN=alice, signed by the CA
    bob_full_dn: ClientCert  # CN=bob,OU=eng,O=Acme\, Inc,C=DE: an RFC 2253 subject with escaping
    expired: ClientCert  # CN=old, signed by the CA, expired yesterday
    self_signed: ClientCert  # CN=mallory, signed by itself
    other_ca: ClientCert  # CN=eve, signed by a CA the broker does not trust

    def broker_stores(self) -> dict[str, str]:
        """A broker's TLS properties for this PKI: its PEM key store and, as trust store, the CA."""
        return {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.server_keystore),
                "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca)}


def _name(**parts: str) -> x509.Name:
    oids = {"C": NameOID.COUNTRY_NAME, "O": NameOID.ORGANIZATION_NAME,
            "OU": NameOID.ORGANIZATIONAL_UNIT_NAME, "CN": NameOID.COMMON_NAME}
    return x509.Name([x509.NameAttribute(oids[k], v) for k, v in parts.items()])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> bytes:
    data = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())
    path.write_bytes(data)
    return data


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _issue(subject: x509.Name, key: ec.EllipticCurvePrivateKey, issuer: x509.Name,
           issuer_key: ec.EllipticCurvePrivateKey, *, ca: bool = False, server: bool = False,
           not_before: datetime.datetime | None = None, not_after: datetime.datetime | None = None) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before or now - _DAY)
        .not_valid_after(not_after or now + 30 * _DAY)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                          key_encipherment=False, data_encipherment=False, key_agreement=False,
                          encipher_only=False, decipher_only=False), critical=True)
    else:
        # A broker's certificate is also its client certificate towards its peers (a cluster's
        # inter-broker listener with ssl.client.auth, broker/inter_broker.py), as in Kafka.
        usages = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH] if server \
            else [ExtendedKeyUsageOID.CLIENT_AUTH]
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        ]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _client(directory: Path, stem: str, subject: x509.Name, issuer: x509.Name | None,
            issuer_key: ec.EllipticCurvePrivateKey | None, **validity: datetime.datetime) -> ClientCert:
    key = _key()
    cert = _issue(subject, key, issuer or subject, issuer_key or key, **validity)  # type: ignore[arg-type]
    cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert_path.write_bytes(_pem(cert))
    _write_key(key_path, key)
    return ClientCert(cert_path, key_path)


def make_pki(directory: Path) -> Pki:
    """Create the CA, the broker's keystore and the client certificates under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_name = _key(), _name(O="oncestream tests", CN="oncestream test CA")
    ca_cert = _issue(ca_name, ca_key, ca_name, ca_key, ca=True)
    ca_path = directory / "ca.crt"
    ca_path.write_bytes(_pem(ca_cert))

    server_key = _key()
    server_cert = _issue(_name(CN="localhost"), server_key, ca_name, ca_key, server=True)
    server_cert_path, server_key_path = directory / "server.crt", directory / "server.key"
    server_cert_path.write_bytes(_pem(server_cert) + _pem(ca_cert))
    key_pem = _write_key(server_key_path, server_key)
    keystore = directory / "server.keystore.pem"  # Kafka's PEM keystore: key, then the chain
    keystore.write_bytes(key_pem + _pem(server_cert) + _pem(ca_cert))

    now = datetime.datetime.now(datetime.UTC)
    other_key, other_name = _key(), _name(CN="untrusted CA")
    return Pki(
        dir=directory,
        ca=ca_path,
        server_keystore=keystore,
        server_cert=server_cert_path,
        server_key=server_key_path,
        alice=_client(directory, "alice", _name(CN="alice"), ca_name, ca_key),
        bob_full_dn=_client(directory, "bob", _name(C="DE", O="Acme, Inc", OU="eng", CN="bob"), ca_name, ca_key),
        expired=_client(directory, "old", _name(CN="old"), ca_name, ca_key,
                        not_before=now - 10 * _DAY, not_after=now - _DAY),
        self_signed=_client(directory, "mallory", _name(CN="mallory"), None, None),
        other_ca=_client(directory, "eve", _name(CN="eve"), other_name, other_key),
    )
