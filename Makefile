# wirebroker's commands. `make serve` and `make test` set everything up on first use.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
SPECS  ?= ../shared/kafka-3.9-message-specs
# test workers (pytest-xdist): a test spends most of its time waiting on brokers and clients,
# so two workers use both cores of a two-core machine; TEST_WORKERS=0 runs the suite in one
TEST_WORKERS ?= 2
# The venv is rebuilt when pyproject.toml changes.
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: setup kerberos serve cluster test check generate bench bench-codec bench-storage bench-broker bench-groups bench-idempotence bench-tls soak pipeline compat jars golden tools image suites dashboard-check dashboard-picture clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test,dev,bench,testcontainers]'
	@rm -f $(VENV)/.installed-*
	@touch $@

# The hot modules compiled with mypyc into $(VENV)/compiled (rebuilt when a source changed): a build
# that fails says why and leaves them Python, which the tests refuse; WIREBROKER_PURE=1 runs them
# as Python deliberately: wirebroker/compiled.py.
setup: $(STAMP)
	@$(PY) -m wirebroker.compiled_build

# MIT Kerberos for GSSAPI listeners and their tests: a KDC (krb5kdc, kdb5_util, kadmin.local),
# libkrb5-dev to build the gssapi extra, and Cyrus SASL's GSSAPI module for kcat/librdkafka
# (Debian's packages, installed when root); then the extra into the venv.
KRB5_PACKAGES := krb5-kdc krb5-admin-server krb5-user libkrb5-dev libsasl2-modules-gssapi-mit
kerberos: $(STAMP)
	@{ test -x /usr/sbin/krb5kdc && command -v krb5-config && command -v kinit && \
	   ls /usr/lib/*/sasl2/libgssapiv2.so; } >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(KRB5_PACKAGES) >/dev/null; \
	  else echo "MIT Kerberos is missing (sudo apt-get install $(KRB5_PACKAGES)): GSSAPI is not installed and its tests are skipped"; fi; }
	@$(PY) -c 'import gssapi' 2>/dev/null || ! command -v krb5-config >/dev/null || \
	  $(PY) -m pip install --quiet --disable-pip-version-check -e '.[gssapi]'

## serve: one broker on 127.0.0.1:9092 with its data in ./data, Prometheus metrics on 127.0.0.1:9404/metrics (Ctrl-C stops it cleanly)
serve: setup
	$(VENV)/bin/wirebroker serve --listeners PLAINTEXT://127.0.0.1:9092 --log-dirs ./data \
	  --override wirebroker.metrics.listener=127.0.0.1:9404

## cluster: ZooKeeper + 3 brokers on 127.0.0.1:9092-9094, metrics on :9404-9406, data in ./data/cluster (Ctrl-C stops all)
cluster: setup jars
	$(VENV)/bin/wirebroker cluster --brokers 3 --metrics-port 9404

## test: set up everything the suite needs (venv, Kafka jars, kcat) and run the whole suite on TEST_WORKERS=2 workers, listing its 30 slowest tests (CI's 45 minutes)
test: setup jars tools
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --durations=30

## tools: command-line clients the tests drive (kcat), Prometheus for the dashboard's test, MIT Kerberos for the GSSAPI tests (Debian's packages)
tools: kerberos
	@command -v kcat >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq kcat >/dev/null; \
	  else echo "kcat is missing: install it (e.g. sudo apt-get install kcat)"; exit 1; fi; }
	@command -v prometheus >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq prometheus >/dev/null; \
	  else echo "prometheus is missing (sudo apt-get install prometheus): the dashboard's test is skipped"; fi; }

## dashboard-check: Prometheus scrapes one broker, then a 3-broker cluster, each under 3 minutes of load; fails if a panel of config/grafana/wirebroker.json returns nothing
dashboard-check: setup jars
	$(PY) -m bench.dashboard --target broker
	$(PY) -m bench.dashboard --target cluster

## dashboard-picture: docs/dashboard.png, the dashboard's panels drawn with matplotlib from Prometheus scraping a 3-broker cluster under load (not a Grafana screenshot)
dashboard-picture: setup jars
	$(PY) -m bench.dashboard --target cluster --picture docs/dashboard.png

## check: format, lint, types, the import direction and the codegen freshness check
check: setup
	$(PY) -m ruff format --check .
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(VENV)/bin/lint-imports
	@if [ -d "$(SPECS)/clients" ]; then $(PY) -m protocol._codegen --specs $(SPECS) --check; \
	else echo "skipping the codegen freshness check: no specs at $(SPECS)"; fi

## generate: regenerate protocol/messages/ from the Kafka 3.9 message specs
generate: setup
	$(PY) -m protocol._codegen --specs $(SPECS)

## compat: the same scenarios on real Kafka 3.9 and on wirebroker, plus raw-request diffs; writes compat/REPORT.md
compat: setup jars tools
	WIREBROKER_COMPAT_REPORT=compat/REPORT.md $(PY) -m pytest compat

## bench: wirebroker against real Kafka 3.9 here (one broker, and 3-broker clusters for rows 10-11), same load generators; writes docs/BENCHMARKS.md + benchmarks.png (~20 min)
bench: setup jars
	$(PY) -m bench.side_by_side

## bench-codec: the codec benchmark (Produce v9 decode, Fetch v12 encode)
bench-codec: setup
	$(PY) bench/bench_codec.py

## bench-storage: storage benchmark (append, read lookup, recovery); figures in docs/storage.md
bench-storage: setup
	$(PY) bench/bench_storage.py

## bench-broker: broker benchmark with confluent-kafka as the load generator
bench-broker: setup
	$(PY) bench/bench_broker.py

## bench-tls: what TLS costs the broker, CPU s/GiB through the TLS and the plaintext transports
bench-tls: setup
	$(PY) bench/bench_tls.py

## bench-groups: join of a 10-member group and offset-commit round trips
bench-groups: setup
	$(PY) bench/bench_groups.py

## bench-idempotence: idempotent produce against plain acks=all
bench-idempotence: setup
	$(PY) bench/bench_idempotence.py

## soak: brokers under steady load plus topic, group and connection churn; fails if memory, descriptors or threads grow, a client errs or the broker logs an ERROR (20 min; SOAK="--brokers 3 --minutes 30" a cluster; see python -m bench.soak --help)
soak: setup jars
	$(PY) -m bench.soak $(SOAK)

## pipeline: the Spark log-aggregation job end to end (embedded broker unless one answers on 127.0.0.1:9092; Ctrl-C stops)
pipeline: setup jars
	$(PY) -m pipeline

## image: build wirebroker:latest and wirebroker-kafka:3.9 locally, no registry needed (starts dockerd as root; see image/build.sh)
image: setup jars
	bash image/build.sh

## suites: franz-go's kgo, librdkafka's, kafka-python's and aiokafka's own test suites against Kafka 3.9 and wirebroker: one broker, 3-broker clusters, one secured broker (over TLS; librdkafka also over SASL; kafka-python and aiokafka not secured, but with the TLS and SASL listeners of their own fixtures' brokers); writes compat/REPORT.md (~3 h; SUITES_ARGS="--suite aiokafka" runs one suite; see compat/suites/)
suites: setup jars tools
	nice -n 10 $(PY) -m compat.suites $(SUITES_ARGS)

## jars: Kafka 3.9 + ZooKeeper + Spark's Kafka connector + Kafka Streams and its examples from Maven Central into .cache/jars/ (no-op when up to date)
jars:
	bash jars/fetch.sh kafka spark streams

## golden: re-capture tests/protocol/golden/frames/ from librdkafka and the Java client against real Kafka 3.9
golden: setup jars
	$(PY) tests/protocol/golden/capture.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
