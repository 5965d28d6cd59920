"""SASL settings: what each listener offers, and this broker's own login to its peers.

Keys, as Kafka reads them: `sasl.enabled.mechanisms` (or `listener.name.<l>.sasl.enabled.mechanisms`),
`listener.name.<l>.<mechanism>.sasl.jaas.config`, `sasl.server.max.receive.size` and
`connections.max.reauth.ms` (or `listener.name.<l>.connections.max.reauth.ms`). As Kafka's
JaasContext, the server side ignores an unprefixed `sasl.jaas.config`, and a mechanism without
its prefixed one takes its login module from the JAAS file's `<l>.KafkaServer` or `KafkaServer`
section (`jaas_file.kafka_server_section`; `_section_entry` takes each mechanism's module there
as Kafka's mechanisms do).

GSSAPI (Kerberos, Kafka's default mechanism) takes the listener's `Krb5LoginModule` JAAS entry
(`useKeyTab=true storeKey=true keyTab=... principal=...`; without one, as Kafka's, the listener
starts and every GSSAPI login fails), a service name (a `serviceName` option or
`sasl.kerberos.service.name`, which every mechanism of the listener needs, as Kafka's
KerberosLogin logs them all in) and `sasl.kerberos.principal.to.local.rules`, each refused with
Kafka's message when missing, and the optional gssapi package (`kerberos`). As
Kafka's SaslChannelBuilder, which loads a JaasContext for each enabled mechanism, a listener
needs a JAAS entry for every one: its prefixed `sasl.jaas.config`, else a section of the JAAS
file (whatever its login modules); with neither, it is refused with Kafka's "Could not find a
'KafkaServer' or '<l>.KafkaServer' entry in the JAAS configuration" and what to set, at start
and for a change at run time. As Kafka's, a mechanism logs in with whatever login modules its
entry names, refused only where Kafka's login fails (`login_failure`), and its server
reads what Kafka's reads: PLAIN's users are the `user_<name>` options of PlainLoginModules (none
without one); SCRAM's entry holds no options the server side reads (its credentials are stored,
see `credentials`); OAUTHBEARER takes its validator's `unsecuredValidator*` options from its
JAAS entry (whatever its module) or, with
`listener.name.<l>.oauthbearer.sasl.server.callback.handler.class` set to Kafka's secured
OAuthBearerValidatorCallbackHandler, the `sasl.oauthbearer.*` keys (each overridden by
`listener.name.<l>.sasl.oauthbearer.*`); a JWKS URL without that handler is refused, where
Kafka would accept unsecured tokens. Listeners verifying with the same JWKS endpoint share one
`KeySet` (`share_key_sets`), which the broker fetches before serving. Kafka's PLAIN, SCRAM and
OAUTHBEARER servers exist only once a login loaded their login module's class
(`loaded_login_modules`, `has_sasl_server`).

Between brokers (`inter_broker_login`), as Kafka: when the inter-broker listener is
SASL_PLAINTEXT or SASL_SSL, this broker logs in to its peers with
`sasl.mechanism.inter.broker.protocol` (Kafka's default: GSSAPI), which must be enabled on
that listener, using the credentials of that listener's JAAS entry for the mechanism (the
`username`/`password` its PlainLoginModules and ScramLoginModules put in the Subject:
`subject_credentials`; the `unsecuredLogin*` options of OAuthBearerLoginModule, the principal and
keytab of Krb5LoginModule), the same entry Kafka's brokers use for their client side.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from wirebroker.java_hashing import hash_set_order, string_hash
from wirebroker.sasl.java_tokens import (
    END,
    KAFKA_WORD_CHARS,
    java_tokens,
    quoting_hint,
    token_name,
)
from wirebroker.system_properties import JAAS_FILE, JAVA_TRIM, system_property

if TYPE_CHECKING:
    from wirebroker.config import BrokerConfig, ConfigError
    from wirebroker.sasl.access_token import AccessTokenLogin
    from wirebroker.sasl.jwks import KeySet
    from wirebroker.sasl.kerberos import KerberosService
    from wirebroker.sasl.mechanism import SaslClient
    from wirebroker.sasl.oauthbearer import SecuredValidator, UnsecuredValidator

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
SCRAM = (SCRAM_SHA_256, SCRAM_SHA_512)
OAUTHBEARER = "OAUTHBEARER"
GSSAPI = "GSSAPI"
IMPLEMENTED = (GSSAPI, PLAIN, SCRAM_SHA_256, SCRAM_SHA_512, OAUTHBEARER)
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTHBEARER_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
KRB5_LOGIN_MODULE = "com.sun.security.auth.module.Krb5LoginModule"
#: ZooKeeper's, on Kafka's classpath: it logs in as PlainLoginModule (`CREDENTIAL_MODULES`), but
#: only with a `username` option, and registers no SASL server or client of Kafka's.
DIGEST_LOGIN_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"
LOGIN_MODULES = {
    GSSAPI: KRB5_LOGIN_MODULE,
    PLAIN: PLAIN_LOGIN_MODULE,
    SCRAM_SHA_256: SCRAM_LOGIN_MODULE,
    SCRAM_SHA_512: SCRAM_LOGIN_MODULE,
    OAUTHBEARER: OAUTHBEARER_LOGIN_MODULE,
}
#: The login modules that put their `username` option in the Subject's public credentials and
#: their `password` in its private ones, where Kafka's SaslClientCallbackHandler finds this
#: broker's PLAIN or SCRAM login (`subject_credentials`; DigestLoginModule only when it has a
#: `username`); their login succeeds for any mechanism (`login_failure`).
CREDENTIAL_MODULES = (PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE, DIGEST_LOGIN_MODULE)
#: Kafka 3.9's login callback handlers for OAUTHBEARER: the client-credentials one (by its
#: public name and its deprecated one) and the default, unsecured, one.
SECURED_LOGINS = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler",
)
UNSECURED_LOGIN = (
    "org.apache.kafka.common.security.oauthbearer.internals.unsecured."
    "OAuthBearerUnsecuredLoginCallbackHandler"
)
#: The system property listing the login modules a `sasl.jaas.config` may not name, and its
#: default (Kafka 3.9.2's JaasUtils: JNDI and LDAP lookups, CVE-2023-25194 and CVE-2025-27818).
DISALLOWED_LOGIN_MODULES = "org.apache.kafka.disallowed.login.modules"
DISALLOWED_LOGIN_MODULES_DEFAULT = (
    "com.sun.security.auth.module.JndiLoginModule,com.sun.security.auth.module.LdapLoginModule"
)
JAAS_USER_PREFIX = "user_"  # PlainLoginModule's option naming a user: user_<name>="<password>"

_CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")


class JaasError(ValueError):
    """A `sasl.jaas.config` value or a JAAS file that does not parse; the message says where."""


class JaasEntry:
    """One login module of a `sasl.jaas.config` value (Kafka allows exactly one)."""

    # Not a dataclass: start-up time (docs/perf-notes.md, branch `startup`).
    __slots__ = ("login_module", "control_flag", "options")

    def __init__(
        self, login_module: str, control_flag: str, options: dict[str, str] | None = None
    ) -> None:
        self.login_module = login_module
        self.control_flag = control_flag
        self.options: dict[str, str] = {} if options is None else options


def parse_jaas_config(text: str) -> JaasEntry:
    """`Module flag key="value" ...;` to a JaasEntry, as Kafka's JaasConfig reads a
    `sasl.jaas.config` value (its StreamTokenizer: `java_tokens`) and JaasContext takes it: one
    login module, not one of the disallowed ones (`login_module_allowed`). Its messages are
    Kafka's, naming options, never values, and say what to write where Kafka's do not; an option
    named by a number or a character such as `*` (Kafka keeps it under no name, where no login
    module looks) is left out."""
    tokens = java_tokens(text, KAFKA_WORD_CHARS)
    entries: list[JaasEntry] = []
    i = 0
    while tokens[i][0] != END:
        module = tokens[i][1]
        i += 1
        if tokens[i][0] == END:
            raise JaasError("Login module control flag not specified in JAAS config")
        flag = tokens[i][1]
        if flag is None:
            raise JaasError(
                "Login module control flag is not available in the JAAS config: "
                f"{token_name(tokens[i])} where {', '.join(_CONTROL_FLAGS)} should be"
            )
        known_flag = control_flag(flag)
        options: dict[str, str] = {}
        i += 1
        after = "the control flag"
        while tokens[i][0] not in (END, ";"):
            key = tokens[i][1]
            value = tokens[i + 2][1] if tokens[i + 1][0] == "=" else None
            if value is None:
                found = (
                    "no '=' after it"
                    if tokens[i + 1][0] != "="
                    else f"{token_name(tokens[i + 2])} after its '='"
                )
                name = f"key '{key}'" if key is not None else f"an option after {after}"
                raise JaasError(
                    f"Value not specified for {name} in JAAS config, {found}: "
                    f"{quoting_hint(KAFKA_WORD_CHARS)}"
                )
            if key is not None:
                options[key] = value
                after = f"option {key}"
            i += 3
        if tokens[i][0] != ";":
            raise JaasError("JAAS config entry not terminated by semi-colon")
        i += 1
        if not module:
            raise JaasError(
                "Login module not specified in JAAS config: an entry starts with the login "
                "module's class name"
            )
        entries.append(JaasEntry(module, known_flag, options))
    if len(entries) != 1:
        raise JaasError(
            f"JAAS config property contains {len(entries)} login modules, should be 1 module"
            if entries
            else "Login module not specified in JAAS config"
        )
    login_module_allowed(entries[0].login_module)
    return entries[0]


def login_module_allowed(login_module: str) -> None:
    """JaasError (Kafka's message) when `login_module` is one of the disallowed ones
    (`DISALLOWED_LOGIN_MODULES`, read as Kafka reads it: its comma-separated names trimmed)."""
    module = login_module.strip(JAVA_TRIM)
    disallowed = system_property(DISALLOWED_LOGIN_MODULES)
    if disallowed is None:
        disallowed = DISALLOWED_LOGIN_MODULES_DEFAULT
    if module in {name.strip(JAVA_TRIM) for name in disallowed.split(",")}:
        raise JaasError(
            f"{module} is not allowed. Update System property '{DISALLOWED_LOGIN_MODULES}' to "
            f"allow {module}"
        )


def control_flag(flag: str) -> str:
    """`flag` as one of `_CONTROL_FLAGS`, compared as Java's String.toUpperCase does."""
    upper = flag.upper()
    for known in _CONTROL_FLAGS:
        if upper == known.upper():
            return known
    raise JaasError(
        f"Invalid login module control flag '{flag}' in JAAS config: one of "
        f"{', '.join(_CONTROL_FLAGS)}"
    )


class ListenerSasl:
    """What a SASL listener offers: the mechanisms in the handshake and their JAAS options."""

    # Not a dataclass: start-up time (docs/perf-notes.md, branch `startup`).
    __slots__ = (
        "listener_name",
        "mechanisms",
        "jaas",
        "jaas_sources",
        "logins",
        "max_receive_size",
        "max_reauth_ms",
        "oauthbearer",
        "kerberos",
    )

    def __init__(
        self,
        listener_name: str,
        mechanisms: tuple[str, ...],
        jaas: dict[str, JaasEntry],
        jaas_sources: dict[str, str],
        logins: dict[str, list[JaasEntry]],
        max_receive_size: int,
        max_reauth_ms: int = 0,
        oauthbearer: UnsecuredValidator | SecuredValidator | None = None,
        kerberos: KerberosService | None = None,
    ) -> None:
        self.listener_name = listener_name
        self.mechanisms = mechanisms
        self.jaas = jaas
        #: Where each mechanism's JAAS entry comes from (its config key, or the section of the
        #: JAAS file), for messages.
        self.jaas_sources = jaas_sources
        #: Each mechanism's JAAS context: the login modules Kafka's login for it runs (its
        #: key's one, or all of its section's), where this broker's own login finds its
        #: username and password (`subject_credentials`).
        self.logins = logins
        self.max_receive_size = max_receive_size
        #: The session lifetime (KIP-368); 0: sessions never expire.
        self.max_reauth_ms = max_reauth_ms
        #: How OAUTHBEARER tokens are checked (None: OAUTHBEARER is not enabled).
        self.oauthbearer = oauthbearer
        #: The service principal GSSAPI clients log in to (None: GSSAPI is not enabled, or its
        #: JAAS entry names no Krb5LoginModule: every GSSAPI login fails, as Kafka's).
        self.kerberos = kerberos

    def plain_users(self) -> dict[str, str]:
        """PLAIN's users and passwords: the `user_<name>` options of its PlainLoginModule;
        none without one (Kafka's PlainServerCallbackHandler reads PlainLoginModules only)."""
        entry = self.jaas.get(PLAIN)
        if entry is None or entry.login_module != PLAIN_LOGIN_MODULE:
            return {}
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
            f"mechanism wirebroker implements ({', '.join(IMPLEMENTED)})"
        )
    jaas: dict[str, JaasEntry] = {}
    sources: dict[str, str] = {}
    logins: dict[str, list[JaasEntry]] = {}
    for mechanism in mechanisms:
        key = f"{prefix}{mechanism.lower()}.sasl.jaas.config"
        text = config.get(key)
        if text is None:
            continue
        try:
            jaas[mechanism] = parse_jaas_config(text)
        except JaasError as e:
            raise ConfigError(f"{key}: {e}") from None
        sources[mechanism] = key
        logins[mechanism] = [jaas[mechanism]]
    section = None
    if len(jaas) < len(mechanisms):
        section = _server_section(listener_name)
    if section is None:
        # As Kafka's JaasContext, for each enabled mechanism in turn: neither its key nor a
        # section of the JAAS file, the listener does not start.
        for mechanism in mechanisms:
            if mechanism not in jaas:
                raise _no_jaas_context(config, listener_name, prefix, mechanism)
    else:
        source, entries = section
        for mechanism in mechanisms:
            if mechanism not in logins:
                logins[mechanism] = entries
                sources[mechanism] = source
                entry = _section_entry(mechanism, entries, source, prefix)
                if entry is not None:
                    jaas[mechanism] = entry
    for mechanism, modules in logins.items():
        if GSSAPI in mechanisms:
            # As Kafka's brokers: with GSSAPI enabled, KerberosLogin logs in every mechanism
            # of the listener, and takes a service name for each.
            _service_name(config, prefix, modules)
        how = _jaas_how(prefix, mechanism, logs_in=_logs_in(config, listener_name, mechanism))
        failure = login_failure(mechanism, modules)
        if failure is not None:
            raise ConfigError(f"{sources[mechanism]}: {failure}: {how}")
        if mechanism in jaas:
            _login_module_usable(mechanism, jaas[mechanism].login_module, sources[mechanism], how)
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
        sources,
        logins,
        config.get_int("sasl.server.max.receive.size"),
        max_reauth_ms,
        _oauthbearer_validator(config, prefix, jaas, sources)
        if OAUTHBEARER in mechanisms
        else None,
        _kerberos_service(config, listener_name, jaas, sources, logins[GSSAPI])
        if GSSAPI in mechanisms
        else None,
    )


#: Each mechanism's options in the example `_jaas_how` gives (SCRAM's server side needs none,
#: OAUTHBEARER's unsecured validator has defaults), and those of the mechanism this broker logs
#: in to its peers with (`inter_broker_login`: its own credentials too).
_EXAMPLE_OPTIONS = {
    GSSAPI: ' useKeyTab=true storeKey=true keyTab="..." principal="kafka/host@REALM"',
    PLAIN: ' user_admin="admin-secret"',
    SCRAM_SHA_256: "",
    SCRAM_SHA_512: "",
    OAUTHBEARER: "",
}
_LOGIN_EXAMPLE_OPTIONS = {
    **_EXAMPLE_OPTIONS,
    PLAIN: ' username="broker" password="broker-secret" user_broker="broker-secret"',
    SCRAM_SHA_256: ' username="broker" password="broker-secret"',
    SCRAM_SHA_512: ' username="broker" password="broker-secret"',
    OAUTHBEARER: ' unsecuredLoginStringClaim_sub="broker"',
}


def _jaas_how(prefix: str, mechanism: str, *, logs_in: bool = False) -> str:
    """What to set for a listener (`prefix`) to give `mechanism` its JAAS entry (with this
    broker's own login to its peers when it `logs_in` with it)."""
    from wirebroker.sasl.jaas_file import KAFKA_SERVER  # it imports this module

    module = LOGIN_MODULES[mechanism]
    listener = prefix.split(".")[2]
    options = (_LOGIN_EXAMPLE_OPTIONS if logs_in else _EXAMPLE_OPTIONS)[mechanism]
    return (
        f"set {prefix}{mechanism.lower()}.sasl.jaas.config={module} required{options}; or put "
        f"that login module in the {KAFKA_SERVER} (or {listener}.{KAFKA_SERVER}) section of the "
        "JAAS file"
    )


def _logs_in(config: BrokerConfig, listener_name: str, mechanism: str) -> bool:
    """Whether this broker logs in to its peers with `mechanism` on the listener."""
    return (config.inter_broker_listener() or "") == listener_name.upper() and (
        config.get("sasl.mechanism.inter.broker.protocol") or ""
    ).strip().upper() == mechanism


def _login_module_usable(mechanism: str, module: str, source: str, how: str) -> None:
    """ConfigError, then `how` to set it right, where the login `module` of a listener's
    `mechanism`'s JAAS entry (its key's, or its section's OAUTHBEARER one) is Krb5LoginModule
    and the mechanism not GSSAPI: only GSSAPI takes a Krb5LoginModule (where Kafka would log in
    to the KDC for nothing)."""
    from wirebroker.config import ConfigError

    if module == KRB5_LOGIN_MODULE and mechanism != GSSAPI:
        raise ConfigError(
            f"{source}: {mechanism} takes {LOGIN_MODULES[mechanism]}, not {module}: {how}"
        )


def _no_jaas_context(
    config: BrokerConfig, listener_name: str, prefix: str, mechanism: str
) -> ConfigError:
    """ConfigError for an enabled mechanism of the listener (`prefix`) with no JAAS entry at
    all: Kafka's message (JaasContext.loadServerContext), then what to set."""
    from wirebroker.config import ConfigError
    from wirebroker.sasl.jaas_file import KAFKA_SERVER

    ignored = (
        " (as Kafka, the unprefixed sasl.jaas.config is not read for a listener)"
        if config.get("sasl.jaas.config") is not None
        else ""
    )
    logs_in = _logs_in(config, listener_name, mechanism)
    return ConfigError(
        f"Could not find a '{KAFKA_SERVER}' or '{listener_name.lower()}.{KAFKA_SERVER}' entry "
        f"in the JAAS configuration. System property '{JAAS_FILE}' is "
        f"{system_property(JAAS_FILE) or 'not set'}: listener {listener_name} enables "
        f"{mechanism}: {_jaas_how(prefix, mechanism, logs_in=logs_in)}{ignored}"
    )


def _server_section(listener_name: str) -> tuple[str, list[JaasEntry]] | None:
    """`jaas_file.kafka_server_section`, its JaasError a ConfigError."""
    from wirebroker.config import ConfigError
    from wirebroker.sasl.jaas_file import kafka_server_section  # it imports this module

    try:
        return kafka_server_section(listener_name)
    except JaasError as e:
        raise ConfigError(str(e)) from None


def _section_entry(
    mechanism: str, entries: list[JaasEntry], source: str, prefix: str
) -> JaasEntry | None:
    """A mechanism's login module in a JAAS file's section, as Kafka's mechanisms take it:
    PLAIN's options from every PlainLoginModule there (the first of each: JaasContext's
    configEntryOption), OAUTHBEARER's from the section's only module whatever it is (Kafka
    refuses a section of several), GSSAPI's and SCRAM's from their module's first entry; None
    without one (PLAIN then has no users, as Kafka's)."""
    from wirebroker.config import ConfigError

    if mechanism == OAUTHBEARER:
        if len(entries) != 1:
            raise ConfigError(
                f"{source}: Must supply exactly 1 non-null JAAS mechanism configuration (size "
                f"was {len(entries)}): OAUTHBEARER reads a section of one login module; set "
                f"{prefix}oauthbearer.sasl.jaas.config={OAUTHBEARER_LOGIN_MODULE} required; "
                "instead"
            )
        return entries[0]
    module = LOGIN_MODULES[mechanism]
    mine = [e for e in entries if e.login_module == module]
    if not mine:
        return None
    if mechanism != PLAIN:
        return mine[0]
    options: dict[str, str] = {}
    for entry in mine:
        for key, value in entry.options.items():
            options.setdefault(key, value)
    return JaasEntry(module, mine[0].control_flag, options)


def _kerberos_service(
    config: BrokerConfig,
    listener_name: str,
    jaas: dict[str, JaasEntry],
    sources: dict[str, str],
    modules: list[JaasEntry],
) -> KerberosService | None:
    """GSSAPI's service principal and keytab (its JAAS entry's Krb5LoginModule), service name
    (the first `serviceName` option of its JAAS context's `modules`, as Kafka's KerberosLogin
    reads it) and short-name rules, refused as Kafka refuses them; the gssapi package must be
    installed. None without a Krb5LoginModule: as Kafka's, the listener starts, and its GSSAPI
    server finds no Kerberos principal in the Subject: every GSSAPI login fails."""
    from wirebroker.config import ConfigError
    from wirebroker.sasl.kerberos import KerberosService, load_gssapi
    from wirebroker.sasl.kerberos_names import KerberosShortNamer

    prefix = f"listener.name.{listener_name.lower()}."
    entry = jaas.get(GSSAPI)
    service_name = _service_name(config, prefix, modules)
    rules_key = "sasl.kerberos.principal.to.local.rules"
    rules = _mechanism_setting(config, prefix, GSSAPI, rules_key) or "DEFAULT"
    try:
        short_namer = KerberosShortNamer([r for r in rules.split(",") if r.strip()])
        if entry is None or entry.login_module != KRB5_LOGIN_MODULE:
            return None
        service = KerberosService.from_jaas(entry, sources[GSSAPI], service_name, short_namer)
        load_gssapi()
    except (ValueError, ImportError) as e:
        raise ConfigError(f"listener {listener_name}: {e}") from None
    return service


def _service_name(config: BrokerConfig, prefix: str, modules: Sequence[JaasEntry]) -> str:
    """The Kerberos service name Kafka's KerberosLogin takes for a JAAS context's `modules` on
    the listener `prefix` names: the first `serviceName` option of its modules, else
    `sasl.kerberos.service.name`; ConfigError (Kafka's words) when they differ or neither is
    set."""
    from wirebroker.config import ConfigError

    jaas_service = next(
        (m.options["serviceName"] for m in modules if "serviceName" in m.options), None
    )
    config_service = _mechanism_setting(config, prefix, GSSAPI, "sasl.kerberos.service.name")
    if jaas_service is not None and config_service is not None and jaas_service != config_service:
        raise ConfigError(
            "Conflicting serviceName values found in JAAS and Kafka configs value in JAAS file "
            f"{jaas_service}, value in Kafka config {config_service}"
        )
    service_name = jaas_service or config_service
    if service_name is None:
        raise ConfigError("No serviceName defined in either JAAS or Kafka config")
    return service_name


def _oauthbearer_validator(
    config: BrokerConfig, prefix: str, jaas: dict[str, JaasEntry], sources: dict[str, str]
) -> UnsecuredValidator | SecuredValidator:
    from wirebroker.config import ConfigError
    from wirebroker.sasl.oauthbearer import (
        SECURED_VALIDATORS,
        UNSECURED_VALIDATOR,
        UnsecuredValidator,
    )

    handler_key = f"{prefix}oauthbearer.sasl.server.callback.handler.class"
    handler = (config.get(handler_key) or "").strip()
    entry = jaas[OAUTHBEARER]  # without one, listener_sasl refused OAUTHBEARER
    source = sources[OAUTHBEARER]
    if handler in SECURED_VALIDATORS:
        return _secured_validator(config, prefix, entry.options, source)
    if handler not in ("", UNSECURED_VALIDATOR):
        raise ConfigError(
            f"{handler_key}={handler} is not implemented: OAUTHBEARER validates tokens with "
            f"{SECURED_VALIDATORS[0]} (OIDC, sasl.oauthbearer.jwks.endpoint.url) or Kafka's "
            f"default {UNSECURED_VALIDATOR}"
        )
    if not handler and _oauthbearer_setting(config, prefix, "sasl.oauthbearer.jwks.endpoint.url"):
        # Kafka would validate unsecured tokens here, ignoring the URL: anyone could log in.
        raise ConfigError(
            f"sasl.oauthbearer.jwks.endpoint.url is set but listener {prefix.split('.')[2]} "
            f"would accept unsecured tokens: set {handler_key}={SECURED_VALIDATORS[0]} to "
            "verify tokens with the JWKS"
        )
    try:
        return UnsecuredValidator.from_options(entry.options)
    except ValueError as e:
        raise ConfigError(f"{source}: {e}") from None


def _oauthbearer_setting(config: BrokerConfig, prefix: str, key: str) -> str | None:
    """An OAUTHBEARER `key` (`sasl.oauthbearer.*`, `sasl.login.*`) of the listener `prefix`
    names (`_mechanism_setting`)."""
    return _mechanism_setting(config, prefix, OAUTHBEARER, key)


def _mechanism_setting(config: BrokerConfig, prefix: str, mechanism: str, key: str) -> str | None:
    """A `mechanism`'s `key` of the listener `prefix` names, as Kafka's broker reads it:
    `listener.name.<l>.<mechanism>.<key>`, else `listener.name.<l>.<key>`, else `<key>` (a
    blank value reads as unset)."""
    for name in (f"{prefix}{mechanism.lower()}.{key}", prefix + key):
        if config.is_set(name):
            value = config.get(name)
            break
    else:
        value = config.get(key)
    return value.strip() if value and value.strip() else None


def _oauthbearer_number(
    config: BrokerConfig, prefix: str, key: str, low: float, high: float | None = None
) -> int:
    """An integer OAUTHBEARER setting (unset: Kafka's default) within Kafka's bounds."""
    return int(_oauthbearer_float(config, prefix, key, low, high, whole=True))


def _oauthbearer_float(
    config: BrokerConfig,
    prefix: str,
    key: str,
    low: float,
    high: float | None = None,
    *,
    whole: bool = False,
) -> float:
    from wirebroker.config import ConfigError

    text = _oauthbearer_setting(config, prefix, key) or ""
    value: float | None
    try:
        value = int(text) if whole else float(text)
    except ValueError:
        value = None
    if (
        value is None
        or not math.isfinite(value)
        or value < low
        or (high is not None and value > high)
    ):
        bounds = f"at least {low}" if high is None else f"between {low} and {high}"
        raise ConfigError(f"{key}={text} must be {bounds}")
    return value


def _secured_validator(
    config: BrokerConfig, prefix: str, options: Mapping[str, str], source: str
) -> SecuredValidator:
    """Kafka's OAuthBearerValidatorCallbackHandler's settings, its JAAS entry's `options`
    (`ssl.*`; `source` says where they come from) included (no I/O: the key set is fetched when the broker starts, `KeySet.run`)."""
    from wirebroker.config import ConfigError
    from wirebroker.sasl.jwks import JwksEndpoint, KeySet
    from wirebroker.sasl.oauthbearer import SecuredValidator
    from wirebroker.sasl.provider import ProviderTls, endpoint_url

    key = "sasl.oauthbearer.jwks.endpoint.url"
    url = _oauthbearer_setting(config, prefix, key)
    if url is None:
        raise ConfigError(
            f"listener {prefix.split('.')[2]} verifies OAUTHBEARER tokens with a JWKS: set "
            f"{key} (https://..., http://... or file:...)"
        )

    def number(name: str, at_least: int) -> int:
        return _oauthbearer_number(config, prefix, f"sasl.oauthbearer.{name}", at_least)

    endpoint = JwksEndpoint(
        endpoint_url(key, url),
        number("jwks.endpoint.refresh.ms", 1),
        number("jwks.endpoint.retry.backoff.ms", 0),
        number("jwks.endpoint.retry.backoff.max.ms", 0),
        ProviderTls(options, source),
    )
    audience = _oauthbearer_setting(config, prefix, "sasl.oauthbearer.expected.audience") or ""
    return SecuredValidator(
        KeySet(endpoint),
        tuple(a.strip() for a in audience.split(",") if a.strip()),
        _oauthbearer_setting(config, prefix, "sasl.oauthbearer.expected.issuer"),
        _oauthbearer_setting(config, prefix, "sasl.oauthbearer.sub.claim.name") or "sub",
        _oauthbearer_setting(config, prefix, "sasl.oauthbearer.scope.claim.name") or "scope",
        number("clock.skew.seconds", 0),
    )


def share_key_sets(listeners: Iterable[ListenerSasl], held: list[KeySet]) -> list[KeySet]:
    """Point every listener verifying secured tokens at the one KeySet of its JWKS endpoint
    (one of `held` if it has it: their keys are kept across config changes); the key sets
    in use, those of `held` first (one of `held` no listener uses is left out)."""
    key_sets = list(held)
    used: list[KeySet] = []
    for listener in listeners:
        validator = listener.oauthbearer
        if validator is None:
            continue
        from wirebroker.sasl.oauthbearer import SecuredValidator  # loaded by listener_sasl

        if not isinstance(validator, SecuredValidator):
            continue
        same = next((k for k in key_sets if k.endpoint == validator.keys.endpoint), None)
        if same is None:
            key_sets.append(validator.keys)
        else:
            validator.keys = same
        used.append(validator.keys)
    return [k for k in key_sets if k in used]


class SaslLogin:
    """This broker's login to its peers: the inter-broker mechanism and the options of its
    JAAS entry (which hold the password: never shown), and for OAUTHBEARER with a token
    endpoint, the access token it fetches (`access_token`)."""

    # Not a dataclass: start-up time (docs/perf-notes.md, branch `startup`).
    __slots__ = ("listener_name", "mechanism", "options", "access_token")

    def __init__(
        self,
        listener_name: str,
        mechanism: str,
        options: Mapping[str, str],
        access_token: AccessTokenLogin | None = None,
    ) -> None:
        self.listener_name = listener_name
        self.mechanism = mechanism
        self.options = options
        self.access_token = access_token

    async def ready(self) -> None:
        """Wait until `client` can be made (this broker's access token fetched)."""
        if self.access_token is not None:
            await self.access_token.wait_token()

    @property
    def blocking(self) -> bool:
        """Whether the client's calls may block (GSSAPI's reach the KDC): run them in a worker
        thread."""
        return self.mechanism == GSSAPI

    def client(self, now_ms: int, host: str) -> SaslClient:
        """A fresh client side of one exchange with the peer on `host` (an OAUTHBEARER token
        made at `now_ms`, or the access token held: `ready` first)."""
        from wirebroker.sasl.oauthbearer import OAuthBearerClient, unsecured_token
        from wirebroker.sasl.plain import PlainClient
        from wirebroker.sasl.scram import ScramClient

        if self.mechanism == GSSAPI:
            from wirebroker.sasl.kerberos import GssapiClient

            options = self.options
            return GssapiClient(
                options["principal"], options["keyTab"], options["serviceName"], host
            )
        if self.mechanism == PLAIN:
            return PlainClient(self.options["username"], self.options["password"])
        if self.mechanism == OAUTHBEARER:
            tokens = self.access_token
            if tokens is None:
                return OAuthBearerClient(*unsecured_token(self.options, now_ms))
            assert tokens.token is not None
            return OAuthBearerClient(tokens.token.value, tokens.endpoint.extensions)
        return ScramClient(self.mechanism, self.options["username"], self.options["password"])

    def adopt(self, held: SaslLogin | None) -> AccessTokenLogin | None:
        """Take over `held`'s access token login, which fetches from this login's endpoint
        from now on (at once, if it changed): whoever still holds `held` (a channel made
        before the change) gets the same tokens. The access token login that must be
        started, if `held` had none."""
        mine = self.access_token
        theirs = held.access_token if held is not None else None
        if mine is None or theirs is None:
            return mine
        theirs.follow(mine.endpoint)
        self.access_token = theirs
        return None


def inter_broker_login(config: BrokerConfig) -> SaslLogin | None:
    """This broker's login to its peers; None when the inter-broker listener is not SASL.
    ConfigError when it is and the mechanism or its JAAS entry cannot log in."""
    from wirebroker.config import ConfigError

    listener = config.inter_broker_listener()
    if listener is None or not config.security_protocol(listener).startswith("SASL_"):
        return None
    mechanism = (config.get("sasl.mechanism.inter.broker.protocol") or "").strip().upper()
    if mechanism not in IMPLEMENTED:
        raise ConfigError(
            f"sasl.mechanism.inter.broker.protocol={mechanism} is not implemented: brokers log "
            f"in to each other on {listener} with one of {', '.join(IMPLEMENTED)}"
        )
    settings = listener_sasl(config, listener)
    offered = settings.mechanisms
    if mechanism not in offered:
        raise ConfigError(
            f"sasl.mechanism.inter.broker.protocol={mechanism} must be enabled on the "
            f"inter-broker listener {listener} (sasl.enabled.mechanisms: {', '.join(offered)})"
        )
    how = _jaas_how(f"listener.name.{listener.lower()}.", mechanism, logs_in=True)
    # listener_sasl found the mechanism's JAAS context (the key's, or the JAAS file's section;
    # else refused) and checked its modules.
    source = settings.jaas_sources[mechanism]
    if mechanism == GSSAPI:
        kerberos = settings.kerberos
        if kerberos is None:
            # Kafka's login finds no Kerberos principal in the Subject: every login to a peer
            # fails.
            raise ConfigError(
                f"{source}: this broker's GSSAPI login to its peers takes its principal and "
                f"keytab from {KRB5_LOGIN_MODULE}, which its JAAS entry does not name: {how}"
            )
        # The listener's own principal and keytab, as Kafka's brokers log in with its
        # KafkaServer entry, to the service of the same name on the peer's host.
        options = {
            "principal": kerberos.principal,
            "keyTab": kerberos.keytab,
            "serviceName": kerberos.service_name,
        }
        return SaslLogin(listener, mechanism, options)
    if mechanism != OAUTHBEARER:
        username, password = subject_credentials(mechanism, settings.logins[mechanism])
        if not username or password is None:
            raise ConfigError(f"{source} needs this broker's username and password: {how}")
        if mechanism in SCRAM and not _scram_client(config, settings):
            raise ConfigError(
                f"{source}: this broker's {mechanism} login to its peers needs a SCRAM client, "
                f"which Kafka's {SCRAM_LOGIN_MODULE} registers when a login loads it, and no "
                f"JAAS entry of this broker names it: {how}"
            )
        return SaslLogin(listener, mechanism, {"username": username, "password": password})
    entry = settings.jaas[mechanism]
    if entry.login_module != OAUTHBEARER_LOGIN_MODULE:
        # Kafka's login finds no token in the Subject: every login to a peer fails.
        raise ConfigError(
            f"{source}: this broker's OAUTHBEARER login to its peers takes its token from "
            f"{OAUTHBEARER_LOGIN_MODULE}, not {entry.login_module}: {how}"
        )
    access_token = _access_token_login(config, listener, source, entry.options)
    if access_token is None:
        from wirebroker.sasl.oauthbearer import unsecured_token

        try:
            unsecured_token(entry.options, 0)
        except ValueError as e:
            raise ConfigError(f"{source}: {e}") from None
    return SaslLogin(listener, mechanism, dict(entry.options), access_token)


def login_failure(mechanism: str, modules: Sequence[JaasEntry]) -> str | None:
    """Kafka's LoginException message where its login for `mechanism` with a JAAS context's
    `modules` fails, and the broker does not start (`_login`); None where it succeeds."""
    return _login(mechanism, modules)[1]


def initialized_modules(mechanism: str, modules: Sequence[JaasEntry]) -> list[JaasEntry]:
    """The login modules of a JAAS context Kafka's login for `mechanism` initializes
    (`_login`)."""
    return _login(mechanism, modules)[0]


def _login(mechanism: str, modules: Sequence[JaasEntry]) -> tuple[list[JaasEntry], str | None]:
    """What Kafka's login for `mechanism` (the JDK's LoginContext) does with a JAAS context's
    `modules`: the modules it initializes, in order, and its LoginException's message (None: it
    succeeds). As the LoginContext's control flags say, a module's failure (`_module_failure`)
    fails the login at once when it is `requisite`; when `required`, once all the modules ran
    (the first such failure); when `sufficient` or `optional`, only when no module succeeds (the
    first failure). A `sufficient` module that succeeds, no `required` one having failed before
    it, ends the login: the modules after it are not initialized."""
    reached: list[JaasEntry] = []
    first_required: str | None = None
    first_error: str | None = None
    success = False
    for entry in modules:
        reached.append(entry)
        error = _module_failure(mechanism, entry)
        if error is None:
            if entry.control_flag == "sufficient" and first_required is None:
                return reached, None
            success = True
        elif entry.control_flag == "requisite":
            return reached, first_required or error
        elif entry.control_flag == "required":
            first_required = first_required or error
        else:
            first_error = first_error or error
    return reached, first_required or (None if success else first_error)


def _module_failure(mechanism: str, entry: JaasEntry) -> str | None:
    """Kafka's LoginException message where the login of one login module, for `mechanism`,
    fails; None where it succeeds: a module Kafka's JVM does not have, OAuthBearerLoginModule
    for another mechanism than OAUTHBEARER (no token from the login callback handler),
    DigestLoginModule with a `username` and no `password` (it adds a null password to the
    Subject). The others succeed: PlainLoginModule, ScramLoginModule and DigestLoginModule for
    any mechanism; Krb5LoginModule here too (GSSAPI's KerberosService checks its keytab and
    principal; `_login_module_usable` refuses it for another mechanism's entry)."""
    module = entry.login_module
    options = entry.options
    if module == DIGEST_LOGIN_MODULE and "username" in options and "password" not in options:
        return (
            "java.lang.NullPointerException: invalid null input(s) (ZooKeeper's "
            f'{DIGEST_LOGIN_MODULE} with a username needs its password="...")'
        )
    if module in (*CREDENTIAL_MODULES, KRB5_LOGIN_MODULE):
        return None
    if module == OAUTHBEARER_LOGIN_MODULE:
        if mechanism == OAUTHBEARER:
            return None
        return (
            "An internal error occurred while retrieving token from callback handler (Kafka's "
            f"login with {module} fails for {mechanism}: it logs in for OAUTHBEARER only)"
        )
    return (
        f"No LoginModule found for {module} (wirebroker has Kafka's {PLAIN_LOGIN_MODULE}, "
        f"{SCRAM_LOGIN_MODULE} and {OAUTHBEARER_LOGIN_MODULE}, ZooKeeper's "
        f"{DIGEST_LOGIN_MODULE}, and {KRB5_LOGIN_MODULE})"
    )


def loaded_login_modules(listeners: Iterable[ListenerSasl]) -> set[str]:
    """The login modules Kafka's JVM loads to log in for these listeners' mechanisms (each
    context's `initialized_modules`)."""
    return {
        entry.login_module
        for listener in listeners
        for mechanism, modules in listener.logins.items()
        for entry in initialized_modules(mechanism, modules)
    }


def has_sasl_server(mechanism: str, loaded: set[str]) -> bool:
    """Whether Kafka's JVM, having `loaded` these login modules, has a SASL server (and client)
    for `mechanism`: Kafka's PLAIN, SCRAM and OAUTHBEARER ones are registered by their login
    module's class when it loads (the JDK's Sasl.createSaslServer finds none before); GSSAPI's
    is the JDK's own."""
    return mechanism == GSSAPI or LOGIN_MODULES[mechanism] in loaded


def subject_credentials(
    mechanism: str, modules: Sequence[JaasEntry]
) -> tuple[str | None, str | None]:
    """This broker's PLAIN or SCRAM (`mechanism`) username and password, as Kafka's
    SaslClientCallbackHandler takes them from the Subject a login with `modules` (a JAAS
    context) fills: each module of `CREDENTIAL_MODULES` the LoginContext initializes adds its
    `username` to the public credentials and its `password` to the private ones
    (DigestLoginModule only when it has a `username`); of several, each is the one a Java
    HashSet of them yields first (`Subject.getPublicCredentials(String.class)`). None where no
    module gives one."""
    usernames: list[str] = []
    passwords: list[str] = []
    for entry in initialized_modules(mechanism, modules):
        if entry.login_module not in CREDENTIAL_MODULES or (
            entry.login_module == DIGEST_LOGIN_MODULE and "username" not in entry.options
        ):
            continue
        if "username" in entry.options:
            usernames.append(entry.options["username"])
        if "password" in entry.options:
            passwords.append(entry.options["password"])
    return _first(usernames), _first(passwords)


def _first(values: list[str]) -> str | None:
    ordered = hash_set_order(values, string_hash)
    return ordered[0] if ordered else None


def _scram_client(config: BrokerConfig, settings: ListenerSasl) -> bool:
    """Whether Kafka's JVM with this `config` has a SCRAM client: some SASL listener's login
    loads ScramLoginModule (the inter-broker listener's `settings` first)."""
    if has_sasl_server(SCRAM_SHA_512, loaded_login_modules([settings])):
        return True
    others = [
        listener_sasl(config, listener.name)
        for listener in config.listeners()
        if listener.name != settings.listener_name
        and config.security_protocol(listener.name).startswith("SASL_")
    ]
    return has_sasl_server(SCRAM_SHA_512, loaded_login_modules(others))


def _access_token_login(
    config: BrokerConfig, listener: str, jaas_key: str, options: Mapping[str, str]
) -> AccessTokenLogin | None:
    """Kafka's OAuthBearerLoginCallbackHandler's settings for this broker's OAUTHBEARER login
    (no I/O: the token is fetched when the broker starts); None: it makes unsecured tokens."""
    from wirebroker.config import ConfigError

    prefix = f"listener.name.{listener.lower()}."
    handler_key = f"{prefix}oauthbearer.sasl.login.callback.handler.class"
    handler = (config.get(handler_key) or "").strip()
    url_key = "sasl.oauthbearer.token.endpoint.url"
    url = _oauthbearer_setting(config, prefix, url_key)
    if handler == UNSECURED_LOGIN or (not handler and url is None):
        return None
    if handler and handler not in SECURED_LOGINS:
        raise ConfigError(
            f"{handler_key}={handler} is not implemented: this broker logs in with "
            f"{SECURED_LOGINS[0]} (OIDC client credentials, {url_key}) or Kafka's default "
            f"{UNSECURED_LOGIN}"
        )
    if url is None:
        raise ConfigError(
            f"{handler_key}={handler} fetches this broker's token from an identity provider: "
            f"set {url_key} (the provider's token endpoint: https://...)"
        )
    # here: a broker making unsecured tokens never loads them (start-up time)
    from wirebroker.sasl.access_token import AccessTokenLogin, RefreshWindow, TokenEndpoint
    from wirebroker.sasl.oauthbearer import login_extensions
    from wirebroker.sasl.provider import ProviderTls, endpoint_url

    url = endpoint_url(url_key, url)
    is_file = url.lower().startswith("file:")
    secret = options.get("clientSecret", "").strip()
    client_id = options.get("clientId", "").strip()
    if not is_file and not (client_id and secret):
        raise ConfigError(
            f"{jaas_key}: this broker gets its OAUTHBEARER token by the client credentials "
            f'grant: set the options clientId="..." clientSecret="..." (and scope="..." if the '
            "provider wants one)"
        )
    try:
        extensions = login_extensions(options, "extension_")
    except ValueError as e:
        raise ConfigError(f"{jaas_key}: {e}") from None

    def number(key: str, low: float, high: float | None = None) -> int:
        return _oauthbearer_number(config, prefix, key, low, high)

    def timeout(key: str) -> int | None:
        return number(key, 0) if _oauthbearer_setting(config, prefix, key) else None

    urlencode = _oauthbearer_setting(config, prefix, "sasl.oauthbearer.header.urlencode") or ""
    if urlencode.lower() not in ("true", "false"):
        raise ConfigError(f"sasl.oauthbearer.header.urlencode={urlencode} must be true or false")
    refresh = RefreshWindow(
        _oauthbearer_float(config, prefix, "sasl.login.refresh.window.factor", 0.5, 1.0),
        _oauthbearer_float(config, prefix, "sasl.login.refresh.window.jitter", 0.0, 0.25),
        number("sasl.login.refresh.min.period.seconds", 0, 900),
        number("sasl.login.refresh.buffer.seconds", 0, 3600),
    )
    endpoint = TokenEndpoint(
        url,
        client_id,
        secret,
        jaas_key=jaas_key,
        scope=options.get("scope"),
        extensions=extensions,
        urlencode_header=urlencode.lower() == "true",
        retry_backoff_ms=number("sasl.login.retry.backoff.ms", 0),
        retry_backoff_max_ms=number("sasl.login.retry.backoff.max.ms", 0),
        connect_timeout_ms=timeout("sasl.login.connect.timeout.ms"),
        read_timeout_ms=timeout("sasl.login.read.timeout.ms"),
        sub_claim=_oauthbearer_setting(config, prefix, "sasl.oauthbearer.sub.claim.name") or "sub",
        scope_claim=(
            _oauthbearer_setting(config, prefix, "sasl.oauthbearer.scope.claim.name") or "scope"
        ),
        refresh=refresh,
        tls=ProviderTls(options, jaas_key),
    )
    return AccessTokenLogin(endpoint, listener)
