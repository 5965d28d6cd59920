"""The clients' own test suites, run side by side against real Kafka 3.9 and wirebroker.

This package owns ``make suites``: it fetches franz-go's ``pkg/kgo`` tests (from the Go module
proxy), librdkafka's test suite (from Debian's source package), kafka-python's integration
tests (from its sdist on PyPI) and aiokafka's functional tests (from GitHub's archive of its
release tag: its sdist has no tests), builds them, runs each test against the targets of
``compat.suites.targets`` -- one Apache Kafka 3.9 broker
(``compat.kafka_process.kafka_reference``: in a container when Docker works, from the jars
otherwise) and one wirebroker, 3-broker clusters of each with ZooKeeper, one broker of each
secured with TLS client certificates, SCRAM and OAUTHBEARER, a 3-broker cluster of each
secured so with SASL_SSL (SCRAM-SHA-512) between its brokers, and (librdkafka only) the same
secured brokers with every client logging in with SCRAM; kafka-python's on the plaintext
ones only (one broker and the clusters), its fixtures' external-broker mode being PLAINTEXT, with
an SSL and a SASL_PLAINTEXT listener (PLAIN, SCRAM) on every broker for its SSL and SASL tests,
whose brokers a pytest plugin (``kafka_python_fixtures``) takes from the target;
aiokafka's on the same targets, every broker given the listeners of aiokafka's own broker image
(PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL; PLAIN and SCRAM users from its JAAS file:
``login_listeners`` holds what both suites share), its Docker fixtures
replaced by a pytest plugin (``aiokafka_fixtures``) -- and writes their rows into
``compat/REPORT.md``. ``--suite`` runs one suite (``make suites SUITES_ARGS="--suite aiokafka"``),
``--target`` one target.

Each test runs in its own process with its own time bound, so a test that hangs on one target
fails alone and is reported as ``timeout``; nothing is allow-listed. A test that passes on Kafka
and fails on a wirebroker target must be a ``compat/FINDINGS.md`` entry (``check_findings``),
and a run on a wirebroker target fails if a broker logged a traceback (a bug it caught, whatever
the tests said; the brokers' logs are kept in ``build/suites/logs/``).
Results are kept per suite and target in ``compat/suites/results/`` (committed) so one target
can be re-run and the report rendered from all of them; the builds and logs are in ``build/suites/``.
"""
