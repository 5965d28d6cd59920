"""Kerberos principal names and their short names: Kafka's KerberosName, KerberosShortNamer and
KerberosRule (`sasl.kerberos.principal.to.local.rules`).

A GSSAPI client authenticated as `alice@EXAMPLE.COM` or `kafka/host1@EXAMPLE.COM` is the Kafka
principal `User:<short name>`, which ACLs name. The rules are tried in order; the first that
applies gives the short name, and a principal no rule applies to cannot log in. As Kafka:

- `DEFAULT`: a name of the default realm (the Kerberos configuration's `default_realm`) is its
  first component (`alice@EXAMPLE.COM` -> `alice`, `kafka/host1@EXAMPLE.COM` -> `kafka`);
- `RULE:[n:format](regex)s/from/to/g/L`: for names of `n` components, the format with `$0`
  (the realm), `$1`, `$2` (the components) replaced; if it matches the whole `regex` (optional),
  `from` (a regex) is replaced by `to` (where `$1` names `from`'s group 1) once or, with `g`,
  everywhere; `/L` or `/U` lower- or upper-case the result. A result holding `/` or `@` is an
  error (Kafka's "Non-simple name").

Kafka compiles the regexes as Java's; they are compiled here with Python's `re`, which agrees on
what such rules use (classes, groups, anchors, quantifiers).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_NAME_PARSER = re.compile(r"([^/@]*)(?:/([^/@]*))?@([^/@]*)")
_RULE_PARSER = re.compile(
    r"((DEFAULT)|((RULE:\[(\d*):([^\]]*)](\(([^)]*)\))?(s/([^/]*)/([^/]*)/(g)?)?/?(L|U)?)))"
)
_PARAMETER = re.compile(r"([^$]*)(\$(\d*))?")
_NON_SIMPLE = re.compile(r"[/@]")
_JAVA_REPLACEMENT = re.compile(r"\\(.)|\$(\d+)|\$\{(\w+)\}|([^\\$]+|\$)")


class NoMatchingRule(Exception):
    """No rule gives a short name for the principal, or one gives a name that is not simple."""


class KerberosName:
    """`service/host@REALM`, `user@REALM` or a bare `user` (no realm)."""

    __slots__ = ("service_name", "host_name", "realm")

    def __init__(self, service_name: str, host_name: str | None, realm: str | None) -> None:
        self.service_name = service_name
        self.host_name = host_name
        self.realm = realm

    @classmethod
    def parse(cls, principal: str) -> KerberosName:
        m = _NAME_PARSER.fullmatch(principal)
        if m is None:
            if "@" in principal:
                raise ValueError(f"Malformed Kerberos name: {principal}")
            return cls(principal, None, None)
        return cls(m[1], m[2], m[3])

    def __str__(self) -> str:
        host = f"/{self.host_name}" if self.host_name is not None else ""
        realm = f"@{self.realm}" if self.realm is not None else ""
        return f"{self.service_name}{host}{realm}"


class KerberosRule:
    """One rule of `sasl.kerberos.principal.to.local.rules` (`DEFAULT` when `components` is
    None)."""

    __slots__ = ("text", "components", "format", "match", "subst", "case")

    def __init__(self, text: str) -> None:
        m = _RULE_PARSER.match(text)
        if m is None:
            raise ValueError(f"Invalid rule: {text}")
        if m.end() != len(text):
            raise ValueError(f"Invalid rule: `{text}`, unmatched substring: `{text[m.end() :]}`")
        self.text = text
        self.components: int | None = None
        self.format = ""
        self.match: re.Pattern[str] | None = None
        #: (from, to, every match) of the `s/from/to/g` part.
        self.subst: tuple[re.Pattern[str], str, bool] | None = None
        self.case = m[13]  # "L", "U" or None
        if m[2] is not None:
            return
        try:
            self.components = int(m[5])
            self.format = m[6]
            self.match = re.compile(m[8]) if m[8] is not None else None
            if m[10] is not None:
                self.subst = (re.compile(m[10]), m[11], m[12] == "g")
        except (ValueError, re.error) as e:
            raise ValueError(f"Invalid rule: {text}: {e}") from None

    def __repr__(self) -> str:
        return self.text

    def apply(self, params: Sequence[str], default_realm: str) -> str | None:
        """The short name of the name `params` (the realm, then the components), or None
        when this rule does not apply to it."""
        result: str | None = None
        if self.components is None:
            if params[0] == default_realm:
                result = params[1]
        elif len(params) - 1 == self.components:
            base = _replace_parameters(self.format, params)
            if self.match is None or self.match.fullmatch(base):
                result = base
                if self.subst is not None:
                    pattern, to, every = self.subst
                    result = pattern.sub(_java_replacement(to), base, count=0 if every else 1)
        if result is None:
            return None
        if _NON_SIMPLE.search(result):
            raise NoMatchingRule(f"Non-simple name {result} after auth_to_local rule {self}")
        if self.case == "L":
            return result.lower()
        return result.upper() if self.case == "U" else result


def _replace_parameters(format: str, params: Sequence[str]) -> str:
    """`format` with each `$n` replaced by `params[n]` (Kafka's replaceParameters)."""
    out: list[str] = []
    start = 0
    while start < len(format):
        m = _PARAMETER.match(format, start)
        assert m is not None  # the pattern matches any text, possibly empty
        out.append(m[1])
        if m[2] is not None:
            if not m[3]:
                raise NoMatchingRule(f"bad format in username mapping in {format}")
            n = int(m[3])
            if n >= len(params):
                raise NoMatchingRule(
                    f"index {n} from {format} is outside of the valid range 0 to {len(params) - 1}"
                )
            out.append(params[n])
        if m.end() == start:
            break
        start = m.end()
    return "".join(out)


def _java_replacement(to: str) -> str:
    r"""Java's replacement string (`$1`, `${name}` a group, `\$` a dollar) as Python's."""

    def one(m: re.Match[str]) -> str:
        if m[2] or m[3]:
            return f"\\g<{m[2] or m[3]}>"
        return (m[1] if m[1] is not None else m[4]).replace("\\", "\\\\")

    return _JAVA_REPLACEMENT.sub(one, to)


class KerberosShortNamer:
    """The rules, in order, and the short names they give; ValueError if one does not
    parse."""

    __slots__ = ("rules",)

    def __init__(self, rules: Sequence[str]) -> None:
        self.rules = [KerberosRule(r.strip()) for r in rules]

    def short_name(self, principal: str, default_realm: str) -> str:
        """`principal`'s short name, the default realm being `default_realm` (Kafka: the
        Kerberos configuration's, or "" when it has none); NoMatchingRule when none applies."""
        name = KerberosName.parse(principal)
        if name.realm is None and name.host_name is None:
            return name.service_name
        params = [name.realm or "", name.service_name]
        if name.host_name is not None:
            params.append(name.host_name)
        for rule in self.rules:
            result = rule.apply(params, default_realm)
            if result is not None:
                return result
        raise NoMatchingRule(f"No rules apply to {name}, rules {self.rules}")
