"""The Grafana dashboard (config/grafana/wirebroker.json) against a real Prometheus (Debian's
package, which `make tools` installs): a broker under a short load, scraped every second, and
every panel's queries evaluated through Prometheus' HTTP API as Grafana sends them must return
data. `make dashboard-check` runs the same for minutes, on a 3-broker cluster too."""

from __future__ import annotations

import shutil

import pytest

from bench.dashboard import JOB, measure, panels

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


@pytest.mark.skipif(
    shutil.which("prometheus") is None, reason="no prometheus: `make tools` installs it"
)
def test_every_panel_returns_data() -> None:
    results, jobs = measure("broker", minutes=0.5, scrape_s=1.0)
    assert jobs == [JOB]
    assert {r.panel["id"] for r in results} == {p["id"] for p in panels()}
    empty = [f"{r.panel['title']} [{r.target['refId']}]: {r.expr}" for r in results if r.empty]
    assert not empty, "\n".join(empty)
