package onceflow.avro;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

/** "--name value" options; repeatable ones ("--prop k=v", "--config k=v") keep every value. */
final class Args {
  private final Map<String, List<String>> values = new LinkedHashMap<>();
  private final Set<String> used = new HashSet<>();

  Args(String[] argv, int from) {
    for (int i = from; i < argv.length; i++) {
      String a = argv[i];
      if (!a.startsWith("--")) throw new UsageException("unexpected argument '" + a + "'");
      String name = a.substring(2);
      String v;
      int eq = name.indexOf('=');
      if (eq >= 0) {
        v = name.substring(eq + 1);
        name = name.substring(0, eq);
      } else {
        if (i + 1 >= argv.length) throw new UsageException("option --" + name + " needs a value");
        v = argv[++i];
      }
      values.computeIfAbsent(name, k -> new ArrayList<>()).add(v);
    }
  }

  String get(String name, String dflt) {
    used.add(name);
    List<String> l = values.get(name);
    if (l == null) return dflt;
    if (l.size() > 1) throw new UsageException("option --" + name + " given more than once");
    return l.get(0);
  }

  String required(String name) {
    String v = get(name, null);
    if (v == null) throw new UsageException("missing required option --" + name);
    return v;
  }

  int getInt(String name, int dflt) {
    String v = get(name, null);
    return v == null ? dflt : Integer.parseInt(v);
  }

  long getLong(String name, long dflt) {
    String v = get(name, null);
    return v == null ? dflt : Long.parseLong(v);
  }

  Boolean getBool(String name) {
    String v = get(name, null);
    if (v == null) return null;
    if (v.equals("true")) return Boolean.TRUE;
    if (v.equals("false")) return Boolean.FALSE;
    throw new UsageException("--" + name + " must be true or false");
  }

  /** Values of a repeatable "k=v" option, in order. */
  Map<String, String> pairs(String name) {
    used.add(name);
    Map<String, String> m = new LinkedHashMap<>();
    for (String kv : values.getOrDefault(name, List.of())) {
      int eq = kv.indexOf('=');
      if (eq <= 0) throw new UsageException("--" + name + " takes key=value, got '" + kv + "'");
      m.put(kv.substring(0, eq), kv.substring(eq + 1));
    }
    return m;
  }

  void putPairs(Properties p, String name) {
    p.putAll(pairs(name));
  }

  /** Fails on options the subcommand never asked for (typos). Call after reading every option. */
  void checkAllUsed() {
    for (String k : values.keySet()) {
      if (!used.contains(k)) throw new UsageException("unknown option --" + k);
    }
  }

  static final class UsageException extends RuntimeException {
    UsageException(String msg) {
      super(msg);
    }
  }
}
