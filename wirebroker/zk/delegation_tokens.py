"""Delegation tokens in ZooKeeper, as Kafka 3.9's DelegationTokenManagerZk and KafkaZkClient
keep them: each token in `/delegation_token/tokens/<id>` (its JSON,
`TokenInformation.to_json`), and every change, this broker's too, announced by a sequential
`/delegation_token/token_changes/token_change_<seq>` znode holding the token's id. Every broker
follows the announcements and reads the token again (gone: removed from its cache), so each
broker's cache (`wirebroker.sasl.delegation_tokens.DelegationTokens`) holds every token, and a
token created on one broker authenticates on all. Announcements older than 15 minutes are
deleted as they are processed (`wirebroker.zk.change_notifications`), as Kafka does.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager

from protocol.errors import ErrorCode, KafkaError
from wirebroker.sasl.delegation_tokens import DelegationTokens, TokenInformation
from wirebroker.zk.change_notifications import purge_obsolete
from wirebroker.zk.client import NoNodeError, ZkClient, ZookeeperError
from wirebroker.zk.znodes import DELEGATION_TOKENS, sequence_number

log = logging.getLogger(__name__)

TOKEN_CHANGES = "/delegation_token/token_changes"
CHANGE_PREFIX = "token_change_"


class ZkDelegationTokens:
    """Where a cluster broker's `DelegationTokens` are saved, and how it follows the others'."""

    def __init__(self, zk: ZkClient, tokens: DelegationTokens) -> None:
        self.zk = zk
        self.tokens = tokens
        self._last_change = -1

    async def start(self) -> None:
        """Kafka's startup: create the paths, load every token, follow the announcements."""
        await self.zk.ensure_path(DELEGATION_TOKENS)
        await self.zk.ensure_path(TOKEN_CHANGES)
        for token_id in await self.zk.get_children(DELEGATION_TOKENS) or []:
            await self._refresh(token_id)
        log.info("Loaded the token cache: %d tokens", len(self.tokens.all()))
        await self.process_changes()

    async def put(self, token: TokenInformation) -> None:
        """Kafka's setOrCreateDelegationToken, then the announcement (KafkaError
        UNKNOWN_SERVER_ERROR if ZooKeeper fails, as Kafka answers)."""
        path = f"{DELEGATION_TOKENS}/{token.token_id}"
        data = json.dumps(token.to_json()).encode()
        with _failed_write(token.token_id):
            try:
                await self.zk.set(path, data)
            except NoNodeError:
                await self.zk.create(path, data, makepath=True)
            await self._announce(token.token_id)

    async def delete(self, token_id: str) -> None:
        with _failed_write(token_id):
            await self.zk.delete(f"{DELEGATION_TOKENS}/{token_id}")
            await self._announce(token_id)

    async def _announce(self, token_id: str) -> None:
        await self.zk.create(f"{TOKEN_CHANGES}/{CHANGE_PREFIX}", token_id.encode(), sequence=True)

    async def process_changes(self) -> None:
        """Read again each token an announcement since the last one names (and watch for the
        next); delete the announcements older than 15 minutes."""
        changes = sorted(
            await self.zk.get_children(TOKEN_CHANGES, watch=True) or [], key=sequence_number
        )
        for child in changes:
            seq = sequence_number(child)
            if seq <= self._last_change:
                continue
            self._last_change = seq
            got = await self.zk.get(f"{TOKEN_CHANGES}/{child}")
            if got is not None:
                await self._refresh(got[0].decode())
        await purge_obsolete(self.zk, TOKEN_CHANGES, changes)

    async def _refresh(self, token_id: str) -> None:
        got = await self.zk.get(f"{DELEGATION_TOKENS}/{token_id}")
        if got is None:
            self.tokens.forget(token_id)
            return
        try:
            self.tokens.cache(TokenInformation.from_json(json.loads(got[0])))
        except ValueError as e:
            log.warning("ignoring delegation token %s: %s", token_id, e)
            return
        await self.tokens.derive()


@contextmanager
def _failed_write(token_id: str) -> Iterator[None]:
    try:
        yield
    except ZookeeperError as e:
        log.error("cannot write delegation token %s to ZooKeeper: %r", token_id, e)
        raise KafkaError(
            "the delegation token could not be saved in ZooKeeper",
            error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
        ) from e
