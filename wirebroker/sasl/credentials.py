"""The broker's SCRAM credentials, per user and mechanism.

The embedded broker keeps them in `scram-credentials.json` in its first log dir, in the shape of
Kafka's ZooKeeper `/config/users/<name>` config (`{"version":1,"users":{name:{"SCRAM-SHA-512":
"salt=...,stored_key=...,server_key=...,iterations=4096"}}}`), written atomically (temporary
file, fsync, rename) in a worker thread. A change is saved first and takes effect only once the
file holds it, one change at a time (`lock`): a change whose write failed (a full disk) is
answered with an error and is in effect neither now nor after a restart. (Except a failure after
the rename, an EIO from the directory's fsync: the new file may stay, and be read at a restart,
unless a later change's write, of what is in effect, replaces it first.) In a cluster they live in
ZooKeeper instead (see `wirebroker.zk.member`), and this store is the broker's cache of them.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from protocol.errors import ErrorCode, KafkaError
from wirebroker.json_file import reason, write_json_in_thread
from wirebroker.sasl.settings import SCRAM

if TYPE_CHECKING:
    from wirebroker.sasl.scram import ScramCredential

log = logging.getLogger(__name__)

FILE_NAME = "scram-credentials.json"


def with_scram_credentials(
    config: dict[str, str], credentials: dict[str, ScramCredential]
) -> dict[str, str]:
    """A user's Kafka config with its SCRAM entries replaced by `credentials` (its other keys,
    quotas, kept), as Kafka's AdminZkClient writes `/config/users/<user>`."""
    kept = {k: v for k, v in config.items() if k not in SCRAM}
    return kept | {m: c.to_kafka_string() for m, c in credentials.items()}


class ScramCredentialStore:
    """Credentials by user, then mechanism; `path` None keeps them in memory only (a cluster)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._users: dict[str, dict[str, ScramCredential]] = {}
        #: Held from reading a user's credentials to change them until `set_user` returns,
        #: so changes are made, and written, one at a time, each from the one before.
        self.lock = trio.Lock()
        if path is not None and path.exists():
            obj = json.loads(path.read_text())
            for user, config in (obj.get("users") or {}).items():
                self.cache_user_config(user, config)

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def user(self, user: str) -> dict[str, ScramCredential]:
        return dict(self._users.get(user, {}))

    def users(self) -> list[str]:
        return sorted(self._users)

    async def set_user(self, user: str, credentials: dict[str, ScramCredential]) -> None:
        """Replace the user's credentials (none: forget the user) once saved; the caller holds
        `lock`. KafkaError UNKNOWN_SERVER_ERROR (as Kafka answers a failed ZooKeeper write) if
        the file cannot be written: then nothing changed."""
        if self.path is not None:
            users = {u: c for u, c in self._users.items() if u != user}
            if credentials:
                users[user] = credentials
            try:
                with trio.CancelScope(shield=True):  # once written, the change takes effect
                    await write_json_in_thread(self.path, _file_contents(users))
            except OSError as e:
                log.error(
                    "cannot write the SCRAM credentials %s: %s; the change of user %s's "
                    "credentials is refused",
                    self.path,
                    e,
                    user,
                )
                raise KafkaError(
                    f"the SCRAM credentials could not be saved ({reason(e)}): nothing changed",
                    error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
                ) from e
        if credentials:
            self._users[user] = dict(credentials)
        else:
            self._users.pop(user, None)

    def cache_user_config(self, user: str, config: dict[str, str]) -> None:
        """Take the user's SCRAM entries from a Kafka user config (its other keys are quotas),
        without saving: the config came from where it is kept. SCRAM's module is imported by
        the first credential (start-up time, docs/perf-notes.md)."""
        credentials = {}
        for mechanism, text in config.items():
            if mechanism in SCRAM:
                from wirebroker.sasl.scram import ScramCredential

                try:
                    credentials[mechanism] = ScramCredential.from_kafka_string(text)
                except ValueError as e:
                    log.warning("ignoring the %s credential of user %s: %s", mechanism, user, e)
        if credentials:
            self._users[user] = credentials
        else:
            self._users.pop(user, None)


def _file_contents(users: dict[str, dict[str, ScramCredential]]) -> dict[str, object]:
    """The file's contents (copies: the loop may change the store while a thread writes)."""
    return {
        "version": 1,
        "users": {
            user: {m: c.to_kafka_string() for m, c in creds.items()}
            for user, creds in sorted(users.items())
        },
    }
