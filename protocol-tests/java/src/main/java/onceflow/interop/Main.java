package onceflow.interop;

import java.io.BufferedWriter;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Command-line peer built on the official Java client, used by onceflow's interop tests.
 * Everything diagnostic goes to stderr; stdout only carries requested data (offsets).
 */
public final class Main {
  private static final PrintStream ERR = System.err;

  private static final String USAGE = String.join("\n",
      "usage: interop <subcommand> --bootstrap HOST:PORT --topic T [options]",
      "",
      "  produce      --input FILE.jsonl [--acks all|1|0] [--compression none|gzip|snappy|lz4|zstd]",
      "               [--idempotent true|false] [--transactional-id ID --txn-size N [--abort-every K]]",
      "               [--linger-ms MS] [--flush-every N] [--prop k=v]...",
      "  consume      --output FILE.jsonl --expect N [--timeout-ms 60000]",
      "               [--isolation read_committed|read_uncommitted] [--group G] [--exact true|false]",
      "               [--settle-ms 1000] [--prop k=v]...",
      "  group-member --group G --duration-ms MS --output FILE.jsonl [--stop-file PATH]",
      "               (runs until PATH exists, at most MS)",
      "               [--isolation read_committed|read_uncommitted] [--prop k=v]...",
      "  create-topic --partitions P [--replication-factor 1] [--config k=v]... [--if-not-exists true]",
      "  delete-topic [--if-exists true]",
      "  offsets      [--wait-stable-ms MS]   prints one JSON line per partition:",
      "               {\"partition\":p,\"earliest\":e,\"latest\":hw,\"last_stable\":lso}",
      "",
      "Input/output lines: {\"partition\":int|null,\"offset\":long (output only),\"timestamp\":long|null,",
      "  \"key\":base64|null,\"value\":base64|null,\"headers\":[{\"key\":string,\"value\":base64|null},...]}");

  public static void main(String[] argv) {
    if (argv.length == 0 || argv[0].equals("-h") || argv[0].equals("--help") || argv[0].equals("help")) {
      ERR.println(USAGE);
      System.exit(argv.length == 0 ? 2 : 0);
    }
    int rc;
    try {
      Args a = new Args(argv, 1);
      switch (argv[0]) {
        case "produce": rc = produce(a); break;
        case "consume": rc = consume(a); break;
        case "group-member": rc = groupMember(a); break;
        case "create-topic": rc = createTopic(a); break;
        case "delete-topic": rc = deleteTopic(a); break;
        case "offsets": rc = offsets(a); break;
        default: throw new Args.UsageException("unknown subcommand '" + argv[0] + "'");
      }
    } catch (Args.UsageException e) {
      ERR.println("interop: " + e.getMessage());
      ERR.println(USAGE);
      rc = 2;
    } catch (Throwable t) {
      Throwable c = (t instanceof ExecutionException && t.getCause() != null) ? t.getCause() : t;
      ERR.println("interop " + argv[0] + ": FAILED: " + c);
      c.printStackTrace(ERR);
      rc = 1;
    }
    ERR.flush();
    // Client threads (e.g. a producer whose close timed out) must not keep the JVM alive.
    System.exit(rc);
  }

  // ---------------------------------------------------------------------------------------------
  // produce

  private static int produce(Args a) throws Exception {
    String bootstrap = a.required("bootstrap");
    String topic = a.required("topic");
    Path input = Paths.get(a.required("input"));
    String acks = a.get("acks", "all");
    String compression = a.get("compression", "none");
    Boolean idempotent = a.getBool("idempotent");
    String txnId = a.get("transactional-id", null);
    int txnSize = a.getInt("txn-size", 0);
    int abortEvery = a.getInt("abort-every", 0);
    String linger = a.get("linger-ms", null);
    int flushEvery = a.getInt("flush-every", 0);
    Properties extra = new Properties();
    a.putPairs(extra, "prop");
    a.checkAllUsed();
    if (txnId != null && txnSize <= 0) throw new Args.UsageException("--transactional-id needs --txn-size N (N > 0)");
    if (txnId == null && (txnSize != 0 || abortEvery != 0)) {
      throw new Args.UsageException("--txn-size/--abort-every need --transactional-id");
    }

    List<Rec> recs = new ArrayList<>();
    int lineNo = 0;
    for (String line : Files.readAllLines(input, StandardCharsets.UTF_8)) {
      lineNo++;
      if (line.isBlank()) continue;
      try {
        recs.add(Rec.fromJson(line));
      } catch (RuntimeException e) {
        throw new IllegalArgumentException(input + ":" + lineNo + ": " + e.getMessage(), e);
      }
    }

    Properties p = new Properties();
    p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    p.put(ProducerConfig.CLIENT_ID_CONFIG, "onceflow-interop-producer");
    p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    p.put(ProducerConfig.ACKS_CONFIG, acks);
    p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, compression);
    if (idempotent != null) p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, idempotent.toString());
    if (Boolean.FALSE.equals(idempotent)) {
      // Without idempotence a retry could reorder batches; one request in flight keeps input order.
      p.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, "1");
    }
    if (linger != null) {
      p.put(ProducerConfig.LINGER_MS_CONFIG, linger);
      // delivery.timeout.ms must be >= linger.ms + request.timeout.ms.
      p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, Long.toString(Long.parseLong(linger) + 120_000L));
      // Large enough that batches are cut only by --flush-every / transaction ends.
      p.put(ProducerConfig.BATCH_SIZE_CONFIG, "1048576");
    }
    if (txnId != null) p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
    p.putAll(extra);

    long t0 = System.nanoTime();
    AtomicReference<Exception> failure = new AtomicReference<>();
    AtomicLong acked = new AtomicLong();
    int committed = 0;
    int aborted = 0;
    try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
      if (txnId == null) {
        int sinceFlush = 0;
        for (Rec r : recs) {
          send(producer, topic, r, failure, acked);
          if (flushEvery > 0 && ++sinceFlush == flushEvery) {
            producer.flush();
            sinceFlush = 0;
          }
          if (failure.get() != null) break;
        }
        producer.flush();
      } else {
        producer.initTransactions();
        int txn = 0;
        for (int start = 0; start < recs.size(); start += txnSize) {
          txn++;
          producer.beginTransaction();
          for (Rec r : recs.subList(start, Math.min(recs.size(), start + txnSize))) {
            send(producer, topic, r, failure, acked);
          }
          if (abortEvery > 0 && txn % abortEvery == 0) {
            // Flush first: abortTransaction drops records still in the accumulator, and the
            // point of an aborted transaction here is aborted data in the log.
            producer.flush();
            if (failure.get() != null) break;
            producer.abortTransaction();
            aborted++;
          } else {
            producer.commitTransaction();
            committed++;
          }
          if (failure.get() != null) break;
        }
      }
    }
    long ms = (System.nanoTime() - t0) / 1_000_000;
    if (failure.get() != null) throw failure.get();
    if (acked.get() != recs.size()) {
      throw new IllegalStateException("only " + acked.get() + " of " + recs.size() + " records were acknowledged");
    }
    ERR.printf("interop produce: topic=%s records=%d acked=%d compression=%s acks=%s idempotent=%s%s elapsed_ms=%d%n",
        topic, recs.size(), acked.get(), compression, acks, idempotent == null ? "default" : idempotent,
        txnId == null ? "" : String.format(" transactional_id=%s committed_txns=%d aborted_txns=%d", txnId, committed, aborted),
        ms);
    return 0;
  }

  private static void send(KafkaProducer<byte[], byte[]> producer, String topic, Rec r,
      AtomicReference<Exception> failure, AtomicLong acked) {
    ProducerRecord<byte[], byte[]> pr =
        new ProducerRecord<>(topic, r.partition, r.timestamp, r.key, r.value, r.headers);
    producer.send(pr, (md, e) -> {
      if (e != null) failure.compareAndSet(null, e);
      else acked.incrementAndGet();
    });
  }

  // ---------------------------------------------------------------------------------------------
  // consume / group-member

  private static Properties consumerProps(String bootstrap, String isolation, String group) {
    Properties p = new Properties();
    p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    p.put(ConsumerConfig.CLIENT_ID_CONFIG, "onceflow-interop-consumer");
    p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
    p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    if (group != null) {
      p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
      p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
    }
    return p;
  }

  private static String isolation(Args a) {
    String iso = a.get("isolation", "read_uncommitted");
    if (!iso.equals("read_uncommitted") && !iso.equals("read_committed")) {
      throw new Args.UsageException("--isolation must be read_committed or read_uncommitted");
    }
    return iso;
  }

  private static int consume(Args a) throws Exception {
    String bootstrap = a.required("bootstrap");
    String topic = a.required("topic");
    Path output = Paths.get(a.required("output"));
    long expect = a.getLong("expect", -1);
    if (expect < 0) throw new Args.UsageException("missing required option --expect N");
    long timeoutMs = a.getLong("timeout-ms", 60_000);
    String iso = isolation(a);
    String group = a.get("group", null);
    Boolean exact = a.getBool("exact");
    long settleMs = a.getLong("settle-ms", 1_000);
    Properties p = consumerProps(bootstrap, iso, group);
    a.putPairs(p, "prop");
    a.checkAllUsed();

    long t0 = System.nanoTime();
    long deadline = t0 + timeoutMs * 1_000_000L;
    List<Rec> got = new ArrayList<>();
    try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
      if (group != null) {
        c.subscribe(List.of(topic));
      } else {
        List<TopicPartition> tps = partitionsOf(c, topic, deadline);
        c.assign(tps);
        c.seekToBeginning(tps);
      }
      while (got.size() < expect && System.nanoTime() < deadline) {
        for (ConsumerRecord<byte[], byte[]> cr : c.poll(Duration.ofMillis(200))) got.add(Rec.fromConsumer(cr));
      }
      if (Boolean.TRUE.equals(exact) && got.size() == expect) {
        long settle = System.nanoTime() + settleMs * 1_000_000L;
        while (System.nanoTime() < settle) {
          for (ConsumerRecord<byte[], byte[]> cr : c.poll(Duration.ofMillis(100))) got.add(Rec.fromConsumer(cr));
        }
      }
      if (group != null && !got.isEmpty()) c.commitSync();
    }
    writeSorted(output, got);
    long ms = (System.nanoTime() - t0) / 1_000_000;
    ERR.printf("interop consume: topic=%s isolation=%s read=%d expected=%d elapsed_ms=%d%n",
        topic, iso, got.size(), expect, ms);
    if (got.size() < expect) {
      ERR.printf("interop consume: FAILED: timed out after %d ms having read %d of %d records%n",
          timeoutMs, got.size(), expect);
      return 1;
    }
    if (Boolean.TRUE.equals(exact) && got.size() != expect) {
      ERR.printf("interop consume: FAILED: read %d records, expected exactly %d%n", got.size(), expect);
      return 1;
    }
    return 0;
  }

  private static int groupMember(Args a) throws Exception {
    String bootstrap = a.required("bootstrap");
    String topic = a.required("topic");
    String group = a.required("group");
    long durationMs = Long.parseLong(a.required("duration-ms"));
    Path output = Paths.get(a.required("output"));
    String stop = a.get("stop-file", null);
    Path stopFile = stop == null ? null : Paths.get(stop);
    String iso = isolation(a);
    Properties p = consumerProps(bootstrap, iso, group);
    p.put(ConsumerConfig.CLIENT_ID_CONFIG, "onceflow-interop-member");
    a.putPairs(p, "prop");
    a.checkAllUsed();

    List<Rec> got = new ArrayList<>();
    Set<Integer> everAssigned = new TreeSet<>();
    long deadline = System.nanoTime() + durationMs * 1_000_000L;
    try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
      c.subscribe(List.of(topic));
      while (System.nanoTime() < deadline && (stopFile == null || !Files.exists(stopFile))) {
        for (ConsumerRecord<byte[], byte[]> cr : c.poll(Duration.ofMillis(100))) got.add(Rec.fromConsumer(cr));
        for (TopicPartition tp : c.assignment()) everAssigned.add(tp.partition());
      }
      c.commitSync();
    }
    writeSorted(output, got);
    ERR.printf("interop group-member: topic=%s group=%s read=%d partitions=%s%n", topic, group, got.size(), everAssigned);
    return 0;
  }

  private static List<TopicPartition> partitionsOf(KafkaConsumer<byte[], byte[]> c, String topic, long deadlineNanos) {
    while (true) {
      List<PartitionInfo> infos;
      try {
        infos = c.partitionsFor(topic, Duration.ofSeconds(5));
      } catch (org.apache.kafka.common.errors.TimeoutException e) {
        // A loaded machine: metadata took longer than 5 s. Ask again until the deadline.
        if (System.nanoTime() > deadlineNanos) throw e;
        continue;
      }
      if (infos != null && !infos.isEmpty()) {
        return infos.stream()
            .map(i -> new TopicPartition(topic, i.partition()))
            .sorted(Comparator.comparingInt(TopicPartition::partition))
            .collect(Collectors.toList());
      }
      if (System.nanoTime() > deadlineNanos) throw new IllegalStateException("topic " + topic + " has no partitions (does it exist?)");
    }
  }

  private static void writeSorted(Path output, List<Rec> got) throws IOException {
    got.sort(Comparator.<Rec>comparingInt(r -> r.partition).thenComparingLong(r -> r.offset));
    try (BufferedWriter w = Files.newBufferedWriter(output, StandardCharsets.UTF_8)) {
      for (Rec r : got) {
        w.write(r.toJson());
        w.write('\n');
      }
    }
  }

  // ---------------------------------------------------------------------------------------------
  // admin

  private static Admin admin(String bootstrap) {
    Properties p = new Properties();
    p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    p.put(AdminClientConfig.CLIENT_ID_CONFIG, "onceflow-interop-admin");
    return Admin.create(p);
  }

  private static int createTopic(Args a) throws Exception {
    String bootstrap = a.required("bootstrap");
    String topic = a.required("topic");
    int partitions = Integer.parseInt(a.required("partitions"));
    short rf = (short) a.getInt("replication-factor", 1);
    Map<String, String> configs = a.pairs("config");
    boolean ifNotExists = Boolean.TRUE.equals(a.getBool("if-not-exists"));
    a.checkAllUsed();
    try (Admin admin = admin(bootstrap)) {
      long deadline = System.nanoTime() + 30_000_000_000L;
      while (true) {
        try {
          admin.createTopics(List.of(new NewTopic(topic, partitions, rf).configs(configs))).all().get();
          break;
        } catch (ExecutionException e) {
          if (!(e.getCause() instanceof TopicExistsException)) throw e;
          if (ifNotExists) {
            ERR.printf("interop create-topic: %s already exists%n", topic);
            return 0;
          }
          // A topic of the same name being deleted reports "exists" for a moment: retry.
          if (System.nanoTime() > deadline) throw e;
          Thread.sleep(250);
        }
      }
      // Wait until every partition has a leader, so a producer started next finds it at once.
      while (true) {
        try {
          TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
          if (d.partitions().size() == partitions && d.partitions().stream().allMatch(i -> i.leader() != null)) break;
        } catch (ExecutionException e) {
          if (!(e.getCause() instanceof UnknownTopicOrPartitionException)) throw e;
        }
        if (System.nanoTime() > deadline) throw new IllegalStateException("topic " + topic + " has no leaders yet");
        Thread.sleep(100);
      }
    }
    ERR.printf("interop create-topic: created %s partitions=%d replication_factor=%d configs=%s%n", topic, partitions, rf, configs);
    return 0;
  }

  private static int deleteTopic(Args a) throws Exception {
    String bootstrap = a.required("bootstrap");
    String topic = a.required("topic");
    boolean ifExists = Boolean.TRUE.equals(a.getBool("if-exists"));
    a.checkAllUsed();
    try (Admin admin = admin(bootstrap)) {
      admin.deleteTopics(List.of(topic)).all().get();
    } catch (ExecutionException e) {
      if (ifExists && e.getCause() instanceof UnknownTopicOrPartitionException) {
        ERR.printf("interop delete-topic: %s does not exist%n", topic);
        return 0;
      }
      throw e;
    }
    ERR.printf("interop delete-topic: deleted %s%n", topic);
    return 0;
  }

  private static int offsets(Args a) throws Exception {
    String bootstrap = a.required("bootstrap");
    String topic = a.required("topic");
    long waitStableMs = a.getLong("wait-stable-ms", -1);
    a.checkAllUsed();
    long deadline = System.nanoTime() + Math.max(0, waitStableMs) * 1_000_000L;
    try (Admin admin = admin(bootstrap)) {
      TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
      List<TopicPartition> tps = new ArrayList<>();
      for (TopicPartitionInfo i : d.partitions()) tps.add(new TopicPartition(topic, i.partition()));
      tps.sort(Comparator.comparingInt(TopicPartition::partition));
      while (true) {
        Map<TopicPartition, Long> earliest = list(admin, tps, OffsetSpec.earliest(), IsolationLevel.READ_UNCOMMITTED);
        Map<TopicPartition, Long> latest = list(admin, tps, OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED);
        Map<TopicPartition, Long> stable = list(admin, tps, OffsetSpec.latest(), IsolationLevel.READ_COMMITTED);
        boolean isStable = tps.stream().allMatch(tp -> latest.get(tp).equals(stable.get(tp)));
        if (waitStableMs < 0 || isStable || System.nanoTime() > deadline) {
          StringBuilder out = new StringBuilder();
          for (TopicPartition tp : tps) {
            out.append(String.format("{\"partition\":%d,\"earliest\":%d,\"latest\":%d,\"last_stable\":%d}%n",
                tp.partition(), earliest.get(tp), latest.get(tp), stable.get(tp)));
          }
          System.out.print(out);
          System.out.flush();
          if (waitStableMs >= 0 && !isStable) {
            ERR.printf("interop offsets: FAILED: %s still has open transactions after %d ms%n", topic, waitStableMs);
            return 1;
          }
          return 0;
        }
        Thread.sleep(100);
      }
    }
  }

  private static Map<TopicPartition, Long> list(Admin admin, List<TopicPartition> tps, OffsetSpec spec, IsolationLevel iso)
      throws Exception {
    Map<TopicPartition, OffsetSpec> req = new HashMap<>();
    for (TopicPartition tp : tps) req.put(tp, spec);
    Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> res =
        admin.listOffsets(req, new ListOffsetsOptions(iso)).all().get();
    Map<TopicPartition, Long> m = new HashMap<>();
    for (TopicPartition tp : tps) m.put(tp, res.get(tp).offset());
    return m;
  }
}
