"""The generator: committed output is fresh, output is deterministic, spec parsing is exact."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol._codegen.__main__ import DEFAULT_SPECS, main, plan
from protocol._codegen.spec import parse_versions, snake, strip_comments

SPECS = DEFAULT_SPECS
needs_specs = pytest.mark.skipif(
    not (SPECS / "clients").is_dir(),
    reason=f"Kafka 3.9 message specs are not at {SPECS}; the freshness check needs them",
)


@needs_specs
def test_committed_output_is_fresh(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--check", "--specs", str(SPECS)]) == 0, capsys.readouterr().out


@needs_specs
def test_output_is_deterministic() -> None:
    assert plan(SPECS) == plan(SPECS)


def test_check_reports_a_missing_specs_folder(tmp_path: Path) -> None:
    assert main(["--check", "--specs", str(tmp_path)]) == 2


def test_strip_comments_keeps_slashes_inside_strings() -> None:
    text = '{"a": "http://x", // comment\n "b": "c\\"//d"}'
    assert strip_comments(text) == '{"a": "http://x", \n "b": "c\\"//d"}'


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0+", (0, 0x7FFF)), ("3-5", (3, 5)), ("2", (2, 2)), ("none", None), (None, None)],
)
def test_parse_versions(text: str | None, expected: tuple[int, int] | None) -> None:
    assert parse_versions(text) == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("TopicData", "topic_data"),
        ("timeoutMs", "timeout_ms"),
        ("ISRVersion", "isr_version"),
        ("Global", "global_"),
    ],
)
def test_snake(name: str, expected: str) -> None:
    assert snake(name) == expected
