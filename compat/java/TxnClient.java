// The Java client's side of the transaction scenarios (compat/transactions.py drives it).
//
// Run with Java's single-file source launcher on Kafka's jars:
//   java -cp '.cache/jars/kafka/*' compat/java/TxnClient.java BOOTSTRAP
// (compat/txn_clients.py compiles it once with javac instead: each JVM then starts 1.5 s sooner).
// It reads one command a line on stdin (words split on spaces, so keys and values have none)
// and answers each with one JSON line on stdout:
// {"ok": true, ...} or {"error": "<exception class>", "cause": "<its cause's class>", ...}.
//
//   producer TXN_ID [KEY=VALUE ...]   a transactional KafkaProducer (these producer configs)
//   init | begin | commit | abort     initTransactions(), beginTransaction(), ...
//   send TOPIC PARTITION KEY VALUE    send() one record; its outcome comes with the next flush
//   flush                             flush(); "sent": each send's offset or exception class
//   subscribe GROUP TOPIC             a read_committed group member, once it has partitions
//   poll N                            the member's next N records and its position after them
//   seek TOPIC PARTITION OFFSET       the member's position
//   offsets TOPIC PARTITION OFFSET    sendOffsetsToTransaction(), with the member's group
//                                     metadata (KIP-447), or GROUP's alone when not subscribed:
//   offsets TOPIC PARTITION OFFSET GROUP
//   read TOPIC PARTITION ISOLATION END  a fresh consumer from the start until its position is
//                                     END: the records the application gets
//   close                             close everything and exit
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class TxnClient {
    static final Duration TIMEOUT = Duration.ofSeconds(30);
    static final ObjectMapper JSON = new ObjectMapper();

    static String bootstrap;
    static KafkaProducer<String, String> producer;
    static KafkaConsumer<String, String> member;
    static final Deque<ConsumerRecord<String, String>> polled = new ArrayDeque<>();
    static final List<Future<RecordMetadata>> sent = new ArrayList<>();

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        System.out.println(JSON.writeValueAsString(Map.of("ok", true, "ready", true)));
        String line;
        while ((line = in.readLine()) != null) {
            String[] words = line.trim().split(" ");
            Map<String, Object> answer = new LinkedHashMap<>();
            try {
                answer.put("ok", true);
                handle(words, answer);
            } catch (Exception e) {
                answer.clear();
                answer.putAll(describe(e));
            }
            System.out.println(JSON.writeValueAsString(answer));
            System.out.flush();
            if (words[0].equals("close")) {
                return;
            }
        }
    }

    static Map<String, Object> describe(Throwable e) {
        if (e instanceof ExecutionException && e.getCause() != null) {
            e = e.getCause();
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("error", e.getClass().getSimpleName());
        out.put("cause", e.getCause() == null ? null : e.getCause().getClass().getSimpleName());
        out.put("message", String.valueOf(e.getMessage()));
        return out;
    }

    static void handle(String[] w, Map<String, Object> answer) throws Exception {
        switch (w[0]) {
            case "producer": {
                Properties p = new Properties();
                p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
                p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, w[1]);
                p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
                p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
                for (int i = 2; i < w.length; i++) {
                    String[] kv = w[i].split("=", 2);
                    p.put(kv[0], kv[1]);
                }
                producer = new KafkaProducer<>(p);
                break;
            }
            case "init":
                producer.initTransactions();
                break;
            case "begin":
                producer.beginTransaction();
                break;
            case "commit":
                producer.commitTransaction();
                break;
            case "abort":
                producer.abortTransaction();
                break;
            case "send":
                sent.add(producer.send(new ProducerRecord<>(w[1], Integer.parseInt(w[2]), w[3], w[4])));
                break;
            case "flush": {
                producer.flush();
                List<Object> outcomes = new ArrayList<>();
                for (Future<RecordMetadata> f : sent) {
                    try {
                        outcomes.add(f.get().offset());
                    } catch (ExecutionException e) {
                        outcomes.add(describe(e).get("error"));
                    }
                }
                sent.clear();
                answer.put("sent", outcomes);
                break;
            }
            case "subscribe": {
                member = new KafkaConsumer<>(consumerProps(w[1], "read_committed"));
                member.subscribe(List.of(w[2]));
                long deadline = System.nanoTime() + TIMEOUT.toNanos();
                while (member.assignment().isEmpty() && System.nanoTime() < deadline) {
                    for (ConsumerRecord<String, String> r : member.poll(Duration.ofMillis(100))) {
                        polled.add(r);
                    }
                }
                if (member.assignment().isEmpty()) {
                    throw new IllegalStateException("no partitions assigned in " + TIMEOUT);
                }
                break;
            }
            case "poll": {
                int n = Integer.parseInt(w[1]);
                long deadline = System.nanoTime() + TIMEOUT.toNanos();
                while (polled.size() < n && System.nanoTime() < deadline) {
                    for (ConsumerRecord<String, String> r : member.poll(Duration.ofMillis(100))) {
                        polled.add(r);
                    }
                }
                List<Object> records = new ArrayList<>();
                while (records.size() < n && !polled.isEmpty()) {
                    records.add(record(polled.poll()));
                }
                answer.put("records", records);
                break;
            }
            case "seek":
                polled.clear();
                member.seek(new TopicPartition(w[1], Integer.parseInt(w[2])), Long.parseLong(w[3]));
                break;
            case "offsets": {
                Map<TopicPartition, OffsetAndMetadata> offsets = Map.of(
                        new TopicPartition(w[1], Integer.parseInt(w[2])),
                        new OffsetAndMetadata(Long.parseLong(w[3])));
                ConsumerGroupMetadata group =
                        w.length > 4 ? new ConsumerGroupMetadata(w[4]) : member.groupMetadata();
                producer.sendOffsetsToTransaction(offsets, group);
                break;
            }
            case "read":
                answer.put("records", read(w[1], Integer.parseInt(w[2]), w[3], Long.parseLong(w[4])));
                break;
            case "close":
                if (member != null) {
                    member.close(TIMEOUT);
                }
                if (producer != null) {
                    producer.close(TIMEOUT);
                }
                break;
            default:
                throw new IllegalArgumentException("unknown command " + w[0]);
        }
    }

    static Properties consumerProps(String group, String isolation) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        if (group != null) {
            p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        }
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        return p;
    }

    static List<Object> read(String topic, int partition, String isolation, long end) {
        List<Object> out = new ArrayList<>();
        TopicPartition tp = new TopicPartition(topic, partition);
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(consumerProps(null, isolation))) {
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            long deadline = System.nanoTime() + TIMEOUT.toNanos();
            while (c.position(tp) < end) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("position " + c.position(tp) + " < " + end);
                }
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
                    out.add(record(r));
                }
            }
        }
        return out;
    }

    static List<Object> record(ConsumerRecord<String, String> r) {
        List<Object> out = new ArrayList<>();
        out.add(r.offset());
        out.add(r.key());
        out.add(r.value());
        return out;
    }
}
