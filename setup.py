"""The compiled scans (parsers/_scan.c): optional, so that kdiag installs
where there is no C compiler; its parsers then run their reference code
(parsers/scan.py). Everything else is in pyproject.toml."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("kdiag.parsers._scan", ["parsers/_scan.c"], optional=True,
                             extra_compile_args=["-O2"])])
