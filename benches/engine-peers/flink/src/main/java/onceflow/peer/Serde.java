package onceflow.peer;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import onceflow.peer.Records.DriverHour;
import onceflow.peer.Records.RawRecord;
import onceflow.peer.Records.RideEvent;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.util.Collector;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;

/** Kafka (de)serialization of the two jobs, with Jackson for the JSON values. */
public final class Serde {
    private Serde() {}

    /** Thread-safe once configured; shared by every operator of the JVM. */
    static final ObjectMapper JSON = new ObjectMapper();

    static JsonNode parse(byte[] value) throws IOException {
        return JSON.readTree(value);
    }

    /** Job (a)'s source records: key and value bytes as read. */
    public static class RawDeserializer implements KafkaRecordDeserializationSchema<RawRecord> {
        @Override
        public void deserialize(ConsumerRecord<byte[], byte[]> record, Collector<RawRecord> out) {
            out.collect(new RawRecord(record.key(), record.value()));
        }

        @Override
        public TypeInformation<RawRecord> getProducedType() {
            return TypeInformation.of(RawRecord.class);
        }
    }

    /** Job (b)'s source records: the ride event's driver, kind, passengers and event time. */
    public static class RideDeserializer implements KafkaRecordDeserializationSchema<RideEvent> {
        @Override
        public void deserialize(ConsumerRecord<byte[], byte[]> record, Collector<RideEvent> out)
                throws IOException {
            JsonNode v = parse(record.value());
            RideEvent e = new RideEvent();
            e.driverId = v.get("driver_id").asLong();
            e.isStart = v.get("is_start").asBoolean();
            e.passengers = v.get("passengers").asLong();
            e.eventTime = v.get("event_time").asLong();
            out.collect(e);
        }

        @Override
        public TypeInformation<RideEvent> getProducedType() {
            return TypeInformation.of(RideEvent.class);
        }
    }

    /** Job (a)'s sink records: the input's key and value bytes, unchanged. */
    public static class RawSerializer implements KafkaRecordSerializationSchema<RawRecord> {
        private final String topic;

        public RawSerializer(String topic) {
            this.topic = topic;
        }

        @Override
        public ProducerRecord<byte[], byte[]> serialize(RawRecord r, KafkaSinkContext ctx, Long timestamp) {
            return new ProducerRecord<>(topic, r.key, r.value);
        }
    }

    /** Job (b)'s sink records: key = the driver id as JSON, value = the window's result as JSON. */
    public static class DriverHourSerializer implements KafkaRecordSerializationSchema<DriverHour> {
        private final String topic;

        public DriverHourSerializer(String topic) {
            this.topic = topic;
        }

        @Override
        public ProducerRecord<byte[], byte[]> serialize(DriverHour h, KafkaSinkContext ctx, Long timestamp) {
            ObjectNode v = JSON.createObjectNode();
            v.put("driver_id", h.driverId);
            v.put("window_start", h.windowStart);
            v.put("window_end", h.windowEnd);
            v.put("rides", h.rides);
            v.put("passengers", h.passengers);
            byte[] value;
            try {
                value = JSON.writeValueAsBytes(v);
            } catch (IOException e) {
                throw new IllegalStateException("cannot write " + v, e);
            }
            byte[] key = Long.toString(h.driverId).getBytes(StandardCharsets.UTF_8);
            return new ProducerRecord<>(topic, key, value);
        }
    }
}
