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
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.StreamJoined;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.processor.TimestampExtractor;
import org.apache.kafka.streams.state.SessionStore;
import org.apache.kafka.streams.state.WindowStore;

/**
 * The Kafka Streams peer of onceflow's engine benchmark (benches/engine): the taxi jobs
 * (a) {@code cleansing}, (b) {@code per-driver-hourly}, (c) {@code driver-shifts} and
 * (d) {@code rides-and-fares} in the Streams DSL. Configured by the
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

    /** One fare of `onceflow taxi generate --fares` (unknown fields are ignored). */
    public static final class Fare {
        public long ride_id;
        public long taxi_id;
        public long driver_id;
        public String payment_type;
        public double tip;
        public double tolls;
        public double total_fare;
        public long event_time;
    }

    /**
     * (d)'s output value: the ride's START event with its fare, the projection of
     * jobs/rides-and-fares.toml (the ride's event_time named start_time).
     */
    public static final class Enriched {
        public long ride_id;
        public long driver_id;
        public long taxi_id;
        public int passengers;
        public long start_time;
        public double start_lon;
        public double start_lat;
        public double end_lon;
        public double end_lat;
        public String payment_type;
        public double tip;
        public double tolls;
        public double total_fare;

        Enriched(Ride ride, Fare fare) {
            ride_id = ride.ride_id;
            driver_id = ride.driver_id;
            taxi_id = ride.taxi_id;
            passengers = ride.passengers;
            start_time = ride.event_time;
            start_lon = ride.start_lon;
            start_lat = ride.start_lat;
            end_lon = ride.end_lon;
            end_lat = ride.end_lat;
            payment_type = fare.payment_type;
            tip = fare.tip;
            tolls = fare.tolls;
            total_fare = fare.total_fare;
        }
    }

    /** Rides ended and passengers, per driver and window (the window's aggregate). */
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

        Counts merge(Counts other) {
            return new Counts(rides + other.rides, passengers + other.passengers);
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

    static byte[] json(Object value) {
        try {
            return value == null ? null : JSON.writeValueAsBytes(value);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    static Fare parseFare(byte[] value) {
        try {
            return JSON.readValue(value, Fare.class);
        } catch (IOException e) {
            throw new UncheckedIOException("not a fare: " + new String(value, StandardCharsets.UTF_8), e);
        }
    }

    static final Serde<Ride> RIDE_SERDE = Serdes.serdeFrom(
        (Serializer<Ride>) (topic, ride) -> json(ride),
        (Deserializer<Ride>) (topic, bytes) -> bytes == null ? null : parse(bytes));

    static final Serde<Fare> FARE_SERDE = Serdes.serdeFrom(
        (Serializer<Fare>) (topic, fare) -> json(fare),
        (Deserializer<Fare>) (topic, bytes) -> bytes == null ? null : parseFare(bytes));

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

    /** Event time of a fare: its event_time (the ride's pick-up); the value is already a Fare. */
    public static final class FareTime implements TimestampExtractor {
        @Override
        public long extract(ConsumerRecord<Object, Object> record, long partitionTime) {
            return ((Fare) record.value()).event_time;
        }
    }

    /** The output value of the windowed jobs (b) and (c), as onceflow writes it. */
    static byte[] windowJson(byte[] driverKey, long start, long end, Counts c) {
        long driver = Long.parseLong(new String(driverKey, StandardCharsets.UTF_8).trim());
        String json = "{\"driver_id\":" + driver
            + ",\"window_start\":" + start
            + ",\"window_end\":" + end
            + ",\"rides\":" + c.rides
            + ",\"passengers\":" + c.passengers + "}";
        return json.getBytes(StandardCharsets.UTF_8);
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
            .map((window, c) -> KeyValue.pair(window.key(),
                    windowJson(window.key(), window.window().start(), window.window().end(), c)),
                Named.as("to-json"))
            .to(output, Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));
        return b.build();
    }

    /** The gap of inactivity that ends a driver's shift (c). */
    static final Duration SHIFT_GAP = Duration.ofMinutes(30);

    /**
     * (c) Each driver's shifts: session windows of its END events 30 min apart at most (grace
     * 60 s), each shift emitted once when it closes. A Streams session window ends at its last
     * record's time; onceflow's (and the output's) window_end is that + the gap.
     */
    static Topology driverShifts(String input, String output) {
        StreamsBuilder b = new StreamsBuilder();
        b.stream(input, Consumed.with(Serdes.ByteArray(), RIDE_SERDE).withTimestampExtractor(new EventTime()))
            .filter((driver, ride) -> !ride.is_start, Named.as("ride-ends"))
            .groupByKey(Grouped.with(Serdes.ByteArray(), RIDE_SERDE)) // the key already is the driver
            .windowedBy(SessionWindows.ofInactivityGapAndGrace(SHIFT_GAP, Duration.ofSeconds(60)))
            .aggregate(() -> new Counts(0, 0), (driver, ride, counts) -> counts.add(ride),
                (driver, left, right) -> left.merge(right),
                Named.as("driver-shifts"),
                Materialized.<byte[], Counts, SessionStore<Bytes, byte[]>>as("driver-shifts-store")
                    .withKeySerde(Serdes.ByteArray())
                    .withValueSerde(COUNTS_SERDE))
            .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()).withName("shift-closed"))
            .toStream(Named.as("closed-shifts"))
            .map((session, c) -> KeyValue.pair(session.key(),
                    windowJson(session.key(), session.window().start(), session.window().end() + SHIFT_GAP.toMillis(), c)),
                Named.as("to-json"))
            .to(output, Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));
        return b.build();
    }

    /**
     * (d) Each ride's START event joined with the fares of its ride whose event times are at most
     * 1 min from its own (both bounds inclusive; grace 60 s unless JOIN_GRACE_MS says otherwise,
     * see README.md): both streams re-keyed by ride id (two repartition topics), a windowed
     * stream-stream inner join, output keyed by the ride id's decimal text.
     */
    static Topology ridesAndFares(String rides, String fares, String output, Duration grace) {
        StreamsBuilder b = new StreamsBuilder();
        KStream<String, Ride> starts = b
            .stream(rides, Consumed.with(Serdes.ByteArray(), RIDE_SERDE).withTimestampExtractor(new EventTime()))
            .filter((driver, ride) -> ride.is_start, Named.as("ride-starts"))
            .selectKey((driver, ride) -> Long.toString(ride.ride_id), Named.as("rides-by-ride-id"));
        KStream<String, Fare> faresByRide = b
            .stream(fares, Consumed.with(Serdes.ByteArray(), FARE_SERDE).withTimestampExtractor(new FareTime()))
            .selectKey((ride, fare) -> Long.toString(fare.ride_id), Named.as("fares-by-ride-id"));
        starts
            .join(faresByRide, (ride, fare) -> json(new Enriched(ride, fare)),
                JoinWindows.ofTimeDifferenceAndGrace(Duration.ofMinutes(1), grace),
                StreamJoined.with(Serdes.String(), RIDE_SERDE, FARE_SERDE)
                    .withName("rides-and-fares")
                    .withStoreName("rides-and-fares-store"))
            .to(output, Produced.with(Serdes.String(), Serdes.ByteArray()));
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
            case "driver-shifts" -> driverShifts(input, output);
            case "rides-and-fares" -> ridesAndFares(input, need("FARES"), output, Duration.ofMillis(
                Long.parseLong(System.getenv().getOrDefault("JOIN_GRACE_MS", "60000"))));
            default -> {
                System.err.println("kstreams peer: JOB must be cleansing, per-driver-hourly, driver-shifts or rides-and-fares");
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
        if (job.equals("rides-and-fares")) {
            // The join's task reads two repartition topics. With the default (0) it processes one of
            // them alone as soon as the other has nothing buffered and no lag, which under EOS is
            // the case between two upstream commits: stream time then runs ahead of the other side
            // and its records come back too late for the join's store (most joins lost, README.md).
            // Wait for both sides up to a commit interval + 10 s, so the join task merges them by
            // timestamp.
            p.put(StreamsConfig.MAX_TASK_IDLE_MS_CONFIG, Long.parseLong(need("INTERVAL_MS")) + 10_000L);
        }
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
