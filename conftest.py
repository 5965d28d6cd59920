"""The test run imports the compiled build (`wirebroker.compiled`) ahead of pytest's assertion
rewriting, and its header says which codec it tests: the mypyc build or pure Python, and why
(`tests/wirebroker/test_compiled.py` fails a run that imports other than what its environment
asks for)."""

from __future__ import annotations

from wirebroker.compiled import put_first
from wirebroker.compiled_build import status

put_first()  # before any test module imports the codec


def pytest_report_header() -> str:
    return f"codec: {status()}"
