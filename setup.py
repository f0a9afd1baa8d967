"""Build configuration of the one C extension (the metadata lives in pyproject.toml).

``oncestream._native.record_columns`` decodes Kafka records sections into Arrow column buffers
for the Spark reader (see its source for why it is hand-written). It is optional: when no C
compiler is at hand the install still succeeds and the reader uses its pure-Python builder.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "oncestream._native.record_columns",
            ["src/oncestream/_native/record_columns.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter",
                                "-Wno-missing-field-initializers"],
            optional=True,
        ),
    ],
)
