"""SASL authentication on the broker (issue 14, point 3).

Sans-io pieces: ``plain`` (RFC 4616), ``scram`` (RFC 5802/7677 server side), ``jaas`` (Kafka's
``sasl.jaas.config`` syntax), ``credentials`` (the durable SCRAM credential store) and
``exchange`` (one connection's SaslHandshake/SaslAuthenticate state). The handlers in
``broker/handlers/sasl.py`` drive them; ``broker/dispatch.py`` holds the gate that refuses every
other request before authentication.
"""
