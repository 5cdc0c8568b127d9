//! Broker error codes as a typed value.
//!
//! Every error code a broker can return maps to an [`ErrorCode`], whose name is Kafka's own
//! (`NOT_LEADER_OR_FOLLOWER`, `PRODUCER_FENCED`, ...). What the client *does* about an error is
//! decided in one place, [`crate::client::classify`]; this module only names them.

use kafka_protocol::error::{ParseResponseErrorCode, ResponseError};
use std::fmt;

/// A broker error code (never 0: success is not an error).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ErrorCode(pub i16);

impl ErrorCode {
    /// Converts a code from a response into `Ok(())` for 0 and `Err` otherwise.
    ///
    /// # Errors
    /// Returns the code itself when it is not 0.
    ///
    /// ```
    /// use onceflow::protocol::ErrorCode;
    /// assert!(ErrorCode::check(0).is_ok());
    /// assert_eq!(ErrorCode::check(6).unwrap_err(), ErrorCode::NOT_LEADER_OR_FOLLOWER);
    /// ```
    pub fn check(code: i16) -> Result<(), ErrorCode> {
        if code == 0 {
            Ok(())
        } else {
            Err(ErrorCode(code))
        }
    }

    /// The kafka-protocol crate's enum for this code (`Unknown(n)` for codes it does not know).
    pub fn response_error(self) -> ResponseError {
        self.0.err().unwrap_or(ResponseError::Unknown(self.0))
    }

    /// Kafka's SCREAMING_SNAKE name for the code, e.g. `NOT_LEADER_OR_FOLLOWER`.
    pub fn name(self) -> String {
        let camel = format!("{:?}", self.response_error());
        if camel.starts_with("Unknown(") {
            return format!("UNKNOWN_ERROR_CODE_{}", self.0);
        }
        let mut out = String::with_capacity(camel.len() + 8);
        for (i, ch) in camel.chars().enumerate() {
            if ch.is_ascii_uppercase() && i > 0 {
                out.push('_');
            }
            out.push(ch.to_ascii_uppercase());
        }
        out
    }
}

macro_rules! codes {
    ($($name:ident = $code:expr),* $(,)?) => {
        impl ErrorCode {
            $(
                #[allow(missing_docs)]
                pub const $name: ErrorCode = ErrorCode($code);
            )*
        }
    };
}

codes! {
    UNKNOWN_SERVER_ERROR = -1,
    OFFSET_OUT_OF_RANGE = 1,
    CORRUPT_MESSAGE = 2,
    UNKNOWN_TOPIC_OR_PARTITION = 3,
    INVALID_FETCH_SIZE = 4,
    LEADER_NOT_AVAILABLE = 5,
    NOT_LEADER_OR_FOLLOWER = 6,
    REQUEST_TIMED_OUT = 7,
    BROKER_NOT_AVAILABLE = 8,
    REPLICA_NOT_AVAILABLE = 9,
    MESSAGE_TOO_LARGE = 10,
    STALE_CONTROLLER_EPOCH = 11,
    OFFSET_METADATA_TOO_LARGE = 12,
    NETWORK_EXCEPTION = 13,
    COORDINATOR_LOAD_IN_PROGRESS = 14,
    COORDINATOR_NOT_AVAILABLE = 15,
    NOT_COORDINATOR = 16,
    INVALID_TOPIC_EXCEPTION = 17,
    RECORD_LIST_TOO_LARGE = 18,
    NOT_ENOUGH_REPLICAS = 19,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20,
    INVALID_REQUIRED_ACKS = 21,
    ILLEGAL_GENERATION = 22,
    INCONSISTENT_GROUP_PROTOCOL = 23,
    INVALID_GROUP_ID = 24,
    UNKNOWN_MEMBER_ID = 25,
    INVALID_SESSION_TIMEOUT = 26,
    REBALANCE_IN_PROGRESS = 27,
    INVALID_COMMIT_OFFSET_SIZE = 28,
    TOPIC_AUTHORIZATION_FAILED = 29,
    GROUP_AUTHORIZATION_FAILED = 30,
    CLUSTER_AUTHORIZATION_FAILED = 31,
    INVALID_TIMESTAMP = 32,
    UNSUPPORTED_SASL_MECHANISM = 33,
    ILLEGAL_SASL_STATE = 34,
    UNSUPPORTED_VERSION = 35,
    TOPIC_ALREADY_EXISTS = 36,
    INVALID_PARTITIONS = 37,
    INVALID_REPLICATION_FACTOR = 38,
    INVALID_REPLICA_ASSIGNMENT = 39,
    INVALID_CONFIG = 40,
    NOT_CONTROLLER = 41,
    INVALID_REQUEST = 42,
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43,
    POLICY_VIOLATION = 44,
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45,
    DUPLICATE_SEQUENCE_NUMBER = 46,
    INVALID_PRODUCER_EPOCH = 47,
    INVALID_TXN_STATE = 48,
    INVALID_PRODUCER_ID_MAPPING = 49,
    INVALID_TRANSACTION_TIMEOUT = 50,
    CONCURRENT_TRANSACTIONS = 51,
    TRANSACTION_COORDINATOR_FENCED = 52,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53,
    SECURITY_DISABLED = 54,
    OPERATION_NOT_ATTEMPTED = 55,
    KAFKA_STORAGE_ERROR = 56,
    LOG_DIR_NOT_FOUND = 57,
    SASL_AUTHENTICATION_FAILED = 58,
    UNKNOWN_PRODUCER_ID = 59,
    REASSIGNMENT_IN_PROGRESS = 60,
    DELEGATION_TOKEN_AUTH_DISABLED = 61,
    GROUP_ID_NOT_FOUND = 69,
    FETCH_SESSION_ID_NOT_FOUND = 70,
    INVALID_FETCH_SESSION_EPOCH = 71,
    LISTENER_NOT_FOUND = 72,
    TOPIC_DELETION_DISABLED = 73,
    FENCED_LEADER_EPOCH = 74,
    UNKNOWN_LEADER_EPOCH = 75,
    UNSUPPORTED_COMPRESSION_TYPE = 76,
    STALE_BROKER_EPOCH = 77,
    OFFSET_NOT_AVAILABLE = 78,
    MEMBER_ID_REQUIRED = 79,
    PREFERRED_LEADER_NOT_AVAILABLE = 80,
    GROUP_MAX_SIZE_REACHED = 81,
    FENCED_INSTANCE_ID = 82,
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83,
    ELECTION_NOT_NEEDED = 84,
    NO_REASSIGNMENT_IN_PROGRESS = 85,
    GROUP_SUBSCRIBED_TO_TOPIC = 86,
    INVALID_RECORD = 87,
    UNSTABLE_OFFSET_COMMIT = 88,
    THROTTLING_QUOTA_EXCEEDED = 89,
    PRODUCER_FENCED = 90,
    RESOURCE_NOT_FOUND = 91,
    DUPLICATE_RESOURCE = 92,
    UNACCEPTABLE_CREDENTIAL = 93,
    INCONSISTENT_VOTER_SET = 94,
    INVALID_UPDATE_VERSION = 95,
    FEATURE_UPDATE_FAILED = 96,
    PRINCIPAL_DESERIALIZATION_FAILURE = 97,
    SNAPSHOT_NOT_FOUND = 98,
    POSITION_OUT_OF_RANGE = 99,
    UNKNOWN_TOPIC_ID = 100,
    DUPLICATE_BROKER_REGISTRATION = 101,
    BROKER_ID_NOT_REGISTERED = 102,
    INCONSISTENT_TOPIC_ID = 103,
    INCONSISTENT_CLUSTER_ID = 104,
    TRANSACTIONAL_ID_NOT_FOUND = 105,
    FETCH_SESSION_TOPIC_ID_ERROR = 106,
    INELIGIBLE_REPLICA = 107,
    NEW_LEADER_ELECTED = 108,
    OFFSET_MOVED_TO_TIERED_STORAGE = 109,
    FENCED_MEMBER_EPOCH = 110,
    UNRELEASED_INSTANCE_ID = 111,
    UNSUPPORTED_ASSIGNOR = 112,
    STALE_MEMBER_EPOCH = 113,
    MISMATCHED_ENDPOINT_TYPE = 114,
    UNSUPPORTED_ENDPOINT_TYPE = 115,
    UNKNOWN_CONTROLLER_ID = 116,
    UNKNOWN_SUBSCRIPTION_ID = 117,
    TELEMETRY_TOO_LARGE = 118,
    INVALID_REGISTRATION = 119,
    TRANSACTION_ABORTABLE = 120,
    INVALID_RECORD_STATE = 121,
    SHARE_SESSION_NOT_FOUND = 122,
    INVALID_SHARE_SESSION_EPOCH = 123,
    FENCED_STATE_EPOCH = 124,
    INVALID_VOTER_KEY = 125,
    DUPLICATE_VOTER = 126,
    VOTER_NOT_FOUND = 127,
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.0)
    }
}

impl fmt::Debug for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_kafka_spelling() {
        assert_eq!(
            ErrorCode::NOT_LEADER_OR_FOLLOWER.name(),
            "NOT_LEADER_OR_FOLLOWER"
        );
        assert_eq!(ErrorCode::PRODUCER_FENCED.name(), "PRODUCER_FENCED");
        assert_eq!(ErrorCode(30000).name(), "UNKNOWN_ERROR_CODE_30000");
        assert_eq!(
            ErrorCode::MESSAGE_TOO_LARGE.to_string(),
            "MESSAGE_TOO_LARGE (10)"
        );
    }
}
