"""PostgreSQL access of cluster mode: schema, connection pool, catalog, broker registry."""
