"""Principal builders the tests plug into our broker (``principal.builder.class``, Kafka's
property; broker/principal.py), so ACL tests can act as several users without SASL or mTLS.

    --config principal.builder.class=tests.support.principals:ClientIdPrincipalBuilder

The broker process must be able to import ``tests`` (tests.support.brokers puts the repository
root on its PYTHONPATH). Nothing like this ships: any client could claim any identity.
"""

from __future__ import annotations

from oncestream.broker.principal import AuthenticationContext, DefaultKafkaPrincipalBuilder

CLIENT_ID_PRINCIPAL_BUILDER = "tests.support.principals:ClientIdPrincipalBuilder"
CLIENT_ID_PREFIX = "principal:"


class ClientIdPrincipalBuilder:
    """client.id ``principal:NAME`` makes the connection ``User:NAME``; any other client.id gets
    the default builder's principal (SASL id, certificate subject, or anonymous)."""

    reads_client_id = True

    def __init__(self) -> None:
        self._default = DefaultKafkaPrincipalBuilder()

    def build(self, context: AuthenticationContext) -> str:
        client_id = context.client_id or ""
        if client_id.startswith(CLIENT_ID_PREFIX) and len(client_id) > len(CLIENT_ID_PREFIX):
            return "User:" + client_id[len(CLIENT_ID_PREFIX):]
        return self._default.build(context)
