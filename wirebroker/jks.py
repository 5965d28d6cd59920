"""Java KeyStore (JKS) files, read as the JDK's JavaKeyStore reads them: Kafka's default
`ssl.keystore.type` and `ssl.truststore.type`, the stores older deployments made with keytool;
and JCEKS files, as its JceKeyStore reads them (`ssl.keystore.type=JCEKS`).

A JKS file is big-endian: the magic `FEEDFEED`, a version (1 or 2), an entry count, then each
entry: a tag (1: a private key, 2: a trusted certificate), its alias (Java's modified UTF-8) and
a timestamp; a private key's entry holds the key encrypted by Sun's KeyProtector (an
EncryptedPrivateKeyInfo of the algorithm 1.3.6.1.4.1.42.2.17.1.1) and its certificate chain, a
trusted one a certificate (version 2 names each certificate's type, `X.509`). Last comes a
SHA-1 digest of the store password (UTF-16BE), the words "Mighty Aphrodite" and everything
before it: a wrong password or a changed file fails with Java's message.

A JCEKS file is the same but for its magic, `CECECECE`, its keys' protection and one more kind
of entry. A key is protected by PBEWithMD5AndTripleDES (1.3.6.1.4.1.42.2.19.1, with an 8-byte
salt and an iteration count): each half of the salt (the first reversed when both are equal),
then the password (printable ASCII only), is hashed with MD5, the digest and the password again
as many times as the count says; the two digests are the DESede key (24 bytes) and the CBC IV
(8), the key PKCS#8 under PKCS#5 padding. A JKS-protected key in a JCEKS file is read too. A
secret-key entry (tag 3) is a serialized `SealedObject`, skipped
(`wirebroker.java_serialization`): TLS needs none.

KeyProtector: the encrypted bytes are a 20-byte salt, the key XORed with a keystream and a
20-byte check; the keystream is SHA-1(password + salt), then SHA-1(password + the previous
block); the check is SHA-1(password + the key). The key is PKCS#8, which `cryptography` reads.

Java lists a store's entries (KeyStore.aliases, the order in which Kafka's SslFactory compares
two keystores' entries) as its JavaKeyStore keeps them, in a java.util.Hashtable by alias: the
order of that table's buckets (`JksStore.certificate_entries`).

Every length is checked against what is left of the file before it is used; a truncated or
malformed store is a `JksError` saying what is wrong, never an exception of another kind.
"""

from __future__ import annotations

import hashlib
import struct
from typing import NamedTuple

from wirebroker import der
from wirebroker.java_hashing import hashtable_order
from wirebroker.java_serialization import SerializationError, object_end

MAGIC = b"\xfe\xed\xfe\xed"
JCEKS_MAGIC = b"\xce\xce\xce\xce"
_PRIVATE_KEY, _TRUSTED_CERT, _SECRET_KEY = 1, 2, 3
#: Sun's KeyProtector (the JKS key encryption), DER-encoded OID 1.3.6.1.4.1.42.2.17.1.1.
_KEY_PROTECTOR = bytes.fromhex("2b060104012a02110101")
#: PBEWithMD5AndTripleDES (JCEKS's key encryption), DER-encoded OID 1.3.6.1.4.1.42.2.19.1.
_PBE_MD5_DES3 = bytes.fromhex("2b060104012a021301")
#: The largest iteration count the JDK 17's JCEKS KeyProtector takes.
MAX_PBE_ITERATIONS = 5_000_000
_WHITENER = b"Mighty Aphrodite"
_DIGEST = 20
_U16, _U32, _U64 = struct.Struct(">H"), struct.Struct(">I"), struct.Struct(">Q")
CONVERT = (
    "keytool -importkeystore -srckeystore STORE.jks -destkeystore STORE.p12 -deststoretype PKCS12"
)


class JksError(ValueError):
    """A JKS store that cannot be read; the message says why (never a password)."""


class JksPasswordError(JksError):
    """The store's or the key's password is not the one given."""


class PrivateKeyEntry:
    """A private key entry: its alias, the key's encrypted bytes and the chain (DER)."""

    __slots__ = ("alias", "protected_key", "chain")

    def __init__(self, alias: str, protected_key: bytes, chain: list[bytes]) -> None:
        self.alias = alias
        self.protected_key = protected_key
        self.chain = chain

    def key(self, password: str) -> bytes:
        """The PKCS#8 DER private key, decrypted with `password` (Java's UnrecoverableKey
        message when it is not the key's)."""
        algorithm, parameters, encrypted = _encrypted_private_key_info(self.protected_key)
        if algorithm == _KEY_PROTECTOR:
            return _recover_key(encrypted, password.encode("utf-16-be"))
        if algorithm == _PBE_MD5_DES3:
            return _recover_pbe_key(parameters, encrypted, password)
        raise JksError(
            f"the private key is protected by {der.dotted(algorithm)}, neither JKS's nor JCEKS's "
            "KeyProtector: convert the store"
        )


class TrustedCertEntry(NamedTuple):
    """A trusted certificate entry: its alias and the certificate (DER)."""

    alias: str
    certificate: bytes


class SecretKeyEntry(NamedTuple):
    """A JCEKS secret-key entry: its alias only (its sealed key is not read)."""

    alias: str


Entry = PrivateKeyEntry | TrustedCertEntry | SecretKeyEntry


class JksStore:
    """A JKS or JCEKS store's entries, in the file's order."""

    __slots__ = ("entries",)

    def __init__(self, entries: list[Entry]) -> None:
        self.entries = entries

    @property
    def private_keys(self) -> list[PrivateKeyEntry]:
        return [e for e in self.entries if isinstance(e, PrivateKeyEntry)]

    @property
    def trusted_certs(self) -> list[bytes]:
        return [e.certificate for e in self.entries if isinstance(e, TrustedCertEntry)]

    def key_entries(self) -> list[PrivateKeyEntry]:
        """The private key entries in the order Java lists them (`hashtable_order`)."""
        by_alias = {entry.alias: entry for entry in self.entries}
        return [
            entry
            for alias in hashtable_order(list(by_alias))
            if isinstance(entry := by_alias[alias], PrivateKeyEntry)
        ]

    def certificate_entries(self) -> list[tuple[str, bytes]]:
        """The entries with a certificate (a key entry's first one, a trusted one's), by alias,
        in the order Java's JavaKeyStore lists them: its Hashtable's (`hashtable_order`)."""
        by_alias: dict[str, bytes | None] = {}
        for entry in self.entries:  # an alias read again takes the first one's place
            if isinstance(entry, PrivateKeyEntry):
                by_alias[entry.alias] = entry.chain[0] if entry.chain else None
            elif isinstance(entry, TrustedCertEntry):
                by_alias[entry.alias] = entry.certificate
            else:  # (JceKeyStore's Hashtable holds it too)
                by_alias[entry.alias] = None
        return [
            (alias, certificate)
            for alias in hashtable_order(list(by_alias))
            if (certificate := by_alias[alias]) is not None
        ]


def read_jks(data: bytes, password: str | None) -> JksStore:
    """The entries of the JKS or JCEKS store `data`; with `password`, its integrity checked
    first (as Java, a truststore read without a password is not checked)."""
    jceks = data.startswith(JCEKS_MAGIC)
    if not jceks and not data.startswith(MAGIC):
        raise JksError("not a JKS store (its first bytes are not FEEDFEED)")
    if len(data) < len(MAGIC) + 8 + _DIGEST:
        raise JksError("the store is truncated")
    body, digest = data[:-_DIGEST], data[-_DIGEST:]
    if password is not None:
        expected = hashlib.sha1(password.encode("utf-16-be") + _WHITENER + body).digest()
        if expected != digest:
            raise JksPasswordError("Keystore was tampered with, or password was incorrect")
    reader = _Reader(body, len(MAGIC))
    version = reader.u32()
    if version not in (1, 2):
        raise JksError(f"JKS version {version} is not 1 or 2")
    entries: list[Entry] = []
    for _ in range(reader.u32()):
        tag = reader.u32()
        alias = reader.utf()
        reader.take(_U64.size)  # the entry's creation time
        if tag == _PRIVATE_KEY:
            protected = reader.take(reader.u32())
            chain = [reader.certificate(version) for _ in range(reader.u32())]
            entries.append(PrivateKeyEntry(alias, protected, chain))
        elif tag == _TRUSTED_CERT:
            entries.append(TrustedCertEntry(alias, reader.certificate(version)))
        elif tag == _SECRET_KEY and jceks:
            try:
                reader.offset = object_end(body, reader.offset)
            except SerializationError as e:
                raise JksError(f"the secret key entry {alias!r} cannot be read: {e}") from None
            entries.append(SecretKeyEntry(alias))
        else:
            raise JksError(
                f"entry {alias!r} has tag {tag}, neither a private key nor a certificate"
            )
    if reader.offset != len(body):
        raise JksError("bytes follow the store's last entry")
    return JksStore(entries)


class _Reader:
    """Reads `data` from `offset`, each length checked against what is left."""

    __slots__ = ("data", "offset")

    def __init__(self, data: bytes, offset: int) -> None:
        self.data = data
        self.offset = offset

    def take(self, n: int) -> bytes:
        if n > len(self.data) - self.offset:
            raise JksError("the store is truncated")
        chunk = self.data[self.offset : self.offset + n]
        self.offset += n
        return chunk

    def u32(self) -> int:
        value: int = _U32.unpack(self.take(4))[0]
        return value

    def utf(self) -> str:
        (n,) = _U16.unpack(self.take(2))
        raw = self.take(n)
        # Java's modified UTF-8: NUL as C0 80, other characters as UTF-8 (surrogates apart).
        try:
            return raw.replace(b"\xc0\x80", b"\0").decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            raise JksError("an alias or a certificate type is not UTF-8") from None

    def certificate(self, version: int) -> bytes:
        if version == 2:
            kind = self.utf()
            if kind != "X.509":
                raise JksError(f"a certificate of type {kind!r}: only X.509 is read")
        return self.take(self.u32())


def _recover_key(encrypted: bytes, password: bytes) -> bytes:
    """JKS's KeyProtector.recover: the encrypted bytes decrypted and checked."""
    if len(encrypted) < 2 * _DIGEST:
        raise JksError("the private key's protected bytes are truncated")
    salt, body, check = encrypted[:_DIGEST], encrypted[_DIGEST:-_DIGEST], encrypted[-_DIGEST:]
    stream = bytearray()
    block = salt
    while len(stream) < len(body):
        block = hashlib.sha1(password + block).digest()
        stream += block
    key = bytes(a ^ b for a, b in zip(body, stream, strict=False))
    if hashlib.sha1(password + key).digest() != check:
        raise JksPasswordError("Cannot recover key: the key's password is not this one")
    return key


def _recover_pbe_key(parameters: list[der.Der], encrypted: bytes, password: str) -> bytes:
    """JCEKS's KeyProtector.recover: PBEWithMD5AndTripleDES decryption (the module's
    docstring), with the JDK's limits on the salt, the iteration count and the password."""
    from cryptography.hazmat.decrepit.ciphers.algorithms import TripleDES
    from cryptography.hazmat.primitives import padding
    from cryptography.hazmat.primitives.ciphers import Cipher, modes

    try:
        if not parameters or parameters[0].tag != der.SEQUENCE:
            raise der.DerError("not a SEQUENCE")
        fields = der.parse(parameters[0].contents)
    except der.DerError as e:
        raise JksError(f"the private key's PBE parameters are malformed: {e}") from None
    if len(fields) != 2 or fields[0].tag != der.OCTETS or fields[1].tag != der.INTEGER:
        raise JksError("the private key's PBE parameters are not a salt and an iteration count")
    salt, iterations = fields[0].contents, int.from_bytes(fields[1].contents, "big", signed=True)
    if len(salt) != 8:
        raise JksError("the private key's PBE salt is not 8 bytes long")
    if not 0 < iterations <= MAX_PBE_ITERATIONS:
        raise JksError(f"the private key's PBE iteration count {iterations} is out of range")
    if not all(" " <= c <= "~" for c in password):
        raise JksError("the key's password is not printable ASCII, as JCEKS's protection needs")
    if not encrypted or len(encrypted) % 8:
        raise JksError("the private key's encrypted bytes are not whole DESede blocks")
    secret = password.encode("ascii")
    halves = [salt[:4], salt[4:]]
    if halves[0] == halves[1]:
        halves[0] = halves[0][::-1]
    derived = b""
    for half in halves:
        digest = hashlib.md5(half + secret).digest()
        for _ in range(iterations - 1):
            digest = hashlib.md5(digest + secret).digest()
        derived += digest
    decryptor = Cipher(TripleDES(derived[:24]), modes.CBC(derived[24:])).decryptor()
    unpadder = padding.PKCS7(64).unpadder()
    try:
        plain = decryptor.update(encrypted) + decryptor.finalize()
        return unpadder.update(plain) + unpadder.finalize()
    except ValueError:
        raise JksPasswordError("Cannot recover key: the key's password is not this one") from None


def _encrypted_private_key_info(data: bytes) -> tuple[bytes, list[der.Der], bytes]:
    """The algorithm OID's bytes, its parameters and the encrypted data of an
    EncryptedPrivateKeyInfo: SEQUENCE { SEQUENCE { OID, parameters }, OCTET STRING }."""
    try:
        parts = der.fields(data, der.SEQUENCE)
        if len(parts) < 2 or parts[0].tag != der.SEQUENCE or parts[1].tag != der.OCTETS:
            raise der.DerError("not an algorithm and its encrypted data")
        algorithm = der.parse(parts[0].contents)
        if not algorithm or algorithm[0].tag != der.OID:
            raise der.DerError("its algorithm has no OID")
    except der.DerError as e:
        raise JksError(f"the private key's EncryptedPrivateKeyInfo is malformed: {e}") from None
    return algorithm[0].contents, algorithm[1:], parts[1].contents
