//! Why a run stopped.

/// Why a run stopped. Each is one line naming what is wrong and what to change.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// The job asks for something this runtime does not do.
    #[error("{0}")]
    Unsupported(String),
    /// The state store failed or refused the restore.
    #[error(transparent)]
    State(#[from] crate::engine::state::StateError),
    /// The sink failed (data loss, prefix clash, budget, a client error).
    #[error(transparent)]
    Sink(#[from] crate::engine::sink::SinkError),
    /// The file sink could not write, close or commit a part file.
    #[error(transparent)]
    FileSink(#[from] crate::engine::sink::file::FileSinkError),
    /// The file source could not read its input.
    #[error(transparent)]
    FileSource(#[from] crate::engine::file_source::FileSourceError),
    /// The file source's `format` names no format of [`RunConfig::formats`](super::RunConfig::formats),
    /// or its settings do not make a format: the message says which.
    #[error("{0}")]
    LineFormat(String),
    /// The coordinator failed the job.
    #[error(transparent)]
    Checkpoint(#[from] crate::engine::checkpoint::JobFailure),
    /// A client call of the source failed.
    #[error("{what}: {source}")]
    Client {
        /// What the runtime was doing.
        what: String,
        /// The client's error.
        #[source]
        source: crate::client::Error,
    },
    /// The schema registry failed (unreachable past `default.api.timeout.ms`, refused
    /// credentials), or an output value does not fit the sink's schema.
    #[error("{what}: {source}")]
    Schema {
        /// What the runtime was doing.
        what: String,
        /// The registry's or the serde's error.
        #[source]
        source: crate::schema::SchemaError,
    },
    /// An output value cannot be written in the sink's format (`csv`, `raw`): what and why.
    #[error("{what}: {reason}")]
    Encode {
        /// What the runtime was doing.
        what: String,
        /// What is wrong with the value and what to change.
        reason: String,
    },
    /// A user function of a typed job (`engine::dataflow`) failed: the job stops, naming
    /// the operator.
    #[error("operator {operator}: {message}; fix the function (or the input it cannot handle) and restart from the latest checkpoint")]
    Function {
        /// The operator's uid and kind, e.g. `long-rides (process)`.
        operator: String,
        /// The function's error.
        message: String,
    },
    /// An input record the job cannot process, with `errors.tolerance = "none"`: the job
    /// stops before anything after the record is committed.
    #[error("{0}")]
    BadRecord(String),
    /// An invariant of the runtime broke (a bug): the message says which.
    #[error("internal error: {0}")]
    Internal(String),
}

impl RuntimeError {
    pub(crate) fn client(what: impl Into<String>, source: crate::client::Error) -> RuntimeError {
        RuntimeError::Client {
            what: what.into(),
            source,
        }
    }
}
