package onceflow.peer;

import java.io.IOException;
import java.io.InputStream;
import java.lang.reflect.Field;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.flink.api.dag.Transformation;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.PipelineOptions;
import org.apache.flink.streaming.api.environment.LocalStreamEnvironment;
import org.apache.flink.streaming.api.graph.StreamGraph;
import org.apache.flink.streaming.api.transformations.SourceTransformation;
import org.apache.flink.table.api.EnvironmentSettings;
import org.apache.flink.table.api.TableResult;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.table.api.config.TableConfigOptions;

/**
 * The SQL jobs, "driver-shifts" and "rides-and-fares": the statements of
 * {@code src/main/resources/sql/JOB.sql} (Kafka tables, a view, one INSERT), without their
 * whole-line comments and with their {@code ${VAR}} placeholders filled in from the
 * environment, run one by one with
 * {@link StreamTableEnvironment#executeSql} on a local environment made from the same
 * configuration as the DataStream jobs' (checkpointing, state backend, restore path), so the
 * INSERT runs in a MiniCluster in this JVM until the JVM is killed.
 */
final class SqlJob {
    private SqlJob() {}

    private static final Pattern PLACEHOLDER = Pattern.compile("\\$\\{([A-Z_]+)\\}");
    /** A statement ends with a ';' at the end of a line (the job files keep to that). */
    private static final Pattern STATEMENT_END = Pattern.compile(";[ \\t]*(\\r?\\n|$)");

    static void run(Configuration conf, String job, String jobName, Map<String, String> vars) throws Exception {
        conf.set(PipelineOptions.NAME, jobName);
        SignallingEnvironment env = new SignallingEnvironment(conf);
        StreamTableEnvironment tables =
                StreamTableEnvironment.create(env, EnvironmentSettings.newInstance().inStreamingMode().build());
        // TIMESTAMP_LTZ values (the event-time column) shown as TIMESTAMP (a window's bounds) are in
        // this zone; UTC keeps the conversion back to epoch ms free of offsets and DST.
        tables.getConfig().set(TableConfigOptions.LOCAL_TIME_ZONE, "UTC");

        TableResult insert = null;
        for (String statement : statements(fill(withoutCommentLines(resource("sql/" + job + ".sql")), vars))) {
            insert = tables.executeSql(statement);
        }
        if (insert == null) {
            throw new IllegalStateException("sql/" + job + ".sql has no statement");
        }
        // The last statement is the INSERT: submitted, it runs until the JVM is killed.
        insert.await();
    }

    /**
     * The local environment that wraps the source of every Kafka table of the job in
     * {@link StartedSignal}, for {@code peer: started}. The planner builds the sources on its own
     * stand-in environment, not on this one; the transformations come here when the executor turns
     * them into the job's StreamGraph, and Flink has no public way to change a
     * {@link SourceTransformation}'s source: it is set by reflection (a Flink version that renames
     * the field fails here, at start).
     */
    static final class SignallingEnvironment extends LocalStreamEnvironment {
        SignallingEnvironment(Configuration conf) {
            super(conf);
        }

        @Override
        public StreamGraph generateStreamGraph(List<Transformation<?>> transformations) {
            Set<Transformation<?>> all = new LinkedHashSet<>();
            for (Transformation<?> t : transformations) {
                all.addAll(t.getTransitivePredecessors());
            }
            for (Transformation<?> t : all) {
                if (t instanceof SourceTransformation) {
                    signal((SourceTransformation<?, ?, ?>) t);
                }
            }
            return super.generateStreamGraph(transformations);
        }

        private static <T> void signal(SourceTransformation<T, ?, ?> t) {
            if (t.getSource() instanceof StartedSignal) {
                return;
            }
            try {
                Field source = SourceTransformation.class.getDeclaredField("source");
                source.setAccessible(true);
                source.set(t, new StartedSignal<>(t.getSource(), t.getOutputType(), t.getName()));
            } catch (ReflectiveOperationException e) {
                throw new IllegalStateException("cannot wrap the source of " + t.getName(), e);
            }
        }
    }

    static String resource(String path) throws IOException {
        try (InputStream in = SqlJob.class.getClassLoader().getResourceAsStream(path)) {
            if (in == null) {
                throw new IOException("no resource " + path);
            }
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        }
    }

    /** The script without its whole-line comments ({@code --} first on the line). */
    static String withoutCommentLines(String sql) {
        StringBuilder out = new StringBuilder();
        sql.lines().filter(l -> !l.strip().startsWith("--")).forEach(l -> out.append(l).append('\n'));
        return out.toString();
    }

    /** Replaces each {@code ${VAR}} with its value as the inside of a SQL string literal ('' for '). */
    static String fill(String sql, Map<String, String> vars) {
        Matcher m = PLACEHOLDER.matcher(sql);
        StringBuilder out = new StringBuilder();
        while (m.find()) {
            String value = vars.get(m.group(1));
            if (value == null) {
                throw new IllegalArgumentException("no value for ${" + m.group(1) + "}");
            }
            m.appendReplacement(out, Matcher.quoteReplacement(value.replace("'", "''")));
        }
        m.appendTail(out);
        return out.toString();
    }

    /** The statements of a script: split at each line-ending ';', blank pieces dropped. */
    static List<String> statements(String sql) {
        List<String> out = new ArrayList<>();
        for (String piece : STATEMENT_END.split(sql)) {
            if (!piece.isBlank()) {
                out.add(piece.strip());
            }
        }
        return out;
    }
}
