"""wirebroker against real Apache Kafka 3.9 on the same machine, in one run (``make bench``).

Modules, each owning one thing:

- ``targets``: the two brokers under test (a ZooKeeper-mode Kafka JVM and a ``wirebroker
  serve`` process), their shared settings, the 3-broker clusters of each kind that rows
  10-11 run on (one ZooKeeper each), and what the harness reads of a broker process from
  ``/proc`` (resident memory, CPU seconds).
- ``java_load``: Kafka's own load generators, ``ProducerPerformance`` and
  ``ConsumerPerformance``, run from the project's jars.
- ``rdkafka_load``: the librdkafka (confluent-kafka) load generators, each run in its own
  Python process so the client never shares the harness's GIL; also row 11's failover probe.
- ``workloads``: the table's rows, what each one runs and which figures it yields.
- ``report``: ``docs/BENCHMARKS.md`` (only the generated part between its markers) and the
  ratio chart ``docs/benchmarks.png``.
- ``__main__``: the command line (``python -m bench.side_by_side --help``).
"""
