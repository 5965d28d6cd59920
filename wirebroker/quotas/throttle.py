"""A request's throttle: its client quotas recorded, its response's `throttle_time_ms` (KIP-219).

The dispatcher calls :func:`request_started` before a handler (when request quotas are set) and
:func:`request_throttle` after it, which records the request time (`request_percentage`) of
every request but the exempt ones (Kafka's cluster actions, a follower's fetch, an acks=0
produce: :func:`exempt`). A `Later` whose task still works for the request (a Fetch's or a
ListOffsets by timestamp's reads in a worker thread, then the answer) counts that task's time
too: :func:`later_started`, :func:`later_answered`. A handler that records a quota of its own
reports the throttle time with :func:`throttle` (Produce: the request bytes; Fetch: the response
bytes, and the request time itself, so that a throttled fetch answers empty; CreateTopics,
CreatePartitions, DeleteTopics: controller mutations). The largest throttle time stays in
`ctx.throttle_time_ms`; the dispatcher puts it in the response (:func:`set_throttle_time`; a
`Later` answer gets it when ready) and the connection sends the answer at once and then reads
nothing more from the client for that long (Kafka mutes the channel); clients of KIP-219
versions also back off themselves.

The request time is measured by :class:`TaskTime`, an instrument of the trio run that adds up
how long each task runs; it is installed when a request quota first applies, so a broker
without request quotas pays nothing for it.
"""

from __future__ import annotations

from time import perf_counter
from typing import TYPE_CHECKING

import trio

from protocol.schema import Message
from wirebroker.quotas.client import ClientQuotaManager, session_names

if TYPE_CHECKING:
    from wirebroker.dispatch import RequestContext

PRODUCE_KEY, FETCH_KEY = 0, 1
#: Kafka's ApiKeys with clusterAction: inter-broker requests, never throttled.
CLUSTER_ACTIONS = frozenset({4, 5, 6, 7, 27, 52, 53, 54, 55, 56, 57, 58, 62, 63, 67})
#: Request time is counted in percent of a second: 100 per second of handling.
PERCENT_PER_SECOND = 100.0


class TaskTime(trio.abc.Instrument):
    """Seconds each task of the trio run has spent running (Kafka's request thread time)."""

    def __init__(self) -> None:
        self.spent: dict[trio.lowlevel.Task, float] = {}
        self._step_started = 0.0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._step_started = perf_counter()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        self.spent[task] = self.spent.get(task, 0.0) + perf_counter() - self._step_started

    def task_exited(self, task: trio.lowlevel.Task) -> None:
        self.spent.pop(task, None)

    def current(self) -> float:
        """The running time of the current task, this step included."""
        task = trio.lowlevel.current_task()
        return self.spent.get(task, 0.0) + perf_counter() - self._step_started


_TASK_TIME: trio.lowlevel.RunVar[TaskTime | None] = trio.lowlevel.RunVar("task_time", None)


def _task_time() -> TaskTime:
    instrument = _TASK_TIME.get()
    if instrument is None:
        instrument = TaskTime()
        trio.lowlevel.add_instrument(instrument)
        _TASK_TIME.set(instrument)
    return instrument


def request_started(ctx: RequestContext) -> None:
    """Note where the request's task time starts (request quotas are set)."""
    if ctx.header.request_api_key not in CLUSTER_ACTIONS:
        ctx.quota_started = _task_time().current()


def request_throttle(ctx: RequestContext) -> int:
    """Record the request's time so far against its request quota (once); its throttle."""
    started = ctx.quota_started
    if started is None:
        return 0
    ctx.quota_started = None
    seconds = _task_time().current() - started
    manager = ctx.broker.quotas.request
    user, client_id = session_names(ctx.principal, ctx.client_id)
    throttle_ms = manager.record(user, client_id, seconds * PERCENT_PER_SECOND, ctx.broker.now_ms())
    throttle(ctx, manager, throttle_ms)
    return throttle_ms


def later_started(ctx: RequestContext) -> None:
    """A `Later`'s task goes on with the request's work (a Fetch's or ListOffsets' reads in a
    worker, the answer): its time counts too, when request quotas are set."""
    if ctx.broker.quotas.request.enabled:
        request_started(ctx)


def later_answered(ctx: RequestContext, response: Message) -> None:
    """A `Later`'s answer is ready: its task's time recorded (if not yet), the response given
    the request's throttle time."""
    request_throttle(ctx)
    if ctx.throttle_time_ms:
        set_throttle_time(response, ctx.throttle_time_ms)


def record(ctx: RequestContext, manager: ClientQuotaManager, value: float) -> int:
    """Record `value` (bytes) against the client's quota of `manager`; its throttle."""
    if not manager.enabled:
        return 0
    user, client_id = session_names(ctx.principal, ctx.client_id)
    throttle_ms = manager.record(user, client_id, value, ctx.broker.now_ms())
    throttle(ctx, manager, throttle_ms)
    return throttle_ms


def exempt(ctx: RequestContext) -> None:
    """This request's time is not counted (a follower's fetch, an acks=0 produce)."""
    ctx.quota_started = None


def throttle(ctx: RequestContext, manager: ClientQuotaManager, throttle_ms: int) -> None:
    """The request is throttled `throttle_ms` for `manager`'s quota (the largest one wins)."""
    if throttle_ms <= 0:
        return
    user, client_id = session_names(ctx.principal, ctx.client_id)
    manager.throttled(user, client_id, throttle_ms, ctx.broker.now_ms())
    ctx.throttle_time_ms = max(ctx.throttle_time_ms, throttle_ms)


_HAS_THROTTLE_TIME: dict[type, bool] = {}


def set_throttle_time(response: Message, throttle_ms: int) -> None:
    """Put the throttle time in a response that has the field (the larger one stays)."""
    cls = type(response)
    has = _HAS_THROTTLE_TIME.get(cls)
    if has is None:
        has = _HAS_THROTTLE_TIME[cls] = any(f.name == "throttle_time_ms" for f in cls.FIELDS)
    if has:
        response.throttle_time_ms = max(response.throttle_time_ms, throttle_ms)  # type: ignore[attr-defined]
