#!/usr/bin/env bash
# Make sure a Docker engine answers, for `make image`, the container tests and CI.
#
#   bash image/engine.sh            # exit 0 when `docker info` works, else say what is missing
#
# As root on a machine without an engine it installs what is missing from Debian's packages
# (docker.io brings dockerd, containerd and runc; docker-compose; debootstrap for the base image)
# and starts dockerd in the background (log: /var/log/wirebroker-dockerd.log). It never pulls
# anything: no image registry is needed, `make image` builds every image locally.
# Not root and no engine: it prints what to install or start, and exits 1.
set -euo pipefail

log=/var/log/wirebroker-dockerd.log
need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v docker-compose >/dev/null || docker compose version >/dev/null 2>&1 || need+=(docker-compose)
command -v debootstrap >/dev/null || need+=(debootstrap)

if [ "${#need[@]}" -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "image/engine.sh: missing ${need[*]}: install them (sudo apt-get install ${need[*]})" >&2
        docker info >/dev/null 2>&1 && exit 0
        exit 1
    fi
    echo "image/engine.sh: installing ${need[*]} from Debian's packages" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

if docker info >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "image/engine.sh: no Docker engine answers on ${DOCKER_HOST:-/var/run/docker.sock}:" \
        "start one (sudo dockerd, or sudo systemctl start docker) or run as root" >&2
    exit 1
fi
echo "image/engine.sh: starting dockerd (log: $log)" >&2
# setsid: the engine outlives this script and the make that ran it, as a service would.
setsid dockerd >>"$log" 2>&1 </dev/null &
for _ in $(seq 1 120); do
    docker info >/dev/null 2>&1 && exit 0
    sleep 0.5
done
echo "image/engine.sh: dockerd did not answer within 60 s; its log says:" >&2
tail -n 20 "$log" >&2
exit 1
