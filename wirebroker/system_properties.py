"""The JVM system properties a Kafka deployment sets, read without a JVM, and Java's
`${property}` expansion of them.

Kafka reads some settings only as system properties (`-Dname=value` on the JVM's command line,
which kafka-server-start.sh takes from `KAFKA_OPTS`): OAUTHBEARER's allowed URLs, the login
modules a `sasl.jaas.config` may not name, the JAAS file (`java.security.auth.login.config`) and
the ZooKeeper client's SASL switches. wirebroker reads
each from an environment variable of that very name or, without one, from the last
`-Dname=value` word of `KAFKA_OPTS`, so a deployment's `KAFKA_OPTS` works unchanged; without
either, the JVM's own properties a file may name (`user.home`, `user.dir`, ...) have the value
the JVM gives them. Neither can be changed by a client, as a system property cannot.

`expand_properties` is the JDK's PropertyExpander: `${name}` is the system property `name`
(`${/}` the file separator), as in a JAAS file (`jaas_file`). `security_property` reads a Java
security property as the JDK's java.security (as shipped) and the file named by the system
property `java.security.properties` set it.
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

#: What Java's String.trim removes from either end: the control characters and the space.
JAVA_TRIM = "".join(map(chr, range(33)))
#: The system property naming the JAAS file (`wirebroker.sasl.jaas_file`).
JAAS_FILE = "java.security.auth.login.config"


def system_property(name: str) -> str | None:
    """The value of system property `name`, or None when it is not set."""
    value = os.environ.get(name)
    if value is None:
        flag = f"-D{name}="
        for word in os.environ.get("KAFKA_OPTS", "").split():
            if word.startswith(flag):
                value = word[len(flag) :]
    if value is None and name in _JVM_PROPERTIES:
        value = _JVM_PROPERTIES[name]()
    return value


def _user(field: str) -> str:
    """The user's `field` in the password database; `?` where the user has no entry, as the
    JVM's."""
    try:
        return str(getattr(pwd.getpwuid(os.getuid()), field))
    except KeyError:
        return "?"


#: The JVM's own properties (on Linux) a `${...}` may name: the user's home and name as the
#: JVM takes them (the password database, not $HOME), the working directory, the separators.
_JVM_PROPERTIES = {
    "user.home": lambda: _user("pw_dir"),
    "user.name": lambda: _user("pw_name"),
    "user.dir": os.getcwd,
    "java.io.tmpdir": lambda: "/tmp",
    "file.separator": lambda: os.sep,
    "path.separator": lambda: os.pathsep,
    "line.separator": lambda: "\n",
}


class ExpandError(ValueError):
    """A `${name}` naming a property that is not set (the JDK's ExpandException); raised by
    `expand_properties`, its message naming the property, never a value."""


def expand_properties(value: str) -> str:
    """`value` with each `${name}` replaced by system property `name`, as the JDK's
    PropertyExpander: `${/}` is the file separator; `${{...}}` is left as it is, as is a `${`
    without its `}` (to the end); ExpandError for a property that is not set or `${}`."""
    out: list[str] = []
    pos = 0
    while (start := value.find("${", pos)) != -1:
        out.append(value[pos:start])
        if value.startswith("{", start + 2):  # ${{...}}: kept as written
            close = value.find("}}", start + 2)
            if close == -1:
                pos = start
                break
            out.append(value[start : close + 2])
            pos = close + 2
            continue
        close = value.find("}", start + 2)
        if close == -1:  # no `}`: the rest as it is
            pos = start
            break
        name = value[start + 2 : close]
        if name == "/":
            out.append(os.sep)
        elif not name:
            raise ExpandError("unable to expand ${}: a property name can't be empty")
        else:
            expanded = system_property(name)
            if expanded is None:
                raise ExpandError(f"unable to expand property {name}")
            out.append(expanded)
        pos = close + 1
    out.append(value[pos:])
    return "".join(out)


#: The JDK's java.security, as shipped, for the security properties wirebroker reads.
_JAVA_SECURITY = {"policy.expandProperties": "true"}


def security_property(name: str) -> str | None:
    """Java security property `name` (the JDK's Security.getProperty): the JDK's java.security
    as shipped, overridden by the properties file `-Djava.security.properties=<file>` names
    (`==<file>`: that file's properties only). The file's name is expanded, `${...}`; a file
    that cannot be read or expanded is skipped, as the JDK skips it."""
    extra = system_property("java.security.properties")
    properties = dict(_JAVA_SECURITY)
    if extra:
        from wirebroker.config import parse_properties

        only = extra.startswith("=")
        try:
            path = expand_properties(extra[1:] if only else extra)
            text = Path(path.removeprefix("file:")).read_text(encoding="latin-1")
        except (ExpandError, OSError):
            return properties.get(name)
        if only:
            properties.clear()
        properties.update(parse_properties(text))
    return properties.get(name)
