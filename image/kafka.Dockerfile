# Apache Kafka 3.9 (ZooKeeper mode) from the project's jars, for docker-compose.yml, the compat
# suite and testcontainers. Built by `make image` (image/build.sh streams .cache/jars/kafka into
# the context; `make jars` fetches them); image/kafka-entrypoint.sh says how it is configured.
ARG BASE_IMAGE=eclipse-temurin:17-jre
FROM ${BASE_IMAGE}
COPY .cache/jars/kafka/ /opt/kafka/libs/
COPY image/kafka-entrypoint.sh /opt/kafka/entrypoint.sh
VOLUME /var/lib/kafka /var/lib/zookeeper
EXPOSE 9092 2181
ENTRYPOINT ["/opt/kafka/entrypoint.sh"]
CMD ["kafka"]
