//! From the file's shape to the checked job: the job's name, its source (topics or a file),
//! then the pipeline, the sink and the settings (each in its own file).

use std::ops::Range;
use std::path::PathBuf;

use toml::Spanned;

use crate::engine::job::JobError;

use super::locator::Locator;
use super::model::*;
use super::pipeline::check_pipeline;
use super::raw::*;
use super::settings::check_settings;
use super::sink::{check_ends, check_sink};

pub(super) fn check(loc: &Locator<'_>, raw: RawJob) -> Result<Job, JobError> {
    let name = raw.name.get_ref().clone();
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Err(loc.at(
            &raw.name.span(),
            Some("name"),
            format!("{name:?} is not a job name: use letters, digits, '.', '_' and '-'"),
        ));
    }
    let mut raw_sink = raw.sink;
    let sink_span = raw_sink.span();
    let sink_brokers = raw_sink.get_mut().brokers.take();
    let source = check_source(loc, &name, raw.source, sink_brokers)?;
    let pipeline = check_pipeline(loc, raw.pipeline)?;
    let sink = check_sink(loc, raw_sink)?;
    check_ends(loc, &source, &pipeline, &sink, &sink_span)?;
    let mode_span = raw.settings.mode.as_ref().map_or(0..0, |m| m.span());
    let facts = SinkFacts {
        exactly_once: sink.guarantee == DeliveryGuarantee::ExactlyOnce,
        kafka: sink.file.is_none(),
    };
    let settings = check_settings(loc, &name, facts, raw.settings)?;
    let registry = super::records::check_registry(loc, raw.registry, &source, &sink)?;
    if settings.mode == Mode::Cluster {
        let refused = if source.file.is_some() || sink.file.is_some() {
            Some("mode = \"cluster\" reads and writes Kafka only: a file source or sink runs with mode = \"local\"")
        } else if source.start == StartPosition::Latest {
            Some("mode = \"cluster\" starts a partition without committed offsets at its beginning: remove source.start = \"latest\" (or run with mode = \"local\")")
        } else if pipeline
            .iter()
            .filter(|op| matches!(op, Operator::WindowAggregate(_)))
            .count()
            > 1
        {
            Some("mode = \"cluster\" runs one keyed stage, and this job has a window after a window: run it with mode = \"local\"")
        } else {
            None
        };
        if let Some(why) = refused {
            return Err(loc.at(&mode_span, Some("settings.mode"), why));
        }
    }
    Ok(Job {
        name,
        source,
        pipeline,
        sink,
        settings,
        registry,
    })
}

pub(super) fn check_source(
    loc: &Locator<'_>,
    name: &str,
    raw: Spanned<RawSource>,
    sink_brokers: Option<Spanned<Brokers>>,
) -> Result<SourceSpec, JobError> {
    let span = raw.span();
    let mut raw = raw.into_inner();
    let file = match raw.kind {
        EndKind::File => Some(check_file_source(loc, &span, &raw)?),
        EndKind::Kafka => {
            refuse_file_source_fields(loc, &raw)?;
            None
        }
    };
    let (brokers_field, brokers) = match (&file, raw.brokers.take(), sink_brokers) {
        (None, Some(b), _) => ("source.brokers", b),
        (None, None, _) => {
            return Err(loc.at(
                &span,
                Some("source.brokers"),
                "no broker given; write e.g. brokers = \"localhost:9092\"",
            ))
        }
        (Some(_), _, Some(b)) => ("sink.brokers", b),
        (Some(_), Some(b), None) => ("source.brokers", b),
        (Some(_), None, None) => (
            "sink.brokers",
            Spanned::new(span.clone(), Brokers(Vec::new())),
        ),
    };
    let brokers_span = brokers.span();
    let brokers = brokers.into_inner().0;
    if brokers.is_empty() && file.is_none() {
        return Err(loc.at(
            &brokers_span,
            Some(brokers_field),
            "no broker given; write e.g. brokers = \"localhost:9092\"",
        ));
    }
    let topics = check_topics(loc, &span, raw.topics.take(), file.is_some())?;
    let (value_format, value_columns) = match &file {
        Some(_) => (RecordFormat::Json, None),
        None => {
            let format = super::records::check_source_format(loc, raw.format.as_ref())?;
            let columns = super::lines::check_value_columns(loc, &span, &raw, format)?;
            (format, columns)
        }
    };
    let group = match raw.group.map(|g| g.id) {
        Some(g) if g.get_ref().trim().is_empty() => {
            return Err(loc.at(
                &g.span(),
                Some("source.group.id"),
                "the group name is empty",
            ));
        }
        Some(g) => g.into_inner(),
        None => name.to_owned(),
    };
    Ok(SourceSpec {
        brokers,
        topics,
        file,
        group,
        // 10 s: one Metadata request per job, and a new partition's records wait at most that.
        partition_discovery_ms: raw.partition.map_or(10_000, |p| *p.discovery.ms.get_ref()),
        start: raw.start,
        value_format,
        value_columns,
    })
}

/// A Kafka source given what only a file source has.
pub(super) fn refuse_file_source_fields(
    loc: &Locator<'_>,
    raw: &RawSource,
) -> Result<(), JobError> {
    for (given, field) in [
        (raw.path.as_ref().map(|p| p.span()), "source.path"),
        (
            raw.serving_speed_factor.as_ref().map(|p| p.span()),
            "source.serving_speed_factor",
        ),
        (
            raw.max_delay_s.as_ref().map(|p| p.span()),
            "source.max_delay_s",
        ),
        (raw.header.as_ref().map(|p| p.span()), "source.header"),
        (raw.time.as_ref().map(|p| p.span()), "source.time"),
        (raw.key.as_ref().map(|p| p.span()), "source.key"),
    ] {
        if let Some(at) = given {
            return Err(loc.at(
                &at,
                Some(field),
                "only a file source has it: add type = \"file\" to [source], or remove it",
            ));
        }
    }
    Ok(())
}

/// `source.topics`: at least one, none empty, for a Kafka source; none for a file source.
pub(super) fn check_topics(
    loc: &Locator<'_>,
    span: &Range<usize>,
    given: Option<Spanned<Vec<Spanned<String>>>>,
    file: bool,
) -> Result<Vec<String>, JobError> {
    let mut topics = Vec::new();
    match (given, file) {
        (Some(given), true) => return Err(loc.at(
            &given.span(),
            Some("source.topics"),
            "a file source reads source.path, not topics: remove topics (or the type = \"file\")",
        )),
        (None, true) => {}
        (None, false) => {
            return Err(loc.at(
                span,
                Some("source.topics"),
                "no topic given; write e.g. topics = [\"rides\"]",
            ))
        }
        (Some(given), false) => {
            let topics_span = given.span();
            for t in given.into_inner() {
                if t.get_ref().trim().is_empty() {
                    return Err(loc.at(&t.span(), Some("source.topics"), "a topic name is empty"));
                }
                topics.push(t.into_inner());
            }
            if topics.is_empty() {
                return Err(loc.at(
                    &topics_span,
                    Some("source.topics"),
                    "no topic given; write e.g. topics = [\"rides\"]",
                ));
            }
        }
    }
    Ok(topics)
}

/// `[source] type = "file"`: path and format (both required; whether the format's name is
/// registered is checked at start, by the runtime), the serving speed and the delay.
pub(super) fn check_file_source(
    loc: &Locator<'_>,
    span: &Range<usize>,
    raw: &RawSource,
) -> Result<FileSourceSpec, JobError> {
    let Some(path) = raw.path.as_ref() else {
        return Err(loc.at(
            span,
            Some("source.path"),
            "a file source needs path = \"<a file or a directory of files>\"",
        ));
    };
    if path.get_ref().trim().is_empty() {
        return Err(loc.at(&path.span(), Some("source.path"), "the path is empty"));
    }
    let Some(format) = raw.format.as_ref() else {
        return Err(loc.at(
            span,
            Some("source.format"),
            "a file source needs format = \"csv\" (with its columns), \"json\" (JSON Lines), \"avro\" (container files) or \
             the name of a format the program that runs the job registers (an unknown name is \
             refused at start, with the registered ones listed)",
        ));
    };
    let format = super::lines::check_line_format(loc, span, raw, format)?;
    let factor = raw
        .serving_speed_factor
        .as_ref()
        .map_or(0.0, |f| *f.get_ref());
    if !factor.is_finite() || factor < 0.0 {
        let at = raw
            .serving_speed_factor
            .as_ref()
            .map_or(span.clone(), |f| f.span());
        return Err(loc.at(
            &at,
            Some("source.serving_speed_factor"),
            format!("{factor} is not a speed-up: give 0 (as fast as possible) or a positive number, e.g. 600"),
        ));
    }
    Ok(FileSourceSpec {
        path: PathBuf::from(path.get_ref()),
        format,
        serving_speed_factor: factor,
        max_delay_s: raw.max_delay_s.as_ref().map_or(0, |d| *d.get_ref()),
    })
}
