"""``make suites``: ``python -m compat.suites [--suite S] [--target T] [--mode quick|full]``.

Runs each suite's tests against each target (see the package's docstring), saving results as it
goes, then writes the suites' part of ``compat/REPORT.md`` from every saved result and checks
that each test passing on Kafka and failing on wirebroker is named in ``compat/FINDINGS.md``
(exit 1 when one is not). ``--report-only`` only writes the report from saved results.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
import time

from compat.report import write_part
from compat.suites import aiokafka, kafka_python, kgo, librdkafka, report
from compat.suites.results import BUILD, TARGETS, SuiteRun, load
from compat.suites.targets import LOGS, start

SUITES = ("kgo", "librdkafka", "kafka-python", "aiokafka")
#: Where each suite runs: kgo's suite logs in only in its own login tests (on the secured
#: targets), not every client, so it has nothing to run on the SASL targets; kafka-python's
#: fixtures take an external broker over PLAINTEXT, and its SSL and SASL tests the target's own
#: listeners (``compat.suites.kafka_python``); aiokafka's the brokers with the listeners of its
#: own image (``compat.suites.aiokafka``); both on the plaintext targets, one broker and clusters.
PLAINTEXT_TARGETS = ("kafka", "wirebroker", "kafka-cluster", "wirebroker-cluster")
SUITE_TARGETS = {
    "kgo": tuple(t for t in TARGETS if not t.endswith("-sasl")),
    "librdkafka": TARGETS,
    "kafka-python": PLAINTEXT_TARGETS,
    "aiokafka": PLAINTEXT_TARGETS,
}
#: Broker settings on every target, as compat's (Kafka's defaults otherwise).
COMMON = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "1",
    "auto.create.topics.enable": "true",
}
#: librdkafka's "default" test scenario (tests/scenarios/default.json): 4 partitions a topic;
#: and an authorizer, which its ACL tests (0109, 0115, 0119) need: with no ACL everyone may do
#: anything, so every other test runs as without one.
SETTINGS = {
    "kgo": COMMON,
    "librdkafka": {
        **COMMON,
        "num.partitions": "4",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "allow.everyone.if.no.acl.found": "true",
    },
    #: What the broker configuration of kafka-python's own fixtures (servers/resources/ in its
    #: repository) sets that its tests rely on: 4 partitions a topic, an authorizer (for its ACL
    #: test) and session timeouts down to 1 s (its group test's is 3 s).
    "kafka-python": {
        **COMMON,
        "num.partitions": "4",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "allow.everyone.if.no.acl.found": "true",
        "group.min.session.timeout.ms": "1000",
    },
    #: What aiokafka's broker image (docker/scripts/start-kafka.sh in its repository) sets beside
    #: its listeners (``aiokafka.listeners``): 2 partitions a topic, an authorizer that lets
    #: everyone do what no ACL names, and the JAAS file's ``admin`` as its super user.
    "aiokafka": {
        **COMMON,
        "num.partitions": "2",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "allow.everyone.if.no.acl.found": "true",
        "super.users": f"User:{aiokafka.ADMIN_USER}",
    },
}


def run_suite(suite: str, targets: list[str], mode: str, only: str | None) -> None:
    if suite == "kgo":
        package = kgo.build()
        names = kgo.tests(package)
        version = kgo.describe()
    elif suite == "kafka-python":
        package = kafka_python.fetch()
        names = kafka_python.tests(package)
        version = kafka_python.describe()
    elif suite == "aiokafka":
        package = aiokafka.fetch()
        names = aiokafka.tests(package)
        version = aiokafka.describe()
    else:
        src = librdkafka.fetch_and_build()
        names = librdkafka.tests(src)
        version = librdkafka.describe(mode)
    if only:
        names = [n for n in names if re.search(only, n)]
    for target_name in targets:
        log = LOGS / f"{suite}-{target_name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("")
        began = time.monotonic()
        with contextlib.ExitStack() as stack:
            settings, properties = SETTINGS[suite], {}
            listener_names: tuple[str, ...] = ("PLAINTEXT",)
            listeners = None
            if suite == "aiokafka":
                listeners = stack.enter_context(aiokafka.listeners(package))
            elif suite == "kafka-python":
                listeners = stack.enter_context(kafka_python.listeners())
            if listeners is not None:
                settings = {**settings, **listeners.settings}
                properties, listener_names = listeners.system_properties, listeners.names
            target = stack.enter_context(start(target_name, settings, properties, listener_names))
            target_json = ""
            if suite == "kafka-python":
                assert listeners is not None
                kafka_python.add_users(target)
                target_json = kafka_python.plugin_target(listeners, target)
            elif suite == "aiokafka":
                assert listeners is not None
                target_json = aiokafka.plugin_target(listeners, target)
            run = SuiteRun(suite, target_name, version, target.how)
            saved = load(suite, target_name) if only else None
            if saved is not None:  # a partial run updates the saved whole run
                again = f"{len(names)} tests re-ran {run.started}"
                saved.reran = f"{saved.reran}; {again}" if saved.reran else again
                run = saved
            print(f"suites: {suite} on {target.how} ({len(names)} tests; log {log})", flush=True)
            for name in names:
                if suite == "kgo":
                    got = {name: kgo.run_one(package, name, target, log)}
                elif suite == "kafka-python":
                    got = {name: kafka_python.run_one(package, name, target, target_json, log)}
                elif suite == "aiokafka":
                    got = {name: aiokafka.run_one(package, name, target_json, log)}
                else:
                    got = librdkafka.run_one(src, name, target, mode, log)
                for test, outcome in got.items():
                    run.tests[test] = outcome
                    if outcome.status not in ("pass", "skip"):
                        print(f"  {test}: {outcome.status} {outcome.detail}", flush=True)
                if saved is None:
                    run.seconds = time.monotonic() - began
                run.save()
        took = time.monotonic() - began
        print(f"suites: {suite} on {target_name}: {run.counts()} in {took:.0f} s", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compat.suites", description=__doc__)
    parser.add_argument("--suite", action="append", choices=SUITES, help="default: all")
    parser.add_argument("--target", action="append", choices=TARGETS, help="default: all")
    parser.add_argument("--mode", choices=("quick", "full"), default="quick", help="librdkafka's")
    parser.add_argument(
        "--only", metavar="REGEX", help="only the tests matching (updates saved results)"
    )
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    if not args.report_only:
        for suite in args.suite or SUITES:
            targets = [t for t in args.target or TARGETS if t in SUITE_TARGETS[suite]]
            if targets:
                run_suite(suite, targets, args.mode, args.only)
            else:
                print(f"suites: {suite} does not run on {', '.join(args.target)}", flush=True)
    text, missing = report.render(SUITES)
    write_part(report.REPORT, text, suites=True)
    print(f"suites: wrote {report.REPORT.relative_to(BUILD.parents[1])}")
    if missing:
        print(
            "suites: these pass on Kafka and fail on wirebroker but have no compat/FINDINGS.md "
            "entry:\n  " + "\n  ".join(missing),
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
