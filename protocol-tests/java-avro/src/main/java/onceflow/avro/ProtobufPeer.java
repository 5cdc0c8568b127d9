package onceflow.avro;

import com.google.protobuf.DescriptorProtos.FileDescriptorProto;
import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.FileDescriptor;
import com.google.protobuf.DynamicMessage;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.protobuf.util.JsonFormat;
import com.squareup.wire.schema.internal.parser.MessageElement;
import com.squareup.wire.schema.internal.parser.ProtoFileElement;
import com.squareup.wire.schema.internal.parser.ProtoParser;
import com.squareup.wire.schema.internal.parser.TypeElement;
import io.apicurio.registry.resolver.ParsedSchema;
import io.apicurio.registry.serde.config.SerdeConfig;
import io.apicurio.registry.serde.kafka.KafkaDeserializer;
import io.apicurio.registry.serde.protobuf.MessageIndexesUtil;
import io.apicurio.registry.serde.protobuf.ProtobufDeserializer;
import io.apicurio.registry.serde.protobuf.ProtobufKafkaSerializer;
import io.apicurio.registry.serde.utils.ByteBufferInputStream;
import io.apicurio.registry.utils.protobuf.schema.FileDescriptorUtils;
import io.apicurio.registry.utils.protobuf.schema.ProtobufSchema;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.Future;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Protobuf interop peer: Apicurio Registry's Kafka Protobuf serde configured for the Confluent
 * wire format (magic byte 0, 4-byte big-endian schema id = the registry's contentId, the message
 * indexes, the Protobuf binary encoding), values as {@link DynamicMessage}s of a Descriptor built
 * at run time from the .proto text (no protoc, no generated classes), in and out in the proto3
 * JSON mapping (JsonFormat), one per line. Diagnostics go to stderr; stdout carries only data.
 */
final class ProtobufPeer {
  private static final PrintStream ERR = System.err;

  private ProtobufPeer() {}

  // ---------------------------------------------------------------------------------------------
  // serde configuration

  /**
   * The Avro peer's settings ({@link Main#serdeConfig}: magic 0 + Default4ByteIdHandler writing
   * the contentId, id in the payload and not in Kafka headers) plus what the Protobuf serde needs
   * for the Confluent format. Unlike the Avro ones these are NOT the 3.1.7 defaults:
   * <ul>
   *   <li>send-type-ref=false: by default ProtobufSerializer writes, after the id, a
   *       length-delimited {@code Ref {string name = 1}} message carrying the message type's simple
   *       name (apicurio's own framing). ProtobufKafkaSerializer turns it off by itself only when
   *       Kafka headers are enabled, which the Confluent format rules out.
   *   <li>send-indexes=true: write the Confluent message indexes (zig-zag varint count, then the
   *       zig-zag varint indexes). Off by default. Note that 3.1.7 always writes the count, so the
   *       first top-level message is {@code 02 00}, not Confluent's one-byte shortcut {@code 00};
   *       both mean [0] to Confluent's reader (it reads the count; 0 means [0]).
   *   <li>read-indexes=true, read-type-ref=false: what the deserializer should expect. 3.1.7's
   *       ProtobufDeserializer only skips the indexes, though, and then has no message type (its
   *       type comes from a Ref or a Kafka header): {@link IndexedProtobufDeserializer} picks the
   *       type by the indexes instead.
   * </ul>
   */
  static Map<String, Object> serdeConfig(String registry) {
    Map<String, Object> c = Main.serdeConfig(registry);
    c.put(SerdeConfig.SEND_TYPE_REF, "false");
    c.put(SerdeConfig.SEND_INDEXES, "true");
    c.put(SerdeConfig.READ_TYPE_REF, "false");
    c.put(SerdeConfig.READ_INDEXES, "true");
    return c;
  }

  static Map<String, Object> serializerConfig(String registry) {
    Map<String, Object> c = serdeConfig(registry);
    // Register the schema as a new version of the subject's artifact when its content is not there
    // yet. The serializer registers the text that Apicurio regenerates from the Descriptor
    // (FileDescriptorUtils.fileDescriptorToProtoFile), not the file's own text, and every import
    // (google/protobuf/timestamp.proto, ...) first as an artifact of its own, named by its import
    // path, that the schema's references list points at. The Avro peer's dereference-schema=true
    // is left out: the Protobuf schema parser ignores it when registering.
    c.put(SerdeConfig.AUTO_REGISTER_ARTIFACT, "true");
    // NOT the default (true): 3.1.7's check looks the message up by its simple name among the
    // file's top-level messages (FileDescriptor.findMessageTypeByName), so it fails every nested
    // message ("Missing message type Stop in the protobuf schema"). What it compares otherwise is
    // the registered schema with the message's own Descriptor, from which that schema was made.
    c.put(SerdeConfig.VALIDATION_ENABLED, "false");
    return c;
  }

  // ---------------------------------------------------------------------------------------------
  // schema

  /** A .proto file, the Descriptor of the message to write and its message indexes. */
  static final class ProtoSchema {
    final FileDescriptor file;
    final Descriptor message;
    /** The message indexes of {@link #message} in the file's own text. */
    final List<Integer> fileIndexes;
    /**
     * Its message indexes in the text that the serializer registers, which Apicurio regenerates
     * from the Descriptor (FileDescriptorUtils.fileDescriptorToProtoFile): there a map field's
     * entry type is an explicit nested message (before the nested messages declared after the
     * map field), so the indexes of nested messages can differ from {@link #fileIndexes}.
     */
    final List<Integer> registeredIndexes;

    ProtoSchema(FileDescriptor file, Descriptor message, List<Integer> fileIndexes, List<Integer> registeredIndexes) {
      this.file = file;
      this.message = message;
      this.fileIndexes = fileIndexes;
      this.registeredIndexes = registeredIndexes;
    }
  }

  /**
   * Parses the .proto file with Apicurio's FileDescriptorUtils (Square Wire's parser and linker)
   * and picks the message NAME: "Ride", "nyc.Ride", "Ride.Stop" or "nyc.Ride.Stop"; null means the
   * first top-level message. Imports may name the well-known files that Apicurio knows
   * (google/protobuf/*.proto, google/type/*.proto: protobuf-java's and Google's common protos' own
   * descriptors); the FileDescriptor depends on exactly the imported ones, as protoc's would
   * (FileDescriptorUtils.protoFileToFileDescriptor makes every file it knows a dependency, and the
   * serializer then registers all 28 as references).
   */
  static ProtoSchema loadSchema(String file, String messageName) throws Exception {
    Path path = Paths.get(file);
    String text = Files.readString(path, StandardCharsets.UTF_8);
    ProtoFileElement element;
    FileDescriptor fd;
    try {
      element = ProtoParser.Companion.parse(FileDescriptorUtils.DEFAULT_LOCATION, text);
      FileDescriptorProto proto = FileDescriptorUtils.toFileDescriptorProto(text,
          path.getFileName().toString(), Optional.ofNullable(element.getPackageName()), Map.of());
      Map<String, FileDescriptor> known = new HashMap<>();
      for (FileDescriptor d : FileDescriptorUtils.baseDependencies()) addWithDependencies(d, known);
      List<FileDescriptor> deps = new ArrayList<>();
      for (String dep : proto.getDependencyList()) {
        FileDescriptor d = known.get(dep);
        if (d == null) {
          throw new IllegalArgumentException("import \"" + dep + "\": only the well-known files are"
              + " available (" + String.join(", ", new TreeSet<>(known.keySet())) + ")");
        }
        deps.add(d);
      }
      fd = FileDescriptor.buildFrom(proto, deps.toArray(new FileDescriptor[0]));
    } catch (Exception e) {
      throw new IllegalArgumentException(file + ": not a .proto file that can be linked: " + e, e);
    }
    String pkg = fd.getPackage();
    String name = messageName;
    if (name == null) {
      MessageElement first = FileDescriptorUtils.firstMessage(element);
      if (first == null) throw new IllegalArgumentException(file + ": no top-level message");
      name = first.getName();
    } else if (!pkg.isEmpty() && name.startsWith(pkg + ".")) {
      name = name.substring(pkg.length() + 1);
    }
    String[] parts = name.split("\\.", -1);
    Descriptor d = fd.findMessageTypeByName(parts[0]);
    for (int i = 1; d != null && i < parts.length; i++) d = d.findNestedTypeByName(parts[i]);
    if (d == null) {
      throw new Args.UsageException("--message " + messageName + ": no such message in " + file);
    }
    ProtoFileElement registered = FileDescriptorUtils.fileDescriptorToProtoFile(fd.toProto());
    return new ProtoSchema(fd, d, indexesOf(element.getTypes(), Arrays.asList(parts)),
        indexesOf(registered.getTypes(), Arrays.asList(parts)));
  }

  private static void addWithDependencies(FileDescriptor d, Map<String, FileDescriptor> known) {
    if (known.putIfAbsent(d.getName(), d) != null) return;
    for (FileDescriptor dep : d.getDependencies()) addWithDependencies(dep, known);
  }

  /**
   * The message indexes of a message, given its name path below the package, in the types of a
   * file (or of a message): the position among the messages only (enums and services do not
   * count), level by level, as Confluent defines them.
   */
  static List<Integer> indexesOf(List<TypeElement> types, List<String> namePath) {
    List<Integer> out = new ArrayList<>();
    for (String part : namePath) {
      int i = 0;
      MessageElement found = null;
      for (TypeElement t : types) {
        if (!(t instanceof MessageElement)) continue;
        if (t.getName().equals(part)) {
          found = (MessageElement) t;
          break;
        }
        i++;
      }
      if (found == null) throw new IllegalStateException("no message " + String.join(".", namePath));
      out.add(i);
      types = found.getNestedTypes();
    }
    return out;
  }

  /** The message that the indexes designate in a schema as the deserializer parsed it. */
  static Descriptor messageAt(ProtobufSchema schema, List<Integer> indexes) {
    List<TypeElement> types = schema.getProtoFileElement().getTypes();
    Descriptor d = null;
    for (int index : indexes) {
      int i = 0;
      MessageElement found = null;
      for (TypeElement t : types) {
        if (!(t instanceof MessageElement)) continue;
        if (i++ == index) {
          found = (MessageElement) t;
          break;
        }
      }
      if (found == null) {
        throw new IllegalStateException("message indexes " + indexes + " designate no message of the schema");
      }
      d = d == null ? schema.getFileDescriptor().findMessageTypeByName(found.getName())
          : d.findNestedTypeByName(found.getName());
      if (d == null) {
        throw new IllegalStateException("message " + found.getName() + " (indexes " + indexes
            + ") is in the schema text but not in its Descriptor");
      }
      types = found.getNestedTypes();
    }
    if (d == null) throw new IllegalStateException("empty message indexes");
    return d;
  }

  /** stdin lines (blank ones skipped) parsed with JsonFormat into messages of the type. */
  static List<DynamicMessage> readJsonValues(Descriptor type) throws IOException {
    JsonFormat.Parser parser = JsonFormat.parser();
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    List<DynamicMessage> out = new ArrayList<>();
    String line;
    int lineNo = 0;
    while ((line = in.readLine()) != null) {
      lineNo++;
      if (line.isBlank()) continue;
      DynamicMessage.Builder b = DynamicMessage.newBuilder(type);
      try {
        parser.merge(line, b);
      } catch (IOException | RuntimeException e) {
        throw new IllegalArgumentException("stdin:" + lineNo + ": not a " + type.getFullName()
            + " in the proto3 JSON mapping: " + e, e);
      }
      out.add(b.build());
    }
    return out;
  }

  static final JsonFormat.Printer PRINTER =
      JsonFormat.printer().alwaysPrintFieldsWithNoPresence().omittingInsignificantWhitespace();

  // ---------------------------------------------------------------------------------------------
  // framing

  /** Magic byte, id, message indexes and payload of Confluent-framed Protobuf bytes. */
  static final class Framed {
    final int schemaId;
    final List<Integer> indexes;
    /** Where the Protobuf payload starts. */
    final int payloadOffset;

    private Framed(int schemaId, List<Integer> indexes, int payloadOffset) {
      this.schemaId = schemaId;
      this.indexes = indexes;
      this.payloadOffset = payloadOffset;
    }

    /**
     * Decodes the framing independently of the serde: magic 0, 4-byte big-endian id, a zig-zag
     * varint count, that many zig-zag varint indexes; a count of 0 means [0] (Confluent's
     * one-byte form of the first top-level message).
     */
    static Framed parse(byte[] b) {
      int id = Main.schemaIdOf(b);
      int[] pos = {5};
      int n = zigzag(b, pos);
      if (n < 0) throw new IllegalStateException("negative message index count " + n);
      List<Integer> idx = new ArrayList<>();
      if (n == 0) idx.add(0);
      for (int i = 0; i < n; i++) idx.add(zigzag(b, pos));
      return new Framed(id, idx, pos[0]);
    }

    private static int zigzag(byte[] b, int[] pos) {
      int v = 0;
      for (int shift = 0; ; shift += 7) {
        if (pos[0] >= b.length) throw new IllegalStateException("message indexes run past the end");
        if (shift > 28) throw new IllegalStateException("message index varint too long");
        int x = b[pos[0]++] & 0xff;
        v |= (x & 0x7f) << shift;
        if ((x & 0x80) == 0) break;
      }
      return (v >>> 1) ^ -(v & 1);
    }
  }

  /**
   * ProtobufDeserializer that picks the message type by the Confluent message indexes, in the
   * schema the registry returned for the id (3.1.7's own only skips them: it takes the type from
   * a Ref message or a Kafka header, neither of which the Confluent format has). The id handling
   * and the schema lookup (references included) are the serde's.
   */
  static final class IndexedProtobufDeserializer extends ProtobufDeserializer<DynamicMessage> {
    @Override
    protected DynamicMessage readData(ParsedSchema<ProtobufSchema> schema, ByteBuffer buffer, int start,
        int length) {
      ByteBuffer slice = buffer.duplicate();
      slice.position(start);
      slice.limit(start + length);
      InputStream in = new ByteBufferInputStream(slice);
      try {
        List<Integer> indexes = MessageIndexesUtil.readFrom(in);
        return DynamicMessage.parseFrom(messageAt(schema.getParsedSchema(), indexes), in);
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }
  }

  /** The Kafka Deserializer around {@link IndexedProtobufDeserializer}, as ProtobufKafkaDeserializer is around ProtobufDeserializer. */
  static final class IndexedProtobufKafkaDeserializer extends KafkaDeserializer<ProtobufSchema, DynamicMessage> {
    IndexedProtobufKafkaDeserializer() {
      super(new IndexedProtobufDeserializer());
    }
  }

  // ---------------------------------------------------------------------------------------------
  // protobuf-produce

  static int produce(Args a) throws Exception {
    String bootstrap = a.required("bootstrap");
    String registry = a.required("registry");
    String topic = a.required("topic");
    String schemaFile = a.required("schema");
    String messageName = a.get("message", null);
    Properties extra = new Properties();
    a.putPairs(extra, "prop");
    a.checkAllUsed();
    ProtoSchema schema = loadSchema(schemaFile, messageName);

    List<DynamicMessage> values = readJsonValues(schema.message);
    noteIndexes("protobuf-produce", schema);

    Properties p = new Properties();
    p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    p.put(ProducerConfig.ACKS_CONFIG, "all");
    p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ProtobufKafkaSerializer.class.getName());
    p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
    p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
    p.putAll(serializerConfig(registry));
    p.putAll(extra);

    try (KafkaProducer<byte[], DynamicMessage> producer = new KafkaProducer<>(p)) {
      List<Future<RecordMetadata>> acks = new ArrayList<>();
      for (DynamicMessage v : values) acks.add(producer.send(new ProducerRecord<>(topic, null, v)));
      producer.flush();
      for (Future<RecordMetadata> f : acks) f.get();
    }
    return 0;
  }

  // ---------------------------------------------------------------------------------------------
  // protobuf-consume

  static int consume(Args a) throws Exception {
    String bootstrap = a.required("bootstrap");
    String registry = a.required("registry");
    String topic = a.required("topic");
    int count = a.getInt("count", -1);
    long timeoutMs = a.getLong("timeout-ms", 60000);
    Properties extra = new Properties();
    a.putPairs(extra, "prop");
    a.checkAllUsed();
    if (count < 0) throw new Args.UsageException("missing or negative --count");

    List<ConsumerRecord<byte[], byte[]>> got =
        Main.readRecords("protobuf-consume", bootstrap, topic, count, timeoutMs, extra);
    if (got == null) return 1;

    try (IndexedProtobufKafkaDeserializer deser = new IndexedProtobufKafkaDeserializer()) {
      deser.configure(serdeConfig(registry), false);
      for (ConsumerRecord<byte[], byte[]> r : got) {
        Framed f = Framed.parse(r.value());
        for (Header h : r.headers()) {
          ERR.println("avro-interop protobuf-consume: note: record " + r.partition() + "/" + r.offset()
              + " has a Kafka header " + h.key() + " (" + h.value().length + " bytes)");
        }
        DynamicMessage value = deser.deserialize(topic, r.headers(), r.value());
        System.out.println("{\"schema_id\": " + f.schemaId + ", \"indexes\": " + jsonInts(f.indexes)
            + ", \"value\": " + toJson(value) + "}");
      }
    }
    return 0;
  }

  static String jsonInts(List<Integer> l) {
    StringBuilder sb = new StringBuilder("[");
    for (int i = 0; i < l.size(); i++) sb.append(i == 0 ? "" : ", ").append(l.get(i));
    return sb.append(']').toString();
  }

  static String toJson(DynamicMessage m) throws InvalidProtocolBufferException {
    return PRINTER.print(m);
  }

  // ---------------------------------------------------------------------------------------------
  // protobuf-encode

  static int encode(Args a) throws Exception {
    String registry = a.required("registry");
    String subject = a.required("subject");
    String schemaFile = a.required("schema");
    String messageName = a.get("message", null);
    a.checkAllUsed();
    ProtoSchema schema = loadSchema(schemaFile, messageName);

    List<DynamicMessage> values = readJsonValues(schema.message);
    noteIndexes("protobuf-encode", schema);
    Map<String, Object> c = serializerConfig(registry);
    // The subject is the artifact (group "default", where the ccompat API keeps subjects), in place
    // of what TopicIdStrategy would derive from a topic. Imports keep their own artifacts.
    c.put(SerdeConfig.EXPLICIT_ARTIFACT_ID, subject);
    try (ProtobufKafkaSerializer<DynamicMessage> ser = new ProtobufKafkaSerializer<>()) {
      ser.configure(c, false);
      Base64.Encoder b64 = Base64.getEncoder();
      for (DynamicMessage v : values) {
        byte[] framed = ser.serialize(subject, v);
        checkFraming(framed, schema.registeredIndexes, v);
        System.out.println(b64.encodeToString(framed));
      }
    }
    return 0;
  }

  /** A note on stderr when the registered text puts the message at other indexes than the file. */
  static void noteIndexes(String subcommand, ProtoSchema schema) {
    if (schema.registeredIndexes.equals(schema.fileIndexes)) return;
    ERR.println("avro-interop " + subcommand + ": note: " + schema.message.getFullName()
        + " is at message indexes " + schema.fileIndexes + " in the file but "
        + schema.registeredIndexes + " in the schema text that Apicurio registers (map entry"
        + " types are explicit nested messages there); the bytes carry the latter");
  }

  /** Fails unless the bytes are magic 0, an id, the message's indexes, then exactly its encoding. */
  static void checkFraming(byte[] framed, List<Integer> expectedIndexes, DynamicMessage v) {
    Framed f = Framed.parse(framed);
    if (!f.indexes.equals(expectedIndexes)) {
      throw new IllegalStateException("the serializer wrote message indexes " + f.indexes + ", not "
          + expectedIndexes + " (those of " + v.getDescriptorForType().getFullName()
          + " in the registered schema text)");
    }
    byte[] payload = Arrays.copyOfRange(framed, f.payloadOffset, framed.length);
    if (!Arrays.equals(payload, v.toByteArray())) {
      throw new IllegalStateException("the bytes after the message indexes are not the message's"
          + " Protobuf encoding (a type Ref or other framing in between?)");
    }
  }
}
