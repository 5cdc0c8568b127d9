package onceflow.peer;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.Comparator;
import java.util.HashMap;
import java.util.Map;
import java.util.Optional;
import java.util.stream.Stream;
import onceflow.peer.Records.DriverHour;
import onceflow.peer.Records.RawRecord;
import onceflow.peer.Records.RideEvent;
import onceflow.peer.Records.RidesAndPassengers;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.functions.FilterFunction;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.CoreOptions;
import org.apache.flink.configuration.ExternalizedCheckpointRetention;
import org.apache.flink.configuration.JobManagerOptions;
import org.apache.flink.configuration.RestOptions;
import org.apache.flink.configuration.TaskManagerOptions;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.configuration.StateRecoveryOptions;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.core.execution.CheckpointingMode;
import org.apache.flink.core.execution.RecoveryClaimMode;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction;
import org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.util.Collector;

/**
 * The Flink peer of onceflow's engine benchmark: job "cleansing" or "per-driver-hourly" (DataStream
 * API, here) or "driver-shifts" or "rides-and-fares" (Flink SQL, {@link SqlJob}) from Kafka to
 * Kafka, in a local MiniCluster (this JVM), parallelism 1, checkpointed to STATE_DIR/checkpoints
 * and restored from the newest completed checkpoint there. Configured by environment variables
 * (see run.sh and README.md).
 */
public final class FlinkPeer {
    private FlinkPeer() {}

    public static void main(String[] args) throws Exception {
        String bootstrap = env("BOOTSTRAP");
        String job = env("JOB");
        String input = env("INPUT");
        String output = env("OUTPUT");
        long intervalMs = Long.parseLong(env("INTERVAL_MS"));
        String guarantee = env("GUARANTEE");
        Path stateDir = Paths.get(env("STATE_DIR")).toAbsolutePath();
        String name = env("NAME");

        DeliveryGuarantee delivery;
        switch (guarantee) {
            case "exactly-once": delivery = DeliveryGuarantee.EXACTLY_ONCE; break;
            case "at-least-once": delivery = DeliveryGuarantee.AT_LEAST_ONCE; break;
            default: throw new IllegalArgumentException("GUARANTEE must be exactly-once or at-least-once, not " + guarantee);
        }

        Path checkpoints = stateDir.resolve("checkpoints");
        Files.createDirectories(checkpoints);

        Configuration conf = new Configuration();
        conf.set(CoreOptions.DEFAULT_PARALLELISM, 1);
        // The MiniCluster's REST endpoint and blob server listen on random ports: loopback only.
        conf.set(RestOptions.BIND_ADDRESS, "127.0.0.1");
        conf.set(RestOptions.ADDRESS, "127.0.0.1");
        conf.set(JobManagerOptions.BIND_HOST, "127.0.0.1");
        conf.set(TaskManagerOptions.BIND_HOST, "127.0.0.1");
        conf.set(StateBackendOptions.STATE_BACKEND, "hashmap");
        conf.set(CheckpointingOptions.CHECKPOINT_STORAGE, "filesystem");
        conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, checkpoints.toUri().toString());
        conf.set(CheckpointingOptions.CHECKPOINTING_INTERVAL, Duration.ofMillis(intervalMs));
        conf.set(CheckpointingOptions.CHECKPOINTING_CONSISTENCY_MODE, CheckpointingMode.EXACTLY_ONCE);
        conf.set(CheckpointingOptions.EXTERNALIZED_CHECKPOINT_RETENTION,
                ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION);
        removeIncompleteCheckpoints(checkpoints);
        Optional<Path> latest = latestCompletedCheckpoint(checkpoints);
        if (latest.isPresent()) {
            // The new job owns the checkpoint it resumes from: it is deleted once subsumed.
            conf.set(StateRecoveryOptions.SAVEPOINT_PATH, latest.get().toUri().toString());
            conf.set(StateRecoveryOptions.RESTORE_MODE, RecoveryClaimMode.CLAIM);
            System.err.println("peer: restoring from " + latest.get());
        }

        String jobName = "onceflow-peer " + job + " " + name;
        switch (job) {
            case "cleansing":
            case "per-driver-hourly": {
                StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
                if (job.equals("cleansing")) {
                    cleansing(env, bootstrap, input, output, name, delivery);
                } else {
                    perDriverHourly(env, bootstrap, input, output, name, delivery);
                }
                // Runs until the JVM is killed: the Kafka source is unbounded.
                env.execute(jobName);
                break;
            }
            case "driver-shifts":
            case "rides-and-fares": {
                Map<String, String> vars = new HashMap<>();
                vars.put("BOOTSTRAP", bootstrap);
                vars.put("INPUT", input);
                vars.put("OUTPUT", output);
                vars.put("NAME", name);
                vars.put("GUARANTEE", guarantee);
                if (job.equals("rides-and-fares")) {
                    vars.put("FARES", env("FARES"));
                }
                // Runs until the JVM is killed, like the DataStream jobs.
                SqlJob.run(conf, job, jobName, vars);
                break;
            }
            default:
                throw new IllegalArgumentException("JOB must be cleansing, per-driver-hourly, driver-shifts or "
                        + "rides-and-fares, not " + job);
        }
    }

    // ---- job (a) ----------------------------------------------------------------------------

    static void cleansing(StreamExecutionEnvironment env, String bootstrap, String input, String output,
            String name, DeliveryGuarantee delivery) {
        DataStream<RawRecord> rides = env.fromSource(
                source(bootstrap, input, name, new Serde.RawDeserializer()),
                WatermarkStrategy.noWatermarks(), "rides");
        rides.filter(new InNycBox()).name("in NYC box")
                .sinkTo(sink(bootstrap, name, delivery, new Serde.RawSerializer(output))).name("cleansed rides");
    }

    /** Keeps a ride event iff it starts and ends in the NYC box (edges included). */
    public static class InNycBox implements FilterFunction<RawRecord> {
        static final double MIN_LON = -74.05, MAX_LON = -73.70, MIN_LAT = 40.50, MAX_LAT = 41.00;

        @Override
        public boolean filter(RawRecord r) throws IOException {
            JsonNode v = Serde.parse(r.value);
            return inBox(v.get("start_lon").asDouble(), v.get("start_lat").asDouble())
                    && inBox(v.get("end_lon").asDouble(), v.get("end_lat").asDouble());
        }

        static boolean inBox(double lon, double lat) {
            return lon >= MIN_LON && lon <= MAX_LON && lat >= MIN_LAT && lat <= MAX_LAT;
        }
    }

    // ---- job (b) ----------------------------------------------------------------------------

    static void perDriverHourly(StreamExecutionEnvironment env, String bootstrap, String input, String output,
            String name, DeliveryGuarantee delivery) {
        // Timestamps and watermarks at the source, so the watermark is kept per split (partition).
        WatermarkStrategy<RideEvent> watermarks = WatermarkStrategy
                .<RideEvent>forBoundedOutOfOrderness(Duration.ofSeconds(60))
                .withTimestampAssigner((ride, recordTimestamp) -> ride.eventTime);
        DataStream<RideEvent> rides = env.fromSource(
                source(bootstrap, input, name, new Serde.RideDeserializer()), watermarks, "rides");
        rides.filter(ride -> !ride.isStart).name("END events")
                .keyBy(ride -> ride.driverId)
                .window(TumblingEventTimeWindows.of(Duration.ofHours(1)))
                .allowedLateness(Duration.ZERO)
                .aggregate(new CountRides(), new WithWindowBounds())
                .name("rides per driver per hour")
                .sinkTo(sink(bootstrap, name, delivery, new Serde.DriverHourSerializer(output)))
                .name("driver hours");
    }

    /** Incremental: END events and their passengers, one accumulator per driver and window. */
    public static class CountRides implements AggregateFunction<RideEvent, RidesAndPassengers, RidesAndPassengers> {
        @Override
        public RidesAndPassengers createAccumulator() {
            return new RidesAndPassengers();
        }

        @Override
        public RidesAndPassengers add(RideEvent ride, RidesAndPassengers acc) {
            acc.rides += 1;
            acc.passengers += ride.passengers;
            return acc;
        }

        @Override
        public RidesAndPassengers getResult(RidesAndPassengers acc) {
            return acc;
        }

        @Override
        public RidesAndPassengers merge(RidesAndPassengers a, RidesAndPassengers b) {
            a.rides += b.rides;
            a.passengers += b.passengers;
            return a;
        }
    }

    /** Adds the driver and the window's bounds to the aggregate when the window fires. */
    public static class WithWindowBounds
            extends ProcessWindowFunction<RidesAndPassengers, DriverHour, Long, TimeWindow> {
        @Override
        public void process(Long driverId, Context ctx, Iterable<RidesAndPassengers> aggregates,
                Collector<DriverHour> out) {
            RidesAndPassengers acc = aggregates.iterator().next();
            DriverHour h = new DriverHour();
            h.driverId = driverId;
            h.windowStart = ctx.window().getStart();
            h.windowEnd = ctx.window().getEnd();
            h.rides = acc.rides;
            h.passengers = acc.passengers;
            out.collect(h);
        }
    }

    // ---- Kafka ------------------------------------------------------------------------------

    static <T> StartedSignal<T, ?, ?> source(String bootstrap, String topic, String name,
            KafkaRecordDeserializationSchema<T> deserializer) {
        KafkaSource<T> kafka = KafkaSource.<T>builder()
                .setBootstrapServers(bootstrap)
                .setTopics(topic)
                .setGroupId(name)
                .setClientIdPrefix(name)
                // A fresh job reads from the start; a restored one from its checkpointed offsets.
                .setStartingOffsets(OffsetsInitializer.earliest())
                .setDeserializer(deserializer)
                .setProperty("isolation.level", "read_committed")
                .build();
        TypeInformation<T> type = deserializer.getProducedType();
        return new StartedSignal<>(kafka, type, topic);
    }

    static <T> KafkaSink<T> sink(String bootstrap, String name, DeliveryGuarantee delivery,
            KafkaRecordSerializationSchema<T> serializer) {
        return KafkaSink.<T>builder()
                .setBootstrapServers(bootstrap)
                .setRecordSerializer(serializer)
                .setDeliveryGuarantee(delivery)
                .setTransactionalIdPrefix(name)
                // Must not exceed the broker's transaction.max.timeout.ms (15 min by default).
                .setProperty("transaction.timeout.ms", "300000")
                .build();
    }

    // ---- recovery ---------------------------------------------------------------------------

    /**
     * The newest completed checkpoint under {@code dir}: a {@code <job id>/chk-N} directory with a
     * {@code _metadata} file (written last, when the checkpoint completes). Every run has a new
     * job id; checkpoint numbers go on from the restored one, so the newest is the one whose
     * {@code _metadata} was written last (ties broken by N).
     */
    static Optional<Path> latestCompletedCheckpoint(Path dir) throws IOException {
        try (Stream<Path> jobs = Files.list(dir)) {
            return jobs.filter(Files::isDirectory)
                    .flatMap(FlinkPeer::listQuietly)
                    .filter(p -> p.getFileName().toString().matches("chk-\\d+"))
                    .filter(p -> Files.isRegularFile(p.resolve("_metadata")))
                    .max(Comparator.comparingLong(FlinkPeer::metadataMillis)
                            .thenComparingLong(p -> Long.parseLong(p.getFileName().toString().substring(4))));
        }
    }

    /**
     * Removes what killed runs left half-written: {@code chk-N} directories without a
     * {@code _metadata} (a checkpoint in progress at the kill). No job runs on the directory yet.
     */
    static void removeIncompleteCheckpoints(Path dir) throws IOException {
        try (Stream<Path> jobs = Files.list(dir)) {
            for (Path chk : jobs.filter(Files::isDirectory).flatMap(FlinkPeer::listQuietly).toList()) {
                if (chk.getFileName().toString().matches("chk-\\d+") && !Files.exists(chk.resolve("_metadata"))) {
                    deleteRecursively(chk);
                }
            }
        }
    }

    private static void deleteRecursively(Path root) throws IOException {
        try (Stream<Path> all = Files.walk(root)) {
            for (Path p : all.sorted(Comparator.reverseOrder()).toList()) {
                Files.deleteIfExists(p);
            }
        }
    }

    private static Stream<Path> listQuietly(Path dir) {
        try (Stream<Path> s = Files.list(dir)) {
            return s.toList().stream();
        } catch (IOException e) {
            return Stream.empty();
        }
    }

    private static long metadataMillis(Path chk) {
        try {
            return Files.getLastModifiedTime(chk.resolve("_metadata")).toMillis();
        } catch (IOException e) {
            return Long.MIN_VALUE;
        }
    }

    static String env(String key) {
        String v = System.getenv(key);
        if (v == null || v.isEmpty()) {
            throw new IllegalArgumentException("environment variable " + key + " is not set");
        }
        return v;
    }
}
