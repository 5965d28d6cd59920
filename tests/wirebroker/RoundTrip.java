import java.io.FileInputStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The Java client's round trip for the security matrix (tests/wirebroker/test_security_matrix.py):
 * {@code RoundTrip CLIENT.properties TOPIC VALUE...} produces each VALUE to partition 0 of TOPIC
 * with acks=all, then reads the partition from its start and prints one value a line until it
 * has as many. The properties file holds the client's security settings.
 */
public class RoundTrip {
    public static void main(String[] args) throws Exception {
        Properties config = new Properties();
        try (FileInputStream in = new FileInputStream(args[0])) {
            config.load(in);
        }
        String topic = args[1];
        int count = args.length - 2;
        Properties producerConfig = new Properties();
        producerConfig.putAll(config);
        producerConfig.put("acks", "all");
        producerConfig.put("key.serializer", ByteArraySerializer.class.getName());
        producerConfig.put("value.serializer", ByteArraySerializer.class.getName());
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerConfig)) {
            for (int i = 2; i < args.length; i++) {
                byte[] value = args[i].getBytes(StandardCharsets.UTF_8);
                producer.send(new ProducerRecord<>(topic, 0, null, value)).get();
            }
        }
        Properties consumerConfig = new Properties();
        consumerConfig.putAll(config);
        consumerConfig.put("enable.auto.commit", "false");
        consumerConfig.put("key.deserializer", ByteArrayDeserializer.class.getName());
        consumerConfig.put("value.deserializer", ByteArrayDeserializer.class.getName());
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(consumerConfig)) {
            TopicPartition partition = new TopicPartition(topic, 0);
            consumer.assign(List.of(partition));
            consumer.seekToBeginning(List.of(partition));
            long deadline = System.currentTimeMillis() + 60_000;
            int seen = 0;
            while (seen < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(500))) {
                    System.out.println(new String(record.value(), StandardCharsets.UTF_8));
                    seen++;
                }
            }
        }
    }
}
