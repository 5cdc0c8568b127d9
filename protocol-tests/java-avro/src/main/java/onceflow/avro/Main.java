package onceflow.avro;

import io.apicurio.registry.serde.Default4ByteIdHandler;
import io.apicurio.registry.serde.avro.AvroKafkaDeserializer;
import io.apicurio.registry.serde.avro.AvroKafkaSerializer;
import io.apicurio.registry.serde.avro.AvroSerdeConfig;
import io.apicurio.registry.serde.avro.NonRecordContainer;
import io.apicurio.registry.serde.config.IdOption;
import io.apicurio.registry.serde.config.SerdeConfig;
import io.apicurio.registry.serde.kafka.config.KafkaSerdeConfig;
import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.DecoderFactory;
import org.apache.avro.io.EncoderFactory;
import org.apache.avro.io.JsonEncoder;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Avro interop peer: Apicurio Registry's Kafka Avro serde (Confluent wire format: magic byte 0,
 * 4-byte big-endian schema id = the registry's contentId, Avro binary) plus the official Kafka
 * client. Values come in and go out in the Avro JSON encoding, one per line. Diagnostics go to
 * stderr; stdout carries only data. The protobuf-* subcommands are {@link ProtobufPeer}'s.
 */
public final class Main {
  private static final PrintStream ERR = System.err;

  private static final String USAGE = String.join("\n",
      "usage: avro-interop <subcommand> --registry URL [options]",
      "",
      "  produce --bootstrap HOST:PORT --registry URL --topic T --schema FILE.avsc [--prop k=v]...",
      "          stdin: one value per line in the Avro JSON encoding; each becomes a record value",
      "          written by Apicurio's AvroKafkaSerializer (subject = artifact T-value, registered",
      "          if new); prints nothing; exit 0 once every record is acknowledged",
      "  consume --bootstrap HOST:PORT --registry URL --topic T --count N",
      "          [--reader-schema FILE.avsc] [--timeout-ms 60000] [--prop k=v]...",
      "          reads N record values from the beginning of every partition (output ordered by",
      "          partition, then offset), decodes them with AvroKafkaDeserializer (writer schema by",
      "          the id in the bytes; with --reader-schema, resolved to that schema) and prints per",
      "          record: {\"schema_id\": ID, \"value\": <Avro JSON encoding, one line>}",
      "  encode  --registry URL --subject S --schema FILE.avsc",
      "          no Kafka: stdin values (Avro JSON encoding) -> the serializer's framed bytes,",
      "          base64, one line each (registers the schema under subject S if new)",
      "",
      "  protobuf-produce --bootstrap HOST:PORT --registry URL --topic T --schema FILE.proto",
      "          [--message NAME] [--prop k=v]...",
      "          stdin: one value per line in the proto3 JSON mapping, each parsed into a",
      "          DynamicMessage of message NAME (default: the file's first top-level message; NAME",
      "          may be nested, Outer.Inner, with or without the package) and written by Apicurio's",
      "          ProtobufKafkaSerializer in the Confluent format (subject = artifact T-value);",
      "          prints nothing; exit 0 once every record is acknowledged",
      "  protobuf-consume --bootstrap HOST:PORT --registry URL --topic T --count N",
      "          [--timeout-ms 60000] [--prop k=v]...",
      "          reads N record values as consume does, decodes them into DynamicMessage (schema by",
      "          the id, message type by the Confluent message indexes) and prints per record:",
      "          {\"schema_id\": ID, \"indexes\": [..], \"value\": <proto3 JSON, one line, fields with",
      "          default values included>}",
      "  protobuf-encode --registry URL --subject S --schema FILE.proto [--message NAME]",
      "          no Kafka: stdin values (proto3 JSON) -> the serializer's framed bytes, base64, one",
      "          line each (registers the schema under subject S if new)",
      "",
      "  bench --registry URL --format avro|protobuf [--count N] [--warmup W] [--topic T]",
      "          no Kafka: times the serializer and the deserializer on N records of a fixed schema",
      "          (SerdeBench; benches/run-serde-comparison.sh), one JSON line per phase",
      "",
      "URL: the Confluent-compatible base (http://HOST:PORT/apis/ccompat/v7, as schema-registry.sh",
      "prints it) or Apicurio's own API (http://HOST:PORT/apis/registry/v3); the serde always talks",
      "to the latter, derived from the former.");

  /** Carries --reader-schema into {@link ReaderSchemaDatumProvider} through the serde config. */
  static final String READER_SCHEMA_CONFIG = "onceflow.avro.reader-schema";

  /** Held so that the level set on it stays (java.util.logging keeps loggers weakly). */
  private static final java.util.logging.Logger APICURIO_LOG = java.util.logging.Logger.getLogger("io.apicurio");

  public static void main(String[] argv) {
    // The registry client logs through java.util.logging (a warning about its shared Vert.x
    // instance on every run): only errors, on stderr.
    APICURIO_LOG.setLevel(java.util.logging.Level.SEVERE);
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
        case "encode": rc = encode(a); break;
        case "protobuf-produce": rc = ProtobufPeer.produce(a); break;
        case "protobuf-consume": rc = ProtobufPeer.consume(a); break;
        case "protobuf-encode": rc = ProtobufPeer.encode(a); break;
        case "bench": rc = SerdeBench.run(a); break;
        default: throw new Args.UsageException("unknown subcommand '" + argv[0] + "'");
      }
    } catch (Args.UsageException e) {
      ERR.println("avro-interop: " + e.getMessage());
      ERR.println(USAGE);
      rc = 2;
    } catch (Throwable t) {
      Throwable c = (t instanceof ExecutionException && t.getCause() != null) ? t.getCause() : t;
      ERR.println("avro-interop " + argv[0] + ": FAILED: " + c);
      c.printStackTrace(ERR);
      rc = 1;
    }
    System.out.flush();
    ERR.flush();
    // Client threads (the serde's Vert.x HTTP client, a producer whose close timed out) must not
    // keep the JVM alive.
    System.exit(rc);
  }

  // ---------------------------------------------------------------------------------------------
  // registry + serde configuration

  /** Apicurio's v3 API base for a ccompat base URL (or the v3 base itself). */
  static String apicurioApiUrl(String url) {
    String u = url.replaceAll("/+$", "");
    int i = u.indexOf("/apis/");
    String root = i >= 0 ? u.substring(0, i) : u;
    return root + "/apis/registry/v3";
  }

  /**
   * The serde settings that give the Confluent wire format. They are the serde's defaults in 3.x
   * (SerdeConfig / KafkaSerdeConfig / AvroSerdeConfig), set explicitly so that a change of default
   * cannot go unnoticed: magic byte 0 (always written by AbstractSerializer), then
   * Default4ByteIdHandler writing the contentId as a 4-byte big-endian int, the id in the payload
   * and not in Kafka headers, Avro binary encoding. With the registry's default
   * apicurio.ccompat.legacy-id-mode.enabled=false, the ccompat API's schema id IS the contentId.
   */
  static Map<String, Object> serdeConfig(String registry) {
    Map<String, Object> c = new HashMap<>();
    c.put(SerdeConfig.REGISTRY_URL, apicurioApiUrl(registry));
    c.put(SerdeConfig.ID_HANDLER, Default4ByteIdHandler.class.getName());
    c.put(SerdeConfig.USE_ID, IdOption.contentId.name());
    c.put(KafkaSerdeConfig.ENABLE_HEADERS, "false");
    c.put(AvroSerdeConfig.AVRO_ENCODING, AvroSerdeConfig.AVRO_ENCODING_BINARY);
    return c;
  }

  static Map<String, Object> serializerConfig(String registry) {
    Map<String, Object> c = serdeConfig(registry);
    // Register the writer schema as a new version of the subject's artifact when its content is
    // not there yet (FIND_OR_CREATE_VERSION, the default if-exists policy).
    c.put(SerdeConfig.AUTO_REGISTER_ARTIFACT, "true");
    // NOT a default: without it the 3.x serializer registers every named type nested in the
    // schema (a record's enum, a record field, ...) as an artifact of its own (subject = the
    // type's full name, e.g. "nyc.Kind") and the top schema as text that names it ("type":"Kind")
    // plus a references list. /schemas/ids/{id} then returns a schema that a plain Avro parser
    // cannot read without fetching the references first, unlike what Confluent's serializer
    // registers. true registers the whole schema inline, as Schema.toString() prints it.
    c.put(SerdeConfig.DEREFERENCE_SCHEMA, "true");
    return c;
  }

  static Schema parseSchemaFile(String file) throws IOException {
    return new Schema.Parser().parse(Files.readString(Paths.get(file), StandardCharsets.UTF_8));
  }

  /** stdin lines (blank ones skipped) decoded with JsonDecoder against the schema. */
  static List<Object> readJsonValues(Schema schema) throws IOException {
    GenericDatumReader<Object> reader = new OrderedGenericDatumReader<>(schema);
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    List<Object> out = new ArrayList<>();
    String line;
    int lineNo = 0;
    while ((line = in.readLine()) != null) {
      lineNo++;
      if (line.isBlank()) continue;
      try {
        out.add(reader.read(null, DecoderFactory.get().jsonDecoder(schema, line)));
      } catch (IOException | RuntimeException e) {
        throw new IllegalArgumentException("stdin:" + lineNo + ": not a value of the schema in the Avro JSON encoding: " + e, e);
      }
    }
    return out;
  }

  /** Records go to the serializer as they are; anything else with its schema attached. */
  static Object serializable(Schema schema, Object value) {
    if (value instanceof GenericRecord) return value;
    return new NonRecordContainer<>(schema, value);
  }

  static String toAvroJson(Schema schema, Object value) throws IOException {
    ByteArrayOutputStream bos = new ByteArrayOutputStream();
    JsonEncoder enc = EncoderFactory.get().jsonEncoder(schema, bos, false);
    new GenericDatumWriter<Object>(schema).write(value, enc);
    enc.flush();
    return bos.toString(StandardCharsets.UTF_8);
  }

  static int schemaIdOf(byte[] framed) {
    if (framed == null || framed.length < 5 || framed[0] != 0) {
      throw new IllegalStateException("not in the Confluent wire format (magic 0 + 4-byte id): "
          + (framed == null ? "null" : framed.length + " bytes"));
    }
    return ByteBuffer.wrap(framed, 1, 4).getInt();
  }

  // ---------------------------------------------------------------------------------------------
  // produce

  private static int produce(Args a) throws Exception {
    String bootstrap = a.required("bootstrap");
    String registry = a.required("registry");
    String topic = a.required("topic");
    Schema schema = parseSchemaFile(a.required("schema"));
    Properties extra = new Properties();
    a.putPairs(extra, "prop");
    a.checkAllUsed();

    List<Object> values = readJsonValues(schema);

    Properties p = new Properties();
    p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    p.put(ProducerConfig.ACKS_CONFIG, "all");
    p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, AvroKafkaSerializer.class.getName());
    p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
    p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
    p.putAll(serializerConfig(registry));
    p.putAll(extra);

    try (KafkaProducer<byte[], Object> producer = new KafkaProducer<>(p)) {
      List<Future<RecordMetadata>> acks = new ArrayList<>();
      for (Object v : values) {
        acks.add(producer.send(new ProducerRecord<>(topic, null, serializable(schema, v))));
      }
      producer.flush();
      for (Future<RecordMetadata> f : acks) f.get();
    }
    return 0;
  }

  // ---------------------------------------------------------------------------------------------
  // consume

  private static int consume(Args a) throws Exception {
    String bootstrap = a.required("bootstrap");
    String registry = a.required("registry");
    String topic = a.required("topic");
    int count = a.getInt("count", -1);
    String readerFile = a.get("reader-schema", null);
    long timeoutMs = a.getLong("timeout-ms", 60000);
    Properties extra = new Properties();
    a.putPairs(extra, "prop");
    a.checkAllUsed();
    if (count < 0) throw new Args.UsageException("missing or negative --count");
    Schema readerSchema = readerFile == null ? null : parseSchemaFile(readerFile);

    Map<String, Object> dc = serdeConfig(registry);
    dc.put(AvroSerdeConfig.AVRO_DATUM_PROVIDER, ReaderSchemaDatumProvider.class.getName());
    if (readerSchema != null) dc.put(READER_SCHEMA_CONFIG, readerSchema.toString());

    List<ConsumerRecord<byte[], byte[]>> got = readRecords("consume", bootstrap, topic, count, timeoutMs, extra);
    if (got == null) return 1;

    try (AvroKafkaDeserializer<Object> deser = new AvroKafkaDeserializer<>()) {
      deser.configure(dc, false);
      for (ConsumerRecord<byte[], byte[]> r : got) {
        int id = schemaIdOf(r.value());
        ReaderSchemaDatumProvider.lastSchema = null;
        Object value = deser.deserialize(topic, r.headers(), r.value());
        Schema schema = ReaderSchemaDatumProvider.lastSchema;
        if (schema == null) throw new IllegalStateException("the deserializer reported no schema");
        System.out.println("{\"schema_id\": " + id + ", \"value\": " + toAvroJson(schema, value) + "}");
      }
    }
    return 0;
  }

  /**
   * The first {@code count} record values of the topic, read with a byte-array consumer from the
   * beginning of every partition and ordered by partition, then offset. Null (after a message on
   * stderr, prefixed with the subcommand's name) when the topic has no partitions or fewer records
   * came within the timeout.
   */
  static List<ConsumerRecord<byte[], byte[]>> readRecords(String subcommand, String bootstrap, String topic,
      int count, long timeoutMs, Properties extra) throws InterruptedException {
    Properties p = new Properties();
    p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    p.putAll(extra);

    long deadline = System.currentTimeMillis() + timeoutMs;
    List<ConsumerRecord<byte[], byte[]>> got = new ArrayList<>();
    try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
      List<TopicPartition> tps = new ArrayList<>();
      while (true) {
        List<PartitionInfo> parts;
        try {
          parts = consumer.partitionsFor(topic, Duration.ofSeconds(5));
        } catch (org.apache.kafka.common.errors.TimeoutException e) {
          parts = null; // a loaded machine: ask again until the deadline
        }
        if (parts != null && !parts.isEmpty()) {
          for (PartitionInfo pi : parts) tps.add(new TopicPartition(topic, pi.partition()));
          break;
        }
        if (System.currentTimeMillis() >= deadline) {
          ERR.println("avro-interop " + subcommand + ": topic " + topic + " has no partitions (does it exist?)");
          return null;
        }
        Thread.sleep(200);
      }
      consumer.assign(tps);
      consumer.seekToBeginning(tps);
      while (got.size() < count) {
        long left = deadline - System.currentTimeMillis();
        if (left <= 0) {
          ERR.println("avro-interop " + subcommand + ": timed out with " + got.size() + " of " + count + " records");
          return null;
        }
        for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(Math.min(left, 500)))) {
          got.add(r);
        }
      }
    }
    got.sort(Comparator.<ConsumerRecord<byte[], byte[]>>comparingInt(ConsumerRecord::partition)
        .thenComparingLong(ConsumerRecord::offset));
    return got.subList(0, count);
  }

  // ---------------------------------------------------------------------------------------------
  // encode

  private static int encode(Args a) throws Exception {
    String registry = a.required("registry");
    String subject = a.required("subject");
    Schema schema = parseSchemaFile(a.required("schema"));
    a.checkAllUsed();

    List<Object> values = readJsonValues(schema);
    Map<String, Object> c = serializerConfig(registry);
    // The subject is the artifact (group "default", where the ccompat API keeps subjects), in place
    // of what TopicIdStrategy would derive from a topic.
    c.put(SerdeConfig.EXPLICIT_ARTIFACT_ID, subject);
    try (AvroKafkaSerializer<Object> ser = new AvroKafkaSerializer<>()) {
      ser.configure(c, false);
      Base64.Encoder b64 = Base64.getEncoder();
      for (Object v : values) {
        byte[] framed = ser.serialize(subject, serializable(schema, v));
        schemaIdOf(framed); // asserts the framing
        System.out.println(b64.encodeToString(framed));
      }
    }
    return 0;
  }
}
