# wirebroker in a container. `make image` builds it with no network (see image/build.sh): its base
# from Debian's packages unless python:3.11-slim is at hand, pip installing from wheels built on
# the host, and the host's mypyc build of the hot modules (wirebroker/compiled.py), taken only if
# it matches the installed sources and this Python runs it. Without make: `docker build -t
# wirebroker .` (pip then uses PyPI, and those modules run as Python), and
# `docker run -p 9092:9092 wirebroker serve --listeners=PLAINTEXT://0.0.0.0:9092 --advertised-listeners=PLAINTEXT://localhost:9092`
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}
# PIP_NO_INDEX=1 (make image): install only from image/wheels/, which make image fills.
ARG PIP_NO_INDEX=
COPY image/wheels/ /tmp/wheels/
# The host's compiled build (make image), else only a README.
COPY image/compiled/ /tmp/compiled/
COPY pyproject.toml README.md /src/
COPY protocol /src/protocol
COPY storage /src/storage
COPY wirebroker /src/wirebroker
COPY pipeline /src/pipeline
RUN python3 -m venv /opt/wirebroker \
    && PIP_NO_INDEX=${PIP_NO_INDEX} /opt/wirebroker/bin/pip install --no-cache-dir \
        --disable-pip-version-check --find-links /tmp/wheels /src \
    && /opt/wirebroker/bin/python -I -m wirebroker.compiled_build --prebuilt /tmp/compiled \
    && rm -rf /src /tmp/wheels /tmp/compiled
ENV PATH=/opt/wirebroker/bin:$PATH
VOLUME /data
EXPOSE 9092
ENTRYPOINT ["wirebroker"]
CMD ["serve", "--listeners=PLAINTEXT://0.0.0.0:9092", "--log-dirs=/data"]
