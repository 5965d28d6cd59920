"""The Prometheus endpoint: a tiny HTTP/1.1 server on the broker's trio nursery.

`serve_metrics(broker, task_status=...)` binds `wirebroker.metrics.listener` (HOST:PORT; unset:
no endpoint, nothing listens) and answers `GET /metrics` with the text exposition format of a
registry this broker owns (`wirebroker.metrics_collector.BrokerCollector`), never
prometheus_client's global one, so several brokers in one process do not mix. It runs on the
broker's trio thread, so the collector reads the broker's state without locks, and each
connection is one request and one response (`Connection: close`). Before each scrape it asks the leaders of partitions
led elsewhere for the high watermarks consumer lag needs (`wirebroker.metrics_lag`, bounded in
time). Anything but GET or HEAD of `/metrics` is answered 404 or 405; a request that is not
HTTP, too large, or too slow is dropped.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING

import trio
from prometheus_client import CollectorRegistry, generate_latest

from wirebroker.metrics_collector import BrokerCollector
from wirebroker.metrics_lag import RemoteHighWatermarks

if TYPE_CHECKING:
    from wirebroker.broker import Broker

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MAX_REQUEST_BYTES = 16384
REQUEST_TIMEOUT_S = 10.0


async def serve_metrics(
    broker: Broker, *, task_status: trio.TaskStatus[str | None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Serve /metrics until cancelled; reports its URL (None when the endpoint is off)."""
    address = broker.config.metrics_listener()
    if address is None:
        task_status.started(None)
        return
    host, port = address
    collector = BrokerCollector(broker)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    listeners = await trio.open_tcp_listeners(port, host=host or None)
    bound_port = listeners[0].socket.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host or "0.0.0.0"
    url = f"http://{shown}:{bound_port}/metrics"
    log.info("metrics endpoint on %s", url)
    task_status.started(url)
    remote = RemoteHighWatermarks(broker)
    try:
        await trio.serve_listeners(
            partial(_serve_one, registry=registry, collector=collector, remote=remote), listeners
        )
    finally:
        with trio.CancelScope(shield=True):
            await remote.aclose()


async def _serve_one(
    stream: trio.SocketStream,
    *,
    registry: CollectorRegistry,
    collector: BrokerCollector,
    remote: RemoteHighWatermarks,
) -> None:
    try:
        with trio.move_on_after(REQUEST_TIMEOUT_S):
            head = await _read_head(stream)
            if head is not None:
                if _is_scrape(head):
                    collector.remote_high_watermarks = await remote.fetch()
                await stream.send_all(_answer(head, registry))
    except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
        pass
    except Exception:  # a bug costs this scrape only
        log.exception("metrics request failed")
    finally:
        with trio.CancelScope(shield=True):
            await stream.aclose()


async def _read_head(stream: trio.SocketStream) -> bytes | None:
    """The request line and headers, or None if the peer closed or sent too much."""
    data = bytearray()
    while b"\r\n\r\n" not in data and b"\n\n" not in data:
        if len(data) > MAX_REQUEST_BYTES:
            return None
        chunk = await stream.receive_some(4096)
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def _request_line(head: bytes) -> list[str]:
    return head.split(b"\n", 1)[0].decode("latin-1").split()


def _is_scrape(head: bytes) -> bool:
    parts = _request_line(head)
    return len(parts) == 3 and parts[0] == "GET" and parts[1].split("?", 1)[0] == "/metrics"


def _answer(head: bytes, registry: CollectorRegistry) -> bytes:
    parts = _request_line(head)
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return _response("400 Bad Request", b"bad request\n")
    method, target = parts[0], parts[1].split("?", 1)[0]
    if target != "/metrics":
        return _response("404 Not Found", b"not found: the metrics are at /metrics\n")
    if method not in ("GET", "HEAD"):
        return _response("405 Method Not Allowed", b"only GET\n", "Allow: GET, HEAD\r\n")
    body = generate_latest(registry)
    return _response("200 OK", body, content_type=CONTENT_TYPE, head_only=method == "HEAD")


def _response(
    status: str,
    body: bytes,
    extra: str = "",
    *,
    content_type: str = "text/plain; charset=utf-8",
    head_only: bool = False,
) -> bytes:
    header = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n{extra}\r\n"
    )
    return header.encode("latin-1") + (b"" if head_only else body)
