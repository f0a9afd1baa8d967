"""Cluster mode (issue 22): stateless brokers whose durability is an object store and whose
ordering, metadata and leases are PostgreSQL's transactions (docs/cluster.md).

Layer: below ``broker`` (which serves the wire protocol from it), above ``remote`` (the object
store interface it uploads to and reads from). Sub-packages: ``pg`` (the connection pool, schema
migrations and the catalog: brokers and their leases, topics, configs, ACLs, SCRAM users),
``diskless`` (produce objects, the commit transaction that assigns offsets, reads, consolidation,
garbage collection), ``leases`` (coordinator partitions owned through fenced leases).
"""
