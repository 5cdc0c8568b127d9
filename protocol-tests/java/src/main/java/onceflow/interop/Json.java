package onceflow.interop;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A tiny JSON reader/writer, enough for the interop JSON-lines files.
 *
 * <p>Values are mapped to: {@code null}, {@link Boolean}, {@link Long} (integral numbers),
 * {@link Double} (other numbers), {@link String}, {@link List} and {@link LinkedHashMap}.
 */
final class Json {
  private Json() {}

  static Object parse(String text) {
    Parser p = new Parser(text);
    p.ws();
    Object v = p.value();
    p.ws();
    if (p.i != text.length()) throw p.error("trailing characters");
    return v;
  }

  private static final class Parser {
    final String s;
    int i;

    Parser(String s) {
      this.s = s;
    }

    IllegalArgumentException error(String what) {
      return new IllegalArgumentException("JSON: " + what + " at offset " + i);
    }

    void ws() {
      while (i < s.length()) {
        char c = s.charAt(i);
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') i++;
        else break;
      }
    }

    void expect(char c) {
      if (i >= s.length() || s.charAt(i) != c) throw error("expected '" + c + "'");
      i++;
    }

    boolean literal(String word) {
      if (s.startsWith(word, i)) {
        i += word.length();
        return true;
      }
      return false;
    }

    Object value() {
      if (i >= s.length()) throw error("unexpected end");
      char c = s.charAt(i);
      switch (c) {
        case '{':
          return object();
        case '[':
          return array();
        case '"':
          return string();
        default:
          if (literal("null")) return null;
          if (literal("true")) return Boolean.TRUE;
          if (literal("false")) return Boolean.FALSE;
          if (c == '-' || (c >= '0' && c <= '9')) return number();
          throw error("unexpected character '" + c + "'");
      }
    }

    Map<String, Object> object() {
      expect('{');
      Map<String, Object> m = new LinkedHashMap<>();
      ws();
      if (i < s.length() && s.charAt(i) == '}') {
        i++;
        return m;
      }
      while (true) {
        ws();
        String k = string();
        ws();
        expect(':');
        ws();
        m.put(k, value());
        ws();
        if (i < s.length() && s.charAt(i) == ',') {
          i++;
          continue;
        }
        expect('}');
        return m;
      }
    }

    List<Object> array() {
      expect('[');
      List<Object> l = new ArrayList<>();
      ws();
      if (i < s.length() && s.charAt(i) == ']') {
        i++;
        return l;
      }
      while (true) {
        ws();
        l.add(value());
        ws();
        if (i < s.length() && s.charAt(i) == ',') {
          i++;
          continue;
        }
        expect(']');
        return l;
      }
    }

    String string() {
      expect('"');
      StringBuilder b = new StringBuilder();
      while (true) {
        if (i >= s.length()) throw error("unterminated string");
        char c = s.charAt(i++);
        if (c == '"') return b.toString();
        if (c != '\\') {
          b.append(c);
          continue;
        }
        if (i >= s.length()) throw error("unterminated escape");
        char e = s.charAt(i++);
        switch (e) {
          case '"': b.append('"'); break;
          case '\\': b.append('\\'); break;
          case '/': b.append('/'); break;
          case 'b': b.append('\b'); break;
          case 'f': b.append('\f'); break;
          case 'n': b.append('\n'); break;
          case 'r': b.append('\r'); break;
          case 't': b.append('\t'); break;
          case 'u':
            if (i + 4 > s.length()) throw error("bad \\u escape");
            b.append((char) Integer.parseInt(s.substring(i, i + 4), 16));
            i += 4;
            break;
          default:
            throw error("bad escape '\\" + e + "'");
        }
      }
    }

    Object number() {
      int start = i;
      if (s.charAt(i) == '-') i++;
      boolean integral = true;
      while (i < s.length()) {
        char c = s.charAt(i);
        if (c >= '0' && c <= '9') {
          i++;
        } else if (c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
          integral = false;
          i++;
        } else {
          break;
        }
      }
      String t = s.substring(start, i);
      if (integral) return Long.parseLong(t);
      return Double.parseDouble(t);
    }
  }

  /** Writes a JSON value compactly (no whitespace), keys in map iteration order. */
  static String write(Object v) {
    StringBuilder b = new StringBuilder();
    write(b, v);
    return b.toString();
  }

  @SuppressWarnings("unchecked")
  static void write(StringBuilder b, Object v) {
    if (v == null) {
      b.append("null");
    } else if (v instanceof String) {
      string(b, (String) v);
    } else if (v instanceof Number || v instanceof Boolean) {
      b.append(v);
    } else if (v instanceof Map) {
      b.append('{');
      boolean first = true;
      for (Map.Entry<String, Object> e : ((Map<String, Object>) v).entrySet()) {
        if (!first) b.append(',');
        first = false;
        string(b, e.getKey());
        b.append(':');
        write(b, e.getValue());
      }
      b.append('}');
    } else if (v instanceof List) {
      b.append('[');
      boolean first = true;
      for (Object o : (List<Object>) v) {
        if (!first) b.append(',');
        first = false;
        write(b, o);
      }
      b.append(']');
    } else {
      throw new IllegalArgumentException("cannot write " + v.getClass());
    }
  }

  private static void string(StringBuilder b, String s) {
    b.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '"': b.append("\\\""); break;
        case '\\': b.append("\\\\"); break;
        case '\n': b.append("\\n"); break;
        case '\r': b.append("\\r"); break;
        case '\t': b.append("\\t"); break;
        default:
          if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
          else b.append(c);
      }
    }
    b.append('"');
  }
}
