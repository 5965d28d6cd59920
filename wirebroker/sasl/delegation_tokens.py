"""Delegation tokens (KIP-48), as Kafka 3.9's DelegationTokenManager(Zk) keeps them.

A token is its information (Kafka's TokenInformation: id, owner, requester, renewers, issue,
expiry and max timestamps) and its HMAC: HmacSHA512 of the token id's UTF-8 bytes keyed with
`delegation.token.secret.key` (alias `delegation.token.master.key`); unset or empty, tokens are
disabled. The HMAC is never stored: every broker with the same key computes it again. A client
authenticates with SASL/SCRAM, the token id as user name, the extension `tokenauth=true` and the
HMAC in base64 as password: the SCRAM credentials of a token are derived from that password
(4096 iterations, a salt of this broker's own, each mechanism), as Kafka's DelegationTokenCache,
in a worker thread when the token is cached (PBKDF2 would hold the loop for tens of ms).

The embedded broker keeps the tokens in `delegation-tokens.json` in its first log dir (each
token as Kafka writes `/delegation_token/tokens/<id>`), written atomically in a worker thread; a
cluster broker keeps them in ZooKeeper as Kafka (`wirebroker.zk.delegation_tokens`) and this is
its cache. A change is answered once saved, one change at a time (`lock`), as the SCRAM
credentials (`wirebroker.sasl.credentials`). A token past its expiry or max timestamp is removed by the
expiry check every `delegation.token.expiry.check.interval.ms`, as Kafka's: until then it still
authenticates (Kafka's SCRAM callback does not look at the timestamps).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from protocol.errors import ErrorCode, KafkaError
from wirebroker.json_file import reason, write_json_in_thread
from wirebroker.zk.sanitizer import desanitize, sanitize

if TYPE_CHECKING:
    from wirebroker.config import BrokerConfig
    from wirebroker.sasl.scram import ScramCredential
    from wirebroker.zk.delegation_tokens import ZkDelegationTokens

log = logging.getLogger(__name__)

FILE_NAME = "delegation-tokens.json"
#: Kafka's DelegationTokenManagerZk.CurrentVersion, of a token's JSON.
VERSION = 3
#: What Kafka answers in a timestamp when it refuses (DelegationTokenManager.ErrorTimestamp).
ERROR_TIMESTAMP = -1


class TokenPrincipal(str):
    """A principal (`User:<name>`, the token's owner) authenticated with a delegation token:
    Kafka's KafkaPrincipal.tokenAuthenticated. Equal to the same principal's plain string."""

    __slots__ = ()


def secret_key(config: BrokerConfig) -> str | None:
    """`delegation.token.secret.key`, else its alias; None (tokens disabled) if unset or
    empty, as Kafka's `tokenAuthEnabled`."""
    key = config.get("delegation.token.secret.key")
    if key is None:
        key = config.get("delegation.token.master.key")
    return key or None


def create_hmac(token_id: str, key: str) -> bytes:
    """Kafka's DelegationTokenManager.createHmac."""
    return hmac.new(key.encode(), token_id.encode(), hashlib.sha512).digest()


def new_token_id() -> str:
    """Kafka's CoreUtils.generateUuidAsBase64: a random UUID, URL-safe base64, no padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


@dataclass(frozen=True, slots=True)
class TokenInformation:
    token_id: str
    owner: str
    token_requester: str
    renewers: tuple[str, ...]
    issue_timestamp: int
    max_timestamp: int
    expiry_timestamp: int

    def owner_or_renewer(self, principal: str) -> bool:
        return principal == self.owner or principal in self.renewers

    def expired(self, now_ms: int) -> bool:
        return self.max_timestamp < now_ms or self.expiry_timestamp < now_ms

    def to_json(self) -> dict[str, Any]:
        """As Kafka's DelegationTokenManagerZk.toJsonCompatibleMap."""
        return {
            "version": VERSION,
            "owner": sanitize(self.owner),
            "tokenRequester": sanitize(self.token_requester),
            "renewers": [sanitize(r) for r in self.renewers],
            "issueTimestamp": self.issue_timestamp,
            "maxTimestamp": self.max_timestamp,
            "expiryTimestamp": self.expiry_timestamp,
            "tokenId": self.token_id,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> TokenInformation:
        """As Kafka's DelegationTokenManagerZk.fromBytes (before version 3, the requester is
        the owner); ValueError if it is not a token."""
        try:
            version = int(obj["version"])
            if not 0 < version <= VERSION:
                raise ValueError(f"unknown version {version}")
            owner = desanitize(obj["owner"])
            return cls(
                token_id=str(obj["tokenId"]),
                owner=owner,
                token_requester=desanitize(obj["tokenRequester"]) if version >= 3 else owner,
                renewers=tuple(desanitize(r) for r in obj["renewers"]),
                issue_timestamp=int(obj["issueTimestamp"]),
                max_timestamp=int(obj["maxTimestamp"]),
                expiry_timestamp=int(obj["expiryTimestamp"]),
            )
        except (KeyError, TypeError) as e:
            raise ValueError(f"not a delegation token: {e!r}") from None


@dataclass(slots=True)
class DelegationTokens:
    """The tokens by id, and by HMAC; saved in `path`, or in ZooKeeper once a cluster broker
    set `zk`."""

    key: str
    path: Path | None
    zk: ZkDelegationTokens | None = None
    _tokens: dict[str, TokenInformation] = field(default_factory=dict)
    _by_hmac: dict[bytes, str] = field(default_factory=dict)
    #: Each token's SCRAM credentials, by mechanism, once derived.
    _credentials: dict[str, dict[str, ScramCredential]] = field(default_factory=dict)
    #: Held from reading a token to saving its change: changes one at a time.
    lock: trio.Lock = field(default_factory=trio.Lock)

    @classmethod
    def open(cls, key: str, path: Path | None) -> DelegationTokens:
        """The tokens in `path` (read at start-up, before the loop serves anyone)."""
        tokens = cls(key, path)
        if path is not None and path.exists():
            for token_id, obj in (json.loads(path.read_text()).get("tokens") or {}).items():
                try:
                    tokens.cache(TokenInformation.from_json(obj))
                except ValueError as e:
                    log.warning("ignoring delegation token %s: %s", token_id, e)
        return tokens

    def hmac(self, token: TokenInformation) -> bytes:
        return create_hmac(token.token_id, self.key)

    def get(self, token_id: str) -> TokenInformation | None:
        return self._tokens.get(token_id)

    def for_hmac(self, token_hmac: bytes) -> TokenInformation | None:
        token_id = self._by_hmac.get(token_hmac)
        return None if token_id is None else self._tokens.get(token_id)

    def all(self) -> list[TokenInformation]:
        return list(self._tokens.values())

    def credential(self, token_id: str, mechanism: str) -> ScramCredential | None:
        """The SCRAM credential of the token for `mechanism` (Kafka's
        DelegationTokenCache.credential); None for an unknown token. Derived by `derive` in a
        worker thread; here, on the loop, only for a login that came first."""
        token = self._tokens.get(token_id)
        if token is None:
            return None
        if token_id not in self._credentials:
            self._credentials.update(_derive_credentials([(token_id, self.hmac(token))]))
        return self._credentials[token_id][mechanism]

    async def derive(self) -> None:
        """Derive the SCRAM credentials of the tokens that have none yet, in a worker thread
        (PBKDF2, 4096 iterations per mechanism: about 30 ms of CPU a token)."""
        todo = [(t, self.hmac(i)) for t, i in self._tokens.items() if t not in self._credentials]
        if todo:
            derived = await trio.to_thread.run_sync(_derive_credentials, todo)
            for token_id, credentials in derived.items():
                if token_id in self._tokens:  # not removed meanwhile
                    self._credentials.setdefault(token_id, credentials)

    def cache(self, token: TokenInformation) -> None:
        """Take a token, or its change, without saving it."""
        self._tokens[token.token_id] = token
        self._by_hmac[self.hmac(token)] = token.token_id

    def forget(self, token_id: str) -> None:
        """Drop a token from the cache without saving."""
        token = self._tokens.pop(token_id, None)
        if token is not None:
            self._by_hmac.pop(self.hmac(token), None)
            self._credentials.pop(token_id, None)

    async def update(self, token: TokenInformation) -> None:
        """Add or change a token once saved; the caller holds `lock`."""
        if self.zk is not None:
            await self.zk.put(token)
        else:
            await self._save({**self._tokens, token.token_id: token})
        self.cache(token)
        await self.derive()

    async def remove(self, token_id: str) -> None:
        """Remove a token once saved; the caller holds `lock`."""
        if self.zk is not None:
            await self.zk.delete(token_id)
        else:
            await self._save({t: i for t, i in self._tokens.items() if t != token_id})
        self.forget(token_id)

    async def _save(self, tokens: dict[str, TokenInformation]) -> None:
        assert self.path is not None
        contents = {"version": 1, "tokens": {t: i.to_json() for t, i in sorted(tokens.items())}}
        try:
            with trio.CancelScope(shield=True):  # once written, the change takes effect
                await write_json_in_thread(self.path, contents)
        except OSError as e:
            log.error(
                "cannot write the delegation tokens %s: %s; the change is refused", self.path, e
            )
            raise KafkaError(
                f"the delegation tokens could not be saved ({reason(e)}): nothing changed",
                error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
            ) from e

    async def run(self, interval_ms: int, now_ms: Callable[[], int]) -> None:
        """Derive the credentials of the tokens read at start-up, then Kafka's expireTokens
        every `interval_ms`: remove the tokens past their expiry or max timestamp."""
        await self.derive()
        while True:
            await trio.sleep(interval_ms / 1000)
            async with self.lock:
                now = now_ms()
                for token in [t for t in self._tokens.values() if t.expired(now)]:
                    log.info(
                        "Delegation token expired for token: %s for owner: %s",
                        token.token_id,
                        token.owner,
                    )
                    try:
                        await self.remove(token.token_id)
                    except KafkaError:
                        break  # logged; tried again at the next check


def _derive_credentials(tokens: list[tuple[str, bytes]]) -> dict[str, dict[str, ScramCredential]]:
    """Each token's SCRAM credentials (token id, HMAC): Kafka's DelegationTokenManager
    `prepareScramCredentials`, the HMAC in base64 as password, every mechanism's minimum
    iterations."""
    from wirebroker.sasl.scram import MIN_ITERATIONS, ScramCredential
    from wirebroker.sasl.settings import SCRAM

    return {
        token_id: {
            m: ScramCredential.from_password(
                m, base64.b64encode(token_hmac).decode(), MIN_ITERATIONS
            )
            for m in SCRAM
        }
        for token_id, token_hmac in tokens
    }
