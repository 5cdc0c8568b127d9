package onceflow.avro;

import io.apicurio.registry.serde.avro.AvroSerdeConfig;
import io.apicurio.registry.serde.avro.DefaultAvroDatumProvider;
import org.apache.avro.Schema;
import org.apache.avro.io.DatumReader;

/**
 * The serde's default datum provider (GenericDatumReader/Writer, no logical-type conversions),
 * except that reading resolves the writer schema (the one the registry returns for the id in the
 * bytes) to the --reader-schema when one is given, as Avro schema resolution does, and keeps map
 * entries in wire order (OrderedGenericDatumReader). It also notes the schema the last value was
 * read with, so that Main can print it with JsonEncoder.
 */
public final class ReaderSchemaDatumProvider<T> extends DefaultAvroDatumProvider<T> {
  /** The schema of the value read last (the reader schema if any, else the writer's). */
  static volatile Schema lastSchema;

  private Schema readerSchema;

  @Override
  public void configure(AvroSerdeConfig config) {
    super.configure(config);
    Object s = config.originals().get(Main.READER_SCHEMA_CONFIG);
    readerSchema = s == null ? null : new Schema.Parser().parse(s.toString());
  }

  @Override
  public DatumReader<T> createDatumReader(Schema writerSchema) {
    Schema reader = readerSchema != null ? readerSchema : writerSchema;
    lastSchema = reader;
    return new OrderedGenericDatumReader<>(writerSchema, reader);
  }
}
