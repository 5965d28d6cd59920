#!/usr/bin/env bash
# `make image`: build wirebroker:latest and wirebroker-kafka:3.9 locally, with no registry and no
# network access from inside any build.
#
#   bash image/build.sh              # both images (needs `make jars` for the Kafka image)
#   BASE_IMAGE=python:3.11-slim bash image/build.sh   # use a base you have instead
#
# 1. A base image: BASE_IMAGE when given, else python:3.11-slim / eclipse-temurin:17-jre when
#    they are already present locally, else wirebroker-base:bookworm, made once from Debian's
#    packages (debootstrap --variant=minbase with Python 3.11 and a JRE, then `docker import`)
#    and kept: a second run finds it by tag and skips this step.
# 2. Python wheels built on the host (`pip wheel`, into build/wheels/), so pip inside the build
#    installs with --no-index. The dependencies' wheels are rebuilt only when pyproject.toml
#    changes; the project's own wheel every time.
# 3. The host's mypyc build of the hot modules (`make setup` makes it in the venv) into
#    build/compiled/ when the host runs it, i.e. it matches these sources. The image installs it
#    only if its Python runs it too (CPython 3.11's ABI holds across patch releases; the host's
#    Debian bookworm and the image's share the C library); else the image runs them as Python.
#    The last line says which the image runs.
# 4. `docker build` of Dockerfile and image/kafka.Dockerfile, each from a context streamed by
#    tar (which follows .cache's symlink to the shared jar cache).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-.venv/bin/python}
WB_IMAGE=${WB_IMAGE:-wirebroker:latest}
KAFKA_IMAGE=${KAFKA_IMAGE:-wirebroker-kafka:3.9}
DEBIAN_BASE=wirebroker-base:bookworm
DEBIAN_SUITE=bookworm
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
DEBIAN_PACKAGES=python3,python3-venv,openjdk-17-jre-headless
KAFKA_JARS=.cache/jars/kafka

say() { echo "make image: $*" >&2; }
seconds() { echo $(($(date +%s) - $1)); }

bash image/engine.sh

have_image() { docker image inspect "$1" >/dev/null 2>&1; }

debian_base() {
    local want have tree start
    want="$DEBIAN_SUITE:$DEBIAN_PACKAGES"
    have=$(docker image inspect -f '{{index .Config.Labels "wirebroker.base"}}' "$DEBIAN_BASE" 2>/dev/null || true)
    if [ "$have" = "$want" ]; then
        return
    fi
    [ "$(id -u)" = 0 ] || { say "making $DEBIAN_BASE needs root (debootstrap); or set BASE_IMAGE"; exit 1; }
    start=$(date +%s)
    tree=$(mktemp -d /tmp/wirebroker-base.XXXXXX)
    trap 'rm -rf "$tree"' EXIT
    say "making $DEBIAN_BASE: debootstrap $DEBIAN_SUITE with $DEBIAN_PACKAGES (about a minute or two)"
    debootstrap --variant=minbase --include="$DEBIAN_PACKAGES" "$DEBIAN_SUITE" "$tree" "$DEBIAN_MIRROR" \
        >/tmp/wirebroker-debootstrap.log 2>&1 || {
        tail -n 20 /tmp/wirebroker-debootstrap.log >&2
        say "debootstrap failed (full log: /tmp/wirebroker-debootstrap.log)"
        exit 1
    }
    rm -rf "$tree"/var/cache/apt/archives/*.deb "$tree"/var/lib/apt/lists/* "$tree"/tmp/*
    tar -C "$tree" -c . | docker import \
        --change "ENV LANG=C.UTF-8" \
        --change "LABEL wirebroker.base=$want" \
        --change 'CMD ["bash"]' - "$DEBIAN_BASE" >/dev/null
    rm -rf "$tree"
    trap - EXIT
    say "made $DEBIAN_BASE in $(seconds "$start") s"
}

pick_base() { # $1: the image users' Dockerfiles default to
    if [ -n "${BASE_IMAGE:-}" ]; then
        echo "$BASE_IMAGE"
    elif have_image "$1"; then
        echo "$1"
    else
        debian_base
        echo "$DEBIAN_BASE"
    fi
}

wheels() {
    local stamp want
    mkdir -p build/wheels
    stamp=build/wheels/.deps-$(cksum pyproject.toml | cut -d' ' -f1)
    if [ ! -f "$stamp" ]; then
        say "building the dependencies' wheels on the host (pip wheel, into build/wheels/)"
        rm -f build/wheels/*.whl build/wheels/.deps-*
        # setuptools and wheel: the build backend, so pip can build the project offline.
        "$PY" -m pip wheel --quiet --disable-pip-version-check -w build/wheels \
            . 'setuptools>=69' wheel
        touch "$stamp"
    fi
    rm -f build/wheels/wirebroker-*.whl
}

compiled() { # the host's compiled build into build/compiled/ if the host runs it, else nothing
    local host
    rm -rf build/compiled
    mkdir -p build/compiled
    host=$(env -u WIREBROKER_PURE "$PY" -I -m wirebroker.compiled_build --status)
    if [[ $host == compiled* ]]; then
        cp -r "$("$PY" -c 'from wirebroker.compiled import BUILD_DIR; print(BUILD_DIR)')"/. build/compiled/
    else
        say "no compiled build to give the image: the host runs its record path as $host"
    fi
}

build() { # docker build's own output only when it fails (the legacy builder's notice is noise)
    local out
    if ! out=$(docker build -q "$@" 2>&1); then
        echo "$out" >&2
        say "docker build $* failed"
        exit 1
    fi
}

context() { # $@: paths; streams them as a build context, build/X as image/X
    tar -ch --transform 's,^build/,image/,' --exclude='__pycache__' "$@"
}

start=$(date +%s)
base=$(pick_base python:3.11-slim)
wheels
compiled
say "building $WB_IMAGE from $base"
context Dockerfile pyproject.toml README.md protocol storage wirebroker pipeline build/wheels \
    build/compiled |
    build --build-arg BASE_IMAGE="$base" --build-arg PIP_NO_INDEX=1 -t "$WB_IMAGE" -
runs=$(docker run --rm --entrypoint python "$WB_IMAGE" -I -m wirebroker.compiled_build --status)
say "built $WB_IMAGE in $(seconds "$start") s; its record path and codec primitives: $runs"
if [ -f build/compiled/manifest ] && [[ $runs != compiled* ]]; then
    say "the image's Python refused the host's compiled build: \`docker build\` of the same context says why"
fi

if ! ls "$KAFKA_JARS"/kafka_2.13-*.jar >/dev/null 2>&1; then
    say "no Kafka jars in $KAFKA_JARS: run \`make jars\` for $KAFKA_IMAGE"
    exit 1
fi
start=$(date +%s)
base=$(pick_base eclipse-temurin:17-jre)
say "building $KAFKA_IMAGE from $base"
context image/kafka.Dockerfile image/kafka-entrypoint.sh "$KAFKA_JARS" |
    build -f image/kafka.Dockerfile --build-arg BASE_IMAGE="$base" -t "$KAFKA_IMAGE" -
say "built $KAFKA_IMAGE in $(seconds "$start") s"
