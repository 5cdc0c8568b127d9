package onceflow.peer;

import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.connector.source.Boundedness;
import org.apache.flink.api.connector.source.ReaderOutput;
import org.apache.flink.api.connector.source.Source;
import org.apache.flink.api.connector.source.SourceEvent;
import org.apache.flink.api.connector.source.SourceReader;
import org.apache.flink.api.connector.source.SourceReaderContext;
import org.apache.flink.api.connector.source.SourceSplit;
import org.apache.flink.api.connector.source.SplitEnumerator;
import org.apache.flink.api.connector.source.SplitEnumeratorContext;
import org.apache.flink.api.java.typeutils.ResultTypeQueryable;
import org.apache.flink.core.io.InputStatus;
import org.apache.flink.core.io.SimpleVersionedSerializer;

/**
 * Instrumentation only: a Source that is the given source (a KafkaSource), except that once a
 * reader of every such source of the job (they are told apart by their names) has been handed its
 * splits (partitions with their start offsets: from the enumerator on a fresh start, from the
 * checkpoint on a restore), the JVM prints {@code peer: started} on stderr, once. That is the
 * moment the benchmark driver waits for: the job is deployed, its state restored and its sources
 * about to read. The DataStream jobs wrap their one source themselves; the SQL jobs get every
 * Kafka table's source wrapped by {@link SqlJob.SignallingEnvironment}.
 */
public final class StartedSignal<T, S extends SourceSplit, E>
        implements Source<T, S, E>, ResultTypeQueryable<T> {
    /** The names of the sources made in this JVM (when the job is built, before it runs). */
    private static final Set<String> SOURCES = ConcurrentHashMap.newKeySet();
    /** Those of them whose reader has been handed splits. */
    private static final Set<String> STARTED = ConcurrentHashMap.newKeySet();
    private static boolean printed;

    private final Source<T, S, E> inner;
    private final TypeInformation<T> type;
    private final String name;

    public StartedSignal(Source<T, S, E> inner, TypeInformation<T> type, String name) {
        this.inner = inner;
        this.type = type;
        this.name = name;
        SOURCES.add(name);
    }

    static synchronized void started(String name) {
        STARTED.add(name);
        if (!printed && STARTED.containsAll(SOURCES)) {
            printed = true;
            System.err.println("peer: started");
            System.err.flush();
        }
    }

    @Override
    public TypeInformation<T> getProducedType() {
        return type;
    }

    @Override
    public Boundedness getBoundedness() {
        return inner.getBoundedness();
    }

    @Override
    public SplitEnumerator<S, E> createEnumerator(SplitEnumeratorContext<S> ctx) throws Exception {
        return inner.createEnumerator(ctx);
    }

    @Override
    public SplitEnumerator<S, E> restoreEnumerator(SplitEnumeratorContext<S> ctx, E state) throws Exception {
        return inner.restoreEnumerator(ctx, state);
    }

    @Override
    public SimpleVersionedSerializer<S> getSplitSerializer() {
        return inner.getSplitSerializer();
    }

    @Override
    public SimpleVersionedSerializer<E> getEnumeratorCheckpointSerializer() {
        return inner.getEnumeratorCheckpointSerializer();
    }

    @Override
    public SourceReader<T, S> createReader(SourceReaderContext ctx) throws Exception {
        return new Reader<>(inner.createReader(ctx), name);
    }

    /** Delegates every call; signals on the first non-empty addSplits. */
    private static final class Reader<T, S extends SourceSplit> implements SourceReader<T, S> {
        private final SourceReader<T, S> inner;
        private final String name;

        Reader(SourceReader<T, S> inner, String name) {
            this.inner = inner;
            this.name = name;
        }

        @Override
        public void start() {
            inner.start();
        }

        @Override
        public InputStatus pollNext(ReaderOutput<T> output) throws Exception {
            return inner.pollNext(output);
        }

        @Override
        public List<S> snapshotState(long checkpointId) {
            return inner.snapshotState(checkpointId);
        }

        @Override
        public CompletableFuture<Void> isAvailable() {
            return inner.isAvailable();
        }

        @Override
        public void addSplits(List<S> splits) {
            inner.addSplits(splits);
            if (!splits.isEmpty()) {
                started(name);
            }
        }

        @Override
        public void notifyNoMoreSplits() {
            inner.notifyNoMoreSplits();
        }

        @Override
        public void handleSourceEvents(SourceEvent event) {
            inner.handleSourceEvents(event);
        }

        @Override
        public void notifyCheckpointComplete(long checkpointId) throws Exception {
            inner.notifyCheckpointComplete(checkpointId);
        }

        @Override
        public void notifyCheckpointAborted(long checkpointId) throws Exception {
            inner.notifyCheckpointAborted(checkpointId);
        }

        @Override
        public void pauseOrResumeSplits(java.util.Collection<String> pause, java.util.Collection<String> resume) {
            inner.pauseOrResumeSplits(pause, resume);
        }

        @Override
        public void close() throws Exception {
            inner.close();
        }
    }
}
