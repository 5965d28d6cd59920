"""`meta.properties` in each log dir: the cluster id and broker id, in Kafka's v0 format.

A broker refuses to start on log dirs that belong to another cluster or broker id, as Kafka
does, instead of mixing two brokers' data.
"""

from __future__ import annotations

import base64
import os
import uuid
from pathlib import Path

from wirebroker.config import ConfigError, parse_properties

FILE = "meta.properties"


def new_cluster_id() -> str:
    """A random cluster id: a uuid in URL-safe base64 without padding, as Kafka makes them."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def load_or_create_meta(dirs: list[Path], broker_id: int, configured: str | None) -> str:
    cluster_id = configured
    for d in dirs:
        path = d / FILE
        if not path.exists():
            continue
        props = parse_properties(path.read_text())
        found = props.get("cluster.id")
        if props.get("broker.id") not in (None, str(broker_id)):
            raise ConfigError(
                f"{path} belongs to broker {props.get('broker.id')}, not broker.id={broker_id}: "
                "use another log.dirs or set broker.id to match"
            )
        if cluster_id is not None and found is not None and found != cluster_id:
            raise ConfigError(
                f"{path} belongs to cluster {found}, not {cluster_id}: use another log.dirs"
            )
        cluster_id = cluster_id or found
    cluster_id = cluster_id or new_cluster_id()
    for d in dirs:
        path = d / FILE
        if path.exists():
            continue
        tmp = path.with_suffix(".tmp")
        tmp.write_text(f"#\nversion=0\nbroker.id={broker_id}\ncluster.id={cluster_id}\n")
        os.replace(tmp, path)
    return cluster_id


def read_meta_cluster_id(dirs: list[Path]) -> str | None:
    """The cluster id recorded in the log dirs' meta.properties, if any has one."""
    for d in dirs:
        path = d / FILE
        if path.exists():
            found = parse_properties(path.read_text()).get("cluster.id")
            if found:
                return found
    return None
