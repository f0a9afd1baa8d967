"""ksqlDB's REST API for a SQL-server node.

- ``app``      ``create_app(engine, *, max_body_bytes)``: the ASGI app (routes, errors, streaming).
- ``http``     plain-ASGI plumbing: bounded bodies, content negotiation, responses.
- ``framing``  the bytes ksqlDB writes on /query, /query-stream and /inserts-stream (sans-io).
- ``serve``    ``serve(app, host, port, shutdown_event, ready)``: hypercorn, HTTP/1.1 + h2c.
- ``client``   a small HTTP client of this API (used by the shell ``oncestream sql``).
"""
