"""Build configuration of the C extensions (the metadata lives in pyproject.toml).

``oncestream._native.record_columns`` decodes Kafka records sections into Arrow column buffers
for the Spark reader (see its source for why it is hand-written). ``oncestream._native.tls_pump``
moves an established TLS connection's bytes in C with the GIL released (links OpenSSL: the
libssl-dev headers). Both are optional: when no C compiler or no OpenSSL headers are at hand the
install still succeeds and the callers use their pure-Python paths.
"""

from setuptools import Extension, setup

_COMPILE_ARGS = ["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]

setup(
    ext_modules=[
        Extension(
            "oncestream._native.record_columns",
            ["src/oncestream/_native/record_columns.c"],
            extra_compile_args=_COMPILE_ARGS,
            optional=True,
        ),
        Extension(
            "oncestream._native.tls_pump",
            ["src/oncestream/_native/tls_pump.c"],
            extra_compile_args=_COMPILE_ARGS,
            libraries=["ssl", "crypto"],
            optional=True,
        ),
    ],
)
