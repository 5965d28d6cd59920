"""`wirebroker serve` freezes what its start made out of the collector's full passes (its
opened logs), then what each later creation of partitions made (a CreateTopics' logs), and a
topic deleted afterwards still gives back its files, whichever freeze took it."""

from __future__ import annotations

import os
import re
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess, serving
from tests.wirebroker.helpers import wait_until

PARTITIONS = 200
START, CREATED = "start-up state", "new partitions' state"


def _frozen(broker: BrokerProcess, what: str = START) -> int:
    """How many objects the first freeze of `what` logged (waiting for it)."""
    line = broker.wait_for_log(f"{what} (")
    assert line is not None, f"no freeze of {what} logged"
    found = re.search(rf"{what} \((\d+) objects\)", line)
    assert found is not None, line
    return int(found[1])


def _open_files(pid: int) -> list[str]:
    fds = Path(f"/proc/{pid}/fd")
    out = []
    for fd in fds.iterdir():
        try:
            out.append(os.readlink(fd))
        except OSError:
            continue  # closed meanwhile
    return out


def test_the_opened_logs_are_frozen_and_a_deleted_topic_still_gives_back_its_files(
    tmp_path: Path,
) -> None:
    broker = BrokerProcess(tmp_path)
    with serving(broker):
        empty = _frozen(broker)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("many", PARTITIONS, 1)])["many"].result(30)
        # made after the start: frozen once the CreateTopics made them
        assert _frozen(broker, CREATED) >= PARTITIONS * 30
    broker.log.clear()
    with serving(broker):
        # restarted: the 200 partitions' logs were opened before the freeze
        assert _frozen(broker) - empty >= PARTITIONS * 30
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("later", 20, 1)])["later"].result(30)
        assert _frozen(broker, CREATED) >= 20 * 30
        for future in admin.delete_topics(["many", "later"]).values():
            future.result(30)
        assert broker.proc is not None
        pid = broker.proc.pid
        deleted = ("many-", "later-")
        wait_until(lambda: not any(p.name.startswith(deleted) for p in tmp_path.iterdir()))
        # the frozen log objects do not hold the deleted files open
        wait_until(lambda: not [f for f in _open_files(pid) if "/many-" in f or "/later-" in f])
