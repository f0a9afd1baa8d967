"""Tables of ACLs (cluster/pg/acls.py) and SCRAM credentials (cluster/pg/scram.py).

An ACL is its whole binding (the primary key): adding one twice is a no-op, as in Kafka. A SCRAM
credential is stored as the broker's file store keeps it: salt, StoredKey, ServerKey and the
iteration count per user and mechanism, never a password.
"""

from __future__ import annotations

from oncestream.cluster.pg.schema_step import SchemaStep

STEPS: tuple[SchemaStep, ...] = (
    SchemaStep("0004_security", """
CREATE TABLE acls (
    resource_type smallint NOT NULL,
    resource_name text NOT NULL,
    pattern_type smallint NOT NULL,
    principal text NOT NULL,
    host text NOT NULL,
    operation smallint NOT NULL,
    permission smallint NOT NULL,
    PRIMARY KEY (resource_type, resource_name, pattern_type, principal, host, operation, permission)
);
CREATE TABLE scram_credentials (
    user_name text NOT NULL,
    mechanism text NOT NULL,
    salt bytea NOT NULL,
    stored_key bytea NOT NULL,
    server_key bytea NOT NULL,
    iterations int NOT NULL CHECK (iterations > 0),
    PRIMARY KEY (user_name, mechanism)
);
"""),
)
