# wirebroker in a container. `make image` builds it with no network (see image/build.sh): its base
# from Debian's packages unless python:3.11-slim is at hand, and pip installing from wheels built
# on the host. Without make: `docker build -t wirebroker .` (pip then uses PyPI), and
# `docker run -p 9092:9092 wirebroker serve --listeners=PLAINTEXT://0.0.0.0:9092 --advertised-listeners=PLAINTEXT://localhost:9092`
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}
# PIP_NO_INDEX=1 (make image): install only from image/wheels/, which make image fills.
ARG PIP_NO_INDEX=
COPY image/wheels/ /tmp/wheels/
COPY pyproject.toml README.md /src/
COPY protocol /src/protocol
COPY storage /src/storage
COPY wirebroker /src/wirebroker
COPY pipeline /src/pipeline
RUN python3 -m venv /opt/wirebroker \
    && PIP_NO_INDEX=${PIP_NO_INDEX} /opt/wirebroker/bin/pip install --no-cache-dir \
        --disable-pip-version-check --find-links /tmp/wheels /src \
    && rm -rf /src /tmp/wheels
ENV PATH=/opt/wirebroker/bin:$PATH
VOLUME /data
EXPOSE 9092
ENTRYPOINT ["wirebroker"]
CMD ["serve", "--listeners=PLAINTEXT://0.0.0.0:9092", "--log-dirs=/data"]
