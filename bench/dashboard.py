"""The Grafana dashboard checked against a real Prometheus scraping wirebroker, and its picture.

    python -m bench.dashboard [--target broker|cluster] [--minutes M] [--scrape-interval S]
                              [--picture PATH]

Starts wirebroker (`broker`: one `wirebroker serve`; `cluster`: `wirebroker cluster`, three
brokers on a ZooKeeper from the Kafka jars), each with its Prometheus endpoint, and Prometheus
(Debian's package, installed with apt-get when it is missing and this runs as root) scraping
them every `--scrape-interval` seconds as job `wirebroker`. Then a load for `--minutes`:
producers to two topics (acks=all), a consumer group that reads more slowly than they write
(so it lags), a producer held to a `producer_byte_rate` quota (so it is throttled), and every
few seconds a keyless record to a compacted topic and a fetch out of range (a failed produce
and request errors). Every target of every panel of `config/grafana/wirebroker.json`, and the
`job` variable's query, is then evaluated through Prometheus' HTTP API as Grafana would (a range
query over the load, `$job` as every job, `$__rate_interval` as four scrape intervals, Grafana's
least), and what each returned is printed; the exit status is 1 if any returned no series or
only NaN.

With `--picture`, the panels are rendered with matplotlib to that PNG, in the dashboard's
layout, with its titles, queries, legends and units: a rendering of the dashboard's panels,
not a Grafana screenshot (no registry this project uses ships Grafana).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
from bench.side_by_side.targets import free_port  # noqa: E402
from protocol.messages.alter_client_quotas import AlterClientQuotasRequest  # noqa: E402
from protocol.record_batch import SimpleRecord  # noqa: E402
from tests.wirebroker.helpers import RawClient, fetch_request, produce_request  # noqa: E402

DASHBOARD = REPO_ROOT / "config" / "grafana" / "wirebroker.json"
JOB = "wirebroker"
TOPICS = {"orders": 3, "clicks": 3}
COMPACTED = "compacted"
GROUP = "billing"
THROTTLED_CLIENT = "dashboard-throttled"
THROTTLED_BYTES_PER_S = 20_000
READY_TIMEOUT_S = 120.0


# ----------------------------------------------------------------------------- processes
def prometheus_binary() -> str:
    """Debian's Prometheus, installed first when missing (as root)."""
    found = shutil.which("prometheus")
    if found:
        return found
    if os.geteuid() != 0:
        raise SystemExit("prometheus is missing: install it (e.g. sudo apt-get install prometheus)")
    subprocess.run(["apt-get", "update", "-qq"], check=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", "prometheus"], check=True)
    found = shutil.which("prometheus")
    if found is None:
        raise SystemExit("apt-get installed prometheus, but it is not on the PATH")
    return found


@contextmanager
def process(argv: list[str], log: Path) -> Iterator[subprocess.Popen[str]]:
    """A process of its own session, output to `log`; SIGTERM (then SIGKILL) at the end."""
    with open(log, "w") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def wait_for(log: Path, pattern: str, proc: subprocess.Popen[str]) -> re.Match[str]:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        m = re.search(pattern, log.read_text(errors="replace"))
        if m:
            return m
        if proc.poll() is not None:
            raise SystemExit(f"{log.stem} exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    raise SystemExit(f"no {pattern!r} in {log} after {READY_TIMEOUT_S:.0f} s")


@dataclass
class Wirebroker:
    bootstrap: str
    metrics: list[str]  # host:port of each /metrics
    replication: int


@contextmanager
def running_wirebroker(target: str, workdir: Path) -> Iterator[Wirebroker]:
    wirebroker = [sys.executable, "-m", "wirebroker"]
    log = workdir / f"wirebroker-{target}.log"
    if target == "broker":
        argv = wirebroker + ["serve", "--log-dirs", str(workdir / "data")]
        argv += ["--listeners", "PLAINTEXT://127.0.0.1:0"]
        argv += ["--override", "wirebroker.metrics.listener=127.0.0.1:0"]
        with process(argv, log) as proc:
            metrics = wait_for(log, r"metrics endpoint on http://(\S+)/metrics", proc)[1]
            ready = wait_for(log, r"ready in \d+ ms on PLAINTEXT://(\S+) ", proc)[1]
            yield Wirebroker(ready, [metrics], 1)
        return
    argv = wirebroker + ["cluster", "--brokers", "3", "--zookeeper-port", "0", "--base-port", "0"]
    argv += ["--metrics-port", "0", "--data-dir", str(workdir / "cluster")]
    with process(argv, log) as proc:
        bootstrap = wait_for(log, r"bootstrap\.servers=(\S+)", proc)[1]
        urls = wait_for(log, r"metrics: (.+)", proc)[1].split()
        yield Wirebroker(bootstrap, [re.sub(r"^http://|/metrics$", "", u) for u in urls], 3)


@contextmanager
def running_prometheus(targets: list[str], scrape_s: float, workdir: Path) -> Iterator[str]:
    """Prometheus scraping `targets` (job `wirebroker`); its base URL."""
    config = workdir / "prometheus.yml"
    config.write_text(
        json.dumps(
            {
                "global": {"scrape_interval": f"{scrape_s:g}s", "scrape_timeout": f"{scrape_s:g}s"},
                "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": targets}]}],
            }
        )
    )
    port = free_port()  # Prometheus does not say which port it bound for :0
    argv = [
        prometheus_binary(),
        f"--config.file={config}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    argv += [f"--storage.tsdb.path={workdir / 'tsdb'}", "--log.level=info"]
    log = workdir / "prometheus.log"
    with process(argv, log) as proc:
        wait_for(log, r"Server is ready to receive web requests", proc)
        yield f"http://127.0.0.1:{port}"


# ----------------------------------------------------------------------------------- load
@dataclass
class Load:
    bootstrap: str
    replication: int
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        topics = [NewTopic(t, n, self.replication) for t, n in TOPICS.items()]
        topics.append(
            NewTopic(COMPACTED, 1, self.replication, config={"cleanup.policy": "compact"})
        )
        for future in admin.create_topics(topics).values():
            future.result(60)
        self._set_quota()
        for work in (self._produce, self._consume, self._throttled, self._mistakes):
            thread = threading.Thread(target=self._guarded, args=(work,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)
        if self.errors:
            raise SystemExit("the load failed:\n" + "\n".join(self.errors))

    def _guarded(self, work: Any) -> None:
        try:
            work()
        except Exception as e:  # reported by close()
            self.errors.append(f"{work.__name__}: {e!r}")

    def _set_quota(self) -> None:
        entity = AlterClientQuotasRequest.EntityData(
            entity_type="client-id", entity_name=THROTTLED_CLIENT
        )
        op = AlterClientQuotasRequest.OpData(key="producer_byte_rate", value=THROTTLED_BYTES_PER_S)
        request = AlterClientQuotasRequest(
            entries=[AlterClientQuotasRequest.EntryData(entity=[entity], ops=[op])]
        )
        with RawClient(self.bootstrap.split(",")[0]) as client:
            answer = client.request(request, 1)
        assert answer.entries[0].error_code == 0, answer

    def _produce(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 5})
        i = 0
        while not self.stop.is_set():
            for _ in range(100):
                producer.produce("orders", b"o" * 512, key=b"%d" % i)
                producer.produce("clicks", b"c" * 256, key=b"%d" % i)
                i += 1
            producer.poll(0)
            time.sleep(0.1)  # about 2,000 records a second
        producer.flush(30)

    def _consume(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": GROUP,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        consumer.subscribe(list(TOPICS))
        try:
            while not self.stop.is_set():
                consumer.consume(num_messages=100, timeout=1.0)
                consumer.commit(asynchronous=True)
                time.sleep(0.1)  # at most 1,000 records a second: it lags
        finally:
            consumer.close()

    def _throttled(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "client.id": THROTTLED_CLIENT})
        while not self.stop.is_set():
            try:
                producer.produce("clicks", b"t" * 1024)
            except BufferError:
                producer.poll(0.1)
            producer.poll(0)
            time.sleep(0.01)  # about 100 KB a second, five times the quota
        producer.purge()  # what the quota still holds back

    def _mistakes(self) -> None:
        """A keyless record to the compacted topic (INVALID_RECORD: a failed produce) and a
        fetch out of range, every 2 s, each to its partition's leader."""
        with (
            RawClient(self._leader(COMPACTED)) as compacted,
            RawClient(self._leader("orders")) as orders,
        ):
            while not self.stop.wait(2.0):
                keyless = produce_request(COMPACTED, 0, [SimpleRecord(None, b"v")], acks=1)
                compacted.request(keyless, 9)
                orders.request(fetch_request("orders", 0, offset=1 << 40), 12)

    def _leader(self, topic: str) -> str:
        """host:port of the leader of `topic`'s partition 0."""
        metadata = AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(topic, timeout=30)
        leader = metadata.topics[topic].partitions[0].leader
        broker = metadata.brokers[leader]
        return f"{broker.host}:{broker.port}"


# ----------------------------------------------------------------------------- evaluation
@dataclass
class Result:
    panel: dict[str, Any]
    target: dict[str, Any]
    expr: str
    series: list[dict[str, Any]]

    @property
    def empty(self) -> bool:
        return not any(
            not math.isnan(float(v)) for s in self.series for _, v in s.get("values", [])
        )


def panels() -> list[dict[str, Any]]:
    return json.loads(DASHBOARD.read_text())["panels"]


def grafana_expr(expr: str, scrape_s: float) -> str:
    """As Grafana sends it: every job, `$__rate_interval` at its least (4 scrape intervals)."""
    return expr.replace("$job", ".*").replace("$__rate_interval", f"{4 * scrape_s:g}s")


def query_range(prometheus: str, expr: str, start: float, end: float, step: float) -> Any:
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{prometheus}/api/v1/query_range?{params}", timeout=30) as r:
        answer = json.load(r)
    if answer.get("status") != "success":
        raise SystemExit(f"Prometheus refused {expr!r}: {answer}")
    return answer["data"]["result"]


def evaluate(prometheus: str, start: float, end: float, scrape_s: float) -> list[Result]:
    results = []
    for panel in panels():
        for target in panel["targets"]:
            expr = grafana_expr(target["expr"], scrape_s)
            series = query_range(prometheus, expr, start, end, scrape_s)
            results.append(Result(panel, target, expr, series))
    return results


def job_values(prometheus: str) -> list[str]:
    """The `job` variable's query, label_values(kafka_server_replicamanager_partitioncount, job)."""
    match = urllib.parse.urlencode({"match[]": "kafka_server_replicamanager_partitioncount"})
    with urllib.request.urlopen(f"{prometheus}/api/v1/label/job/values?{match}", timeout=30) as r:
        return list(json.load(r)["data"])


def report(results: list[Result], jobs: list[str]) -> bool:
    ok = jobs == [JOB]
    print(f"variable job: {jobs}{'' if ok else '  <-- expected [' + JOB + ']'}")
    for r in results:
        last = []
        for s in r.series[:4]:
            value = s["values"][-1][1] if s.get("values") else "?"
            last.append(f"{_legend(r.target, s['metric'])}={float(value):.4g}")
        more = f" (+{len(r.series) - 4})" if len(r.series) > 4 else ""
        flag = "EMPTY " if r.empty else ""
        print(
            f"{flag}{r.panel['title']} [{r.target['refId']}]: {len(r.series)} series: {', '.join(last)}{more}"
        )
        ok = ok and not r.empty
    return ok


def _legend(target: dict[str, Any], labels: dict[str, str]) -> str:
    legend = target.get("legendFormat") or ""
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m[1], ""), legend) or "value"


# -------------------------------------------------------------------------------- picture
GRID_IN = 0.8  # inches per grid column (24 across)
ROW_IN = 0.42  # inches per grid row unit
PALETTE = ["#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9", "#fade2a"]


def picture(results: list[Result], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    layout = [p["gridPos"] for p in panels()]
    rows = max(g["y"] + g["h"] for g in layout)
    width, height = 24 * GRID_IN, rows * ROW_IN + 0.9
    fig = plt.figure(figsize=(width, height), facecolor="#111217")
    fig.text(0.01, 1 - 0.35 / height, title, color="#ccccdc", fontsize=15, va="top")
    by_panel: dict[int, list[Result]] = {}
    for r in results:
        by_panel.setdefault(r.panel["id"], []).append(r)
    pad = 0.06
    for panel in panels():
        g = panel["gridPos"]
        left, top = (g["x"] * GRID_IN + pad) / width, 1 - (0.9 + g["y"] * ROW_IN + pad) / height
        w, h = (g["w"] * GRID_IN - 2 * pad) / width, (g["h"] * ROW_IN - 2 * pad) / height
        frame = fig.add_axes((left, top - h, w, h))
        frame.set_facecolor("#181b1f")
        frame.set_xticks([])
        frame.set_yticks([])
        for spine in frame.spines.values():
            spine.set_color("#2c3235")
        frame.text(
            0.01,
            0.97,
            panel["title"],
            color="#ccccdc",
            fontsize=11,
            va="top",
            transform=frame.transAxes,
            fontweight="bold",
        )
        panel_results = by_panel.get(panel["id"], [])
        unit = panel["fieldConfig"]["defaults"].get("unit", "none")
        if panel["type"] == "stat":
            _stat(frame, panel, panel_results)
            continue
        inner = fig.add_axes((left + 0.075 * w, top - h + 0.3 * h, w * 0.9, h * 0.58))
        inner.set_facecolor("#181b1f")
        inner.tick_params(colors="#9fa7b3", labelsize=8)
        for spine in inner.spines.values():
            spine.set_color("#2c3235")
        inner.grid(color="#2c3235", linewidth=0.6)
        colour = 0
        for r in panel_results:
            for s in r.series:
                points = [(datetime.fromtimestamp(t), float(v)) for t, v in s["values"]]
                if not points:
                    continue
                xs, ys = zip(*points, strict=True)
                inner.plot(
                    xs,
                    ys,
                    color=PALETTE[colour % len(PALETTE)],
                    linewidth=1.3,
                    label=_legend(r.target, s["metric"]),
                )
                colour += 1
        inner.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
        inner.yaxis.set_major_formatter(_unit_formatter(unit))
        if colour:
            inner.legend(
                loc="upper left",
                bbox_to_anchor=(0, -0.13),
                ncol=5,
                fontsize=7,
                frameon=False,
                labelcolor="#ccccdc",
                handlelength=1.2,
            )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=72, facecolor=fig.get_facecolor())
    plt.close(fig)
    print(f"wrote {path}")


def _stat(frame: Any, panel: dict[str, Any], results: list[Result]) -> None:
    values = [float(s["values"][-1][1]) for r in results for s in r.series if s.get("values")]
    value = values[-1] if values else math.nan
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    colour = steps[0]["color"]
    for step in steps[1:]:
        if value >= step["value"]:
            colour = step["color"]
    frame.set_facecolor({"green": "#37872d", "red": "#c4162a"}.get(colour, colour))
    text = "No data" if math.isnan(value) else f"{value:g}"
    frame.text(
        0.5,
        0.4,
        text,
        color="white",
        fontsize=28,
        ha="center",
        va="center",
        transform=frame.transAxes,
        fontweight="bold",
    )


def _unit_formatter(unit: str) -> Any:
    from matplotlib.ticker import FuncFormatter

    def scaled(v: float, suffixes: list[str], base: float) -> str:
        for suffix in suffixes:
            if abs(v) < base:
                return f"{v:.3g}{suffix}"
            v /= base
        return f"{v:.3g}{suffixes[-1]}"

    def fmt(v: float, _pos: int) -> str:
        if unit == "bytes":
            return scaled(v, [" B", " KiB", " MiB", " GiB"], 1024)
        if unit == "Bps":
            return scaled(v, [" B/s", " kB/s", " MB/s", " GB/s"], 1000)
        if unit == "ms":
            return f"{v:.3g} ms"
        if unit == "reqps":
            return f"{v:.3g} req/s"
        return scaled(v, ["", " K", " M", " G"], 1000)

    return FuncFormatter(fmt)


# ------------------------------------------------------------------------------------ run
def measure(
    target: str, minutes: float, scrape_s: float, picture_path: Path | None = None
) -> tuple[list[Result], list[str]]:
    """Every panel target's result over a load of `minutes`, and the `job` variable's values;
    with `picture_path`, the panels drawn there."""
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="wb-dashboard-")))
        broker = stack.enter_context(running_wirebroker(target, workdir))
        prometheus = stack.enter_context(running_prometheus(broker.metrics, scrape_s, workdir))
        load = Load(broker.bootstrap, broker.replication)
        load.start()
        start = time.time()
        print(
            f"{target}: load on {broker.bootstrap} for {minutes:g} min, Prometheus at "
            f"{prometheus}, load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        try:
            load.stop.wait(minutes * 60)
            end = time.time()
        finally:
            load.close()
        time.sleep(2 * scrape_s)  # the scrapes up to `end` have landed
        results = evaluate(prometheus, start, end, scrape_s)
        jobs = job_values(prometheus)
        print(f"load average at the end {os.getloadavg()[0]:.1f}")
        if picture_path is not None:
            picture(
                results,
                picture_path,
                "wirebroker (Kafka metrics): the panels of config/grafana/wirebroker.json, "
                f"rendered with matplotlib from Prometheus ({_TARGETS[target]}, {minutes:g} min "
                "of load); not a Grafana screenshot",
            )
        return results, jobs


_TARGETS = {"broker": "one broker", "cluster": "a 3-broker cluster"}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--target", choices=["broker", "cluster"], default="broker")
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--scrape-interval", type=float, default=5.0, metavar="SECONDS")
    parser.add_argument("--picture", type=Path, metavar="PNG")
    args = parser.parse_args()
    ok = report(*measure(args.target, args.minutes, args.scrape_interval, args.picture))
    if not ok:
        print("some panel returned nothing: see EMPTY above", file=sys.stderr)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
