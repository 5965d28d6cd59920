"""Encryption of the password configs stored as dynamic broker configs, as Kafka stores them.

Kafka (ZooKeeper mode) never writes a dynamic password config (`listener.name.<l>.ssl.key.password`,
`listener.name.<l>.<mechanism>.sasl.jaas.config`, ...) in the clear: it encrypts it with a key
derived from `password.encoder.secret` (Kafka's EncryptingPasswordEncoder) and stores a
comma-separated `name:value` map: the key factory (PBKDF2WithHmacSHA512), the cipher
(AES/CBC/PKCS5Padding), key length, iterations, a 256-byte salt, the IV (and, for AES/GCM, the
tag length), the encrypted password and its length, bytes in standard base64. This module
writes and reads exactly that, so Kafka's brokers read what wirebroker stores and the other way
round. Without a secret nothing can be stored: :class:`PasswordEncoder` is then None and the
caller refuses with Kafka's "Password encoder secret not configured".
"""

from __future__ import annotations

import base64
import secrets

from wirebroker.config import BrokerConfig, ConfigError

_HASHES = {
    "PBKDF2WithHmacSHA512": "SHA512",
    "PBKDF2WithHmacSHA256": "SHA256",
    "PBKDF2WithHmacSHA1": "SHA1",
}
_CBC, _GCM = "AES/CBC/PKCS5Padding", "AES/GCM/NoPadding"
_SALT_BYTES = 256
_GCM_TAG_BITS = 128


class PasswordEncoder:
    """Encrypts and decrypts with one secret (`password.encoder.*` settings for new values;
    a stored value carries its own algorithm, key length and iterations)."""

    # Not a dataclass: start-up time (docs/perf-notes.md, branch `startup`).
    __slots__ = ("secret", "key_factory", "cipher", "key_length", "iterations")

    def __init__(
        self,
        secret: str,
        key_factory: str = "PBKDF2WithHmacSHA512",
        cipher: str = _CBC,
        key_length: int = 128,
        iterations: int = 4096,
    ) -> None:
        self.secret = secret
        self.key_factory = key_factory
        self.cipher = cipher
        self.key_length = key_length
        self.iterations = iterations

    @classmethod
    def from_config(cls, config: BrokerConfig, *, old: bool = False) -> PasswordEncoder | None:
        """The encoder of `password.encoder.secret` (or `.old.secret`); None when unset."""
        secret = config.get("password.encoder.old.secret" if old else "password.encoder.secret")
        if not secret:
            return None
        encoder = cls(
            secret,
            config.get("password.encoder.keyfactory.algorithm") or "PBKDF2WithHmacSHA512",
            config.get("password.encoder.cipher.algorithm") or _CBC,
            config.get_int("password.encoder.key.length"),
            config.get_int("password.encoder.iterations"),
        )
        if encoder.key_factory not in _HASHES or encoder.cipher not in (_CBC, _GCM):
            raise ConfigError(
                "password.encoder.keyfactory.algorithm must be one of "
                f"{', '.join(_HASHES)} and password.encoder.cipher.algorithm {_CBC} or {_GCM}"
            )
        return encoder

    def encode(self, password: str) -> str:
        from cryptography.hazmat.primitives import padding
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

        salt = secrets.token_bytes(_SALT_BYTES)
        key = self._key(self.key_factory, salt, self.key_length, self.iterations)
        plain = password.encode()
        params: dict[str, str] = {}
        if self.cipher == _GCM:
            iv = secrets.token_bytes(12)
            gcm = Cipher(algorithms.AES(key), modes.GCM(iv)).encryptor()
            encrypted = gcm.update(plain) + gcm.finalize() + gcm.tag
            params["authenticationTagLength"] = str(_GCM_TAG_BITS)
        else:
            iv = secrets.token_bytes(16)
            padder = padding.PKCS7(128).padder()
            encryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
            padded = padder.update(plain) + padder.finalize()
            encrypted = encryptor.update(padded) + encryptor.finalize()
        fields = {
            "keyFactoryAlgorithm": self.key_factory,
            "cipherAlgorithm": self.cipher,
            "keyLength": str(self.key_length),
            "salt": _b64(salt),
            "iterations": str(self.iterations),
            "encryptedPassword": _b64(encrypted),
            "passwordLength": str(len(password)),
            "initializationVector": _b64(iv),
            **params,
        }
        return ",".join(f"{k}:{v}" for k, v in fields.items())

    def decode(self, encoded: str) -> str:
        """The password, or ConfigError when it cannot be decrypted with this secret."""
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives import padding
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

        try:
            fields = dict(item.split(":", 1) for item in encoded.split(","))
            key = self._key(
                fields["keyFactoryAlgorithm"],
                base64.b64decode(fields["salt"]),
                int(fields["keyLength"]),
                int(fields["iterations"]),
            )
            iv = base64.b64decode(fields["initializationVector"])
            encrypted = base64.b64decode(fields["encryptedPassword"])
            if fields["cipherAlgorithm"] == _GCM:
                tag_bytes = int(fields["authenticationTagLength"]) // 8
                gcm = Cipher(
                    algorithms.AES(key), modes.GCM(iv, encrypted[-tag_bytes:], tag_bytes)
                ).decryptor()
                plain = gcm.update(encrypted[:-tag_bytes]) + gcm.finalize()
            else:
                decryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).decryptor()
                unpadder = padding.PKCS7(128).unpadder()
                padded = decryptor.update(encrypted) + decryptor.finalize()
                plain = unpadder.update(padded) + unpadder.finalize()
            password = plain.decode()
        except (KeyError, ValueError, InvalidTag) as e:
            raise ConfigError("Password could not be decoded") from e
        if len(password) != int(fields["passwordLength"]):
            raise ConfigError("Password could not be decoded, sanity check of length failed")
        return password

    def _key(self, key_factory: str, salt: bytes, key_length: int, iterations: int) -> bytes:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC

        algorithm = getattr(hashes, _HASHES[key_factory])()
        kdf = PBKDF2HMAC(algorithm, key_length // 8, salt, iterations)
        return kdf.derive(self.secret.encode())


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
