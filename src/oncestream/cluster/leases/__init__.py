"""Coordinator partitions owned through leases in PostgreSQL (cluster mode, issue 22 point 4).

``coordinator_leases``: who owns each coordinator partition and the epoch that fences its writes;
``pg_internal_topic``: the internal compacted topics as PostgreSQL rows, every append fenced;
``producer_id_blocks``: producer ids from a PostgreSQL sequence; ``lease_keeper``: the periodic
round that acquires, hands off and loses partitions and tells the coordinators.
"""
