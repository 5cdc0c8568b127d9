//! Subject name strategies: under which subject of the registry a record's schema is
//! registered and looked up (the property `key.subject.name.strategy` /
//! `value.subject.name.strategy`, with the Java serializers' class names or short names).

use super::error::{Result, SchemaError};

/// Whether a serde handles record keys or values (the topic strategy's `-key` / `-value`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Part {
    /// The record key.
    Key,
    /// The record value.
    Value,
}

impl Part {
    /// `key` or `value`.
    pub fn as_str(self) -> &'static str {
        match self {
            Part::Key => "key",
            Part::Value => "value",
        }
    }
}

/// How the subject is named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SubjectNameStrategy {
    /// `<topic>-key` / `<topic>-value` (the default: one schema line per topic).
    #[default]
    Topic,
    /// The record's fully qualified name (several topics share the subject; one topic may
    /// carry several record types).
    Record,
    /// `<topic>-<fully qualified name>`.
    TopicRecord,
}

impl SubjectNameStrategy {
    /// Reads a strategy from its short name (`topic`, `record`, `topic-record`) or the Java
    /// serializers' class name (`io.confluent.kafka.serializers.subject.TopicNameStrategy`,
    /// `...RecordNameStrategy`, `...TopicRecordNameStrategy`).
    ///
    /// # Errors
    /// [`SchemaError::Config`] naming the value and the ones accepted.
    pub fn parse(property: &str, value: &str) -> Result<SubjectNameStrategy> {
        let short = value.rsplit('.').next().unwrap_or(value);
        match short.to_ascii_lowercase().as_str() {
            "topic" | "topicnamestrategy" => Ok(SubjectNameStrategy::Topic),
            "record" | "recordnamestrategy" => Ok(SubjectNameStrategy::Record),
            "topic-record" | "topicrecordnamestrategy" => Ok(SubjectNameStrategy::TopicRecord),
            _ => Err(SchemaError::Config(format!(
                "{property}={value} is not a subject name strategy: use topic, record or topic-record (or the Java class names TopicNameStrategy, RecordNameStrategy, TopicRecordNameStrategy)"
            ))),
        }
    }

    /// The subject for a record of `topic`; `record_name` is the schema's fully qualified
    /// name (an Avro record's namespace and name, a Protobuf message's full name), which the
    /// record strategies need.
    ///
    /// # Errors
    /// [`SchemaError::Config`] when a record strategy meets a schema without a name.
    pub fn subject(self, topic: &str, part: Part, record_name: Option<&str>) -> Result<String> {
        let name = || {
            record_name.ok_or_else(|| {
                SchemaError::Config(format!(
                    "the {} subject name strategy needs a named schema (an Avro record, a Protobuf message) for the {} of topic '{topic}'; use the topic strategy",
                    self.as_str(),
                    part.as_str()
                ))
            })
        };
        Ok(match self {
            SubjectNameStrategy::Topic => format!("{topic}-{}", part.as_str()),
            SubjectNameStrategy::Record => name()?.to_owned(),
            SubjectNameStrategy::TopicRecord => format!("{topic}-{}", name()?),
        })
    }

    /// `topic`, `record` or `topic-record`.
    pub fn as_str(self) -> &'static str {
        match self {
            SubjectNameStrategy::Topic => "topic",
            SubjectNameStrategy::Record => "record",
            SubjectNameStrategy::TopicRecord => "topic-record",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use SubjectNameStrategy as S;

    #[test]
    fn subjects_table() {
        #[rustfmt::skip]
        let cases = [
            (S::Topic,       Part::Value, None,                 Some("rides-value")),
            (S::Topic,       Part::Key,   Some("nyc.Ride"),     Some("rides-key")),
            (S::Record,      Part::Value, Some("nyc.Ride"),     Some("nyc.Ride")),
            (S::TopicRecord, Part::Value, Some("nyc.Ride"),     Some("rides-nyc.Ride")),
            (S::Record,      Part::Value, None,                 None),
            (S::TopicRecord, Part::Key,   None,                 None),
        ];
        for (strategy, part, name, want) in cases {
            let got = strategy.subject("rides", part, name);
            match want {
                Some(w) => assert_eq!(got.unwrap(), w),
                None => assert!(got
                    .unwrap_err()
                    .to_string()
                    .contains("needs a named schema")),
            }
        }
    }

    #[test]
    fn strategies_parse_from_short_and_java_class_names() {
        #[rustfmt::skip]
        let cases = [
            ("topic",                                                     Some(S::Topic)),
            ("io.confluent.kafka.serializers.subject.TopicNameStrategy",  Some(S::Topic)),
            ("RecordNameStrategy",                                        Some(S::Record)),
            ("topic-record",                                              Some(S::TopicRecord)),
            ("io.confluent.kafka.serializers.subject.TopicRecordNameStrategy", Some(S::TopicRecord)),
            ("io.apicurio.registry.serde.strategy.TopicIdStrategy",       None),
            ("",                                                          None),
        ];
        for (value, want) in cases {
            match (S::parse("value.subject.name.strategy", value), want) {
                (Ok(got), Some(want)) => assert_eq!(got, want, "{value}"),
                (Err(e), None) => assert!(
                    e.to_string().contains("value.subject.name.strategy="),
                    "{e}"
                ),
                (got, want) => panic!("{value}: got {got:?}, want {want:?}"),
            }
        }
    }
}
