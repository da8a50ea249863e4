"""The one thing pyproject.toml cannot say: the native matcher and the repr reader are C extensions, and optional.

Where they cannot be built (no C compiler), the install goes on without them: speclogs runs every grammar on
polars and reads Python reprs in Python (slower; `speclogs ingest` says so). The bundled grammars/ ship inside the wheel as speclogs/_grammars.
"""

from setuptools import Extension, find_packages, setup

setup(
    packages=find_packages("src") + ["speclogs._grammars"],
    package_dir={"": "src", "speclogs._grammars": "grammars"},
    ext_modules=[
        Extension("speclogs.ingest._native", ["src/speclogs/ingest/_native.c"], optional=True, extra_compile_args=["-O2"]),
        Extension("speclogs.ingest._reprs", ["src/speclogs/ingest/_reprs.c"], optional=True, extra_compile_args=["-O2"]),
    ],
)
