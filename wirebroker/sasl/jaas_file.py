"""A static JAAS login configuration file, as the JVM reads the one named by the system property
`java.security.auth.login.config`: named sections of login modules.

    Client {
        org.apache.zookeeper.server.auth.DigestLoginModule required
        username="kafka" password="kafka-secret";
    };

Each section is `Name { Module flag key="value" ... ; ... };`, its inside read as a
`sasl.jaas.config` value is (`settings.parse_jaas_entries`); `//` and `/* */` comments are
skipped, as Java's ConfigFile does. A name given twice is refused, as there. Java's
`${property}` expansion is not done.
"""

from __future__ import annotations

import re
from pathlib import Path

from wirebroker.sasl.settings import JaasEntry, JaasError, parse_jaas_entries

# A quoted string (kept), or a comment (blanked, keeping its newlines so positions stay true).
_QUOTED_OR_COMMENT = re.compile(r'("(?:[^"\\]|\\.)*")|//[^\n]*|/\*.*?\*/', re.DOTALL)
_SECTION = re.compile(r'\s*([^\s{};="]+)\s*\{((?:[^{}"]|"(?:[^"\\]|\\.)*")*)\}\s*;')


def parse_jaas_file(text: str) -> dict[str, list[JaasEntry]]:
    """Each section's login modules, by the section's name; JaasError saying where it fails."""
    text = _QUOTED_OR_COMMENT.sub(lambda m: m[1] or re.sub(r"[^\n]", " ", m[0]), text)
    sections: dict[str, list[JaasEntry]] = {}
    pos = 0
    while text[pos:].strip():
        m = _SECTION.match(text, pos)
        line = text.count("\n", 0, len(text) - len(text[pos:].lstrip())) + 1
        if m is None:
            raise JaasError(
                f"line {line}: expected a section, "
                'Name { LoginModuleClass controlFlag key="value" ... ; };'
            )
        name = m[1]
        if name in sections:
            raise JaasError(f"line {line}: section {name} is given twice")
        try:
            sections[name] = parse_jaas_entries(m[2])
        except JaasError as e:
            raise JaasError(f"section {name} (line {line}): {e}") from None
        pos = m.end()
    return sections


def read_jaas_file(path: str) -> dict[str, list[JaasEntry]]:
    """`parse_jaas_file` of the file at `path`; OSError when it cannot be read."""
    return parse_jaas_file(Path(path).read_text())
