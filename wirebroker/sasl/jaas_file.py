"""A static JAAS login configuration file, as the JVM reads the one named by the system property
`java.security.auth.login.config`: named sections of login modules.

    Client {
        org.apache.zookeeper.server.auth.DigestLoginModule required
        username="kafka" password="kafka-secret";
    };

Each section is `Name { Module flag key="value" ... ; ... };`, read as the JDK 17's ConfigFile
reads the file (UTF-8): its StreamTokenizer's tokens (`java_tokens`: escapes in quoted strings,
numbers, comments; `*` is a word character here and not in Kafka's `sasl.jaas.config` parser)
and its grammar, where a login module, control flag, option name or option value is a word or a
string in double quotes: a number (`debug=1`) or a string in single quotes (which Kafka's parser
takes) is refused. A name given twice is refused, as there. Messages give the line, the section
and the option, never a value (the JDK's show the token they found).

Option values are expanded as Java's ConfigFile expands them (`system_properties.
expand_properties`): `keyTab="${user.home}${/}kafka.keytab"`, `password="${zk.password}"` take
system properties (`-D` in KAFKA_OPTS); a property that is not set, or a value expanded to
nothing, is refused, naming the option and the property, never a value. Only values are
expanded (not names, modules or flags), and not at all when the Java security property
`policy.expandProperties` is `false` (`system_properties.security_property`). The file's own
name, the system property `java.security.auth.login.config`, is expanded too (`jaas_file_path`).

Two sections are read: ZooKeeper's client's (`Client`: `wirebroker.zk.sasl_login`) and the
brokers' (`KafkaServer`, or `<listener>.KafkaServer` for one listener: `kafka_server_section`),
where a SASL listener's mechanisms find their login modules when the listener has no
`listener.name.<l>.<mechanism>.sasl.jaas.config`, as Kafka's JaasContext looks.
"""

from __future__ import annotations

from contextlib import suppress
from pathlib import Path
from threading import Lock

from wirebroker.sasl.java_tokens import (
    END,
    JDK_WORD_CHARS,
    WORD,
    Token,
    java_tokens,
    line_of,
    quoting_hint,
    token_name,
)
from wirebroker.sasl.settings import JaasEntry, JaasError, control_flag, login_module_allowed
from wirebroker.system_properties import (
    JAAS_FILE,
    ExpandError,
    expand_properties,
    security_property,
    system_property,
)

#: The Java security property that turns `${...}` expansion off when `false`.
EXPAND_PROPERTIES = "policy.expandProperties"
#: The brokers' section (Kafka's JaasContext's GLOBAL_CONTEXT_NAME_SERVER).
KAFKA_SERVER = "KafkaServer"
_SECTION = 'a section is Name { LoginModuleClass controlFlag key="value" ... ; };'


def parse_jaas_file(text: str, *, expand: bool = True) -> dict[str, list[JaasEntry]]:
    """Each section's login modules, by the section's name, their option values expanded
    (`expand`); JaasError saying where it fails. A section without login modules is left out,
    as the JDK finds none by its name (so a broker does not log in to ZooKeeper with it)."""
    return _ConfigFile(text, expand).sections()


class _ConfigFile:
    """The JDK's ConfigFile reading `text`: the tokens, the next one (`i`) and the section it is
    in (`section`, for messages)."""

    __slots__ = ("text", "expand", "tokens", "i", "section")

    def __init__(self, text: str, expand: bool) -> None:
        self.text = text
        self.expand = expand
        self.tokens = java_tokens(text, JDK_WORD_CHARS)
        self.i = 0
        self.section: str | None = None

    def sections(self) -> dict[str, list[JaasEntry]]:
        sections: dict[str, list[JaasEntry]] = {}
        names: set[str | None] = set()
        while self.tokens[self.i][0] != END:
            start = self.tokens[self.i]
            # As the JDK: the name is whatever text the token has; a number or a character
            # names no section (the JDK files it under null, which no login looks up).
            name = start[1]
            label = "without a name" if name is None else name
            self.section = label
            self.i += 1
            self.take("{", "after the section's name")
            entries = []
            while self.tokens[self.i][0] != "}":
                entries.append(self.entry())
            self.i += 1
            self.take(";", "after '}'")
            self.section = None
            if name in names:
                raise self.error(f"section {label} is given twice", start)
            names.add(name)
            if name is not None and entries:  # as the JDK's lookup: no modules, no section
                sections[name] = entries
        return sections

    def entry(self) -> JaasEntry:
        """One login module: `Module flag key="value" ... ;`."""
        module = self.text_of("a login module's class name", "or '}'")
        flag = self.tokens[self.i]
        flag_text = self.text_of("a control flag", "after the login module")
        try:
            flag_name = control_flag(flag_text)
        except JaasError as e:
            raise self.error(str(e), flag) from None
        options: dict[str, str] = {}
        after = "after the control flag"
        while self.tokens[self.i][0] != ";":
            key = self.text_of("an option's name", after)
            self.take("=", f"after option {key}")
            value_token = self.tokens[self.i]
            value = self.text_of("a value", f"after option {key}'s '='", value=True)
            options[key] = self.expanded(key, value, value_token) if self.expand else value
            after = f"after option {key}"
        self.i += 1
        if not module:
            raise self.error("a login module's class name is empty", self.tokens[self.i - 1])
        return JaasEntry(module, flag_name, options)

    def text_of(self, what: str, where: str, *, value: bool = False) -> str:
        """The text of the next token, which must be a word or in double quotes."""
        token = self.tokens[self.i]
        if token[0] == WORD or token[0] == '"':
            self.i += 1
            return token[1] or ""
        hint = ""
        if token[0] == "'":
            hint = ": the JDK's JAAS file parser takes only double quotes"
        elif value:
            hint = f": {quoting_hint(JDK_WORD_CHARS)}"
        raise self.error(f"expected {what} {where}, found {token_name(token)}{hint}", token)

    def take(self, kind: str, where: str) -> None:
        token = self.tokens[self.i]
        if token[0] != kind:
            hint = "" if kind == "=" else f": {_SECTION}"
            raise self.error(f"expected '{kind}' {where}, found {token_name(token)}{hint}", token)
        self.i += 1

    def expanded(self, option: str, value: str, token: Token) -> str:
        """An option's value expanded as Java's ConfigFile.expand: an empty value is left
        empty, a value that expands to nothing is refused."""
        if not value:
            return value
        try:
            expanded = expand_properties(value)
        except ExpandError as e:
            raise self.error(f"option {option}: {e}", token) from None
        if not expanded:
            # `value` is nothing but ${...} of empty properties: names only, no secret.
            raise self.error(
                f"option {option}: system property [{value}] expanded to empty value", token
            )
        return expanded

    def error(self, message: str, token: Token) -> JaasError:
        """JaasError saying where `token` is: its line, and the section it is in, if any."""
        line = line_of(self.text, token[2])
        where = f"section {self.section} (line {line})" if self.section else f"line {line}"
        return JaasError(f"{where}: {message}")


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
    ConfigFile looks: the JDK's java.security sets it, true); OSError when it cannot be read.
    As the JDK, the file is UTF-8 (a byte that is not: U+FFFD) and its line breaks are kept as
    written (a comment after `/` runs to the next `\r` or `\n`)."""
    setting = security_property(EXPAND_PROPERTIES)
    if setting is None:
        setting = system_property(EXPAND_PROPERTIES)
    expand = setting != "false"
    text = Path(path).read_bytes().decode("utf-8", "replace")
    return parse_jaas_file(text, expand=expand)


_server_files: dict[str, dict[str, list[JaasEntry]] | JaasError] = {}
_server_files_lock = Lock()


def kafka_server_section(listener_name: str) -> tuple[str, list[JaasEntry]] | None:
    """The JAAS file's login modules for a listener's mechanisms that have no
    `sasl.jaas.config` of their own, as Kafka's JaasContext finds them: the section
    `<listener>.KafkaServer` (the listener's name in lower case), else `KafkaServer`; with
    where they come from (the section and the file, for messages). None when the system
    property names no file or the file has neither section. JaasError when the file cannot be
    read or parsed, or the section names a login module that is not allowed
    (`login_module_allowed`, checked for each of its modules as Kafka does).

    The file is read once per process, as the JVM reads its login configuration once: a
    listener added or changed at run time finds what the start read, without the event loop
    waiting on the disk (`preload_server_file`, from config validation at start)."""
    setting = system_property(JAAS_FILE)
    if setting is None:
        return None
    path = jaas_file_path(setting)
    sections = read_server_file(path)
    for name in (f"{listener_name.lower()}.{KAFKA_SERVER}", KAFKA_SERVER):
        entries = sections.get(name)
        if entries is not None:
            source = f"section {name} of {path}"
            for entry in entries:
                try:
                    login_module_allowed(entry.login_module)
                except JaasError as e:
                    raise JaasError(f"{source}: {e}") from None
            return source, entries
    return None


def preload_server_file() -> None:
    """Read the JAAS file the system property names, if any, for `kafka_server_section` to
    find it read later (an error is kept for the listeners that need the file)."""
    setting = system_property(JAAS_FILE)
    if setting is None:
        return
    with suppress(JaasError):
        read_server_file(jaas_file_path(setting))


def read_server_file(path: str) -> dict[str, list[JaasEntry]]:
    """`read_jaas_file(path)`, read the first time only (its sections or its error kept);
    JaasError naming the file when it cannot be read or parsed."""
    with _server_files_lock:
        if path not in _server_files:
            try:
                _server_files[path] = read_jaas_file(path)
            except OSError as e:
                _server_files[path] = JaasError(
                    f"cannot read the JAAS file {path} ({JAAS_FILE}): {e.strerror or e}"
                )
            except JaasError as e:
                _server_files[path] = JaasError(f"the JAAS file {path} ({JAAS_FILE}): {e}")
        found = _server_files[path]
    if isinstance(found, JaasError):
        raise JaasError(str(found))
    return found
