"""Native (C) helpers behind pure-Python fallbacks with the same results.

``record_columns``: Kafka records sections into Arrow column buffers (the Spark reader's column
builder). Built by ``pip install -e .`` (setup.py); when it is missing, or when the environment
sets ``ONCESTREAM_NATIVE=0``, callers use their Python path.
"""
