"""A keystore's entries as Kafka's SslFactory compares them when a listener's keystore changes at
run time (its CertificateEntries), and that comparison, with Kafka's messages.

An entry is an alias and the certificate Java's KeyStore.getCertificate gives for it (a key
entry's first one, a trusted certificate), in the order KeyStore.aliases lists them: a PKCS12
store's as `wirebroker.pkcs12` reads it, a JKS store's as `wirebroker.jks` does, a PEM keystore
one entry named `kafka` (Kafka's PemStore). Kafka compares a new keystore's entries with the old
one's position by position: unless both `ssl.allow.dn.changes` and `ssl.allow.san.changes`,
there must be as many; unless `ssl.allow.dn.changes`, each subject must be the old one's;
unless `ssl.allow.san.changes`, each entry must have at least the old one's subject
alternative names. The first difference refuses the keystore, the subjects checked first.

The messages show an entry as Kafka's do: its alias, its subject as Java's
X500Principal.toString prints it (the RDNs from the last to the first, joined by ", ", the
attributes of one by " + "; Java's keywords, `OID.<dotted>` for an attribute without one; a
value in double quotes when it holds a special character, begins or ends with a space or has
two together; `#` and the hex of its encoding when it is not a string Java reads), and its
alternative names as Java lists them ([type, name]: 2 a DNS name, 7 an IP address, ...) in a
HashSet, in the set's order. Java gives an other name (type 0) as a byte array, which equals
no other one: an old certificate with one is refused unless `ssl.allow.san.changes`, as in
Kafka, and the array prints as `[B@` and a number that differs, as in Java.

Subjects are equal when their canonical forms are (`canonical_subject`, what Java's
X500Principal.equals compares: case, runs of spaces and the string type of a value do not count).
A directory name among the alternative names prints in RFC 2253 form as Java's X500Principal.getName
gives it (`rfc2253_name`), which is also a TLS client's principal name (`wirebroker.tls`).
"""

from __future__ import annotations

import ipaddress
import unicodedata
from collections.abc import Sequence
from typing import NamedTuple

from cryptography import x509

from wirebroker import der
from wirebroker.config import ConfigError
from wirebroker.java_hashing import hash_set_order, string_hash


class CertificateEntry(NamedTuple):
    """An entry with a certificate: its alias as Java lists it and the certificate."""

    alias: str
    certificate: x509.Certificate


def check_change(
    old: Sequence[CertificateEntry],
    new: Sequence[CertificateEntry],
    *,
    allow_dn_changes: bool,
    allow_san_changes: bool,
) -> None:
    """Kafka's CertificateEntries.ensureCompatible of a new keystore's entries against the old
    one's: ConfigError with Kafka's message (without the prefix its SslFactory adds) and what
    allows the change."""
    if not allow_dn_changes:
        _same_count(old, new)
        for before, after in zip(old, new, strict=True):
            if not _same_subject(before.certificate, after.certificate):
                raise ConfigError(
                    "Keystore DistinguishedName does not match:  existing={alias="
                    f"{before.alias}, DN={java_subject(before.certificate)}}}, new={{alias="
                    f"{after.alias}, DN={java_subject(after.certificate)}}} "
                    "(ssl.allow.dn.changes=true allows it)"
                )
    if not allow_san_changes:
        _same_count(old, new)
        for before, after in zip(old, new, strict=True):
            old_names = _java_alt_names(before.certificate)
            new_names = _java_alt_names(after.certificate)
            if not all(name in new_names for name in old_names):
                raise ConfigError(
                    "Keystore SubjectAltNames do not match:  existing={alias="
                    f"{before.alias}, SAN={_printed(old_names)}}}, new={{alias={after.alias}, "
                    f"SAN={_printed(new_names)}}} (ssl.allow.san.changes=true allows it)"
                )


def _same_count(old: Sequence[CertificateEntry], new: Sequence[CertificateEntry]) -> None:
    if len(old) != len(new):
        raise ConfigError(
            f"Keystore entries do not match, existing store contains {len(old)} entries, new "
            f"store contains {len(new)} entries (keytool -list shows a store's entries; "
            "ssl.allow.dn.changes=true with ssl.allow.san.changes=true allows it)"
        )


def _same_subject(old: x509.Certificate, new: x509.Certificate) -> bool:
    return old.subject == new.subject or canonical_subject(old) == canonical_subject(new)


# subjects as Java prints them --------------------------------------------------------------------
#: Java's keywords (X500Principal.toString), by attribute type.
_KEYWORDS = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.12": "T",
    "1.3.6.1.4.1.42.2.11.2.1": "IP",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "2.5.4.46": "DNQ",
    "2.5.4.4": "SURNAME",
    "2.5.4.42": "GIVENNAME",
    "2.5.4.43": "INITIALS",
    "2.5.4.44": "GENERATION",
    "1.2.840.113549.1.9.1": "EMAILADDRESS",
    "0.9.2342.19200300.100.1.1": "UID",
    "2.5.4.5": "SERIALNUMBER",
}
#: The string types Java reads an attribute's value as (DerValue.getAsString), by tag, with
#: their character sets: UTF8String, PrintableString, T61String, IA5String, UniversalString,
#: BMPString, GeneralString.
_STRINGS = {
    0x0C: "utf-8",
    0x13: "ascii",
    0x14: "latin-1",
    0x16: "ascii",
    0x1C: "utf-32-be",
    0x1E: "utf-16-be",
    0x1B: "ascii",
}
#: RFC 2253's keywords (Java's canonical form writes the dotted type for the others).
_RFC2253_KEYWORDS = {
    k: v
    for k, v in _KEYWORDS.items()
    if v in ("CN", "C", "L", "ST", "O", "OU", "STREET", "DC", "UID")
}
#: The value types Java's canonical form reads as strings: UTF8String, PrintableString.
_CANONICAL_STRINGS = (0x0C, 0x13)
#: The value types Java's RFC 2253 form prints as strings (their bytes read as UTF-8, whatever
#: the type): PrintableString, T61String, IA5String, GeneralString, BMPString, UTF8String.
_RFC2253_STRINGS = (0x13, 0x14, 0x16, 0x1B, 0x1E, 0x0C)
#: What Java's RFC 2253 form escapes with a backslash, and the ends it escapes.
_RFC2253_ESCAPED, _RFC2253_ENDS = ',=+<>#;"\\', " \r"
#: What the canonical form escapes with a backslash (and a leading `#`), and what Java's
#: String.trim removes from its ends.
_CANONICAL_ESCAPED = ',+<>;"\\'
_JAVA_TRIMMED = "".join(map(chr, range(0x21)))
#: Characters that have a value quoted, and those escaped inside the quotes.
_SPECIAL, _ESCAPED = ',+=\n<>#;\\"', '\\"'
_PRINTABLE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789 '()+,-./:=?")


def java_subject(certificate: x509.Certificate) -> str:
    """A certificate's subject as Java's X500Principal.toString prints it."""
    return ", ".join(
        " + ".join(_attribute(ava) for ava in der.parse(rdn.contents))
        for rdn in reversed(subject_rdns(certificate))
    )


def canonical_subject(certificate: x509.Certificate) -> str:
    """A certificate's subject in the form Java's X500Principal compares (`getName(CANONICAL)`,
    RFC 2253's canonical form): each attribute `keyword=value` with RFC 2253's keywords, else
    the dotted type; a PrintableString or UTF8String value (of a type with a keyword) escaped as
    RFC 2253 says, its runs of spaces made one and its ends trimmed, any other value `#` and the
    hex of its encoding; all of it upper-cased, lower-cased and decomposed (Unicode's NFKD); the
    attributes of an RDN sorted, joined by `+`, the RDNs by `,`."""
    return ",".join(
        "+".join(sorted(_canonical_attribute(ava) for ava in der.parse(rdn.contents)))
        for rdn in reversed(subject_rdns(certificate))
    )


def rfc2253_name(rdns: Sequence[der.Der]) -> str:
    """A name (its RDNs as encoded) as Java's X500Principal.getName() prints it, RFC 2253's
    form: the RDNs from the last to the first joined by `,`, the attributes of one by `+` in
    their order; each `keyword=value` with RFC 2253's keywords, else the dotted type and `#` and
    the hex of the value's encoding, as for a value that is not a string; a string with `,=+<>#;"\\`
    escaped by a backslash, NUL as `\\00`, and its leading and trailing spaces (and carriage
    returns) escaped."""
    return ",".join(
        "+".join(_rfc2253_attribute(ava) for ava in der.parse(rdn.contents))
        for rdn in reversed(rdns)
    )


def subject_rdns(certificate: x509.Certificate) -> list[der.Der]:
    """The RDNs of a certificate's subject, as it encodes them (cryptography's Name is decoded):
    TBSCertificate's fields are an optional [0] version, the serial number, the signature's
    algorithm, the issuer, the validity, then the subject."""
    tbs = der.fields(certificate.tbs_certificate_bytes, der.SEQUENCE)
    first = 1 if tbs and tbs[0].tag == der.EXPLICIT_0 else 0
    if len(tbs) < first + 5 or tbs[first + 4].tag != der.SEQUENCE:
        raise der.DerError("the certificate has no subject")
    return der.parse(tbs[first + 4].contents)


def _type_and_value(ava: der.Der) -> tuple[str, der.Der]:
    """An attribute's type (dotted) and value."""
    parts = der.parse(ava.contents)
    if len(parts) != 2 or parts[0].tag != der.OID:
        raise der.DerError("an attribute of the subject is malformed")
    return der.dotted(parts[0].contents), parts[1]


def _attribute(ava: der.Der) -> str:
    """One attribute, `keyword=value`."""
    kind, value = _type_and_value(ava)
    keyword = _KEYWORDS.get(kind, f"OID.{kind}")
    charset = _STRINGS.get(value.tag)
    if charset is None:
        return f"{keyword}=#{value.encoded().hex()}"
    return f"{keyword}={_value(value.contents.decode(charset, 'replace'))}"


def _value(text: str) -> str:
    """A string value as Java's AVA prints it: in double quotes (its quotes and backslashes
    escaped) when it holds a special character, begins or ends with a space or a newline, or
    has two together; as it is when it is quoted already."""
    quoted = len(text) > 1 and text[0] == text[-1] == '"'
    quote = False
    white = False  # the last character was a space or a newline
    out = []
    for i, c in enumerate(text):
        if quoted and i in (0, len(text) - 1):
            out.append(c)
            continue
        if c in _PRINTABLE or c in _SPECIAL:
            if (i == 0 and c in " \n") or c in _SPECIAL:
                quote = True
            if c in " \n":
                quote = quote or white
                white = True
            else:
                white = False
                if c in _ESCAPED:
                    out.append("\\")
        else:
            white = False
        out.append(c)
    printed = "".join(out)
    if printed.endswith((" ", "\n")):
        quote = True
    return f'"{printed}"' if quote and not quoted else printed


def _rfc2253_attribute(ava: der.Der) -> str:
    kind, value = _type_and_value(ava)
    keyword = _RFC2253_KEYWORDS.get(kind)
    if keyword is None or value.tag not in _RFC2253_STRINGS:
        return f"{keyword or kind}=#{value.encoded().hex()}"
    text = "".join(
        "\\00" if c == "\0" else f"\\{c}" if c in _RFC2253_ESCAPED else c
        for c in value.contents.decode("utf-8", "replace")
    )
    body = text.strip(_RFC2253_ENDS)
    lead = len(text) - len(text.lstrip(_RFC2253_ENDS))
    trail = len(text.rstrip(_RFC2253_ENDS)) if body else lead
    escaped = "".join(f"\\{c}" for c in text[:lead]) + body
    return f"{keyword}={escaped}" + "".join(f"\\{c}" for c in text[trail:])


def _canonical_attribute(ava: der.Der) -> str:
    kind, value = _type_and_value(ava)
    keyword = _RFC2253_KEYWORDS.get(kind)
    if keyword is None or value.tag not in _CANONICAL_STRINGS:
        text = f"{keyword or kind}=#{value.encoded().hex()}"
    else:
        text = f"{keyword}={_canonical_value(value.contents.decode('utf-8', 'replace'))}"
    return unicodedata.normalize("NFKD", text.upper().lower())


def _canonical_value(text: str) -> str:
    out = []
    space = False  # the last character kept was a space
    for i, c in enumerate(text):
        leading_hash = i == 0 and c == "#"
        if c in _PRINTABLE or c in _CANONICAL_ESCAPED or leading_hash:
            if c in _CANONICAL_ESCAPED or leading_hash:
                out.append("\\")
            if c == " " and space:
                continue
            space = c == " "
        else:
            space = False
        out.append(c)
    return "".join(out).strip(_JAVA_TRIMMED)


# alternative names as Java lists them ------------------------------------------------------------
class _ByteArray:
    """A name Java gives as a byte array (an other name): equal only to itself, its hash
    Java's identity hash."""

    __slots__ = ()

    def __str__(self) -> str:
        return f"[B@{_identity(self):x}"


def _identity(value: object) -> int:
    return id(value) & 0x7FFFFFFF


_AltName = tuple[int, "str | _ByteArray"]


def _java_alt_names(certificate: x509.Certificate) -> list[_AltName]:
    """A certificate's alternative names as Java's X509Certificate.getSubjectAlternativeNames
    gives them, in a HashSet's order (`_hash_set`)."""
    try:
        extension = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return []
    return _hash_set([_java_alt_name(name) for name in extension.value])


def _java_alt_name(name: x509.GeneralName) -> _AltName:
    if isinstance(name, x509.RFC822Name):
        return 1, name.value
    if isinstance(name, x509.DNSName):
        return 2, name.value
    if isinstance(name, x509.DirectoryName):
        return 4, rfc2253_name(der.fields(name.value.public_bytes(), der.SEQUENCE))
    if isinstance(name, x509.UniformResourceIdentifier):
        return 6, name.value
    if isinstance(name, x509.IPAddress):
        return 7, _java_address(name.value)
    if isinstance(name, x509.RegisteredID):
        return 8, name.value.dotted_string
    return 0, _ByteArray()  # x509.OtherName


def _java_address(address: object) -> str:
    """An IP address as Java prints it: IPv6 as eight groups in hex, none left out (an IPv4
    address mapped to IPv6 as the IPv4 one)."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        packed = address.packed
        return ":".join(f"{int.from_bytes(packed[i : i + 2], 'big'):x}" for i in range(0, 16, 2))
    return str(address)


def _hash_set(names: list[_AltName]) -> list[_AltName]:
    """`names` as a java.util.HashSet made of them iterates them: without repeats, by bucket
    (the hash of Java's [type, name] list, spread, modulo a power of two large enough for them
    all, at least 16), each bucket in the order its names were added."""
    return hash_set_order(names, _list_hash, initial_capacity=max(int(len(names) / 0.75) + 1, 16))


def _list_hash(name: _AltName) -> int:
    """Java's List.hashCode of [type, name] (32 bits, unsigned)."""
    kind, value = name
    value_hash = _identity(value) if isinstance(value, _ByteArray) else string_hash(value)
    return (31 * (31 + kind) + value_hash) & 0xFFFFFFFF


def _printed(names: list[_AltName]) -> str:
    """A collection of Java's lists as Java prints it."""
    return "[" + ", ".join(f"[{kind}, {value}]" for kind, value in names) + "]"
