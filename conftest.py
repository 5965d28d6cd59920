"""The test run's header says which codec it tests: the mypyc build or pure Python, and why
(`wirebroker.compiled`; `tests/wirebroker/test_compiled.py` fails a run that imports other than
what its environment asks for)."""

from __future__ import annotations

from wirebroker.compiled_build import status


def pytest_report_header() -> str:
    return f"codec: {status()}"
