"""The entries with a certificate of a PKCS12 keystore, as Java's PKCS12KeyStore lists them:
their aliases in its order and each one's certificate, what Kafka's SslFactory compares when a
listener's keystore changes at run time (`wirebroker.certificate_entries`; `cryptography`,
which reads the store's key and certificates in `wirebroker.tls`, does not say which
certificates are entries, nor their aliases); and its key entries with the chain Java makes for
each (`key_entries`), for a store of several keys, of which `cryptography` reads one.

A PKCS12 file (RFC 7292) is a sequence of SafeContents, plain or encrypted with the store's
password, each a list of bags with attributes (a friendly name: the alias; a local key id).
As Java reads them: a shrouded key bag is a key entry (skipped without a local key id, unless
it is the store's first key), which has a certificate when a certificate bag matches its key id
or alias; a certificate bag with Oracle's trusted key usage attribute (keytool -importcert) is
a trusted certificate entry; other certificate bags only make chains; a secret bag is an entry
without a certificate. Entries are keyed by alias in lower case (the aliases Java lists), the
last one of an alias kept in the first one's place; one without a friendly name is named "1",
"2", ... in the order read. Java lists them in the order read: keytool writes a store's keys
before its certificates, so its key entries come first.

Encrypted SafeContents are read when encrypted with PBES2 (PBKDF2, AES or 3DES in CBC: OpenSSL
3's, Java 17's and `cryptography`'s default) or PKCS#12's own 3DES; otherwise (RC2, OpenSSL
1.1's default for certificates) a `Pkcs12Error` says so. So does anything malformed: the store
was read whole by `cryptography` first, so it comes from this module's narrower reading (DER
only, no BER indefinite lengths).
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.decrepit.ciphers.algorithms import TripleDES
from cryptography.hazmat.primitives import hashes, padding
from cryptography.hazmat.primitives.ciphers import BlockCipherAlgorithm, Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC
from cryptography.hazmat.primitives.serialization import Encoding

from wirebroker import der

_DATA = der.oid("1.2.840.113549.1.7.1")
_ENCRYPTED_DATA = der.oid("1.2.840.113549.1.7.6")
_SHROUDED_KEY_BAG = der.oid("1.2.840.113549.1.12.10.1.2")
_CERT_BAG = der.oid("1.2.840.113549.1.12.10.1.3")
_SECRET_BAG = der.oid("1.2.840.113549.1.12.10.1.5")
_FRIENDLY_NAME = der.oid("1.2.840.113549.1.9.20")
_LOCAL_KEY_ID = der.oid("1.2.840.113549.1.9.21")
_TRUSTED_KEY_USAGE = der.oid("2.16.840.1.113894.746875.1.1")
_X509_CERTIFICATE = der.oid("1.2.840.113549.1.9.22.1")
_PBES2 = der.oid("1.2.840.113549.1.5.13")
_PBKDF2 = der.oid("1.2.840.113549.1.5.12")
_PBE_SHA1_3DES = der.oid("1.2.840.113549.1.12.1.3")
_PRFS: dict[bytes, hashes.HashAlgorithm] = {
    der.oid("1.2.840.113549.2.7"): hashes.SHA1(),
    der.oid("1.2.840.113549.2.8"): hashes.SHA224(),
    der.oid("1.2.840.113549.2.9"): hashes.SHA256(),
    der.oid("1.2.840.113549.2.10"): hashes.SHA384(),
    der.oid("1.2.840.113549.2.11"): hashes.SHA512(),
}
#: PBES2's ciphers (all in CBC mode): key size.
_CIPHERS = {
    der.oid("2.16.840.1.101.3.4.1.2"): 16,
    der.oid("2.16.840.1.101.3.4.1.22"): 24,
    der.oid("2.16.840.1.101.3.4.1.42"): 32,
    der.oid("1.2.840.113549.3.7"): 24,  # des-ede3-cbc
}
_DES_EDE3_CBC = der.oid("1.2.840.113549.3.7")
#: Java's bound on a PBE iteration count (PKCS12KeyStore's MAX_ITERATION_COUNT).
_MAX_ITERATIONS = 5_000_000


class Pkcs12Error(ValueError):
    """The store's entries cannot be listed here; the message says why (never a password)."""


class CertificateEntry(NamedTuple):
    """An entry with a certificate: its alias as Java's KeyStore.aliases gives it (in lower
    case) and its certificate (a key entry's first one), DER."""

    alias: str
    certificate: bytes


class KeyEntry(NamedTuple):
    """A key entry with its chain: its alias (in lower case), the key's EncryptedPrivateKeyInfo
    and the chain Java's PKCS12KeyStore makes for it (DER), from the key's certificate to a
    self-signed one or one whose issuer the store does not hold."""

    alias: str
    encrypted_key: bytes
    chain: list[bytes]


def certificate_entries(data: bytes, password: bytes | None) -> list[CertificateEntry]:
    """The entries with a certificate of the PKCS12 store `data` (key entries with a chain and
    trusted certificate entries) in the order Java lists them."""
    return _census(data, password).certificate_entries()


def key_entries(data: bytes, password: bytes | None) -> list[KeyEntry]:
    """The key entries with a chain of the PKCS12 store `data`, in the order Java lists them."""
    return _census(data, password).key_entries()


def _census(data: bytes, password: bytes | None) -> _Census:
    try:
        pfx = der.fields(data, der.SEQUENCE)
        if len(pfx) < 2 or pfx[1].tag != der.SEQUENCE:
            raise Pkcs12Error("the store is not a PFX")
        kind, content = _content_info(pfx[1])
        if kind != _DATA:
            raise Pkcs12Error("the store is signed with a public key, not a password")
        census = _Census()
        for safe in der.fields(der.single(content, der.OCTETS), der.SEQUENCE):
            kind, content = _content_info(safe)
            if kind == _DATA:
                census.read(der.single(content, der.OCTETS))
            elif kind == _ENCRYPTED_DATA:
                census.read(_decrypt(content, password))
            else:
                raise Pkcs12Error("a part of the store is encrypted with a public key")
        return census
    except der.DerError as e:
        raise Pkcs12Error(str(e)) from None


class _Entry(NamedTuple):
    kind: str  # "key", "trusted" or "secret"
    alias: str
    key_id: bytes | None = None
    certificate: bytes | None = None  # a trusted entry's
    encrypted_key: bytes | None = None  # a key entry's


class _Cert(NamedTuple):
    """A certificate bag that is no entry (chains are made of them)."""

    key_id: bytes | None
    alias: str | None
    certificate: bytes


class _Census:
    """PKCS12KeyStore.engineLoad's entries, as far as listing them needs."""

    __slots__ = ("entries", "certs", "all_certs", "key_count", "unnamed")

    def __init__(self) -> None:
        #: By alias in lower case (Java's aliases), in the order first read; the last one read
        #: of an alias kept.
        self.entries: dict[str, _Entry] = {}
        self.certs: list[_Cert] = []
        #: Every certificate bag's, in the order read (chains are made of them).
        self.all_certs: list[bytes] = []
        self.key_count = 0
        self.unnamed = 0

    def _name(self, alias: str | None) -> str:
        if alias is not None:
            return alias
        self.unnamed += 1
        return str(self.unnamed)

    def read(self, safe_contents: bytes) -> None:
        """The bags of one SafeContents."""
        for index, bag in enumerate(der.fields(safe_contents, der.SEQUENCE)):
            parts = der.parse(bag.contents) if bag.tag == der.SEQUENCE else []
            if len(parts) < 2 or parts[0].tag != der.OID:
                raise Pkcs12Error("a bag is malformed")
            alias, key_id, trusted = _attributes(parts[2] if len(parts) > 2 else None)
            kind = parts[0].contents
            if kind == _SHROUDED_KEY_BAG:
                self.key_count += 1
                if key_id is None:
                    if self.key_count != 1:
                        continue  # as Java: a key without an id is only the first one's
                    key_id = b"01"
                name = self._name(alias)
                shrouded = der.parse(parts[1].contents) if parts[1].tag == der.EXPLICIT_0 else []
                if len(shrouded) != 1 or shrouded[0].tag != der.SEQUENCE:
                    raise Pkcs12Error("a shrouded key bag is malformed")
                self.entries[name.lower()] = _Entry(
                    "key", name, key_id, None, shrouded[0].encoded()
                )
            elif kind == _CERT_BAG:
                certificate = _certificate(parts[1])
                self.all_certs.append(certificate)
                if key_id is None and self.key_count == 1 and index == 0:
                    key_id = b"01"
                if trusted:
                    name = self._name(alias)
                    self.entries[name.lower()] = _Entry("trusted", name, certificate=certificate)
                else:
                    self.certs.append(_Cert(key_id, alias, certificate))
            elif kind == _SECRET_BAG:
                name = self._name(alias)
                self.entries[name.lower()] = _Entry("secret", name)

    def certificate_entries(self) -> list[CertificateEntry]:
        """Trusted certificate entries and key entries a certificate bag belongs to."""
        out = []
        for alias, entry in self.entries.items():
            certificate = entry.certificate if entry.kind == "trusted" else None
            if entry.kind == "key":
                certificate = self._first_of_chain(entry)
            if certificate is not None:
                out.append(CertificateEntry(alias, certificate))
        return out

    def key_entries(self) -> list[KeyEntry]:
        """Key entries a certificate bag belongs to, each with its chain (`_chain`)."""
        out = []
        for alias, entry in self.entries.items():
            if entry.kind == "key" and entry.encrypted_key is not None:
                leaf = self._first_of_chain(entry)
                if leaf is not None:
                    out.append(KeyEntry(alias, entry.encrypted_key, self._chain(leaf)))
        return out

    def _chain(self, leaf: bytes) -> list[bytes]:
        """As PKCS12KeyStore makes a key's chain: from its certificate, each next one a
        certificate of the store whose subject is the last one's issuer and whose key verifies
        its signature, up to a self-signed one, one whose issuer is not there, or a loop."""
        try:
            certificates = [x509.load_der_x509_certificate(c) for c in self.all_certs]
            last = x509.load_der_x509_certificate(leaf)
        except ValueError as e:
            raise Pkcs12Error(f"a certificate cannot be read: {e}") from None
        chain = [last]
        while not _issued_by(last, last):
            issuer = next((c for c in certificates if _issued_by(last, c)), None)
            if issuer is None or issuer in chain:
                break
            chain.append(issuer)
            last = issuer
        return [c.public_bytes(Encoding.DER) for c in chain]

    def _first_of_chain(self, key: _Entry) -> bytes | None:
        """A key entry's certificate, as Java matches it: the first bag of the key's id and
        alias (case ignored), else the last of its id, else the last of its alias."""
        by_id = by_alias = None
        for cert in self.certs:
            same_alias = cert.alias is not None and cert.alias.lower() == key.alias.lower()
            if cert.key_id == key.key_id:
                if same_alias:
                    return cert.certificate
                by_id = cert.certificate
            elif same_alias:
                by_alias = cert.certificate
        return by_id if by_id is not None else by_alias


def _issued_by(certificate: x509.Certificate, issuer: x509.Certificate) -> bool:
    """Whether `issuer`'s subject is `certificate`'s issuer and its key signed it."""
    if certificate.issuer != issuer.subject:
        return False
    try:
        certificate.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _certificate(bag_value: der.Der) -> bytes:
    """The X.509 certificate (DER) of a CertBag, its bag's [0] EXPLICIT value: SEQUENCE {
    certId, [0] EXPLICIT OCTET STRING }."""
    parts = der.parse(der.single(bag_value, der.SEQUENCE))
    if len(parts) != 2 or parts[0].tag != der.OID or parts[1].tag != der.EXPLICIT_0:
        raise Pkcs12Error("a certificate bag is malformed")
    if parts[0].contents != _X509_CERTIFICATE:
        raise Pkcs12Error("a certificate bag holds no X.509 certificate")
    return der.single(parts[1], der.OCTETS)


def _attributes(attributes: der.Der | None) -> tuple[str | None, bytes | None, bool]:
    """A bag's friendly name, local key id and whether it has the trusted key usage."""
    alias: str | None = None
    key_id: bytes | None = None
    trusted = False
    if attributes is None:
        return alias, key_id, trusted
    if attributes.tag != der.SET:
        raise Pkcs12Error("a bag's attributes are not a SET")
    for attribute in der.parse(attributes.contents):
        parts = der.parse(attribute.contents) if attribute.tag == der.SEQUENCE else []
        if len(parts) != 2 or parts[0].tag != der.OID or parts[1].tag != der.SET:
            raise Pkcs12Error("a bag attribute is malformed")
        values = der.parse(parts[1].contents)
        if not values:
            raise Pkcs12Error("a bag attribute has no value")
        if parts[0].contents == _FRIENDLY_NAME:
            if values[0].tag != der.BMP:
                raise Pkcs12Error("a friendly name is not a BMPString")
            alias = values[0].contents.decode("utf-16-be", "replace")
        elif parts[0].contents == _LOCAL_KEY_ID:
            key_id = values[0].contents
        elif parts[0].contents == _TRUSTED_KEY_USAGE:
            trusted = True
    return alias, key_id, trusted


# decryption ------------------------------------------------------------------------------------
def _decrypt(encrypted_data: der.Der, password: bytes | None) -> bytes:
    """The SafeContents an EncryptedData holds: SEQUENCE { version, SEQUENCE { type,
    AlgorithmIdentifier, [0] IMPLICIT the encrypted bytes } }."""
    if password is None:
        raise Pkcs12Error("its certificates are encrypted and there is no password")
    fields = der.fields(encrypted_data.contents, der.SEQUENCE)
    info = (
        der.parse(fields[1].contents) if len(fields) == 2 and fields[1].tag == der.SEQUENCE else []
    )
    if len(info) != 3 or info[1].tag != der.SEQUENCE or info[2].tag != der.IMPLICIT_0:
        raise Pkcs12Error("an EncryptedData is malformed (or holds no bytes)")
    algorithm, parameters = _algorithm(info[1])
    if algorithm == _PBES2:
        cipher, iv = _pbes2(parameters, password)
    elif algorithm == _PBE_SHA1_3DES:
        cipher, iv = _pkcs12_pbe(parameters, password)
    else:
        raise Pkcs12Error(
            f"its certificates are encrypted with {der.dotted(algorithm)}, which is not read here"
        )
    try:  # (a wrong IV or length too)
        decryptor = Cipher(cipher, modes.CBC(iv)).decryptor()
        padded = decryptor.update(info[2].contents) + decryptor.finalize()
        unpadder = padding.PKCS7(cipher.block_size).unpadder()
        return unpadder.update(padded) + unpadder.finalize()
    except ValueError:
        raise Pkcs12Error("its certificates do not decrypt with the store's password") from None


def _pbes2(parameters: list[der.Der], password: bytes) -> tuple[BlockCipherAlgorithm, bytes]:
    """PBES2 (RFC 8018): the cipher, its key from PBKDF2 with its PRF, and the IV."""
    fields = der.parse(parameters[0].contents) if parameters else []
    if len(fields) != 2 or fields[0].tag != der.SEQUENCE or fields[1].tag != der.SEQUENCE:
        raise Pkcs12Error("PBES2's parameters are malformed")
    kdf, kdf_parameters = _algorithm(fields[0])
    if kdf != _PBKDF2:
        raise Pkcs12Error(f"PBES2 with the key derivation {der.dotted(kdf)}")
    pbkdf2 = der.parse(kdf_parameters[0].contents) if kdf_parameters else []
    if len(pbkdf2) < 2 or pbkdf2[0].tag != der.OCTETS or pbkdf2[1].tag != der.INTEGER:
        raise Pkcs12Error("PBKDF2's parameters are malformed")
    prf: hashes.HashAlgorithm = hashes.SHA1()  # the default
    if pbkdf2[-1].tag == der.SEQUENCE:
        prf_algorithm, _ = _algorithm(pbkdf2[-1])
        if prf_algorithm not in _PRFS:
            raise Pkcs12Error(f"PBKDF2 with the PRF {der.dotted(prf_algorithm)}")
        prf = _PRFS[prf_algorithm]
    cipher, iv = _algorithm(fields[1])
    if cipher not in _CIPHERS or len(iv) != 1 or iv[0].tag != der.OCTETS:
        raise Pkcs12Error(f"PBES2 with the cipher {der.dotted(cipher)}")
    size = _CIPHERS[cipher]
    salt, iterations = pbkdf2[0].contents, _iterations(pbkdf2[1])
    key = PBKDF2HMAC(prf, size, salt, iterations).derive(password)
    algorithm = TripleDES(key) if cipher == _DES_EDE3_CBC else algorithms.AES(key)
    return algorithm, iv[0].contents


def _pkcs12_pbe(parameters: list[der.Der], password: bytes) -> tuple[BlockCipherAlgorithm, bytes]:
    """pbeWithSHAAnd3-KeyTripleDES-CBC: the cipher with its key and the IV, both from
    PKCS#12's own derivation."""
    fields = der.parse(parameters[0].contents) if parameters else []
    if len(fields) != 2 or fields[0].tag != der.OCTETS or fields[1].tag != der.INTEGER:
        raise Pkcs12Error("PKCS#12 PBE parameters are malformed")
    salt, iterations = fields[0].contents, _iterations(fields[1])
    secret = (password.decode("utf-8", "replace") + "\0").encode("utf-16-be")
    key = _pkcs12_kdf(secret, salt, iterations, 1, 24)
    iv = _pkcs12_kdf(secret, salt, iterations, 2, 8)
    return TripleDES(key), iv


def _pkcs12_kdf(secret: bytes, salt: bytes, iterations: int, purpose: int, size: int) -> bytes:
    """RFC 7292 appendix B.2 with SHA-1 (64-byte blocks): `secret` is the password as a
    NUL-terminated BMPString, `purpose` 1 for a key and 2 for an IV."""
    block = 64
    material = bytearray(_repeated(salt, block) + _repeated(secret, block))
    out = b""
    while len(out) < size:
        digest = bytes([purpose]) * block + material
        for _ in range(iterations):
            digest = hashlib.sha1(digest).digest()
        out += digest
        adder = int.from_bytes(_repeated(digest, block)[:block], "big") + 1
        for start in range(0, len(material), block):
            value = int.from_bytes(material[start : start + block], "big") + adder
            material[start : start + block] = (value % (1 << 8 * block)).to_bytes(block, "big")
    return out[:size]


def _repeated(data: bytes, block: int) -> bytes:
    """`data` repeated to fill whole blocks (RFC 7292 B.2's S and P)."""
    if not data:
        return b""
    size = -(-len(data) // block) * block
    return (data * (size // len(data) + 1))[:size]


def _iterations(count: der.Der) -> int:
    value = int.from_bytes(count.contents, "big", signed=True)
    if not 0 < value <= _MAX_ITERATIONS:
        raise Pkcs12Error(f"an iteration count of {value} (Java reads 1 to {_MAX_ITERATIONS})")
    return value


# ContentInfo and AlgorithmIdentifier ---------------------------------------------------------
def _content_info(element: der.Der) -> tuple[bytes, der.Der]:
    """A ContentInfo's type and its [0] EXPLICIT content."""
    parts = der.parse(element.contents) if element.tag == der.SEQUENCE else []
    if len(parts) != 2 or parts[0].tag != der.OID or parts[1].tag != der.EXPLICIT_0:
        raise Pkcs12Error("a ContentInfo is malformed")
    return parts[0].contents, parts[1]


def _algorithm(element: der.Der) -> tuple[bytes, list[der.Der]]:
    """An AlgorithmIdentifier's OID and its parameters."""
    parts = der.parse(element.contents) if element.tag == der.SEQUENCE else []
    if not parts or parts[0].tag != der.OID:
        raise Pkcs12Error("an AlgorithmIdentifier is malformed")
    return parts[0].contents, parts[1:]
