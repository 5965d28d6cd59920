"""SASL settings of one listener: enabled mechanisms and their JAAS options.

Keys, as Kafka reads them: `sasl.enabled.mechanisms` (or `listener.name.<l>.sasl.enabled.mechanisms`),
`listener.name.<l>.<mechanism>.sasl.jaas.config`, `sasl.server.max.receive.size` and
`connections.max.reauth.ms` (or `listener.name.<l>.connections.max.reauth.ms`). As Kafka's
JaasContext, the server side ignores an unprefixed `sasl.jaas.config` (in a broker that is its
own client login); where Kafka then reads the `KafkaServer` section of a static JAAS file,
wirebroker reads no JAAS file.

GSSAPI (Kafka's default mechanism) is not implemented: an enabled GSSAPI is not offered in the
handshake. Kafka refuses to start a SASL listener whose mechanisms have no JAAS entry (GSSAPI
needs a Kerberos one), so a listener left with no implemented mechanism is refused here too,
as is PLAIN without a `PlainLoginModule` JAAS config (its users come from there). SCRAM needs
no JAAS options on the server side (its credentials are stored, see `credentials`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wirebroker.config import BrokerConfig

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
IMPLEMENTED = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
JAAS_USER_PREFIX = "user_"  # PlainLoginModule's option naming a user: user_<name>="<password>"

_CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")
_JAAS_TOKEN = re.compile(r'\s*(?:(;)|"((?:[^"\\]|\\.)*)"|([^\s=;"]+)|(=))')


class JaasError(ValueError):
    """A `sasl.jaas.config` value that does not parse; the message says where."""


@dataclass(frozen=True, slots=True)
class JaasEntry:
    """One login module of a `sasl.jaas.config` value (Kafka allows exactly one)."""

    login_module: str
    control_flag: str
    options: dict[str, str] = field(default_factory=dict)


def parse_jaas_config(text: str) -> JaasEntry:
    """`Module flag key="value" ...;` to a JaasEntry, as Kafka's JaasConfig reads it."""
    tokens: list[tuple[str, str]] = []  # (kind, text): kind is ";", "=", "word" or "quoted"
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _JAAS_TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise JaasError(f"unexpected character at {pos} of the JAAS config")
        pos = m.end()
        if m[1]:
            tokens.append((";", ";"))
        elif m[2] is not None:
            tokens.append(("quoted", re.sub(r"\\(.)", r"\1", m[2])))
        elif m[3]:
            tokens.append(("word", m[3]))
        elif m[4]:
            tokens.append(("=", "="))
    entries: list[JaasEntry] = []
    i = 0
    while i < len(tokens):
        if i + 1 >= len(tokens) or tokens[i][0] != "word":
            raise JaasError('expected: LoginModuleClass controlFlag key="value" ... ;')
        module, flag = tokens[i][1], tokens[i + 1][1].lower()
        if flag not in _CONTROL_FLAGS:
            raise JaasError(f"control flag {tokens[i + 1][1]!r} is not one of {_CONTROL_FLAGS}")
        i += 2
        options: dict[str, str] = {}
        while i < len(tokens) and tokens[i][0] != ";":
            if (
                i + 2 >= len(tokens)
                or tokens[i][0] != "word"
                or tokens[i + 1][0] != "="
                or tokens[i + 2][0] not in ("word", "quoted")
            ):
                raise JaasError(f"expected key=value after {module}")
            options[tokens[i][1]] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise JaasError("the login module entry must end with ';'")
        i += 1
        entries.append(JaasEntry(module, flag, options))
    if len(entries) != 1:
        raise JaasError(f"JAAS config contains {len(entries)} login modules, should be 1 module")
    return entries[0]


@dataclass(frozen=True, slots=True)
class ListenerSasl:
    """What a SASL listener offers: the mechanisms in the handshake and their JAAS options."""

    listener_name: str
    mechanisms: tuple[str, ...]
    jaas: dict[str, JaasEntry]
    max_receive_size: int
    #: The session lifetime (KIP-368); 0: sessions never expire.
    max_reauth_ms: int = 0

    def plain_users(self) -> dict[str, str]:
        """PLAIN's users and passwords: the `user_<name>` options of its PlainLoginModule."""
        entry = self.jaas[PLAIN]
        n = len(JAAS_USER_PREFIX)
        return {k[n:]: v for k, v in entry.options.items() if k.startswith(JAAS_USER_PREFIX)}


def listener_sasl(config: BrokerConfig, listener_name: str) -> ListenerSasl:
    """The SASL settings of a listener; ConfigError (from wirebroker.config) when unusable."""
    from wirebroker.config import ConfigError  # config imports this module to validate

    prefix = f"listener.name.{listener_name.lower()}."
    enabled_text = config.get(prefix + "sasl.enabled.mechanisms") or config.get(
        "sasl.enabled.mechanisms"
    )
    enabled = [m.strip().upper() for m in (enabled_text or "").split(",") if m.strip()]
    mechanisms = tuple(m for m in enabled if m in IMPLEMENTED)
    if not mechanisms:
        raise ConfigError(
            f"listener {listener_name}: sasl.enabled.mechanisms={enabled_text} offers no "
            f"mechanism wirebroker implements ({', '.join(IMPLEMENTED)}); GSSAPI (Kerberos) is "
            "not implemented"
        )
    jaas: dict[str, JaasEntry] = {}
    for mechanism in mechanisms:
        key = f"{prefix}{mechanism.lower()}.sasl.jaas.config"
        text = config.get(key)
        if text is None:
            continue
        try:
            jaas[mechanism] = parse_jaas_config(text)
        except JaasError as e:
            raise ConfigError(f"{key}: {e}") from None
    plain = jaas.get(PLAIN)
    if PLAIN in mechanisms and (plain is None or plain.login_module != PLAIN_LOGIN_MODULE):
        raise ConfigError(
            f"listener {listener_name} enables PLAIN but has no {PLAIN_LOGIN_MODULE} JAAS config: "
            f"set {prefix}plain.sasl.jaas.config={PLAIN_LOGIN_MODULE} required "
            'user_admin="admin-secret"; (as Kafka, an unprefixed sasl.jaas.config is not read here)'
        )
    reauth_key = prefix + "connections.max.reauth.ms"
    max_reauth_ms = config.get_int(
        reauth_key if config.is_set(reauth_key) else "connections.max.reauth.ms"
    )
    if max_reauth_ms < 0:
        raise ConfigError(f"connections.max.reauth.ms={max_reauth_ms} must not be negative")
    return ListenerSasl(
        listener_name,
        mechanisms,
        jaas,
        config.get_int("sasl.server.max.receive.size"),
        max_reauth_ms,
    )
