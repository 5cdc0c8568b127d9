//! The client's error type and the one function that decides what to do about a broker error.

use crate::protocol::frame::FrameError;
use crate::protocol::records::RecordError;
use crate::protocol::ErrorCode;
use std::time::Duration;

/// Result alias for the client.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the client. Messages are one line and name what to change.
///
/// `Clone` because one failed produce request fails every record of its batches.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The broker answered with an error code.
    #[error("{context}: broker returned {code}{}", authorization_hint(*code, context))]
    Broker {
        /// What the client was doing, e.g. "produce to orders-3".
        context: String,
        /// The code.
        code: ErrorCode,
    },
    /// A record larger than the limits allows.
    #[error("record of {size} bytes is larger than {limit_name}={limit}; raise {limit_name} (and the topic's max.message.bytes / the broker's message.max.bytes) or send smaller records")]
    RecordTooLarge {
        /// Encoded size of the record.
        size: usize,
        /// Which setting limits it.
        limit_name: &'static str,
        /// Its value.
        limit: usize,
    },
    /// The broker refused a batch as too large (MESSAGE_TOO_LARGE / RECORD_LIST_TOO_LARGE).
    #[error("{context}: broker refused a batch of {size} bytes as too large ({code}); raise the topic's max.message.bytes or the broker's message.max.bytes, or send smaller records")]
    BatchTooLarge {
        /// Where.
        context: String,
        /// The batch size sent.
        size: usize,
        /// The broker's code.
        code: ErrorCode,
    },
    /// TCP failure talking to a broker.
    #[error("broker {broker}: {message}")]
    Io {
        /// host:port.
        broker: String,
        /// What the OS said.
        message: String,
    },
    /// SASL authentication failed. Fatal: the same credentials will fail again.
    #[error("authentication to broker {broker} failed ({mechanism}, {who}): {message}")]
    Authentication {
        /// host:port.
        broker: String,
        /// `sasl.mechanism`.
        mechanism: &'static str,
        /// Who tried: the user name, or where the token came from (never a secret).
        who: String,
        /// What the broker or the exchange said.
        message: String,
    },
    /// The TLS handshake failed (an untrusted or mismatched certificate, a refused client
    /// certificate, a listener that does not speak TLS). Fatal: retrying cannot fix it.
    #[error("broker {broker}: {message}")]
    Tls {
        /// host:port.
        broker: String,
        /// What failed and what to change.
        message: String,
    },
    /// No broker could be reached.
    #[error("no broker reachable at {addrs} ({last}); check bootstrap.servers and that Kafka is running")]
    NoBrokerReachable {
        /// The addresses tried.
        addrs: String,
        /// The last failure.
        last: String,
    },
    /// The connection failed earlier; every request on it fails the same way.
    #[error("connection to broker {broker} is closed: {reason}")]
    ConnectionClosed {
        /// host:port.
        broker: String,
        /// Why it was closed.
        reason: String,
    },
    /// A deadline passed.
    #[error("{what} timed out after {after:?}")]
    Timeout {
        /// What timed out.
        what: String,
        /// The configured limit.
        after: Duration,
    },
    /// Wire decoding failed (the broker's bytes are untrusted).
    #[error(transparent)]
    Frame(#[from] std::sync::Arc<FrameError>),
    /// A record batch could not be decoded.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// Fetched data that cannot be decoded: a corrupt batch or message, or a malformed
    /// transaction marker. The records before it were delivered; the partition does not move
    /// past it until the application seeks.
    #[error("cannot read topic '{topic}' partition {partition} at offset {offset}: {source}; the records before it were delivered; seek past it to skip the corrupt data")]
    CorruptData {
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
        /// Where reading stopped: the position of the partition.
        offset: i64,
        /// What is wrong.
        source: RecordError,
    },
    /// Records the consumer already delivered are no longer in the partition's log (KIP-320: the
    /// leader's log diverges below the position, e.g. after an unclean leader election), and
    /// auto.offset.reset=none. The partition does not move until the application seeks.
    #[error("topic '{topic}' partition {partition} was truncated below the consumer's position {position}{}; seek to continue, or set auto.offset.reset to earliest or latest to move to where the log diverges automatically", match divergent_offset { Some(o) => format!(" (the log now diverges at offset {o})"), None => String::new() })]
    LogTruncation {
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
        /// The position of the partition when the truncation was found.
        position: i64,
        /// The first offset where the log differs from what was fetched, when the broker knows.
        divergent_offset: Option<i64>,
    },
    /// The topic was deleted and recreated under the same name (a new topic id, KIP-516)
    /// while the consumer read it, and auto.offset.reset=none: the old position means nothing
    /// in the new topic. The partition does not move until the application seeks.
    #[error("topic '{topic}' partition {partition} was deleted and recreated (topic id {old_id} became {new_id}); the position {position} belonged to the old topic: seek to continue, or set auto.offset.reset to earliest or latest to reset automatically")]
    TopicRecreated {
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
        /// The position, in the old topic.
        position: i64,
        /// The id the position belonged to.
        old_id: uuid::Uuid,
        /// The id metadata now gives the name.
        new_id: uuid::Uuid,
    },
    /// The topic was deleted and recreated under the same name (a new topic id, KIP-516)
    /// while a batch sent to it was unacknowledged. It may have been written to the deleted
    /// topic, so the producer does not resend it to the new one (a reader of both would see
    /// it twice); records not yet sent go to the new topic.
    #[error("topic '{topic}' partition {partition} was deleted and recreated (topic id {old_id} became {new_id}) while {records} record(s) sent to it were unacknowledged; they may have been written to the deleted topic and were not resent to the new one: send them again if they belong in the new topic")]
    RecreatedWhileInFlight {
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
        /// Records of the failed batch.
        records: usize,
        /// The id the batch was sent under.
        old_id: uuid::Uuid,
        /// The id metadata now gives the name.
        new_id: uuid::Uuid,
    },
    /// The broker supports no version of an API we need.
    #[error("broker {broker} supports no version of {api} that this client speaks; upgrade the broker (Kafka 2.8 or later)")]
    UnsupportedVersion {
        /// host:port.
        broker: String,
        /// API name.
        api: String,
    },
    /// The topic does not exist.
    #[error(
        "topic '{0}' does not exist; create it first (onceflow topics create) or check the name"
    )]
    UnknownTopic(String),
    /// The topic does not exist and the broker did not create it although the client asked
    /// (Metadata with allow_auto_topic_creation): auto-creation is off on the broker.
    #[error("topic '{topic}' does not exist{waited} and the broker does not create topics automatically (auto.create.topics.enable=false); create it with `onceflow topics create` or check the name")]
    TopicNotCreated {
        /// The topic.
        topic: String,
        /// How long the client waited for it, e.g. " (still unknown after 60000 ms,
        /// max.block.ms)", or empty.
        waited: String,
    },
    /// The partition does not exist.
    #[error("partition {partition} of topic '{topic}' does not exist (the topic has {count} partitions)")]
    UnknownPartition {
        /// Topic.
        topic: String,
        /// Partition asked for.
        partition: i32,
        /// Partitions the topic has.
        count: usize,
    },
    /// Every slot of a [`crate::client::pool::TransactionalPool`] is busy; the pool never grows.
    #[error("all {size} transactional ids of pool '{prefix}' are busy ({open} open, {prepared} prepared, {ended} ended and not released); release an ended slot once no durable checkpoint lists its committable (back-pressure until then), or create the pool with more slots")]
    PoolExhausted {
        /// The pool's transactional id prefix.
        prefix: String,
        /// Slots in the pool.
        size: usize,
        /// Slots with an open transaction.
        open: usize,
        /// Slots with a prepared transaction.
        prepared: usize,
        /// Slots ended and not yet released.
        ended: usize,
    },
    /// A configuration problem.
    #[error(transparent)]
    Config(#[from] super::config::ConfigError),
    /// The producer or consumer was closed.
    #[error("{0} is closed")]
    Closed(&'static str),
    /// The transaction or producer was fenced: another producer took over the transactional id,
    /// or the coordinator aborted the transaction (transaction.timeout.ms). Fatal for the
    /// producer instance. Also a consumer group member whose group.instance.id another member
    /// took over: fatal for that member.
    #[error("{0}")]
    Fenced(String),
    /// An offset commit was refused because the group rebalanced (the member must rejoin; its
    /// partitions may belong to another member now).
    #[error("{0}")]
    CommitFailed(String),
    /// A call made out of order (e.g. `send` before `init_transactions()`) or with a bad
    /// argument. The message names what is wrong and what to call or change instead.
    #[error("{0}")]
    Usage(String),
    /// The broker's answer makes no sense: bytes that do not decode as what the protocol says
    /// they are, or an answer that contradicts the request.
    #[error("the broker's answer makes no sense: {0}")]
    Protocol(String),
    /// The client broke one of its own rules: a bug in onceflow.
    #[error("internal error: {0}; this is a bug in onceflow, please report it")]
    Internal(String),
    /// The open transaction cannot commit (a record failed, or the coordinator aborted it);
    /// `abort_transaction()` recovers, and the producer goes on.
    #[error("{0}")]
    TransactionAbortable(String),
}

/// What an authorization error means for the ACLs, named from the request the context starts
/// with: which operation on which kind of resource the principal lacks, and how to grant it.
/// Empty for every other code.
///
/// # Examples
/// ```
/// use onceflow::client::error::authorization_hint;
/// use onceflow::protocol::ErrorCode;
/// let hint = authorization_hint(ErrorCode::TOPIC_AUTHORIZATION_FAILED, "Produce to rides-0");
/// assert!(hint.contains("--operation Write --topic NAME"), "{hint}");
/// assert!(authorization_hint(ErrorCode::NOT_LEADER_OR_FOLLOWER, "Produce").is_empty());
/// ```
pub fn authorization_hint(code: ErrorCode, context: &str) -> String {
    let request = context
        .split(|c: char| !c.is_ascii_alphanumeric())
        .next()
        .unwrap_or("");
    let (operation, resource, flag) = match code {
        ErrorCode::TOPIC_AUTHORIZATION_FAILED => {
            let op = match request {
                "Produce" | "produce" | "AddPartitionsToTxn" => "Write",
                "Fetch" | "fetch" => "Read",
                _ => "Describe",
            };
            (op, "the topic", "--topic NAME")
        }
        ErrorCode::GROUP_AUTHORIZATION_FAILED => {
            let op = match request {
                "FindCoordinator" | "DescribeGroups" => "Describe",
                _ => "Read",
            };
            (op, "the group", "--group NAME")
        }
        ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED => {
            let op = match request {
                "FindCoordinator" | "DescribeTransactions" => "Describe",
                _ => "Write",
            };
            (op, "the transactional id", "--transactional-id NAME")
        }
        ErrorCode::CLUSTER_AUTHORIZATION_FAILED => match request {
            "InitProducerId" => {
                return " (not authorized: an idempotent producer needs IdempotentWrite on the cluster, or Write on a topic on Kafka 3.0+; grant it with kafka-acls --add --allow-principal User:NAME --operation IdempotentWrite --cluster, or set enable.idempotence=false)".to_owned();
            }
            _ => {
                return format!(
                    " (not authorized: the principal lacks a cluster ACL for {request}; grant the operation it needs with kafka-acls --add --allow-principal User:NAME --operation OPERATION --cluster)"
                );
            }
        },
        _ => return String::new(),
    };
    format!(
        " (not authorized: the principal needs {operation} on {resource}; grant it with kafka-acls --add --allow-principal User:NAME --operation {operation} {flag})"
    )
}

impl From<FrameError> for Error {
    fn from(e: FrameError) -> Self {
        Error::Frame(std::sync::Arc::new(e))
    }
}

impl Error {
    /// The broker error code, if this error is one.
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::Error;
    /// use onceflow::protocol::ErrorCode;
    /// let e = Error::broker("creating topic 'rides'", ErrorCode::TOPIC_ALREADY_EXISTS);
    /// assert_eq!(e.code(), Some(ErrorCode::TOPIC_ALREADY_EXISTS));
    /// assert_eq!(Error::Closed("producer").code(), None);
    /// ```
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Broker { code, .. } | Error::BatchTooLarge { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Builds [`Error::Broker`].
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::Error;
    /// use onceflow::protocol::ErrorCode;
    /// let e = Error::broker("fetching rides-0", ErrorCode::NOT_LEADER_OR_FOLLOWER);
    /// assert!(matches!(e, Error::Broker { .. }));
    /// println!("{e}");
    /// ```
    pub fn broker(context: impl Into<String>, code: ErrorCode) -> Self {
        Error::Broker {
            context: context.into(),
            code,
        }
    }

    /// Names the broker that answered (`role` and address, e.g. "coordinator 10.0.0.7:9092")
    /// in an [`Error::Broker`] whose context does not name it yet; other errors are returned
    /// as they are (a connection error names its broker already). Used where the connection
    /// is known, so that every error code reaching the application says which broker sent it.
    pub(crate) fn at_broker(self, role: &str, addr: &str) -> Self {
        match self {
            Error::Broker { context, code } if !context.contains(addr) => Error::Broker {
                context: format!("{context} ({role} {addr})"),
                code,
            },
            e => e,
        }
    }

    /// How the client should react to this error outside a transaction; see [`classify`].
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::{Error, ErrorClass};
    /// use onceflow::protocol::ErrorCode;
    /// let moved = Error::broker("produce to rides-0", ErrorCode::NOT_LEADER_OR_FOLLOWER);
    /// assert_eq!(moved.class(), ErrorClass::RefreshAndRetry);
    /// assert_eq!(Error::Usage("no transactional.id".into()).class(), ErrorClass::Fatal);
    /// ```
    pub fn class(&self) -> ErrorClass {
        self.class_in(Op::General)
    }

    /// How the client should react to this error during `op`; see [`classify`].
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::{error::Op, Error, ErrorClass};
    /// use onceflow::protocol::ErrorCode;
    /// // A produce refused for its epoch: inside a transaction, abort it and go on.
    /// let e = Error::broker("produce to rides-0", ErrorCode::INVALID_PRODUCER_EPOCH);
    /// assert_eq!(e.class_in(Op::TxnProduce), ErrorClass::Abortable);
    /// assert_eq!(e.class_in(Op::TxnCoordinator), ErrorClass::Fatal); // fenced
    /// ```
    pub fn class_in(&self, op: Op) -> ErrorClass {
        match self {
            // A batch refused as too large is a broker code like any other: in a transaction
            // it dooms the transaction, not the producer (it was fatal for the producer).
            Error::Broker { code, .. } | Error::BatchTooLarge { code, .. } => classify(*code, op),
            // A slot frees up when the caller releases one: begin() again after that.
            Error::PoolExhausted { .. } => ErrorClass::Retriable,
            Error::Io { .. }
            | Error::ConnectionClosed { .. }
            | Error::Timeout { .. }
            | Error::NoBrokerReachable { .. } => ErrorClass::RefreshAndRetry,
            Error::TransactionAbortable(_) => ErrorClass::Abortable,
            // The records failed for good, but a transaction that held them can abort.
            Error::RecreatedWhileInFlight { .. } if op == Op::TxnProduce => ErrorClass::Abortable,
            // Usage, Protocol, Internal, Fenced, Config, ...: retrying cannot help.
            _ => ErrorClass::Fatal,
        }
    }
}

/// What to do about an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorClass {
    /// Try the same request again after a backoff.
    Retriable,
    /// The client's view of the cluster is stale (leader moved, coordinator moved, connection
    /// lost): refresh metadata or look the coordinator up again, then retry.
    RefreshAndRetry,
    /// Inside a transaction: the transaction must be aborted, the producer stays usable.
    Abortable,
    /// Retrying cannot help; surface to the user.
    Fatal,
}

/// What the client was doing when an error came back: the same code can mean different things
/// to a transaction coordinator call and to a plain produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Op {
    /// Metadata, fetch, list offsets, admin, and produce outside transactions.
    General,
    /// A produce inside a transaction.
    TxnProduce,
    /// A call to the transaction coordinator (InitProducerId, AddPartitionsToTxn,
    /// AddOffsetsToTxn, EndTxn) or TxnOffsetCommit to the group coordinator.
    TxnCoordinator,
}

/// The one place that decides how a broker error code is handled.
///
/// Anything not listed is fatal: an unclassified error must never be retried in a loop.
///
/// # Examples
/// ```
/// use onceflow::client::{classify, ErrorClass};
/// use onceflow::client::error::Op;
/// use onceflow::protocol::ErrorCode;
/// assert_eq!(classify(ErrorCode::NOT_LEADER_OR_FOLLOWER, Op::General), ErrorClass::RefreshAndRetry);
/// assert_eq!(classify(ErrorCode::PRODUCER_FENCED, Op::TxnCoordinator), ErrorClass::Fatal);
/// assert_eq!(classify(ErrorCode::TRANSACTION_ABORTABLE, Op::TxnProduce), ErrorClass::Abortable);
/// ```
pub fn classify(code: ErrorCode, op: Op) -> ErrorClass {
    let transactional = matches!(op, Op::TxnProduce | Op::TxnCoordinator);
    match code {
        // KIP-588: a produce refused for its epoch means the coordinator bumped it, which it
        // also does when it aborts a transaction that ran past transaction.timeout.ms. The
        // abort re-initializes the producer id (InitProducerId with the current id and epoch);
        // if another producer fenced us, that is where it shows.
        ErrorCode::INVALID_PRODUCER_EPOCH if op == Op::TxnProduce => ErrorClass::Abortable,
        // Another producer owns the transactional id, or we may not use it: never retry.
        ErrorCode::PRODUCER_FENCED
        | ErrorCode::INVALID_PRODUCER_EPOCH
        | ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        | ErrorCode::CLUSTER_AUTHORIZATION_FAILED
        | ErrorCode::TRANSACTION_COORDINATOR_FENCED
        | ErrorCode::INVALID_TRANSACTION_TIMEOUT
        | ErrorCode::INVALID_TXN_STATE
        | ErrorCode::UNSUPPORTED_VERSION
        | ErrorCode::UNSUPPORTED_FOR_MESSAGE_FORMAT
            if transactional =>
        {
            ErrorClass::Fatal
        }
        // The transaction cannot complete; abort it and the producer goes on.
        ErrorCode::TRANSACTION_ABORTABLE
        | ErrorCode::UNKNOWN_PRODUCER_ID
        | ErrorCode::INVALID_PRODUCER_ID_MAPPING
        | ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER
        | ErrorCode::ILLEGAL_GENERATION
        | ErrorCode::UNKNOWN_MEMBER_ID
        | ErrorCode::FENCED_INSTANCE_ID
        | ErrorCode::GROUP_AUTHORIZATION_FAILED
        | ErrorCode::TOPIC_AUTHORIZATION_FAILED
        | ErrorCode::MESSAGE_TOO_LARGE
        | ErrorCode::RECORD_LIST_TOO_LARGE
        | ErrorCode::INVALID_RECORD
            if transactional =>
        {
            ErrorClass::Abortable
        }
        // The cluster moved under us: learn where things are now, then retry.
        ErrorCode::NOT_LEADER_OR_FOLLOWER
        | ErrorCode::LEADER_NOT_AVAILABLE
        | ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
        | ErrorCode::UNKNOWN_TOPIC_ID
        | ErrorCode::FENCED_LEADER_EPOCH
        | ErrorCode::UNKNOWN_LEADER_EPOCH
        | ErrorCode::NOT_COORDINATOR
        | ErrorCode::COORDINATOR_NOT_AVAILABLE
        | ErrorCode::BROKER_NOT_AVAILABLE
        | ErrorCode::REPLICA_NOT_AVAILABLE
        | ErrorCode::KAFKA_STORAGE_ERROR
        | ErrorCode::NETWORK_EXCEPTION
        | ErrorCode::INCONSISTENT_TOPIC_ID
        | ErrorCode::NEW_LEADER_ELECTED
        | ErrorCode::NOT_CONTROLLER => ErrorClass::RefreshAndRetry,
        // Transient on the same broker. CONCURRENT_TRANSACTIONS: the previous transaction's
        // markers are still being written.
        ErrorCode::REQUEST_TIMED_OUT
        | ErrorCode::NOT_ENOUGH_REPLICAS
        | ErrorCode::NOT_ENOUGH_REPLICAS_AFTER_APPEND
        | ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
        | ErrorCode::CONCURRENT_TRANSACTIONS
        | ErrorCode::OFFSET_NOT_AVAILABLE
        | ErrorCode::THROTTLING_QUOTA_EXCEEDED
        | ErrorCode::CORRUPT_MESSAGE
        | ErrorCode::UNSTABLE_OFFSET_COMMIT
        | ErrorCode::REBALANCE_IN_PROGRESS
        | ErrorCode::FETCH_SESSION_ID_NOT_FOUND
        | ErrorCode::INVALID_FETCH_SESSION_EPOCH
        | ErrorCode::ELIGIBLE_LEADERS_NOT_AVAILABLE
        | ErrorCode::PREFERRED_LEADER_NOT_AVAILABLE => ErrorClass::Retriable,
        ErrorCode::TRANSACTION_ABORTABLE => ErrorClass::Abortable,
        // In a transaction, whatever else a produce fails with dooms the transaction but not the
        // producer; elsewhere unclassified means fatal.
        _ if op == Op::TxnProduce => ErrorClass::Abortable,
        _ => ErrorClass::Fatal,
    }
}

#[cfg(test)]
mod authorization_tests {
    use super::*;

    #[test]
    fn authorization_errors_name_the_operation_and_the_resource_to_grant() {
        // (code, context, what the message says)
        let table: &[(ErrorCode, &str, &str)] = &[
            (
                ErrorCode::TOPIC_AUTHORIZATION_FAILED,
                "metadata for topic 'orders'",
                "needs Describe on the topic; grant it with kafka-acls --add --allow-principal User:NAME --operation Describe --topic NAME",
            ),
            (ErrorCode::TOPIC_AUTHORIZATION_FAILED, "produce to orders-3", "needs Write on the topic"),
            (ErrorCode::TOPIC_AUTHORIZATION_FAILED, "Fetch orders-0", "needs Read on the topic"),
            (ErrorCode::TOPIC_AUTHORIZATION_FAILED, "AddPartitionsToTxn orders-1", "needs Write on the topic"),
            (ErrorCode::GROUP_AUTHORIZATION_FAILED, "JoinGroup 'g'", "needs Read on the group; grant it with kafka-acls --add --allow-principal User:NAME --operation Read --group NAME"),
            (ErrorCode::GROUP_AUTHORIZATION_FAILED, "FindCoordinator for group 'g'", "needs Describe on the group"),
            (ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "InitProducerId for 't'", "needs Write on the transactional id; grant it with kafka-acls --add --allow-principal User:NAME --operation Write --transactional-id NAME"),
            (ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "FindCoordinator for transactional id 't'", "needs Describe on the transactional id"),
            (ErrorCode::CLUSTER_AUTHORIZATION_FAILED, "InitProducerId", "an idempotent producer needs IdempotentWrite on the cluster"),
            (ErrorCode::CLUSTER_AUTHORIZATION_FAILED, "CreateAcls", "lacks a cluster ACL for CreateAcls"),
        ];
        for (code, context, want) in table {
            let text = Error::broker(*context, *code).to_string();
            assert!(text.contains(want), "{context}: {text}");
            assert!(text.starts_with(context), "{text}");
        }
        assert_eq!(
            authorization_hint(ErrorCode::NOT_LEADER_OR_FOLLOWER, "produce"),
            ""
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (what, error, its message once the coordinator at 10.0.0.7:9092 is named)
    #[test]
    fn an_error_code_names_the_broker_that_sent_it_once() {
        let at = "10.0.0.7:9092";
        let cases = [
            (
                "an error code",
                Error::broker(
                    "offset fetch for group 'g'",
                    ErrorCode::GROUP_AUTHORIZATION_FAILED,
                ),
                "offset fetch for group 'g' (coordinator 10.0.0.7:9092): broker returned",
            ),
            (
                "already named",
                Error::broker(
                    format!("heartbeat (coordinator {at})"),
                    ErrorCode::UNKNOWN_SERVER_ERROR,
                ),
                "heartbeat (coordinator 10.0.0.7:9092): broker returned",
            ),
            (
                "not an error code",
                Error::Protocol("a damaged answer".into()),
                "a damaged answer",
            ),
        ];
        for (what, e, want) in cases {
            let got = e.at_broker("coordinator", at).to_string();
            assert!(got.starts_with(want) || got.contains(want), "{what}: {got}");
            assert!(got.matches(at).count() <= 1, "{what}: named twice: {got}");
        }
    }

    #[test]
    fn unclassified_codes_are_fatal() {
        assert_eq!(classify(ErrorCode(9999), Op::General), ErrorClass::Fatal);
        assert_eq!(
            classify(ErrorCode::MESSAGE_TOO_LARGE, Op::General),
            ErrorClass::Fatal
        );
        assert_eq!(
            classify(ErrorCode::TOPIC_AUTHORIZATION_FAILED, Op::General),
            ErrorClass::Fatal
        );
    }

    #[test]
    fn a_batch_refused_as_too_large_dooms_a_transaction_not_the_producer() {
        let e = Error::BatchTooLarge {
            context: "produce to t-0".into(),
            size: 10_072,
            code: ErrorCode::MESSAGE_TOO_LARGE,
        };
        assert_eq!(e.class_in(Op::TxnProduce), ErrorClass::Abortable);
        assert_eq!(e.class(), ErrorClass::Fatal);
    }

    #[test]
    fn usage_protocol_and_must_abort_errors_are_told_apart() {
        let cases = [
            (
                Error::Usage("call init_transactions() first".into()),
                ErrorClass::Fatal,
            ),
            (
                Error::Protocol("assignment: too short".into()),
                ErrorClass::Fatal,
            ),
            (Error::Internal("x".into()), ErrorClass::Fatal),
            (
                Error::TransactionAbortable("call abort_transaction()".into()),
                ErrorClass::Abortable,
            ),
        ];
        for (e, want) in cases {
            assert_eq!(e.class(), want, "{e}");
            assert_eq!(e.class_in(Op::TxnCoordinator), want, "{e}");
        }
    }

    #[test]
    fn stale_metadata_codes_refresh() {
        for c in [
            ErrorCode::NOT_LEADER_OR_FOLLOWER,
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            ErrorCode::NOT_COORDINATOR,
        ] {
            assert_eq!(classify(c, Op::General), ErrorClass::RefreshAndRetry, "{c}");
        }
        assert_eq!(
            classify(ErrorCode::TRANSACTION_ABORTABLE, Op::General),
            ErrorClass::Abortable
        );
    }

    #[test]
    fn transactions_have_three_outcomes() {
        use ErrorClass::*;
        let cases = [
            (
                ErrorCode::CONCURRENT_TRANSACTIONS,
                Op::TxnCoordinator,
                Retriable,
            ),
            (
                ErrorCode::COORDINATOR_LOAD_IN_PROGRESS,
                Op::TxnCoordinator,
                Retriable,
            ),
            (
                ErrorCode::NOT_COORDINATOR,
                Op::TxnCoordinator,
                RefreshAndRetry,
            ),
            (
                ErrorCode::UNKNOWN_PRODUCER_ID,
                Op::TxnCoordinator,
                Abortable,
            ),
            (
                ErrorCode::INVALID_PRODUCER_ID_MAPPING,
                Op::TxnCoordinator,
                Abortable,
            ),
            (ErrorCode::TRANSACTION_ABORTABLE, Op::TxnProduce, Abortable),
            (ErrorCode::ILLEGAL_GENERATION, Op::TxnCoordinator, Abortable),
            (ErrorCode::PRODUCER_FENCED, Op::TxnCoordinator, Fatal),
            (ErrorCode::INVALID_PRODUCER_EPOCH, Op::TxnProduce, Abortable),
            (ErrorCode::INVALID_PRODUCER_EPOCH, Op::TxnCoordinator, Fatal),
            (
                ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                Op::TxnCoordinator,
                Fatal,
            ),
            (ErrorCode::MESSAGE_TOO_LARGE, Op::TxnProduce, Abortable),
            (ErrorCode(9999), Op::TxnProduce, Abortable),
            (ErrorCode(9999), Op::TxnCoordinator, Fatal),
            (
                ErrorCode::NOT_LEADER_OR_FOLLOWER,
                Op::TxnProduce,
                RefreshAndRetry,
            ),
        ];
        for (code, op, want) in cases {
            assert_eq!(classify(code, op), want, "{code} in {op:?}");
        }
    }
}
