"""The log-aggregation pipeline: application log events in a topic, aggregated by Spark.

`events` produces generated log events (JSON) with confluent-kafka; `job` is the PySpark
Structured Streaming job that reads them with Spark's Kafka source, counts them per service,
level and minute with a watermark, and writes the counts to another topic with Spark's Kafka
sink; `spark` builds the SparkSession with the connector jars fetched by `make jars`.
`python -m pipeline` (`make pipeline`) runs all of it against a local broker.
"""
