package onceflow.avro;

import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumReader;

/**
 * GenericDatumReader whose maps keep their entries in the order read (LinkedHashMap instead of
 * GenericData's HashMap). Avro map order carries no meaning, but with a HashMap the serializer
 * writes a JSON input's entries in hash order ({"zz","a","mm","b","Q"} went out as a, Q, zz, mm,
 * b), so the bytes would differ from a peer that keeps input order, and consume would print entries
 * in hash order rather than wire order. The maps come from GenericData.newMap (Avro 1.12's fast
 * reader, on by default, calls it directly), hence the GenericData subclass. Nothing else differs
 * from GenericData.get(): no logical-type conversions.
 */
final class OrderedGenericDatumReader<T> extends GenericDatumReader<T> {
  private static final GenericData ORDERED = new GenericData() {
    @Override
    @SuppressWarnings("unchecked")
    public Object newMap(Object old, int size) {
      if (old instanceof LinkedHashMap) {
        ((Map<Object, Object>) old).clear();
        return old;
      }
      return new LinkedHashMap<>();
    }
  };

  OrderedGenericDatumReader(Schema writer, Schema reader) {
    super(writer, reader, ORDERED);
  }

  OrderedGenericDatumReader(Schema schema) {
    super(schema, schema, ORDERED);
  }
}
