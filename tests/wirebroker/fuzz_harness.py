"""The live-broker request fuzz's harness, shared by its modules (`test_request_fuzz.py`: a
standalone broker; `test_cluster_member_fuzz.py`: a cluster member fed by a fake controller;
`test_auth_fuzz.py`: the authentication of SASL and TLS listeners).

It owns what says a bug happened and the checks of one exchange: the log records as they are
made (`recording`, `Records.bugs`: a secret the fuzz planted found in one is a bug too), a
fuzzed request sent on a new connection and its answer checked (`Fuzzed.exchange`), the
broker's health after it (`Fuzzed.check_health`, then the module's `Fuzzed.restore`), and
hypothesis's loop over one API's versions (`fuzz_versions`, with the fuzz's `fuzz_settings`).
What the requests are made of is `tests.wirebroker.fuzz_values`'.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.api import decode_response
from protocol.errors import EncodeError, ErrorCode
from protocol.messages import APIS
from protocol.messages.api_versions import ApiVersionsRequest
from protocol.messages.metadata import MetadataRequest, MetadataResponse
from protocol.messages.produce import ProduceRequest
from protocol.schema import Message
from tests.protocol.strategies import Scalars, messages
from tests.wirebroker.helpers import RawClient, wait_until
from wirebroker import dispatch
from wirebroker.dispatch import VERSIONS

#: How long an answer may take: the fuzz's waits (timeouts, max_wait_ms) are at most 500 ms.
ANSWER_TIMEOUT = 10.0
HEALTH_VERSIONS = ApiVersionsRequest(client_software_name="fuzz", client_software_version="1")
CLIENT_IDS = st.sampled_from([None, "", "fuzz", "a" * 300])

_FORMAT = logging.Formatter("%(levelname)s %(name)s: %(message)s")  # with its traceback


class Records(logging.Handler):
    """Every log record at WARNING and above, and the dispatcher's at INFO (where a handler's
    KafkaError is told), as it is made; every broker record, DEBUG too, while secrets are
    watched."""

    def __init__(self, expected: Iterable[str] = (), secrets: Iterable[str] = ()) -> None:
        #: Strings no record may hold (passwords, proofs, tokens the fuzz sent): the fuzz adds
        #: those it makes as it goes.
        self.secrets = list(secrets)
        super().__init__(logging.DEBUG if self.secrets else logging.INFO)
        self.records: list[logging.LogRecord] = []
        #: Patterns of the errors a fuzzed request deliberately provokes, logged at ERROR as
        #: Kafka logs them (no traceback): not bugs.
        self.expected = [re.compile(e) for e in expected]

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def bugs(self, since: int) -> list[str]:
        """Records since `since` that say the broker met a bug: a traceback, an unexpected
        error, anything at ERROR, a handler failing to encode its own answer (an EncodeError
        is a KafkaError, so the dispatcher answers it as a refusal), a secret told."""
        found = []
        for r in self.records[since:]:
            text = _FORMAT.format(r)
            if (
                r.exc_info
                or (
                    r.levelno >= logging.ERROR
                    and not any(e.search(r.getMessage()) for e in self.expected)
                )
                or "unexpected error" in r.getMessage()
                or any(isinstance(a, EncodeError) for a in r.args or ())
                or any(s in text for s in self.secrets)
            ):
                found.append(text)
        return found

    def closed_deliberately(self, since: int) -> bool:
        return any(
            r.getMessage().startswith("closing connection from") for r in self.records[since:]
        )


@contextmanager
def recording(expected: Iterable[str] = (), secrets: Iterable[str] = ()) -> Iterator[Records]:
    """The records of every logger, the dispatcher's from INFO (with `secrets`, the broker's
    from DEBUG: a secret must not be in any) while in the block (a broker run with
    `wirebroker.embed.run_broker` inside it logs in this process); at its end, none may tell
    a bug (`Records.bugs`; `expected`: its patterns of deliberate errors)."""
    records = Records(expected, secrets)
    root = logging.getLogger()
    told = logging.getLogger(dispatch.__name__ if not records.secrets else "wirebroker")
    root.addHandler(records)
    level = told.level
    told.setLevel(logging.DEBUG if records.secrets else logging.INFO)
    try:
        yield records
        assert not records.bugs(0), "\n".join(records.bugs(0))
    finally:
        told.setLevel(level)
        root.removeHandler(records)


def metadata_of(topics: list[str]) -> MetadataRequest:
    return MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
        allow_auto_topic_creation=False,
    )


class Fuzzed:
    """A fuzzed broker: the values its requests are drawn from, and the checks of each
    exchange. A module shapes its requests (`shape`) and puts back what the fuzz may have
    undone (`restore`)."""

    def __init__(self, bootstrap: str, records: Records, values: Scalars, topics: list[str]):
        self.bootstrap = bootstrap
        self.records = records
        self.values = values
        #: The topics the health check asks Metadata of.
        self.topics = topics
        self._requests: dict[tuple[int, int], st.SearchStrategy[Any]] = {}

    def requests(self, api_key: int, version: int) -> st.SearchStrategy[Any]:
        key = (api_key, version)
        if key not in self._requests:
            cls = APIS[api_key].request_class()
            self._requests[key] = self.shape(cls, messages(cls, version, self.values))
        return self._requests[key]

    def shape(self, cls: type[Message], requests: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        """`requests` of `cls` as the module sends them (all of them here)."""
        return requests

    def restore(self, body: Message, metadata: MetadataResponse) -> None:
        """Put back what `body` may have undone of the module's state (nothing here)."""

    def exchange(self, body: Message, version: int, client_id: str | None) -> None:
        """Send `body` on a new connection; check its answer, the log and the broker's health."""
        since = len(self.records.records)
        api_key, asked = body.API_KEY, version
        with RawClient(self.bootstrap, client_id=client_id, timeout=ANSWER_TIMEOUT) as c:
            correlation_id = c.send(body, version)
            if isinstance(body, ProduceRequest) and body.acks == 0:
                # Not answered: the next request is, unless the produce failed (then closed).
                api_key, asked = ApiVersionsRequest.API_KEY, 0
                correlation_id = c.send(ApiVersionsRequest(), asked)
            try:
                frame = c.receive_frame()
            except ConnectionError:
                wait_until(  # logged before the close: a short wait keeps shrinking short
                    lambda: self.records.closed_deliberately(since),
                    timeout=2,
                    what="a warning saying why the connection was closed",
                )
            else:
                answer = decode_response(frame, api_key, asked)
                assert answer.header.correlation_id == correlation_id
        assert not self.records.bugs(since), "\n".join(self.records.bugs(since))
        self.restore(body, self.check_health())
        assert not self.records.bugs(since), "\n".join(self.records.bugs(since))

    def check_health(self) -> MetadataResponse:
        """ApiVersions and Metadata (of `topics`) answered on a fresh connection."""
        with RawClient(self.bootstrap, timeout=ANSWER_TIMEOUT) as c:
            versions = c.request(HEALTH_VERSIONS, 3)
            assert versions.error_code == ErrorCode.NONE
            metadata: MetadataResponse = c.request(metadata_of(self.topics), 12)
        return metadata


def fuzz_settings(examples: int) -> settings:
    """Hypothesis's settings of a live-broker fuzz: `examples` of them, however long each takes
    (an exchange and the health check after it are slow, their draws large)."""
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def fuzz_versions(fuzzed: Fuzzed, api_key: int, examples: int) -> None:
    """`examples` requests of `api_key`, of every version the broker handles, each exchanged
    (`Fuzzed.exchange`); hypothesis shrinks a failing one."""
    lo, hi = VERSIONS[api_key]

    @fuzz_settings(examples)
    @given(data=st.data())
    def fuzz(data: st.DataObject) -> None:
        version = data.draw(st.integers(lo, hi), label="version")
        body = data.draw(fuzzed.requests(api_key, version), label="request")
        fuzzed.exchange(body, version, data.draw(CLIENT_IDS, label="client_id"))

    fuzz()
