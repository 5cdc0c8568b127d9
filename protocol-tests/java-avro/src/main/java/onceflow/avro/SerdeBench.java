package onceflow.avro;

import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.EnumValueDescriptor;
import com.google.protobuf.Descriptors.FieldDescriptor;
import com.google.protobuf.DynamicMessage;
import io.apicurio.registry.serde.avro.AvroKafkaDeserializer;
import io.apicurio.registry.serde.avro.AvroKafkaSerializer;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Locale;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;

/**
 * {@code bench --registry URL --format avro|protobuf [--count N] [--warmup W] [--topic T]}: the
 * Java side of benches/run-serde-comparison.sh, beside onceflow-perf's {@code serde}
 * (benches/perf/src/serde_bench.rs): the same schema, the same N record values, Apicurio's serdes
 * on one thread, no Kafka.
 *
 * <ul>
 *   <li>Avro: AvroKafkaSerializer of GenericRecords, AvroKafkaDeserializer (GenericRecord out),
 *       configured as {@link Main#serializerConfig} / {@link Main#serdeConfig} (Confluent framing).
 *   <li>Protobuf: ProtobufKafkaSerializer of DynamicMessages, the peer's own
 *       {@link ProtobufPeer.IndexedProtobufKafkaDeserializer} (message type by the Confluent
 *       message indexes), configured as {@link ProtobufPeer#serializerConfig}.
 * </ul>
 *
 * The values are built before the timed phases. An untimed pass over the first W records (default
 * 200,000) encodes and decodes first, so that the JIT has compiled the paths and the registry has
 * been asked (the serializer registers the schema, the deserializer fetches it by id; both cache);
 * it is printed as the phases warmup_encode and warmup_decode. Then the timed phases, encode over
 * all N values and decode over all N records, print one JSON line each, as onceflow-perf does:
 * {@code {"impl":"java","format":..,"phase":..,"records":N,"secs":..,"records_per_sec":..,
 * "cpu_ns_per_record":..,"thread_cpu_ns_per_record":..,"bytes_per_record":..,"check":..}}. CPU:
 * the process's (OperatingSystemMXBean.getProcessCpuTime: every thread, JIT compiler and GC
 * included) and this thread's (ThreadMXBean), over the phase. check: FNV-1a 64 of the payloads
 * after the framing (encode) or the sum of the decoded ids (decode).
 */
final class SerdeBench {
  private SerdeBench() {}

  /** onceflow-perf's serde_bench::AVRO_SCHEMA, the same text. */
  static final String AVRO_SCHEMA = "{\"type\":\"record\",\"name\":\"Ride\",\"namespace\":\"bench\",\"fields\":["
      + "{\"name\":\"id\",\"type\":\"long\"},"
      + "{\"name\":\"zone\",\"type\":[\"null\",\"string\"],\"default\":null},"
      + "{\"name\":\"fare\",\"type\":\"double\"},"
      + "{\"name\":\"kind\",\"type\":{\"type\":\"enum\",\"name\":\"Kind\",\"symbols\":[\"STANDARD\",\"SHARED\",\"PREMIUM\"]}},"
      + "{\"name\":\"at\",\"type\":{\"type\":\"long\",\"logicalType\":\"timestamp-millis\"}},"
      + "{\"name\":\"note\",\"type\":\"string\"},"
      + "{\"name\":\"point\",\"type\":{\"type\":\"array\",\"items\":\"double\"}}]}";

  /** onceflow-perf's serde_bench::PROTO_SCHEMA, the same text. */
  static final String PROTO_SCHEMA = String.join("\n",
      "syntax = \"proto3\";",
      "package bench;",
      "",
      "enum Kind {",
      "  STANDARD = 0;",
      "  SHARED = 1;",
      "  PREMIUM = 2;",
      "}",
      "",
      "message Ride {",
      "  int64 id = 1;",
      "  string zone = 2;",
      "  double fare = 3;",
      "  Kind kind = 4;",
      "  int64 at = 5;",
      "  string note = 6;",
      "  repeated double point = 7;",
      "}",
      "");

  static final String[] ZONES = {"JFK", "LGA", "Midtown", "Harlem", "SoHo"};
  static final String[] KINDS = {"STANDARD", "SHARED", "PREMIUM"};

  // Record i's values: the same as onceflow-perf's Ride::nth.
  static long id(long i) { return i; }
  static String zone(long i) { return i % 7 != 0 ? ZONES[(int) (i % 5)] : null; }
  static double fare(long i) { return 5.0 + (i % 1000) * 0.25; }
  static int kind(long i) { return (int) (i % 3); }
  static long at(long i) { return 1_700_000_000_000L + i * 1000; }
  static String note(long i) { return String.format(Locale.ROOT, "note-%010d-abcdefghijklmno", i); }
  static double lat(long i) { return 40.0 + (i % 100) * 0.5; }
  static double lon(long i) { return -74.0 + (i % 50) * 0.25; }

  static int run(Args a) throws Exception {
    String registry = a.required("registry");
    String format = a.required("format");
    int count = a.getInt("count", 1_000_000);
    int warmup = Math.min(a.getInt("warmup", 200_000), count);
    String topic = a.get("topic", "serde-bench-java-" + format);
    a.checkAllUsed();
    switch (format) {
      case "avro": avro(registry, topic, count, warmup); break;
      case "protobuf": protobuf(registry, topic, count, warmup); break;
      default: throw new Args.UsageException("--format " + format + ": expected avro or protobuf");
    }
    return 0;
  }

  // ---------------------------------------------------------------------------------------------
  // timing

  private static final com.sun.management.OperatingSystemMXBean OS =
      (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
  private static final ThreadMXBean THREADS = ManagementFactory.getThreadMXBean();

  /** A phase being timed. */
  static final class Phase {
    final String format;
    final String name;
    final long cpu;
    final long threadCpu;
    final long start;

    Phase(String format, String name) {
      this.format = format;
      this.name = name;
      this.cpu = OS.getProcessCpuTime();
      this.threadCpu = THREADS.getCurrentThreadCpuTime();
      this.start = System.nanoTime();
    }

    void end(int records, long bytes, String check) {
      long nanos = System.nanoTime() - start;
      long cpuNow = OS.getProcessCpuTime();
      long threadNow = THREADS.getCurrentThreadCpuTime();
      double secs = nanos / 1e9;
      double n = Math.max(records, 1);
      System.out.println(String.format(Locale.ROOT,
          "{\"impl\":\"java\",\"format\":\"%s\",\"phase\":\"%s\",\"records\":%d,\"secs\":%.4f,"
              + "\"records_per_sec\":%.0f,\"cpu_ns_per_record\":%.1f,\"thread_cpu_ns_per_record\":%.1f,"
              + "\"bytes_per_record\":%.2f,\"check\":\"%s\"}",
          format, name, records, secs, records / secs, (cpuNow - cpu) / n, (threadNow - threadCpu) / n,
          bytes / n, check));
      System.out.flush();
    }
  }

  /** FNV-1a 64 over every record's payload after its framing. */
  static String fnv(byte[][] records, int count, java.util.function.ToIntFunction<byte[]> skip) {
    long h = 0xcbf29ce484222325L;
    for (int r = 0; r < count; r++) {
      byte[] b = records[r];
      for (int i = skip.applyAsInt(b); i < b.length; i++) {
        h ^= b[i] & 0xff;
        h *= 0x100000001b3L;
      }
    }
    return String.format("%016x", h);
  }

  static long totalLength(byte[][] records, int count) {
    long n = 0;
    for (int i = 0; i < count; i++) n += records[i].length;
    return n;
  }

  // ---------------------------------------------------------------------------------------------
  // Avro

  static void avro(String registry, String topic, int n, int warmup) throws Exception {
    Schema schema = new Schema.Parser().parse(AVRO_SCHEMA);
    Schema kindSchema = schema.getField("kind").schema();
    GenericData.EnumSymbol[] kinds = new GenericData.EnumSymbol[KINDS.length];
    for (int k = 0; k < kinds.length; k++) kinds[k] = new GenericData.EnumSymbol(kindSchema, KINDS[k]);
    GenericRecord[] values = new GenericRecord[n];
    for (int i = 0; i < n; i++) {
      GenericData.Record r = new GenericData.Record(schema);
      r.put(0, id(i));
      r.put(1, zone(i));
      r.put(2, fare(i));
      r.put(3, kinds[kind(i)]);
      r.put(4, at(i));
      r.put(5, note(i));
      r.put(6, Arrays.asList(lat(i), lon(i)));
      values[i] = r;
    }
    byte[][] out = new byte[n][];
    try (AvroKafkaSerializer<GenericRecord> ser = new AvroKafkaSerializer<>();
        AvroKafkaDeserializer<GenericRecord> de = new AvroKafkaDeserializer<>()) {
      ser.configure(Main.serializerConfig(registry), false);
      de.configure(Main.serdeConfig(registry), false);

      Phase p = new Phase("avro", "warmup_encode");
      for (int i = 0; i < warmup; i++) out[i] = ser.serialize(topic, values[i]);
      p.end(warmup, totalLength(out, warmup), fnv(out, warmup, b -> 5));
      p = new Phase("avro", "warmup_decode");
      long ids = 0;
      for (int i = 0; i < warmup; i++) ids += (Long) de.deserialize(topic, out[i]).get(0);
      p.end(warmup, totalLength(out, warmup), Long.toString(ids));

      p = new Phase("avro", "encode");
      for (int i = 0; i < n; i++) out[i] = ser.serialize(topic, values[i]);
      long bytes = totalLength(out, n);
      p.end(n, bytes, fnv(out, n, b -> 5));
      values = null;

      p = new Phase("avro", "decode");
      ids = 0;
      for (int i = 0; i < n; i++) ids += (Long) de.deserialize(topic, out[i]).get(0);
      p.end(n, bytes, Long.toString(ids));
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Protobuf

  static void protobuf(String registry, String topic, int n, int warmup) throws Exception {
    Path file = Files.createTempFile("serde-bench", ".proto");
    ProtobufPeer.ProtoSchema schema;
    try {
      Files.writeString(file, PROTO_SCHEMA, StandardCharsets.UTF_8);
      schema = ProtobufPeer.loadSchema(file.toString(), "bench.Ride");
    } finally {
      Files.deleteIfExists(file);
    }
    Descriptor d = schema.message;
    FieldDescriptor fId = d.findFieldByNumber(1);
    FieldDescriptor fZone = d.findFieldByNumber(2);
    FieldDescriptor fFare = d.findFieldByNumber(3);
    FieldDescriptor fKind = d.findFieldByNumber(4);
    FieldDescriptor fAt = d.findFieldByNumber(5);
    FieldDescriptor fNote = d.findFieldByNumber(6);
    FieldDescriptor fPoint = d.findFieldByNumber(7);
    EnumValueDescriptor[] kinds = new EnumValueDescriptor[KINDS.length];
    for (int k = 0; k < kinds.length; k++) kinds[k] = fKind.getEnumType().findValueByNumber(k);
    DynamicMessage[] values = new DynamicMessage[n];
    for (int i = 0; i < n; i++) {
      DynamicMessage.Builder b = DynamicMessage.newBuilder(d);
      b.setField(fId, id(i));
      String z = zone(i);
      if (z != null) b.setField(fZone, z);
      b.setField(fFare, fare(i));
      b.setField(fKind, kinds[kind(i)]);
      b.setField(fAt, at(i));
      b.setField(fNote, note(i));
      b.addRepeatedField(fPoint, lat(i));
      b.addRepeatedField(fPoint, lon(i));
      values[i] = b.build();
    }
    byte[][] out = new byte[n][];
    java.util.function.ToIntFunction<byte[]> framing = b -> ProtobufPeer.Framed.parse(b).payloadOffset;
    try (io.apicurio.registry.serde.protobuf.ProtobufKafkaSerializer<DynamicMessage> ser =
            new io.apicurio.registry.serde.protobuf.ProtobufKafkaSerializer<>();
        ProtobufPeer.IndexedProtobufKafkaDeserializer de = new ProtobufPeer.IndexedProtobufKafkaDeserializer()) {
      ser.configure(ProtobufPeer.serializerConfig(registry), false);
      de.configure(ProtobufPeer.serdeConfig(registry), false);

      Phase p = new Phase("protobuf", "warmup_encode");
      for (int i = 0; i < warmup; i++) out[i] = ser.serialize(topic, values[i]);
      p.end(warmup, totalLength(out, warmup), fnv(out, warmup, framing));
      p = new Phase("protobuf", "warmup_decode");
      long ids = 0;
      for (int i = 0; i < warmup; i++) ids += decodedId(de.deserialize(topic, out[i]));
      p.end(warmup, totalLength(out, warmup), Long.toString(ids));

      p = new Phase("protobuf", "encode");
      for (int i = 0; i < n; i++) out[i] = ser.serialize(topic, values[i]);
      long bytes = totalLength(out, n);
      p.end(n, bytes, fnv(out, n, framing));
      values = null;

      p = new Phase("protobuf", "decode");
      ids = 0;
      for (int i = 0; i < n; i++) ids += decodedId(de.deserialize(topic, out[i]));
      p.end(n, bytes, Long.toString(ids));
    }
  }

  /**
   * The id of a decoded message, by its own Descriptor (the one built from the schema the registry
   * returned, not the writer's: a DynamicMessage refuses a FieldDescriptor of another Descriptor).
   */
  private static long decodedId(DynamicMessage m) {
    return (Long) m.getField(m.getDescriptorForType().findFieldByNumber(1));
  }
}
