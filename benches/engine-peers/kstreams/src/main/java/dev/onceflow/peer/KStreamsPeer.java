package dev.onceflow.peer;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.processor.TimestampExtractor;
import org.apache.kafka.streams.state.WindowStore;

/**
 * The Kafka Streams peer of onceflow's engine benchmark (benches/engine): the taxi jobs
 * (a) {@code cleansing} and (b) {@code per-driver-hourly} in the Streams DSL. Configured by the
 * environment (see run.sh and README.md); prints {@code peer: started} to stderr once the
 * application is RUNNING, then runs until it is killed (SIGTERM closes it cleanly).
 */
public final class KStreamsPeer {

    /** One ride event of `onceflow taxi generate` (unknown fields are ignored). */
    public static final class Ride {
        public long ride_id;
        public long driver_id;
        public long taxi_id;
        public boolean is_start;
        public double start_lon;
        public double start_lat;
        public double end_lon;
        public double end_lat;
        public int passengers;
        public long event_time;
    }

    /** Rides ended and passengers, per driver and hour (the window's aggregate). */
    public static final class Counts {
        final long rides;
        final long passengers;

        Counts(long rides, long passengers) {
            this.rides = rides;
            this.passengers = passengers;
        }

        Counts add(Ride r) {
            return new Counts(rides + 1, passengers + r.passengers);
        }
    }

    static final ObjectMapper JSON = new ObjectMapper()
        .configure(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES, false);

    static Ride parse(byte[] value) {
        try {
            return JSON.readValue(value, Ride.class);
        } catch (IOException e) {
            throw new UncheckedIOException("not a ride event: " + new String(value, StandardCharsets.UTF_8), e);
        }
    }

    static final Serde<Ride> RIDE_SERDE = Serdes.serdeFrom(
        (Serializer<Ride>) (topic, ride) -> {
            try {
                return ride == null ? null : JSON.writeValueAsBytes(ride);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        },
        (Deserializer<Ride>) (topic, bytes) -> bytes == null ? null : parse(bytes));

    static final Serde<Counts> COUNTS_SERDE = Serdes.serdeFrom(
        (Serializer<Counts>) (topic, c) ->
            c == null ? null : ByteBuffer.allocate(16).putLong(c.rides).putLong(c.passengers).array(),
        (Deserializer<Counts>) (topic, bytes) -> {
            if (bytes == null) {
                return null;
            }
            ByteBuffer b = ByteBuffer.wrap(bytes);
            return new Counts(b.getLong(), b.getLong());
        });

    /** Event time: the ride event's event_time (epoch ms); the value is already a Ride. */
    public static final class EventTime implements TimestampExtractor {
        @Override
        public long extract(ConsumerRecord<Object, Object> record, long partitionTime) {
            return ((Ride) record.value()).event_time;
        }
    }

    // The NYC box, edges included: longitude -74.05..-73.70, latitude 40.50..41.00.
    static boolean inBox(double lon, double lat) {
        return lon >= -74.05 && lon <= -73.70 && lat >= 40.50 && lat <= 41.00;
    }

    /** (a) Rides that start and end in the box, key and value bytes unchanged. */
    static Topology cleansing(String input, String output) {
        StreamsBuilder b = new StreamsBuilder();
        b.stream(input, Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
            .filter((key, value) -> {
                Ride r = parse(value);
                return inBox(r.start_lon, r.start_lat) && inBox(r.end_lon, r.end_lat);
            }, Named.as("in-nyc"))
            .to(output, Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));
        return b.build();
    }

    /** (b) END events per driver per event-time hour (grace 60 s), each window emitted once. */
    static Topology perDriverHourly(String input, String output) {
        StreamsBuilder b = new StreamsBuilder();
        b.stream(input, Consumed.with(Serdes.ByteArray(), RIDE_SERDE).withTimestampExtractor(new EventTime()))
            .filter((driver, ride) -> !ride.is_start, Named.as("ride-ends"))
            .groupByKey(Grouped.with(Serdes.ByteArray(), RIDE_SERDE)) // the key already is the driver
            .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofHours(1), Duration.ofSeconds(60)))
            .aggregate(() -> new Counts(0, 0), (driver, ride, counts) -> counts.add(ride),
                Named.as("per-driver-hourly"),
                Materialized.<byte[], Counts, WindowStore<Bytes, byte[]>>as("per-driver-hourly-store")
                    .withKeySerde(Serdes.ByteArray())
                    .withValueSerde(COUNTS_SERDE))
            .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()).withName("window-closed"))
            .toStream(Named.as("closed-windows"))
            .map((window, c) -> {
                long driver = Long.parseLong(new String(window.key(), StandardCharsets.UTF_8).trim());
                String json = "{\"driver_id\":" + driver
                    + ",\"window_start\":" + window.window().start()
                    + ",\"window_end\":" + window.window().end()
                    + ",\"rides\":" + c.rides
                    + ",\"passengers\":" + c.passengers + "}";
                return KeyValue.pair(window.key(), json.getBytes(StandardCharsets.UTF_8));
            }, Named.as("to-json"))
            .to(output, Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));
        return b.build();
    }

    static String need(String name) {
        String v = System.getenv(name);
        if (v == null || v.isEmpty()) {
            System.err.println("kstreams peer: set " + name);
            System.exit(2);
        }
        return v;
    }

    public static void main(String[] args) throws InterruptedException {
        String job = need("JOB");
        String input = need("INPUT");
        String output = need("OUTPUT");
        String guarantee = switch (need("GUARANTEE")) {
            case "exactly-once" -> StreamsConfig.EXACTLY_ONCE_V2;
            case "at-least-once" -> StreamsConfig.AT_LEAST_ONCE;
            default -> {
                System.err.println("kstreams peer: GUARANTEE must be exactly-once or at-least-once");
                System.exit(2);
                yield null;
            }
        };
        Topology topology = switch (job) {
            case "cleansing" -> cleansing(input, output);
            case "per-driver-hourly" -> perDriverHourly(input, output);
            default -> {
                System.err.println("kstreams peer: JOB must be cleansing or per-driver-hourly");
                System.exit(2);
                yield null;
            }
        };

        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, need("NAME"));
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, need("BOOTSTRAP"));
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, need("INTERVAL_MS"));
        p.put(StreamsConfig.STATE_DIR_CONFIG, need("STATE_DIR"));
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        // The window store's changelog is compact,delete with retention.ms = the window's retention
        // (1 h + 60 s) + this. Its records carry the rides' event times (the generator's start at
        // 2025-01-01), so with the default (1 day) the broker's retention check deletes them
        // within minutes and a restore after a kill comes back with lost counts. 10 years.
        p.put(StreamsConfig.WINDOW_STORE_CHANGE_LOG_ADDITIONAL_RETENTION_MS_CONFIG, 10L * 365 * 24 * 3600 * 1000);
        // Extra properties for experiments (not used by the benchmark): KSTREAMS_PROPS="k=v k=v".
        String extra = System.getenv("KSTREAMS_PROPS");
        if (extra != null) {
            for (String kv : extra.trim().split("\\s+")) {
                int eq = kv.indexOf('=');
                if (eq > 0) {
                    p.put(kv.substring(0, eq), kv.substring(eq + 1));
                }
            }
        }

        KafkaStreams streams = new KafkaStreams(topology, p);
        AtomicBoolean started = new AtomicBoolean();
        AtomicBoolean closing = new AtomicBoolean();
        CountDownLatch stopped = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING && started.compareAndSet(false, true)) {
                System.err.println("peer: started");
                System.err.flush();
            }
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                stopped.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            System.err.println("kstreams peer: stream thread failed: " + e);
            e.printStackTrace(System.err);
            return StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            closing.set(true);
            streams.close(Duration.ofSeconds(15));
        }, "peer-shutdown"));
        streams.start();
        stopped.await();
        if (!closing.get()) {
            System.err.println("kstreams peer: the application stopped (" + streams.state() + ")");
            streams.close(Duration.ofSeconds(15));
            System.exit(1);
        }
    }
}
