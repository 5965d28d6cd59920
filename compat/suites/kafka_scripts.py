"""Kafka's CLI scripts for the client suites: a ``KAFKA_PATH`` (``build/suites/kafka``) whose
``bin/`` wraps the tools the suites call around the jars of ``make jars`` and whose ``libs/``
links to them (librdkafka's Java helpers compile against it; aiokafka's fixtures run the ACL and
SCRAM commands from it)."""

from __future__ import annotations

from pathlib import Path

from compat.suites.results import BUILD
from wirebroker.zookeeper_server import jars_dir, java_executable

#: Kafka's bin scripts the tests call, and the main class each one runs.
TOOLS = {
    "kafka-topics.sh": "org.apache.kafka.tools.TopicCommand",
    "kafka-configs.sh": "kafka.admin.ConfigCommand",
    "kafka-acls.sh": "kafka.admin.AclCommand",
    "kafka-consumer-groups.sh": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
}


def kafka_path() -> Path:
    """A KAFKA_PATH whose bin/ holds Kafka's scripts as wrappers around the jars."""
    home = BUILD / "kafka"
    bin_dir = home / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    java = java_executable()
    run_class = bin_dir / "kafka-run-class.sh"
    run_class.write_text(
        "#!/bin/sh\n# Kafka's kafka-run-class.sh, around the jars of `make jars`.\n"
        f"exec {java} -Xmx256m -Dlog4j.configuration=file:{home}/tools-log4j.properties "
        f'-cp "{jars_dir()}/*:${{CLASSPATH:-}}" "$@"\n'
    )
    (home / "tools-log4j.properties").write_text(
        "log4j.rootLogger=WARN, err\nlog4j.appender.err=org.apache.log4j.ConsoleAppender\n"
        "log4j.appender.err.Target=System.err\n"
        "log4j.appender.err.layout=org.apache.log4j.PatternLayout\n"
        "log4j.appender.err.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
    )
    libs = home / "libs"  # tests/java/'s Makefile compiles its helpers against $KAFKA_PATH/libs
    if not libs.is_symlink():
        libs.symlink_to(jars_dir())
    for script, main_class in TOOLS.items():
        (bin_dir / script).write_text(f'#!/bin/sh\nexec "{run_class}" {main_class} "$@"\n')
    for path in bin_dir.iterdir():
        path.chmod(0o755)
    return home
