"""`wirebroker serve` freezes what its start made out of the collector's full passes (its
opened logs), and a topic deleted afterwards still gives back its files."""

from __future__ import annotations

import os
import re
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess, serving
from tests.wirebroker.helpers import wait_until

PARTITIONS = 200
FROZEN = re.compile(r"start-up state \((\d+) objects\)")


def _frozen(broker: BrokerProcess) -> int:
    line = broker.wait_for_log("start-up state (")
    assert line is not None, "no start-up freeze logged"
    found = FROZEN.search(line)
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
    broker.log.clear()
    with serving(broker):
        # restarted: the 200 partitions' logs were opened before the freeze
        assert _frozen(broker) - empty >= PARTITIONS * 30
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.delete_topics(["many"])["many"].result(30)
        assert broker.proc is not None
        pid = broker.proc.pid
        wait_until(lambda: not any(p.name.startswith("many-") for p in tmp_path.iterdir()))
        # the frozen log objects do not hold the deleted files open
        wait_until(lambda: not [f for f in _open_files(pid) if "/many-" in f])
