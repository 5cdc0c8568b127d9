//! The sink: a Kafka topic or files, its delivery guarantee and its transactional id prefix.

use std::ops::Range;
use std::path::PathBuf;

use toml::Spanned;

use crate::engine::job::JobError;

use super::locator::Locator;
use super::model::*;
use super::raw::*;

pub(super) fn check_sink(loc: &Locator<'_>, raw: Spanned<RawSink>) -> Result<SinkSpec, JobError> {
    let span = raw.span();
    let mut raw = raw.into_inner();
    let file = match raw.kind {
        EndKind::File => Some(check_file_sink(loc, &span, &mut raw)?),
        EndKind::Kafka => {
            refuse_file_fields(loc, &raw)?;
            None
        }
    };
    let topic = match (raw.topic.take(), &file) {
        (Some(t), Some(_)) => return Err(loc.at(
            &t.span(),
            Some("sink.topic"),
            "a file sink writes to sink.path, not a topic: remove topic (or the type = \"file\")",
        )),
        (None, Some(_)) => String::new(),
        (None, None) => {
            return Err(loc.at(
                &span,
                Some("sink.topic"),
                "no output topic given; write e.g. topic = \"rides-clean\"",
            ))
        }
        (Some(t), None) => {
            if t.get_ref().trim().is_empty() {
                return Err(loc.at(&t.span(), Some("sink.topic"), "the topic name is empty"));
            }
            t.into_inner()
        }
    };
    let (value_format, value_schema) = match &file {
        Some(_) => (RecordFormat::Json, None),
        None => {
            super::records::check_sink_format(loc, &span, raw.format.take(), raw.schema.take())?
        }
    };
    // A file sink took its own columns above.
    let value_columns = check_value_columns(loc, &span, value_format, raw.columns.take())?;
    let guarantee = raw.delivery.map(|d| d.guarantee).unwrap_or_default();
    let prefix_span = raw.transactional.as_ref().map(|t| t.id.prefix.span());
    let prefix = check_prefix(loc, raw.transactional)?;
    if file.is_some() {
        if let Some(at) = &prefix_span {
            return Err(loc.at(
                at,
                Some("sink.transactional.id.prefix"),
                "a file sink has no transactions (its files are made final at each checkpoint): remove it",
            ));
        }
    } else if guarantee == DeliveryGuarantee::ExactlyOnce && prefix.is_none() {
        return Err(loc.at(
            &span,
            Some("sink.transactional.id.prefix"),
            "required for exactly-once: add transactional.id.prefix = \"<a name unique to this \
             job on this cluster>\" to [sink] (or set delivery.guarantee = \"at-least-once\")",
        ));
    }
    Ok(SinkSpec {
        topic,
        file,
        guarantee,
        transactional_id_prefix: prefix,
        value_format,
        value_schema,
        value_columns,
    })
}

/// A Kafka sink's `columns`: the fields a `format = "csv"` sink writes (required), refused
/// with another format.
fn check_value_columns(
    loc: &Locator<'_>,
    span: &Range<usize>,
    format: RecordFormat,
    columns: Option<Spanned<Vec<String>>>,
) -> Result<Vec<String>, JobError> {
    match (format, columns) {
        (RecordFormat::Csv, Some(c)) if !c.get_ref().is_empty() => Ok(c.into_inner()),
        (RecordFormat::Csv, _) => Err(loc.at(
            span,
            Some("sink.columns"),
            "format = \"csv\" writes the fields columns names, in order: add columns = [\"ride_id\", \"event_time\"]",
        )),
        (_, Some(c)) => Err(loc.at(
            &c.span(),
            Some("sink.columns"),
            "only format = \"csv\" or a file sink has it: set format = \"csv\", or remove it",
        )),
        (_, None) => Ok(Vec::new()),
    }
}

/// A Kafka sink given what only a file sink has.
pub(super) fn refuse_file_fields(loc: &Locator<'_>, raw: &RawSink) -> Result<(), JobError> {
    let only_files = [
        (raw.path.as_ref().map(|p| p.span()), "sink.path"),
        (raw.codec.as_ref().map(|p| p.span()), "sink.codec"),
        (
            raw.part.as_ref().map(|p| p.prefix.span()),
            "sink.part.prefix",
        ),
    ];
    for (given, field) in only_files {
        if let Some(at) = given {
            return Err(loc.at(
                &at,
                Some(field),
                "only a file sink has it: add type = \"file\" to [sink], or remove it",
            ));
        }
    }
    Ok(())
}

/// `sink.transactional.id.prefix`: a non-empty name without spaces, when given.
pub(super) fn check_prefix(
    loc: &Locator<'_>,
    transactional: Option<RawTransactional>,
) -> Result<Option<String>, JobError> {
    Ok(match transactional {
        Some(t) => {
            let p = t.id.prefix;
            let text = p.get_ref();
            if text.is_empty() || text.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(loc.at(
                    &p.span(),
                    Some("sink.transactional.id.prefix"),
                    format!(
                        "{text:?} is not a usable prefix: give a non-empty name without spaces"
                    ),
                ));
            }
            Some(p.into_inner())
        }
        None => None,
    })
}

/// `[sink] type = "file"`: path (required), the format, the part prefix and the rolling.
pub(super) fn check_file_sink(
    loc: &Locator<'_>,
    span: &Range<usize>,
    raw: &mut RawSink,
) -> Result<FileSinkSpec, JobError> {
    let Some(path) = raw.path.as_ref() else {
        return Err(loc.at(
            span,
            Some("sink.path"),
            "a file sink needs path = \"<a directory for this job's files>\"",
        ));
    };
    if path.get_ref().trim().is_empty() {
        return Err(loc.at(&path.span(), Some("sink.path"), "the path is empty"));
    }
    let path = PathBuf::from(path.get_ref());
    let format = check_output_format(loc, span, raw)?;
    let prefix = match raw.part.as_ref() {
        Some(p) => {
            let text = p.prefix.get_ref();
            if text.is_empty()
                || !text
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            {
                return Err(loc.at(
                    &p.prefix.span(),
                    Some("sink.part.prefix"),
                    format!(
                        "{text:?} is not a file name prefix: use letters, digits, '.', '_' and '-'"
                    ),
                ));
            }
            text.clone()
        }
        None => "part".to_owned(),
    };
    let (roll_size_bytes, roll_interval_ms) = check_rolling(loc, span, raw.rolling.as_ref())?;
    Ok(FileSinkSpec {
        path,
        format,
        prefix,
        roll_size_bytes,
        roll_interval_ms,
    })
}

/// `sink.format` of a file sink (JSON lines by default), with CSV's `columns` or Avro's
/// `schema` and `codec`.
pub(super) fn check_output_format(
    loc: &Locator<'_>,
    span: &Range<usize>,
    raw: &mut RawSink,
) -> Result<OutputFormat, JobError> {
    let (format, columns) = (raw.format.as_ref(), raw.columns.take());
    let csv = match format.map(|f| (f.get_ref().as_str(), f.span())) {
        None | Some(("json", _)) => false,
        Some(("csv", _)) => true,
        Some(("avro", _)) => return check_avro_output(loc, span, raw, columns),
        Some((other, at)) => {
            return Err(loc.at(
                &at,
                Some("sink.format"),
                format!("{other:?} is not a file format: use \"json\" (JSON lines), \"csv\" or \"avro\" (container files)"),
            ))
        }
    };
    for (given, field) in [
        (raw.schema.as_ref().map(Spanned::span), "sink.schema"),
        (raw.codec.as_ref().map(Spanned::span), "sink.codec"),
    ] {
        if let Some(at) = given {
            return Err(loc.at(
                &at,
                Some(field),
                "only format = \"avro\" files are written with a schema and a codec: set it, or remove this",
            ));
        }
    }
    Ok(match (csv, columns) {
        (false, None) => OutputFormat::JsonLines,
        (false, Some(c)) => {
            return Err(loc.at(
                &c.span(),
                Some("sink.columns"),
                "columns are for format = \"csv\": set the format, or remove columns",
            ))
        }
        (true, Some(c)) if !c.get_ref().is_empty() => OutputFormat::Csv {
            columns: c.into_inner(),
        },
        (true, _) => return Err(loc.at(
            span,
            Some("sink.columns"),
            "format = \"csv\" needs the fields to write: columns = [\"ride_id\", \"event_time\"]",
        )),
    })
}

/// `format = "avro"` files: `schema` (an `.avsc`) and `codec` (`null` by default).
fn check_avro_output(
    loc: &Locator<'_>,
    span: &Range<usize>,
    raw: &mut RawSink,
    columns: Option<Spanned<Vec<String>>>,
) -> Result<OutputFormat, JobError> {
    if let Some(c) = columns {
        return Err(loc.at(
            &c.span(),
            Some("sink.columns"),
            "columns are for format = \"csv\": an Avro file's records hold its schema's fields; remove columns",
        ));
    }
    let Some(schema) = raw.schema.take() else {
        return Err(loc.at(
            span,
            Some("sink.schema"),
            "format = \"avro\" writes with a schema: add schema = \"ride.avsc\" (a file)",
        ));
    };
    if !schema.get_ref().ends_with(".avsc") {
        return Err(loc.at(
            &schema.span(),
            Some("sink.schema"),
            format!(
                "format = \"avro\" writes with an Avro schema file ending in .avsc, not {:?}",
                schema.get_ref()
            ),
        ));
    }
    let codec = match raw.codec.take() {
        None => "null".to_owned(),
        Some(c)
            if matches!(
                c.get_ref().as_str(),
                "null" | "deflate" | "snappy" | "zstandard"
            ) =>
        {
            c.into_inner()
        }
        Some(c) => {
            return Err(loc.at(
                &c.span(),
                Some("sink.codec"),
                format!(
                    "{:?} is not a codec: use \"null\", \"deflate\", \"snappy\" or \"zstandard\"",
                    c.get_ref()
                ),
            ))
        }
    };
    Ok(OutputFormat::Avro {
        schema: PathBuf::from(schema.into_inner()),
        codec,
    })
}

/// `sink.rolling.size.bytes` (128 MiB) and `sink.rolling.interval.ms` (60 s): positive.
pub(super) fn check_rolling(
    loc: &Locator<'_>,
    span: &Range<usize>,
    rolling: Option<&RawRolling>,
) -> Result<(u64, u64), JobError> {
    let roll_size_bytes = rolling
        .and_then(|r| r.size.as_ref())
        .map_or(128 << 20, |s| *s.bytes.get_ref());
    let roll_interval_ms = rolling
        .and_then(|r| r.interval.as_ref())
        .map_or(60_000, |i| *i.ms.get_ref());
    for (value, field, at) in [
        (
            roll_size_bytes,
            "sink.rolling.size.bytes",
            rolling
                .and_then(|r| r.size.as_ref())
                .map(|s| s.bytes.span()),
        ),
        (
            roll_interval_ms,
            "sink.rolling.interval.ms",
            rolling
                .and_then(|r| r.interval.as_ref())
                .map(|i| i.ms.span()),
        ),
    ] {
        if value == 0 {
            return Err(loc.at(
                &at.unwrap_or(span.clone()),
                Some(field),
                "0 would close a part file at every record: give a positive number",
            ));
        }
    }
    Ok((roll_size_bytes, roll_interval_ms))
}

/// What the two ends allow together: Kafka at one end at least (a file source's job writes
/// to Kafka with sink.brokers; a file sink's job reads topics), and a window's late topic only
/// with a Kafka sink.
pub(super) fn check_ends(
    loc: &Locator<'_>,
    source: &SourceSpec,
    pipeline: &[Operator],
    sink: &SinkSpec,
    sink_span: &Range<usize>,
) -> Result<(), JobError> {
    match (&source.file, &sink.file) {
        (Some(_), Some(_)) => {
            return Err(loc.at(
                sink_span,
                Some("sink.type"),
                "a file source with a file sink is not supported yet: one end must be Kafka",
            ))
        }
        (Some(_), None) if source.brokers.is_empty() => {
            return Err(loc.at(
                sink_span,
                Some("sink.brokers"),
                "the Kafka sink of a file source's job needs its brokers: add brokers = \"localhost:9092\" to [sink]",
            ))
        }
        _ => {}
    }
    let late = pipeline.iter().any(|op| match op {
        Operator::WindowAggregate(w) => w.late_topic.is_some(),
        Operator::Join(j) => j.late_topic.is_some(),
        _ => false,
    });
    if late && sink.file.is_some() {
        return Err(loc.at(
            sink_span,
            Some("sink.type"),
            "late_topic writes late records to Kafka, and this job's sink is files: remove late_topic",
        ));
    }
    if let Some(Operator::Join(j)) = pipeline.first() {
        check_join_topics(loc, source, j)?;
    }
    Ok(())
}

/// A join reads the source's topics, one side each: the source lists exactly the sides'.
fn check_join_topics(
    loc: &Locator<'_>,
    source: &SourceSpec,
    join: &crate::engine::job::join::IntervalJoin,
) -> Result<(), JobError> {
    if source.file.is_some() {
        return Err(loc.at_field(
            "join",
            &["[source]"],
            "a join reads two Kafka topics: its source is Kafka (remove type = \"file\")",
        ));
    }
    let sides = [&join.left.topic, &join.right.topic];
    let missing: Vec<&str> = sides
        .iter()
        .filter(|t| !source.topics.contains(t))
        .map(|t| t.as_str())
        .collect();
    let extra: Vec<&str> = source
        .topics
        .iter()
        .filter(|t| !sides.contains(t))
        .map(String::as_str)
        .collect();
    if missing.is_empty() && extra.is_empty() {
        return Ok(());
    }
    Err(loc.at_field(
        "source.topics",
        &["topics", "[source]"],
        format!(
            "a join's source reads its two sides' topics and no other: write topics = [{:?}, {:?}] (missing: {:?}, not a side: {:?})",
            join.left.topic, join.right.topic, missing, extra
        ),
    ))
}
