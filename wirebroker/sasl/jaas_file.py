"""A static JAAS login configuration file, as the JVM reads the one named by the system property
`java.security.auth.login.config`: named sections of login modules.

    Client {
        org.apache.zookeeper.server.auth.DigestLoginModule required
        username="kafka" password="kafka-secret";
    };

Each section is `Name { Module flag key="value" ... ; ... };`, its inside read as a
`sasl.jaas.config` value is (`settings.parse_jaas_entries`); `//` and `/* */` comments are
skipped, as Java's ConfigFile does. A name given twice is refused, as there.

Option values are expanded as Java's ConfigFile expands them (`system_properties.
expand_properties`): `keyTab="${user.home}${/}kafka.keytab"`, `password="${zk.password}"` take
system properties (`-D` in KAFKA_OPTS); a property that is not set, or a value expanded to
nothing, is refused, naming the option and the property, never a value. Only values are
expanded (not names, modules or flags), and not at all when the Java security property
`policy.expandProperties` is `false` (`system_properties.security_property`). The file's own
name, the system property `java.security.auth.login.config`, is expanded too (`jaas_file_path`).
"""

from __future__ import annotations

import re
from pathlib import Path

from wirebroker.sasl.settings import JaasEntry, JaasError, parse_jaas_entries
from wirebroker.system_properties import (
    ExpandError,
    expand_properties,
    security_property,
    system_property,
)

#: The Java security property that turns `${...}` expansion off when `false`.
EXPAND_PROPERTIES = "policy.expandProperties"

# A quoted string (kept), or a comment (blanked, keeping its newlines so positions stay true).
_QUOTED_OR_COMMENT = re.compile(r'("(?:[^"\\]|\\.)*")|//[^\n]*|/\*.*?\*/', re.DOTALL)
_SECTION = re.compile(r'\s*([^\s{};="]+)\s*\{((?:[^{}"]|"(?:[^"\\]|\\.)*")*)\}\s*;')


def parse_jaas_file(text: str, *, expand: bool = True) -> dict[str, list[JaasEntry]]:
    """Each section's login modules, by the section's name, their option values expanded
    (`expand`); JaasError saying where it fails."""
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
            if expand:
                for entry in sections[name]:
                    entry.options = {k: _expanded(k, v) for k, v in entry.options.items()}
        except JaasError as e:
            raise JaasError(f"section {name} (line {line}): {e}") from None
        pos = m.end()
    return sections


def _expanded(option: str, value: str) -> str:
    """An option's value expanded as Java's ConfigFile.expand: an empty value is left empty,
    a value that expands to nothing is refused."""
    if not value:
        return value
    try:
        expanded = expand_properties(value)
    except ExpandError as e:
        raise JaasError(f"option {option}: {e}") from None
    if not expanded:
        # `value` is nothing but ${...} of empty properties: names only, no secret.
        raise JaasError(f"option {option}: system property [{value}] expanded to empty value")
    return expanded


def jaas_file_path(value: str) -> str:
    """The file the system property `java.security.auth.login.config` names, as Java's
    ConfigFile reads it: `${...}` expanded, a leading `=` (`-D...==file`: this file only, which
    is all wirebroker reads) and a `file:` URL's scheme dropped; JaasError when it cannot be
    expanded (the JDK's message)."""
    value = value.removeprefix("=")
    try:
        path = expand_properties(value)
    except ExpandError:
        raise JaasError(f"Unable to properly expand {value}") from None
    return path.removeprefix("file:")


def read_jaas_file(path: str) -> dict[str, list[JaasEntry]]:
    """`parse_jaas_file` of the file at `path`, expanded unless `policy.expandProperties` is
    false (the security property; the system property when that is not set, as Java's
    ConfigFile looks: the JDK's java.security sets it, true); OSError when it cannot be read."""
    setting = security_property(EXPAND_PROPERTIES)
    if setting is None:
        setting = system_property(EXPAND_PROPERTIES)
    expand = setting != "false"
    return parse_jaas_file(Path(path).read_text(), expand=expand)
