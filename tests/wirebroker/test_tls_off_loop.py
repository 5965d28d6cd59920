"""A listener's TLS stores are read in worker threads at run time, never on the event loop: a
new keystore set by IncrementalAlterConfigs (read to validate it, the context made then is the
one applied), one renewed in place (read again by the next alteration) and an SSL listener added
at run time with its keystore (an in-process broker, every read of a store recorded with its
thread)."""

from __future__ import annotations

import threading
from functools import partial
from pathlib import Path

import pytest
import trio
import trustme

from protocol.errors import ErrorCode
from tests.wirebroker.helpers import BROKER, SET, alter_configs, wait_until
from tests.wirebroker.test_dynamic_configs import der, renew, renewal, served_certificate
from tests.wirebroker.test_dynamic_listeners import accepts
from wirebroker import tls
from wirebroker.config import BrokerConfig
from wirebroker.server import serve_broker
from wirebroker.zookeeper_server import free_port

pytestmark = pytest.mark.integration

TIMEOUT = 30.0


def test_stores_are_read_off_the_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca = trustme.CA()
    certs = {
        name: renewal(ca, "localhost", "127.0.0.1") for name in ("old", "new", "renewed", "added")
    }
    for name, cert in certs.items():
        cert.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / f"{name}.pem"))
    reads: list[tuple[str, int]] = []
    read = tls._read

    def recorded(settings: tls.SslSettings, key: str) -> bytes:
        reads.append((Path(settings.get(key) or "").name, threading.get_ident()))
        return read(settings, key)

    monkeypatch.setattr(tls, "_read", recorded)
    config = BrokerConfig.from_properties(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
            "log.dirs": str(tmp_path / "data"),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(tmp_path / "old.pem"),
        }
    )

    async def main() -> int:
        async with trio.open_nursery() as nursery:
            running = await nursery.start(partial(serve_broker, config))
            reads.clear()  # the start reads them before serving
            ports = {lst.name: lst.port for lst in running.listeners}
            bootstrap = f"127.0.0.1:{ports['PLAINTEXT']}"
            ssl_address = ("127.0.0.1", ports["SSL"])
            with trio.fail_after(TIMEOUT):
                new = [("listener.name.ssl.ssl.keystore.location", SET, str(tmp_path / "new.pem"))]
                done = await trio.to_thread.run_sync(alter_configs, bootstrap, BROKER, "0", new)
                assert done == (ErrorCode.NONE, None)
                served = await trio.to_thread.run_sync(served_certificate, ssl_address, ca)
                assert served == der(certs["new"])
                renewed = certs["renewed"].private_key_and_cert_chain_pem.bytes()
                await trio.to_thread.run_sync(renew, tmp_path / "new.pem", renewed)
                done = await trio.to_thread.run_sync(alter_configs, bootstrap, BROKER, "0", new)
                assert done == (ErrorCode.NONE, None)
                served = await trio.to_thread.run_sync(served_certificate, ssl_address, ca)
                assert served == der(certs["renewed"])
                port = free_port()
                added = [
                    (
                        "listeners",
                        SET,
                        f"PLAINTEXT://127.0.0.1:{ports['PLAINTEXT']},"
                        f"SSL://127.0.0.1:{ports['SSL']},ADDED://127.0.0.1:{port}",
                    ),
                    (
                        "listener.security.protocol.map",
                        SET,
                        "PLAINTEXT:PLAINTEXT,SSL:SSL,ADDED:SSL",
                    ),
                    ("listener.name.added.ssl.keystore.type", SET, "PEM"),
                    ("listener.name.added.ssl.keystore.location", SET, str(tmp_path / "added.pem")),
                ]
                done = await trio.to_thread.run_sync(alter_configs, bootstrap, BROKER, "0", added)
                assert done == (ErrorCode.NONE, None)
                await trio.to_thread.run_sync(
                    partial(wait_until, lambda: accepts(port), what="the added listener")
                )
                served = await trio.to_thread.run_sync(served_certificate, ("127.0.0.1", port), ca)
                assert served == der(certs["added"])
            nursery.cancel_scope.cancel()
        return threading.get_ident()

    loop_thread = trio.run(main)
    files = {name for name, _thread in reads}
    assert {"new.pem", "added.pem"} <= files, reads
    assert loop_thread not in {thread for _name, thread in reads}, reads
