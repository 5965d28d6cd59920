#!/bin/bash
# Entrypoint of the wirebroker-kafka image (image/kafka.Dockerfile): Apache Kafka 3.9 from its jars.
#
#   kafka        (default) one broker in ZooKeeper mode, configured from KAFKA_* variables the way
#                Confluent's images read them: KAFKA_BROKER_ID=1 is broker.id=1 ('_' is '.', '__'
#                is '_', '___' is '-'). Without KAFKA_ZOOKEEPER_CONNECT it first starts its own
#                ZooKeeper inside the container, on 127.0.0.1:2181. Listeners: PLAINTEXT on 9092
#                for clients (set KAFKA_ADVERTISED_LISTENERS to the address they dial) and BROKER
#                on 29092, the inter-broker listener, advertised as the container's address.
#   zookeeper    ZooKeeper alone, on :2181.
#   anything else is run as given.
# Logs go to stdout. KAFKA_HEAP_OPTS sets the JVM heap (default -Xmx512m).
set -euo pipefail

libs=/opt/kafka/libs
conf=/tmp/kafka-config
mkdir -p "$conf"
jvm=(java ${KAFKA_HEAP_OPTS:--Xmx512m} -Xss1m -XX:+UseSerialGC -XX:TieredStopAtLevel=1
    -Djava.awt.headless=true -cp "$libs/*")

cat >"$conf/log4j.properties" <<'LOG4J'
log4j.rootLogger=INFO, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.Target=System.out
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
log4j.logger.org.apache.zookeeper=WARN
log4j.logger.org.apache.kafka.clients=WARN
LOG4J

# properties PREFIX FILE DEFAULTS...: the defaults, then every PREFIX* variable, into FILE.
properties() {
    local prefix=$1 file=$2 name key
    shift 2
    declare -A props=()
    for kv in "$@"; do props[${kv%%=*}]=${kv#*=}; done
    while IFS= read -r name; do
        key=${name#"$prefix"}
        key=$(echo "$key" | tr 'A-Z' 'a-z' | sed -e 's/___/-/g' -e 's/__/@/g' -e 's/_/./g' -e 's/@/_/g')
        props[$key]=${!name}
    done < <(compgen -e | grep "^$prefix" | grep -v -e '^KAFKA_HEAP_OPTS$' || true)
    : >"$file"
    for key in "${!props[@]}"; do echo "$key=${props[$key]}" >>"$file"; done
}

zookeeper() { # $1: clientPortAddress
    printf '%s\n' dataDir=/var/lib/zookeeper clientPort=2181 clientPortAddress="$1" tickTime=2000 \
        admin.enableServer=false 4lw.commands.whitelist=ruok,stat,srvr maxClientCnxns=0 \
        >"$conf/zoo.cfg"
    echo "kafka-entrypoint: ZooKeeper on $1:2181"
}

case "${1:-kafka}" in
kafka)
    if [ -z "${KAFKA_ZOOKEEPER_CONNECT:-}" ]; then
        zookeeper 127.0.0.1
        "${jvm[@]}" -Dlog4j.configuration="file:$conf/log4j.properties" \
            org.apache.zookeeper.server.quorum.QuorumPeerMain "$conf/zoo.cfg" &
        export KAFKA_ZOOKEEPER_CONNECT=127.0.0.1:2181
    fi
    # Clients use PLAINTEXT (advertise a host address there); the controller and replicas use
    # BROKER, advertised as the container's own address.
    properties KAFKA_ "$conf/server.properties" broker.id=1 log.dirs=/var/lib/kafka/data \
        listeners=PLAINTEXT://0.0.0.0:9092,BROKER://0.0.0.0:29092 \
        advertised.listeners="PLAINTEXT://localhost:9092,BROKER://$(hostname -i | cut -d' ' -f1):29092" \
        listener.security.protocol.map=PLAINTEXT:PLAINTEXT,BROKER:PLAINTEXT \
        inter.broker.listener.name=BROKER \
        offsets.topic.replication.factor=1 transaction.state.log.replication.factor=1 \
        transaction.state.log.min.isr=1 group.initial.rebalance.delay.ms=0 \
        zookeeper.connection.timeout.ms=30000
    echo "kafka-entrypoint: server.properties:"
    sed 's/^/  /' "$conf/server.properties"
    # exec: the broker is PID 1's replacement and gets docker stop's SIGTERM (a clean shutdown);
    # an embedded ZooKeeper is killed with the container.
    exec "${jvm[@]}" -Dlog4j.configuration="file:$conf/log4j.properties" \
        kafka.Kafka "$conf/server.properties"
    ;;
zookeeper)
    zookeeper 0.0.0.0
    exec "${jvm[@]}" -Dlog4j.configuration="file:$conf/log4j.properties" \
        org.apache.zookeeper.server.quorum.QuorumPeerMain "$conf/zoo.cfg"
    ;;
*)
    exec "$@"
    ;;
esac
