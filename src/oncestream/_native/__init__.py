"""Native (C) helpers behind pure-Python fallbacks with the same results.

``record_columns``: Kafka records sections into Arrow column buffers (the Spark reader's column
builder). ``tls_pump``: an established TLS connection's byte path with the GIL released (the
broker's TLS listeners, broker/tls_pump.py). Built by ``pip install -e .`` (setup.py); when one
is missing, or when the environment sets ``ONCESTREAM_NATIVE=0``, callers use their Python path.
"""
