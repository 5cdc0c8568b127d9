//! The typed streams, from the source to the sink. Their types follow the one key exchange a
//! job may have: [`SourceStream`] / [`Stream`] before it, [`KeyedStream`] at it,
//! [`ResultStream`] after the keyed stage (which has no `key_by`: a second exchange does not
//! compile), and [`JobGraph`] once a sink is attached.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::builder::JobBuilder;
use super::chain::{self, count_in, count_out, Counters, Downstream, SourceFn, Sourced};
use super::process::{KeyedProcessFunction, ProcessStage};
use super::sink::Sink;
use super::source::{Deserializer, SourceRecord};
use super::topology::{ErasedPrefetch, ErasedSource, Keyed, StageFactory, TypedTopology};
use super::window::{StageEnv, WindowAssigner, WindowedStream};
use super::{BuildError, Dataflow};
use crate::engine::formats::{LineFormat, LineFormats};
use crate::engine::metrics::Metrics;
use crate::engine::runtime::topology::{Emitted, KeyedStage};
use crate::engine::runtime::RuntimeError;

/// What the job's streams have said so far: the settings, the operators' kinds (for the
/// metrics, by index) and what a build must refuse.
pub(crate) struct Plan {
    pub(crate) builder: JobBuilder,
    topics: Vec<String>,
    kinds: Vec<&'static str>,
    out_of_orderness: Option<i64>,
    /// The keyed stage's uid, when [`ResultStream::uid`] gave one.
    uid: Option<String>,
    default_uid: &'static str,
    problems: Vec<String>,
    /// The file source's line format, under the name its `source.format` gives.
    formats: LineFormats,
    /// The source deserializer's fetch before a record is deserialized.
    prefetch: ErasedPrefetch,
}

impl Plan {
    /// Appends an operator of `kind`; returns its index.
    fn push(mut self, kind: &'static str) -> (Plan, usize) {
        self.kinds.push(kind);
        let i = self.kinds.len() - 1;
        (self, i)
    }

    pub(crate) fn problem(&mut self, message: impl Into<String>) {
        self.problems.push(message.into());
    }
}

impl JobBuilder {
    /// The job's source: the records of `topics` (read_committed, positions checkpointed),
    /// each made an element by `deserializer` (a [`Json`](super::Json) or a closure over the
    /// [`SourceRecord`]; records it returns `None` for are dropped and counted).
    pub fn source<T: 'static>(
        self,
        topics: impl IntoIterator<Item = impl Into<String>>,
        deserializer: impl Deserializer<T>,
    ) -> SourceStream<T> {
        let deserializer: Arc<dyn Deserializer<T>> = Arc::new(deserializer);
        let d = deserializer.clone();
        let prefetch: ErasedPrefetch = Arc::new(move |r| d.prepare(&SourceRecord::of(r)));
        let plan = Plan {
            builder: self,
            topics: topics.into_iter().map(Into::into).collect(),
            kinds: vec!["source"],
            out_of_orderness: None,
            uid: None,
            default_uid: "keyed",
            problems: Vec::new(),
            formats: LineFormats::new(),
            prefetch,
        };
        SourceStream { plan, deserializer }
    }

    /// The job's source: the events of a file, or of a directory of files read in name order
    /// (`.gz` decompressed), one a line, each made a record (key, value, event time) by
    /// `format` and an element by `deserializer` (as Flink's `FileSource` with a
    /// `StreamFormat`). The reader's position is in every checkpoint (the job file's
    /// `[source] type = "file"`; see [`Self::serving_speed_factor`] and [`Self::max_delay`]).
    /// One reader: with parallelism above 1 the other source subtasks read nothing. The job's
    /// Kafka sink uses [`Self::brokers`]. The job's `source.format` is the format's type name.
    ///
    /// ```no_run
    /// use onceflow::engine::dataflow::{JobBuilder, Json, KafkaSink};
    /// use onceflow::engine::formats::ParsedLine;
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct Reading {
    ///     sensor: u64,
    ///     time: i64,
    ///     celsius: f64,
    /// }
    ///
    /// /// `sensor,time,celsius` lines, keyed by sensor.
    /// fn reading_line(line: &str) -> Result<ParsedLine, String> {
    ///     let bad = |what: &str| format!("{what} in {line:?}: expected sensor,time,celsius");
    ///     let mut columns = line.split(',');
    ///     let mut next = |what: &str| columns.next().ok_or_else(|| bad(what));
    ///     let reading = Reading {
    ///         sensor: next("sensor")?.parse().map_err(|_| bad("sensor"))?,
    ///         time: next("time")?.parse().map_err(|_| bad("time"))?,
    ///         celsius: next("celsius")?.parse().map_err(|_| bad("celsius"))?,
    ///     };
    ///     Ok(ParsedLine {
    ///         key: Some(reading.sensor.to_string().into_bytes()),
    ///         value: serde_json::to_vec(&reading).map_err(|e| e.to_string())?,
    ///         event_time: reading.time,
    ///     })
    /// }
    ///
    /// let job = JobBuilder::new("readings-file-to-kafka")
    ///     .brokers("localhost:9092")
    ///     .transactional_id_prefix("readings-file-to-kafka")
    ///     .max_delay(std::time::Duration::from_secs(60))
    ///     .file_source("readings.csv.gz", reading_line, Json::<Reading>::new())
    ///     .sink(KafkaSink::json("readings"))
    ///     .build();
    /// ```
    pub fn file_source<T: 'static, F: LineFormat + 'static>(
        self,
        path: impl AsRef<std::path::Path>,
        format: F,
        deserializer: impl Deserializer<T>,
    ) -> SourceStream<T> {
        let path = path.as_ref().to_string_lossy().into_owned();
        let name = std::any::type_name::<F>();
        let mut stream = self
            .set("source.type", toml::Value::String("file".into()))
            .set("source.path", toml::Value::String(path))
            .set("source.format", toml::Value::String(name.into()))
            .source(Vec::<String>::new(), deserializer);
        stream.plan.formats.register(name, Arc::new(format));
        stream
    }
}

type TimeFn<T> = Arc<dyn Fn(&T) -> i64 + Send + Sync>;

/// The source (operator 0): deserializes, counts, takes the event time.
fn head<T: 'static>(d: Arc<dyn Deserializer<T>>, time: Option<TimeFn<T>>) -> SourceFn<T> {
    Arc::new(move |r, c, emit| {
        count_in(c, 0);
        let x = match d.element(&SourceRecord::of(r)) {
            Ok(x) => x,
            Err(bad) => return Sourced { time: None, bad },
        };
        count_out(c, 0, 1);
        let t = time.as_ref().map(|f| f(&x));
        emit(t.unwrap_or(r.timestamp), x);
        Sourced { time: t, bad: None }
    })
}

/// The source's stream, before its watermark strategy: [`Self::event_time`] gives one; the
/// other methods go on without (elements then carry their Kafka timestamps, and windows
/// cannot be used).
pub struct SourceStream<T> {
    plan: Plan,
    deserializer: Arc<dyn Deserializer<T>>,
}

impl<T: Send + 'static> SourceStream<T> {
    /// Event time from `f` with a bounded out-of-orderness watermark (Flink's
    /// `WatermarkStrategy.forBoundedOutOfOrderness(d).withTimestampAssigner(f)`): each source
    /// subtask's watermark trails the largest event time it read by `out_of_orderness`; it sees
    /// every record, also those a later filter drops.
    pub fn event_time(
        self,
        f: impl Fn(&T) -> i64 + Send + Sync + 'static,
        out_of_orderness: Duration,
    ) -> Stream<T> {
        let mut plan = self.plan;
        plan.out_of_orderness =
            Some(i64::try_from(out_of_orderness.as_millis()).unwrap_or(i64::MAX));
        Stream {
            plan,
            source: head(self.deserializer, Some(Arc::new(f))),
        }
    }

    /// The stream without event time.
    pub fn into_stream(self) -> Stream<T> {
        Stream {
            plan: self.plan,
            source: head(self.deserializer, None),
        }
    }

    /// As [`Stream::filter`].
    pub fn filter(self, f: impl Fn(&T) -> bool + Send + Sync + 'static) -> Stream<T> {
        self.into_stream().filter(f)
    }

    /// As [`Stream::map`].
    pub fn map<U: Send + 'static>(self, f: impl Fn(T) -> U + Send + Sync + 'static) -> Stream<U> {
        self.into_stream().map(f)
    }

    /// As [`Stream::flat_map`].
    pub fn flat_map<U: Send + 'static, I: IntoIterator<Item = U> + 'static>(
        self,
        f: impl Fn(T) -> I + Send + Sync + 'static,
    ) -> Stream<U> {
        self.into_stream().flat_map(f)
    }

    /// As [`Stream::key_by`].
    pub fn key_by<K>(self, f: impl Fn(&T) -> K + Send + Sync + 'static) -> KeyedStream<K, T>
    where
        K: Serialize + DeserializeOwned + Clone + Send + 'static,
    {
        self.into_stream().key_by(f)
    }

    /// As [`Stream::sink`].
    pub fn sink(self, sink: impl Into<Sink<T>>) -> JobGraph {
        self.into_stream().sink(sink)
    }
}

/// A stream before the key exchange: its operators run chained in each source subtask.
pub struct Stream<T> {
    plan: Plan,
    source: SourceFn<T>,
}

impl<T: Send + 'static> Stream<T> {
    /// Keeps the elements `f` holds true for.
    pub fn filter(self, f: impl Fn(&T) -> bool + Send + Sync + 'static) -> Stream<T> {
        let (plan, i) = self.plan.push("filter");
        Stream {
            plan,
            source: chain::filter(self.source, i, f),
        }
    }

    /// Each element made into `f(element)`.
    pub fn map<U: Send + 'static>(self, f: impl Fn(T) -> U + Send + Sync + 'static) -> Stream<U> {
        let (plan, i) = self.plan.push("map");
        Stream {
            plan,
            source: chain::map(self.source, i, f),
        }
    }

    /// Each element made into the elements `f` returns (none, one or more).
    pub fn flat_map<U: Send + 'static, I: IntoIterator<Item = U> + 'static>(
        self,
        f: impl Fn(T) -> I + Send + Sync + 'static,
    ) -> Stream<U> {
        let (plan, i) = self.plan.push("flat_map");
        Stream {
            plan,
            source: chain::flat_map(self.source, i, f),
        }
    }

    /// The key exchange: each element goes, with its key `f(element)`, to the keyed subtask
    /// owning the key's key group (the key's JSON bytes pick the group and are the state key).
    pub fn key_by<K>(self, f: impl Fn(&T) -> K + Send + Sync + 'static) -> KeyedStream<K, T>
    where
        K: Serialize + DeserializeOwned + Clone + Send + 'static,
    {
        let (plan, i) = self.plan.push("key_by");
        KeyedStream {
            plan,
            source: chain::map(self.source, i, move |x: T| (f(&x), x)),
        }
    }

    /// Writes the elements to `sink`'s topic (the job's sink topic), from each source
    /// subtask's own sink task.
    pub fn sink(self, sink: impl Into<Sink<T>>) -> JobGraph {
        let sink = sink.into();
        let source = self.source;
        let fields = sink.fields();
        let erased: ErasedSource = Arc::new(move |r, c, out| {
            let sourced = source(r, c, &mut |_, x| match sink.output(&x, None) {
                Ok(o) => out.push(Emitted::Out(o)),
                Err(e) => out.push(Emitted::Bad {
                    reason: format!("the sink cannot serialize its element: {e}"),
                }),
            });
            settled(sourced, out)
        });
        JobGraph {
            plan: self.plan,
            source: erased,
            keyed: None,
            sink_fields: fields,
        }
    }
}

/// A stream after `key_by`: a [`KeyedProcessFunction`] or a window runs on it, in the keyed
/// subtask owning each key.
pub struct KeyedStream<K, T> {
    pub(crate) plan: Plan,
    source: SourceFn<(K, T)>,
}

/// The source chain up to the exchange: each `(key, element)` becomes a keyed element.
fn keyed_source<K: Serialize + Send + 'static, T: Send + 'static>(
    src: SourceFn<(K, T)>,
) -> ErasedSource {
    Arc::new(move |r, c: &Counters, out: &mut Vec<Emitted>| {
        let sourced = src(r, c, &mut |time, (k, x)| match serde_json::to_vec(&k) {
            Ok(key) => out.push(Emitted::Keyed {
                key,
                time,
                element: Box::new((k, x)),
            }),
            Err(e) => out.push(Emitted::Bad {
                reason: format!("its key cannot be serialized as JSON: {e}"),
            }),
        });
        settled(sourced, out)
    })
}

/// The event time of what the head made, a record it could not make an element reported to
/// the runtime as bad.
fn settled(sourced: Sourced, out: &mut Vec<Emitted>) -> Option<i64> {
    if let Some(reason) = sourced.bad {
        out.push(Emitted::Bad { reason });
    }
    sourced.time
}

impl<K, T> KeyedStream<K, T>
where
    K: Serialize + DeserializeOwned + Clone + Send + 'static,
    T: Send + 'static,
{
    /// Runs `f` on each element with the key's state and timers (event-time timers fire only
    /// in a job with [`SourceStream::event_time`]: without it there is no watermark).
    pub fn process<O, F>(self, f: F) -> ResultStream<O>
    where
        O: 'static,
        F: KeyedProcessFunction<K, T, O>,
    {
        // The uid names the function's state (Flink's rule); its code may change as long as
        // its states still decode (a value that does not is an error naming the state).
        let kind = "process".to_owned();
        // Sync for the topology; each subtask takes its own clone.
        let f = Mutex::new(f);
        self.stage("process", "process", kind, move |env: StageEnv<O>| {
            let f = f
                .lock()
                .map_err(|_| RuntimeError::Internal("the process function's lock".into()))?
                .clone();
            ProcessStage::<K, T, O, F>::new(
                f,
                env.state,
                env.next,
                env.counters,
                env.index,
                env.name,
            )
        })
    }

    /// Cuts the stream into event-time windows of `assigner`.
    pub fn window(self, assigner: impl WindowAssigner) -> WindowedStream<K, T> {
        let mut keyed = self;
        if keyed.plan.out_of_orderness.is_none() {
            keyed.plan.problem(
                "window(..) needs event time: call .event_time(|e| .., out_of_orderness) right \
                 after source(..)",
            );
        }
        WindowedStream {
            kind: assigner.window_kind(),
            keyed,
            lateness: 0,
            late: None,
        }
    }

    /// The keyed stage (operator kind `op_kind`) that `make` builds in each keyed subtask.
    pub(crate) fn stage<O: 'static, S: KeyedStage + 'static>(
        self,
        op_kind: &'static str,
        default_uid: &'static str,
        layout_kind: String,
        make: impl Fn(StageEnv<O>) -> Result<S, RuntimeError> + Send + Sync + 'static,
    ) -> ResultStream<O> {
        let (mut plan, index) = self.plan.push(op_kind);
        plan.default_uid = default_uid;
        let source = keyed_source(self.source);
        let make = Arc::new(make);
        let finish = move |next: Downstream<O>| {
            let stage: StageFactory =
                Arc::new(move |state, metrics: &Arc<Metrics>, counters, uid: &str| {
                    let env = StageEnv {
                        state,
                        next: next.clone(),
                        counters,
                        index,
                        name: format!("{uid} ({op_kind})"),
                        metrics: metrics.clone(),
                    };
                    Ok(Box::new(make(env)?) as Box<dyn KeyedStage>)
                });
            (source, layout_kind, stage)
        };
        ResultStream {
            plan,
            finish: Box::new(finish),
        }
    }
}

type Finish<T> = Box<dyn FnOnce(Downstream<T>) -> (ErasedSource, String, StageFactory) + Send>;

/// The keyed stage's output: its operators run in the keyed subtask, after the stage.
pub struct ResultStream<T> {
    plan: Plan,
    /// The job's chains, given what follows this stream (continuation-passing: see `chain`).
    finish: Finish<T>,
}

impl<T: 'static> ResultStream<T> {
    /// The keyed operator's uid (default `process` or `window`): it names the operator's
    /// state in checkpoints; letters, digits, `.`, `_`, `-`.
    pub fn uid(mut self, uid: impl Into<String>) -> ResultStream<T> {
        self.plan.uid = Some(uid.into());
        self
    }

    /// Keeps the elements `f` holds true for.
    pub fn filter(self, f: impl Fn(&T) -> bool + Send + Sync + 'static) -> ResultStream<T> {
        let (plan, i) = self.plan.push("filter");
        let prev = self.finish;
        let f: Arc<dyn Fn(&T) -> bool + Send + Sync> = Arc::new(f);
        ResultStream {
            plan,
            finish: Box::new(move |next| prev(chain::filter_down(next, i, f))),
        }
    }

    /// Each element made into `f(element)`.
    pub fn map<U: 'static>(self, f: impl Fn(T) -> U + Send + Sync + 'static) -> ResultStream<U> {
        let (plan, i) = self.plan.push("map");
        let prev = self.finish;
        let f: Arc<dyn Fn(T) -> U + Send + Sync> = Arc::new(f);
        ResultStream {
            plan,
            finish: Box::new(move |next| prev(chain::map_down(next, i, f))),
        }
    }

    /// Each element made into the elements `f` returns.
    pub fn flat_map<U: 'static, I: IntoIterator<Item = U> + 'static>(
        self,
        f: impl Fn(T) -> I + Send + Sync + 'static,
    ) -> ResultStream<U> {
        let (plan, i) = self.plan.push("flat_map");
        let prev = self.finish;
        let f: Arc<dyn Fn(T) -> I + Send + Sync> = Arc::new(f);
        ResultStream {
            plan,
            finish: Box::new(move |next| prev(chain::flat_map_down(next, i, f))),
        }
    }

    /// Writes the elements to `sink`'s topic (the job's sink topic), from each keyed
    /// subtask's own sink task.
    pub fn sink(self, sink: impl Into<Sink<T>>) -> JobGraph {
        let sink = sink.into();
        let fields = sink.fields();
        let next: Downstream<T> = Arc::new(move |x, _, out| {
            let o = sink
                .output(&x, None)
                .map_err(|message| RuntimeError::Function {
                    operator: "sink".into(),
                    message,
                })?;
            out.push(o);
            Ok(())
        });
        let (source, kind, stage) = (self.finish)(next);
        let uid = self
            .plan
            .uid
            .clone()
            .unwrap_or_else(|| self.plan.default_uid.to_owned());
        JobGraph {
            plan: self.plan,
            source,
            keyed: Some(Keyed { uid, kind, stage }),
            sink_fields: fields,
        }
    }
}

/// A job with its sink: [`Self::build`] checks it.
pub struct JobGraph {
    plan: Plan,
    source: ErasedSource,
    keyed: Option<Keyed>,
    /// The job file's `[sink]` fields of the sink.
    sink_fields: Vec<(&'static str, toml::Value)>,
}

impl JobGraph {
    /// The checked job, ready to run.
    ///
    /// # Errors
    /// [`BuildError::Setting`] for a setting a job file would refuse (exactly-once without a
    /// transactional id prefix, key groups below the parallelism ...);
    /// [`BuildError::Dataflow`] for a dataflow that cannot run (a window without event time,
    /// bad window sizes, an unusable uid or late topic).
    pub fn build(self) -> Result<Dataflow, BuildError> {
        let plan = self.plan;
        if let Some(p) = plan.problems.first() {
            return Err(plan.builder.dataflow_error(p.clone()));
        }
        if let Some(k) = &self.keyed {
            if let Err(e) = check_uid(&k.uid) {
                return Err(plan.builder.dataflow_error(e));
            }
        }
        let job = plan.builder.check(&plan.topics, &self.sink_fields)?;
        let topology = TypedTopology {
            prefetch: plan.prefetch,
            source: self.source,
            keyed: self.keyed,
            kinds: plan.kinds,
            out_of_orderness: plan.out_of_orderness,
        };
        Ok(Dataflow {
            job,
            topology: Arc::new(topology),
            formats: plan.formats,
        })
    }
}

/// A uid names a keyspace: letters, digits, `.`, `_`, `-`, at most 200 characters.
pub(crate) fn check_uid(uid: &str) -> Result<(), String> {
    let ok = !uid.is_empty()
        && uid.len() <= 200
        && uid
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "uid {uid:?} is not usable: give 1 to 200 letters, digits, '.', '_' or '-'"
        ))
    }
}
