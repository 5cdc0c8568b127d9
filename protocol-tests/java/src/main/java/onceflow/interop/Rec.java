package onceflow.interop;

import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;

/** One record as it appears in the interop JSON-lines files. */
final class Rec {
  Integer partition;
  Long offset;
  byte[] key;
  byte[] value;
  Long timestamp;
  final List<Header> headers = new ArrayList<>();

  private static final Base64.Encoder B64E = Base64.getEncoder();
  private static final Base64.Decoder B64D = Base64.getDecoder();

  static byte[] b64(Object o, String what) {
    if (o == null) return null;
    if (!(o instanceof String)) throw new IllegalArgumentException(what + " must be a base64 string or null");
    return B64D.decode((String) o);
  }

  static String b64(byte[] b) {
    return b == null ? null : B64E.encodeToString(b);
  }

  @SuppressWarnings("unchecked")
  static Rec fromJson(String line) {
    Object parsed = Json.parse(line);
    if (!(parsed instanceof Map)) throw new IllegalArgumentException("each line must be a JSON object");
    Map<String, Object> m = (Map<String, Object>) parsed;
    Rec r = new Rec();
    Object p = m.get("partition");
    if (p != null) r.partition = ((Number) p).intValue();
    Object ts = m.get("timestamp");
    if (ts != null) r.timestamp = ((Number) ts).longValue();
    r.key = b64(m.get("key"), "key");
    r.value = b64(m.get("value"), "value");
    Object hs = m.get("headers");
    if (hs != null) {
      for (Object h : (List<Object>) hs) {
        Map<String, Object> hm = (Map<String, Object>) h;
        Object k = hm.get("key");
        if (!(k instanceof String)) throw new IllegalArgumentException("header key must be a string");
        r.headers.add(new RecordHeader((String) k, b64(hm.get("value"), "header value")));
      }
    }
    return r;
  }

  static Rec fromConsumer(ConsumerRecord<byte[], byte[]> cr) {
    Rec r = new Rec();
    r.partition = cr.partition();
    r.offset = cr.offset();
    r.key = cr.key();
    r.value = cr.value();
    r.timestamp = cr.timestamp();
    for (Header h : cr.headers()) r.headers.add(h);
    return r;
  }

  /** Output shape: partition, offset, timestamp, key, value, headers. */
  String toJson() {
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("partition", partition);
    m.put("offset", offset);
    m.put("timestamp", timestamp);
    m.put("key", b64(key));
    m.put("value", b64(value));
    List<Object> hl = new ArrayList<>();
    for (Header h : headers) {
      Map<String, Object> hm = new LinkedHashMap<>();
      hm.put("key", h.key());
      hm.put("value", b64(h.value()));
      hl.add(hm);
    }
    m.put("headers", hl);
    return Json.write(m);
  }
}
