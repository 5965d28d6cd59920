"""A real wirebroker process for integration tests: start, stop cleanly, kill -9, restart.

The broker is started as `python -m wirebroker serve` on a free port chosen by the OS; the
bound port is read from its "ready" log line, so tests never race for ports and never sleep.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

READY = re.compile(r"ready in \d+ ms on (?P<listeners>\S+://.*) \(cluster")
LISTENER = re.compile(r"(?P<name>\w+)://(?P<host>[^:,\s]+):(?P<port>\d+)")


class BrokerProcess:
    """One broker process with its data in `data_dir` (kept across restarts)."""

    def __init__(
        self,
        data_dir: Path,
        properties: dict[str, str] | None = None,
        extra_listeners: tuple[str, ...] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        """`properties` may name `listeners` (ports 0: chosen by the OS); the default is one
        PLAINTEXT listener plus `extra_listeners`. `port` is the first listener's, `ports` each
        listener's by name. `env` is set in the process's environment (e.g. `KAFKA_OPTS`)."""
        self.data_dir = data_dir
        self.properties = dict(properties or {})
        #: Listener names served beside PLAINTEXT (e.g. "SSL"), each on 127.0.0.1.
        self.extra_listeners = extra_listeners
        self.env = dict(env or {})
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0
        self.ports: dict[str, int] = {}  # every listener's bound port
        self.log: list[str] = []
        self._logged = threading.Condition()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> None:
        listeners = self.properties.get(
            "listeners",
            ",".join(
                [f"PLAINTEXT://127.0.0.1:{self.port}"]
                + [f"{name}://127.0.0.1:0" for name in self.extra_listeners]
            ),
        )
        if self.ports:  # a restart binds the same ports again
            listeners = ",".join(f"{n}://127.0.0.1:{p}" for n, p in self.ports.items())
        cmd = [sys.executable, "-m", "wirebroker", "serve", "--listeners", listeners]
        cmd += ["--log-dirs", str(self.data_dir)]
        for key, value in self.properties.items():
            if key != "listeners":  # given above, with the bound ports on a restart
                cmd += ["--override", f"{key}={value}"]
        self.proc = subprocess.Popen(
            cmd,
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            bufsize=1,
            env={**os.environ, **self.env},
        )
        settled = threading.Event()  # the ready line came, or the error output closed
        ready = False
        stderr = self.proc.stderr
        assert stderr is not None

        def pump() -> None:
            nonlocal ready
            for line in stderr:
                with self._logged:
                    self.log.append(line.rstrip())
                    self._logged.notify_all()
                m = READY.search(line)
                if m:
                    self.ports = {
                        e["name"]: int(e["port"]) for e in LISTENER.finditer(m["listeners"])
                    }
                    self.port = next(iter(self.ports.values()))
                    ready = True
                    settled.set()
            settled.set()

        threading.Thread(target=pump, daemon=True).start()
        # A broker refusing its config closes its error output before its exit shows: only
        # the ready line means started.
        if not settled.wait(timeout) or not ready or self.proc.poll() is not None:
            self.kill()
            raise RuntimeError("wirebroker did not start:\n" + "\n".join(self.log[-30:]))

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait: a clean shutdown."""
        if self.proc is None:
            return 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.proc = None
        return code

    def kill(self) -> None:
        """kill -9: an unclean stop."""
        if self.proc is None:
            return
        self.proc.kill()
        self.proc.wait()
        self.proc = None

    def wait_for_log(self, text: str, timeout: float = 10.0, since: int = 0) -> str | None:
        """The first log line containing `text` (from line `since` on), waiting up to `timeout` s."""

        def found() -> str | None:
            return next((line for line in self.log[since:] if text in line), None)

        with self._logged:
            self._logged.wait_for(found, timeout)
            return found()

    def restart(self, *, clean: bool = True) -> None:
        if clean:
            self.stop()
        else:
            self.kill()
        self.start()

    def tracebacks(self) -> list[str]:
        """Log lines that open a traceback: a bug the broker caught and logged."""
        return [line for line in self.log if line.startswith("Traceback")]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@contextmanager
def serving(process: BrokerProcess, log_tail: int = 60) -> Iterator[BrokerProcess]:
    """Start `process` and stop it cleanly at the end; then fail if it died meanwhile, exited
    uncleanly or logged a traceback (a handler bug answered as UNKNOWN_SERVER_ERROR would
    otherwise go unnoticed). A failure of the body carries the tail of the broker's log (what
    it did, up to its stop) as a note."""
    process.start()
    failure: BaseException | None = None
    try:
        yield process
    except BaseException as e:
        failure = e
        raise
    finally:
        alive = process.alive()
        code = process.stop()
        tail = "\n".join(process.log[-log_tail:])
        if failure is not None:
            failure.add_note(f"the broker's log, its last {log_tail} lines:\n{tail}")
    assert alive, f"the broker died:\n{tail}"
    assert code == 0, f"the broker exited with {code}:\n{tail}"
    assert not process.tracebacks(), "the broker logged tracebacks:\n" + "\n".join(process.log)


@contextmanager
def broker_process(
    data_dir: Path, properties: dict[str, str] | None = None
) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(data_dir, properties)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
