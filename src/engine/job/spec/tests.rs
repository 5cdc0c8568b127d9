use super::raw::parse_duration;
use super::*;
use crate::engine::time::WindowKind;
use serde_json::json;
use std::path::PathBuf;

const CLEANSING: &str = include_str!("../../../../jobs/rides-cleansing.toml");
const HOURLY: &str = include_str!("../../../../jobs/rides-per-driver-hourly.toml");
const HOURLY_AVRO: &str = include_str!("../../../../jobs/rides-per-driver-hourly-avro.toml");

fn ride(
    driver: u64,
    is_start: bool,
    start: (f64, f64),
    end: (f64, f64),
    t: i64,
) -> serde_json::Value {
    json!({
        "ride_id": 1, "driver_id": driver, "is_start": is_start,
        "start_lon": start.0, "start_lat": start.1, "end_lon": end.0, "end_lat": end.1,
        "passengers": 2, "event_time": t
    })
}

#[test]
fn the_shipped_cleansing_job_parses_and_keeps_rides_inside_nyc() {
    let job = Job::parse("jobs/rides-cleansing.toml", CLEANSING).unwrap();
    assert_eq!(job.name, "rides-cleansing");
    assert_eq!(job.source.topics, vec!["rides".to_owned()]);
    assert_eq!(job.source.group, "rides-cleansing");
    assert_eq!(job.source.partition_discovery_ms, 10_000);
    assert_eq!(job.sink.guarantee, DeliveryGuarantee::ExactlyOnce);
    assert_eq!(
        job.sink.transactional_id_prefix.as_deref(),
        Some("rides-cleansing")
    );
    assert_eq!(job.settings.parallelism, 1);
    let [Operator::Filter(filter)] = &job.pipeline[..] else {
        panic!("one filter expected, got {:?}", job.pipeline);
    };
    let times_square = (-73.985, 40.758);
    let jfk = (-73.7781, 40.6413);
    let newark = (-74.1745, 40.6895);
    assert!(filter.matches(&ride(1, true, times_square, jfk, 0)));
    assert!(!filter.matches(&ride(1, true, times_square, newark, 0)));
    assert!(!filter.matches(&ride(1, false, newark, times_square, 0)));
}

#[test]
fn the_shipped_hourly_job_parses_into_a_keyed_hourly_count_and_sum() {
    let job = Job::parse("jobs/rides-per-driver-hourly.toml", HOURLY).unwrap();
    let [Operator::Filter(ends), Operator::KeyBy(key), Operator::WindowAggregate(win)] =
        &job.pipeline[..]
    else {
        panic!(
            "filter, key_by, window+aggregate expected, got {:?}",
            job.pipeline
        );
    };
    let start = ride(7, true, (-73.98, 40.75), (-73.95, 40.78), 1_700_000_000_000);
    let end = ride(
        7,
        false,
        (-73.98, 40.75),
        (-73.95, 40.78),
        1_700_000_600_000,
    );
    assert!(!ends.matches(&start));
    assert!(ends.matches(&end));
    assert_eq!(key.extract(&start).unwrap().as_bytes(), b"7");
    assert_eq!(win.kind, WindowKind::Tumbling { size: 3_600_000 });
    assert_eq!(win.out_of_orderness, 60_000);
    assert_eq!(win.allowed_lateness, 0);
    assert_eq!(win.late_topic, None);
    assert_eq!(win.event_time(&start), Some(1_700_000_000_000));
    let windows = win.kind.assign(1_700_000_000_000);
    assert_eq!(windows.len(), 1);
    let mut acc = win.aggregate.accumulator();
    win.aggregate.add(&mut acc, &start);
    win.aggregate.add(&mut acc, &start);
    assert_eq!(
        win.result_record(&json!(7), windows[0], &acc),
        json!({"driver_id": 7, "window_start": 1_699_999_200_000_i64,
               "window_end": 1_700_002_800_000_i64, "passengers": 4, "rides": 2})
    );
    assert_eq!(job.settings.key_groups, 128);
    assert_eq!(job.settings.transaction_timeout_ms, 300_000);
}

const HEAD: &str = "name = \"x\"\n[source]\nbrokers = \"b:9092\"\ntopics = [\"in\"]\n";
const SINK: &str = "[sink]\ntopic = \"out\"\ntransactional.id.prefix = \"x\"\n";

#[test]
fn the_shipped_avro_job_is_job_b_between_avro_ends() {
    let avro = Job::parse("jobs/rides-per-driver-hourly-avro.toml", HOURLY_AVRO).unwrap();
    let json = Job::parse("jobs/rides-per-driver-hourly.toml", HOURLY).unwrap();
    assert_eq!(avro.pipeline, json.pipeline);
    assert_eq!(avro.source.value_format, RecordFormat::Avro);
    assert_eq!(avro.sink.value_format, RecordFormat::Avro);
    assert_eq!(
        avro.sink.value_schema.as_deref(),
        Some("fixtures/schemas/driver-hour.avsc")
    );
    assert_eq!(
        avro.registry,
        [(
            "schema.registry.url".to_owned(),
            "http://127.0.0.1:8081/apis/ccompat/v7".to_owned()
        )]
    );
    assert!(std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/schemas/driver-hour.avsc")
        .is_file());
}

#[test]
fn defaults_of_a_minimal_job() {
    let job = Job::parse("m.toml", &format!("{HEAD}{SINK}")).unwrap();
    assert_eq!(job.source.brokers, vec!["b:9092".to_owned()]);
    assert_eq!(job.source.start, StartPosition::Earliest);
    assert!(job.pipeline.is_empty());
    assert_eq!(
        job.settings,
        Settings {
            mode: Mode::Local,
            parallelism: 1,
            key_groups: 128,
            checkpoint_interval_ms: 1_000,
            checkpoint_timeout_ms: 30_000,
            transaction_timeout_ms: 300_000,
            checkpoint_min_pause_ms: 0,
            checkpoint_tolerable_failures: 3,
            checkpoint_commit_margin_ms: 10_000,
            checkpoint_retained: 2,
            restart_allowance_ms: 60_000,
            state_dir: PathBuf::from("state/x"),
            state_cache_bytes: None,
            state_memtable_bytes: None,
            errors: ErrorTolerance::None,
        }
    );
    let job = Job::parse(
        "m.toml",
        "name = \"x\"\n[source]\nbrokers = [\"a:1\", \"b:2,c:3\"]\ntopics = [\"in\"]\n\
         [sink]\ntopic = \"o\"\ndelivery.guarantee = \"at-least-once\"\n",
    )
    .unwrap();
    assert_eq!(job.source.brokers, vec!["a:1", "b:2", "c:3"]);
    assert_eq!(job.sink.guarantee, DeliveryGuarantee::AtLeastOnce);
    assert_eq!(job.sink.transactional_id_prefix, None);
}

#[test]
fn every_checkpoint_setting_is_read_from_the_file() {
    let job = Job::parse(
        "m.toml",
        &format!(
            "{HEAD}{SINK}[settings]\ncheckpoint.min.pause.ms = 250\n\
             checkpoint.tolerable.failures = 0\ncheckpoint.commit.margin.ms = 5000\n\
             checkpoint.retained = 5\nrestart.allowance.ms = 20000\n"
        ),
    )
    .unwrap();
    let s = &job.settings;
    assert_eq!(
        (
            s.checkpoint_min_pause_ms,
            s.checkpoint_tolerable_failures,
            s.checkpoint_commit_margin_ms,
            s.checkpoint_retained,
            s.restart_allowance_ms
        ),
        (250, 0, 5_000, 5, 20_000)
    );
    let job = Job::parse(
        "m.toml",
        &format!("{HEAD}group.id = \"g\"\npartition.discovery.ms = 0\n{SINK}"),
    )
    .unwrap();
    assert_eq!(
        (job.source.group.as_str(), job.source.partition_discovery_ms),
        ("g", 0)
    );
}

#[test]
fn the_shipped_jobs_comments_name_the_defaults_the_parser_uses() {
    // The shipped files list these settings commented out with their defaults: uncommenting
    // them must change nothing.
    for text in [CLEANSING, HOURLY] {
        let uncommented: String = text
            .lines()
            .map(|l| match l.strip_prefix("# ") {
                Some(rest)
                    if ["checkpoint.", "restart."]
                        .iter()
                        .any(|p| rest.starts_with(p)) =>
                {
                    rest.to_owned()
                }
                _ => l.to_owned(),
            })
            .collect::<Vec<_>>()
            .join("\n");
        assert_ne!(uncommented, text, "no commented default in the shipped job");
        let a = Job::parse("a.toml", text).unwrap();
        let b = Job::parse("b.toml", &uncommented).unwrap();
        assert_eq!(a.settings, b.settings);
    }
}

#[test]
fn state_memory_sizes_are_read_from_settings() {
    let job = Job::parse(
        "m.toml",
        &format!(
            "{HEAD}{SINK}[settings]\nstate.dir = \"s\"\nstate.cache.bytes = 8388608\n\
             state.memtable.bytes = 4194304\n"
        ),
    )
    .unwrap();
    assert_eq!(job.settings.state_dir, PathBuf::from("s"));
    assert_eq!(job.settings.state_cache_bytes, Some(8 << 20));
    assert_eq!(job.settings.state_memtable_bytes, Some(4 << 20));
}

#[test]
fn sliding_windows_projection_and_nested_filters_parse() {
    let text = format!(
        "{HEAD}\
[[pipeline]]
filter.or = [
  {{ not = {{ field = \"a.b\", op = \"<\", value = 2.5 }} }},
  {{ and = [ {{ field = \"s\", op = \"!=\", value = \"x\" }}, {{ field = \"ok\", op = \"==\", value = false }} ] }},
]
[[pipeline]]
project = {{ keep = [\"k\", \"t\", \"a.b\"], rename = {{ \"a.b\" = \"ab\" }} }}
[[pipeline]]
key_by = \"k\"
[[pipeline]]
[pipeline.window]
sliding = {{ size = \"10m\", slide = \"5m\" }}
time = \"t\"
late_topic = \"late\"
[[pipeline]]
aggregate = {{ n = \"count\", lo = {{ min = \"ab\" }}, hi = {{ max = \"ab\" }}, mean = {{ avg = \"ab\" }} }}
[[pipeline]]
filter = {{ field = \"n\", op = \">\", value = 1 }}
{SINK}"
    );
    let job = Job::parse("s.toml", &text).unwrap();
    assert_eq!(job.pipeline.len(), 5);
    let Operator::Filter(f) = &job.pipeline[0] else {
        panic!()
    };
    assert!(f.matches(&json!({"a": {"b": 3}})));
    assert!(f.matches(&json!({"s": "y", "ok": false})));
    assert!(!f.matches(&json!({"a": {"b": 1}, "s": "x"})));
    let Operator::Project(p) = &job.pipeline[1] else {
        panic!()
    };
    assert_eq!(
        p.apply(json!({"k": 1, "t": 2, "a": {"b": 3}, "z": 0})),
        json!({"k": 1, "t": 2, "ab": 3})
    );
    let Operator::WindowAggregate(w) = &job.pipeline[3] else {
        panic!()
    };
    assert_eq!(
        w.kind,
        WindowKind::Sliding {
            size: 600_000,
            slide: 300_000
        }
    );
    assert_eq!(w.late_topic.as_deref(), Some("late"));
    let names: Vec<&str> = w
        .aggregate
        .outputs
        .iter()
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(names, ["hi", "lo", "mean", "n"]);
}

#[test]
fn durations_table() {
    let cases = [
        ("250ms", Some(250)),
        ("30s", Some(30_000)),
        ("15m", Some(900_000)),
        ("15min", Some(900_000)),
        ("1h", Some(3_600_000)),
        ("2d", Some(172_800_000)),
        ("0s", Some(0)),
        ("1 h", Some(3_600_000)),
        ("1", None),
        ("h", None),
        ("1.5h", None),
        ("-1s", None),
        ("1hour", None),
        ("99999999999999999d", None),
    ];
    for (text, want) in cases {
        assert_eq!(parse_duration(text), want, "{text:?}");
    }
}

/// Parses `text` expecting an error; returns (line, field, message).
pub(super) fn invalid(text: &str) -> (usize, String, String) {
    match Job::parse("jobs/x.toml", text) {
        Ok(job) => panic!("expected an error, got {job:?}\n{text}"),
        Err(JobError::Invalid {
            line,
            field,
            message,
            ..
        }) => (line, field, message),
        Err(other) => panic!("expected Invalid, got {other}"),
    }
}

#[test]
fn malformed_files_name_the_line_and_the_field() {
    // (file text, line, field, part of the message)
    let stage = |s: &str| format!("{HEAD}[[pipeline]]\n{s}\n{SINK}"); // the stage is on line 6
    let cases: Vec<(String, usize, &str, &str)> = vec![
        (
            stage("filter = { field = 3, op = \"=\", value = 1 }"),
            6,
            "filter.field",
            "expected a string like \"trip.start.lon\", got integer `3`",
        ),
        (
            stage("filter = { field = \"a..b\", op = \"=\", value = 1 }"),
            6,
            "filter.field",
            "empty segment",
        ),
        (
            stage("filter = { field = \"a\", op = \"=~\", value = 1 }"),
            6,
            "filter.op",
            "unknown variant `=~`",
        ),
        (
            stage("filter = { field = \"a\", op = \"=\", value = [1] }"),
            6,
            "filter.value",
            "expected a number, a string or a boolean, got array",
        ),
        (
            stage("filter = { field = \"a\", op = \"<\", value = true }"),
            6,
            "filter.value",
            "a boolean only takes = or !=",
        ),
        (
            stage("filter = { field = \"a\", value = 1 }"),
            6,
            "filter",
            "needs all of field, op and value",
        ),
        (
            stage("filter = { field = \"a\", op = \"=\", value = 1, not = { field = \"b\", op = \"=\", value = 1 } }"),
            6,
            "filter",
            "exactly one of",
        ),
        (
            stage("filter.and = [\n  { field = \"a\", op = \">\", value = 1 },\n  { fiedl = \"b\" },\n]"),
            8,
            "filter.and.fiedl",
            "unknown field `fiedl`",
        ),
        (
            stage("filter.or = []"),
            6,
            "filter.or",
            "an empty list",
        ),
        (
            stage("filter.within = { lon = \"x\", lat = \"y\", box = [1.0, 2.0, 3.0] }"),
            6,
            "filter.within.box",
            "got 3 numbers",
        ),
        (
            stage("filter.within = { lon = \"x\", lat = \"y\", box = [-73.7, 40.5, -74.05, 41.0] }"),
            6,
            "filter.within.box",
            "west must be ≤ east",
        ),
        (
            stage("fitler = { field = \"a\", op = \"=\", value = 1 }"),
            6,
            "fitler",
            "unknown variant `fitler`",
        ),
        (
            stage("key_by = \"a\"\nproject.keep = [\"a\"]"),
            5,
            "pipeline",
            "exactly one operator",
        ),
        (
            stage("project = { keep = [\"a\"], rename = { b = \"c\" } }"),
            6,
            "project",
            "`b` is renamed but not in `keep`",
        ),
        (
            stage("window = { tumbling = \"1h\", time = \"t\" }\n[[pipeline]]\naggregate.n = \"count\""),
            6,
            "window",
            "needs a key_by before it",
        ),
        (
            stage("key_by = \"k\"\n[[pipeline]]\naggregate.n = \"count\""),
            8,
            "aggregate",
            "needs a window right before it",
        ),
        (
            stage("key_by = \"k\"\n[[pipeline]]\nwindow = { tumbling = \"1h\", time = \"t\" }\n[[pipeline]]\naggregate.n = \"count\"\n[[pipeline]]\nwindow = { tumbling = \"1h\", time = \"window_start\" }\n[[pipeline]]\naggregate.m = \"count\""),
            12,
            "window",
            "a window after an aggregate needs a key_by of its own",
        ),
        (
            stage("key_by = \"k\"\n[[pipeline]]\nwindow = { tumbling = \"1h\", time = \"t\" }\n[[pipeline]]\naggregate.n = \"count\"\n[[pipeline]]\nkey_by = \"window_start\"\n[[pipeline]]\nwindow = { tumbling = \"1h\", time = \"window_start\", out_of_orderness = \"1s\" }\n[[pipeline]]\naggregate.m = \"count\""),
            14,
            "window.out_of_orderness",
            "takes its watermark from the one before it",
        ),
        (
            stage("key_by = \"k\"\n[[pipeline]]\nkey_by = \"j\""),
            8,
            "key_by",
            "replaces the first; keep one",
        ),
        (
            stage("key_by = \"k\"\n[[pipeline]]\nwindow = { tumbling = \"1h\", time = \"t\" }\n[[pipeline]]\naggregate.b.top = { n = 0, by = \"v\", keep = [\"k\"] }"),
            10,
            "aggregate.b.top.n",
            "a whole number of at least 1",
        ),
        (
            stage("key_by = \"k\"\n[[pipeline]]\nwindow = { tumbling = \"1h\", time = \"t\" }\n[[pipeline]]\naggregate.b.top = { n = 3, by = \"v\", keep = [] }"),
            10,
            "aggregate.b.top.keep",
            "name the fields each kept record has",
        ),
        (
            stage("key_by = \"k\"\n[[pipeline]]\nwindow = { tumbling = \"1h\", time = \"t\" }"),
            8,
            "window",
            "followed directly by an aggregate",
        ),
        (
            stage("key_by = \"k\"\n[[pipeline]]\nwindow = { session = \"0s\", time = \"t\" }\n[[pipeline]]\naggregate.n = \"count\""),
            8,
            "window.session",
            "the gap must be more than 0",
        ),
        (
            stage("key_by = \"k\"\n[[pipeline]]\nwindow = { session = \"30m\", tumbling = \"1h\", time = \"t\" }\n[[pipeline]]\naggregate.n = \"count\""),
            8,
            "window",
            "or session = \"30m\" (the gap)",
        ),
        (
            stage("key_by = \"k\"\n[[pipeline]]\nwindow = { tumbling = \"1 hour\", time = \"t\" }\n[[pipeline]]\naggregate.n = \"count\""),
            8,
            "window.tumbling",
            "expected a duration like \"1h\"",
        ),
        (
            stage("key_by = \"k\"\n[[pipeline]]\nwindow = { tumbling = 3600, time = \"t\" }\n[[pipeline]]\naggregate.n = \"count\""),
            8,
            "window.tumbling",
            "expected a duration like \"1h\", \"15m\", \"30s\" or \"250ms\", got integer `3600`",
        ),
        (
            stage("key_by = \"k\"\n[[pipeline]]\nwindow = { sliding = { size = \"1m\", slide = \"2m\" }, time = \"t\" }\n[[pipeline]]\naggregate.n = \"count\""),
            8,
            "window.sliding.slide",
            "at most the size",
        ),
        (
            stage("key_by = \"k\"\n[[pipeline]]\nwindow = { tumbling = \"1h\", time = \"t\" }\n[[pipeline]]\naggregate.n = \"total\""),
            10,
            "aggregate.n",
            "unknown variant `total`",
        ),
        (
            stage("key_by = \"d.k\"\n[[pipeline]]\nwindow = { tumbling = \"1h\", time = \"t\" }\n[[pipeline]]\naggregate.k = \"count\""),
            10,
            "aggregate.k",
            "`k` is taken",
        ),
        (
            format!("nmae = \"x\"\n{HEAD}{SINK}"),
            1,
            "nmae",
            "unknown field `nmae`",
        ),
        (
            format!("name = \"x y\"\n[source]\nbrokers = \"b:9092\"\ntopics = [\"in\"]\n{SINK}"),
            1,
            "name",
            "not a job name",
        ),
        (
            format!("name = \"x\"\n[source]\nbrokers = \"b:9092\"\n{SINK}"),
            2,
            "source.topics",
            "no topic given",
        ),
        (
            format!("name = \"x\"\n[source]\nbrokers = \"b:9092\"\ntopics = []\n{SINK}"),
            4,
            "source.topics",
            "no topic given",
        ),
        (
            format!("{HEAD}[source.extra]\n{SINK}"),
            5,
            "source.extra",
            "unknown field `extra`",
        ),
        (
            format!("{HEAD}[sink]\ntopic = \"out\"\n"),
            5,
            "sink.transactional.id.prefix",
            "required for exactly-once",
        ),
        (
            format!("{HEAD}[sink]\ntopic = \"out\"\ndelivery.guarantee = \"exactly_once\"\n"),
            7,
            "sink.delivery.guarantee",
            "unknown variant `exactly_once`",
        ),
        (
            format!("{HEAD}[sink]\ntopic = \"out\"\ntransactional.id.prefix = \"a b\"\n"),
            7,
            "sink.transactional.id.prefix",
            "not a usable prefix",
        ),
        (
            format!("{HEAD}{SINK}[settings]\ncheckpoint.interval.ms = \"1s\"\n"),
            9,
            "settings.checkpoint.interval.ms",
            "expected a whole number, got string \"1s\"",
        ),
        (
            format!("{HEAD}{SINK}[settings]\ncheckpoint.intervall.ms = 5\n"),
            9,
            "settings.checkpoint.intervall",
            "unknown field `intervall`",
        ),
        (
            format!("{HEAD}{SINK}[settings]\ncheckpoint.interval.ms = 10000\ntransaction.timeout.ms = 30000\n"),
            10,
            "settings.transaction.timeout.ms",
            "30000 is below the 230000 the checkpoint settings need",
        ),
        (
            format!("{HEAD}{SINK}[settings]\nparallelism = 4\nkey.groups = 2\n"),
            10,
            "settings.key.groups",
            "out of range",
        ),
        (
            format!("{HEAD}{SINK}[settings]\nparallelism = 0\n"),
            9,
            "settings.parallelism",
            "at least 1",
        ),
        (
            format!("{HEAD}group.id = \" \"\n{SINK}"),
            5,
            "source.group.id",
            "the group name is empty",
        ),
        (
            format!("{HEAD}partition.discovery = 5\n{SINK}"),
            5,
            "source.partition.discovery",
            "expected milliseconds",
        ),
        (
            format!("{HEAD}{SINK}[settings]\ncheckpoint.interval.ms = 5\ncheckpoint.retained = 0\n"),
            10,
            "settings.checkpoint.retained",
            "at least 1",
        ),
        (
            format!("{HEAD}{SINK}[settings]\ncheckpoint.tolerable.failures = -1\n"),
            9,
            "settings.checkpoint.tolerable.failures",
            "expected a whole number",
        ),
        (
            format!("{HEAD}{SINK}[settings]\nrestart.allowance = 5\n"),
            9,
            "settings.restart.allowance",
            "expected milliseconds written as <name>.ms = <whole number>, got integer `5`",
        ),
        (
            format!("{HEAD}{SINK}[settings]\ncheckpoint.commit.margin.ms = \"10s\"\n"),
            9,
            "settings.checkpoint.commit.margin.ms",
            "expected a whole number, got string \"10s\"",
        ),
        (
            format!("{HEAD}{SINK}[settings]\ncheckpoint.min.pause = 5\n"),
            9,
            "settings.checkpoint.min.pause",
            "expected milliseconds written as <name>.ms = <whole number>, got integer `5`",
        ),
        (
            format!("{HEAD}{SINK}[settings]\nstate.cache.bytes = 4096\n"),
            9,
            "settings.state.cache.bytes",
            "4096 is too small: give at least 1048576",
        ),
        (
            format!("{HEAD}{SINK}[settings]\nstate.memtable.bytes = 0\n"),
            9,
            "settings.state.memtable.bytes",
            "at least 1048576",
        ),
    ];
    for (text, line, field, part) in cases {
        let (got_line, got_field, message) = invalid(&text);
        let shown = format!("jobs/x.toml:{got_line}: {got_field}: {message}");
        assert_eq!(
            (got_line, got_field.as_str()),
            (line, field),
            "{shown}\n--- in:\n{text}"
        );
        assert!(message.contains(part), "{shown}\n(wanted {part:?})");
        assert!(!shown.contains('\n'), "one line: {shown}");
    }
}

#[test]
fn the_error_line_reads_as_the_brief_shows() {
    let text =
        format!("{HEAD}[[pipeline]]\nfilter = {{ field = 3, op = \"=\", value = 1 }}\n{SINK}");
    let e = Job::parse("jobs/x.toml", &text).unwrap_err();
    assert_eq!(
        e.to_string(),
        "jobs/x.toml:6: filter.field: expected a string like \"trip.start.lon\", got integer `3`"
    );
    assert_eq!(e.line(), Some(6));
    assert_eq!(e.field(), Some("filter.field"));
}

#[test]
fn a_file_that_is_not_toml_is_a_syntax_error_with_its_line() {
    let cases = [
        ("name = \"x\"\n[source\n", 2),
        ("name = \"x\"\n\nname = \"y\"\n", 3),
        ("name = \"x\nsink = 1\n", 1),
        // An unclosed array points at its opening line.
        ("[source]\ntopics = [\"a\",\n", 2),
    ];
    for (text, line) in cases {
        let e = Job::parse("jobs/x.toml", text).unwrap_err();
        assert!(
            matches!(e, JobError::Syntax { line: l, .. } if l == line),
            "{e} (wanted line {line})"
        );
        assert!(!e.to_string().contains('\n'), "{e}");
    }
}

#[test]
fn a_missing_file_names_the_path() {
    let e = Job::load(Path::new("/nonexistent/job.toml")).unwrap_err();
    assert!(matches!(e, JobError::Read { .. }));
    assert!(
        e.to_string()
            .starts_with("/nonexistent/job.toml: cannot read the job file"),
        "{e}"
    );
}

#[test]
fn errors_in_dotted_and_sub_table_forms_point_at_the_operator() {
    // window written with dotted keys (as in jobs/) and as a [pipeline.window] sub-table.
    let dotted = format!(
        "{HEAD}[[pipeline]]\nwindow.tumbling = \"1h\"\nwindow.time = \"t\"\n[[pipeline]]\naggregate.n = \"count\"\n{SINK}"
    );
    let (line, field, message) = invalid(&dotted);
    assert_eq!((line, field.as_str()), (6, "window"), "{message}");
    let table = format!(
        "{HEAD}[[pipeline]]\n[pipeline.window]\ntumbling = \"1h\"\ntime = \"t\"\n[[pipeline]]\naggregate.n = \"count\"\n{SINK}"
    );
    let (line, field, message) = invalid(&table);
    assert_eq!(line, 6, "the [pipeline.window] header: {message}");
    assert_eq!(field, "window", "{message}");
    let bad_type = format!(
        "{HEAD}[[pipeline]]\n[pipeline.filter]\nfield = \"a\"\nop = \">\"\nvalue = 1979-05-27\n{SINK}"
    );
    let (line, field, message) = invalid(&bad_type);
    assert_eq!((line, field.as_str()), (9, "filter.value"), "{message}");
    assert!(message.contains("got datetime"), "{message}");
}

const FILE_TO_KAFKA: &str = include_str!("../../../../jobs/rides-file-to-kafka.toml");
const KAFKA_TO_FILES: &str = include_str!("../../../../jobs/rides-cleansing-to-files.toml");

/// Job (c): a file source with a Kafka sink, whose brokers are the job's Kafka end.
#[test]
fn the_file_to_kafka_job_reads_a_file_and_writes_a_topic() {
    let job = Job::parse("jobs/rides-file-to-kafka.toml", FILE_TO_KAFKA).unwrap();
    let file = job.source.file.as_ref().expect("a file source");
    assert_eq!(file.path, PathBuf::from("rides.csv.gz"));
    assert_eq!(file.format.name(), "csv");
    assert_eq!(file.max_delay_s, 60);
    assert!(job.source.topics.is_empty());
    assert_eq!(job.source.brokers, ["localhost:9092"]);
    assert_eq!(job.sink.topic, "rides");
    assert!(job.sink.file.is_none());
}

/// Job (d): a Kafka source with a file sink, JSON lines, rolling by size and time.
#[test]
fn the_kafka_to_files_job_writes_part_files() {
    let job = Job::parse("jobs/rides-cleansing-to-files.toml", KAFKA_TO_FILES).unwrap();
    let file = job.sink.file.as_ref().expect("a file sink");
    assert_eq!(file.path, PathBuf::from("out/rides-clean"));
    assert_eq!(file.format, super::OutputFormat::JsonLines);
    assert_eq!(file.prefix, "part");
    assert_eq!(file.roll_size_bytes, 128 << 20);
    assert_eq!(file.roll_interval_ms, 60_000);
    assert_eq!(job.sink.guarantee, DeliveryGuarantee::ExactlyOnce);
    assert!(job.sink.transactional_id_prefix.is_none());
    assert_eq!(job.source.topics, ["rides"]);
}

/// The file ends' mistakes, each named by line and field.
#[test]
fn malformed_file_ends_name_the_line_and_the_field() {
    let kafka_sink =
        "[sink]\nbrokers = \"b:1\"\ntopic = \"o\"\ndelivery.guarantee = \"at-least-once\"\n";
    let file_path = "name = \"j\"\n[source]\ntype = \"file\"\npath = \"x.csv\"\n";
    let file_source = format!("{file_path}format = \"lines\"\n");
    let kafka_source = "name = \"j\"\n[source]\nbrokers = \"b:1\"\ntopics = [\"t\"]\n";
    let file_sink = "[sink]\ntype = \"file\"\npath = \"out\"\n";
    let cases: Vec<(String, usize, &str, &str)> = vec![
        (
            format!("name = \"j\"\n[source]\ntype = \"file\"\n{kafka_sink}"),
            2,
            "source.path",
            "a file source needs path",
        ),
        (
            format!("{file_path}{kafka_sink}"),
            2,
            "source.format",
            "a file source needs format = \"csv\"",
        ),
        (
            format!("{file_path}format = \" \"\n{kafka_sink}"),
            5,
            "source.format",
            "the format is empty",
        ),
        (
            format!("{file_source}topics = [\"t\"]\n{kafka_sink}"),
            6,
            "source.topics",
            "a file source reads source.path, not topics",
        ),
        (
            format!("{file_source}serving_speed_factor = -1.0\n{kafka_sink}"),
            6,
            "source.serving_speed_factor",
            "is not a speed-up",
        ),
        (
            format!("{kafka_source}path = \"x\"\n{kafka_sink}"),
            5,
            "source.path",
            "only a file source has it",
        ),
        (
            format!("{file_source}[sink]\ntopic = \"o\"\ndelivery.guarantee = \"at-least-once\"\n"),
            6,
            "sink.brokers",
            "needs its brokers",
        ),
        (
            format!("{file_source}{file_sink}"),
            6,
            "sink.type",
            "one end must be Kafka",
        ),
        (
            format!("{kafka_source}[sink]\ntype = \"file\"\n"),
            5,
            "sink.path",
            "a file sink needs path",
        ),
        (
            format!("{kafka_source}{file_sink}topic = \"o\"\n"),
            8,
            "sink.topic",
            "a file sink writes to sink.path, not a topic",
        ),
        (
            format!("{kafka_source}{file_sink}format = \"csv\"\n"),
            5,
            "sink.columns",
            "format = \"csv\" needs the fields",
        ),
        (
            format!("{kafka_source}{file_sink}columns = [\"a\"]\n"),
            8,
            "sink.columns",
            "columns are for format = \"csv\"",
        ),
        (
            format!("{kafka_source}{file_sink}rolling.size.bytes = 0\n"),
            8,
            "sink.rolling.size.bytes",
            "give a positive number",
        ),
        (
            format!("{kafka_source}{file_sink}part.prefix = \"a/b\"\n"),
            8,
            "sink.part.prefix",
            "is not a file name prefix",
        ),
        (
            format!("{kafka_source}{file_sink}transactional.id.prefix = \"p\"\n"),
            8,
            "sink.transactional.id.prefix",
            "a file sink has no transactions",
        ),
        (
            format!("{kafka_source}[sink]\ntopic = \"o\"\npath = \"x\"\ntransactional.id.prefix = \"p\"\n"),
            7,
            "sink.path",
            "only a file sink has it",
        ),
    ];
    for (text, line, field, part) in cases {
        let (l, f, m) = invalid(&text);
        assert_eq!((l, f.as_str()), (line, field), "{m}\n{text}");
        assert!(m.contains(part), "{m:?} lacks {part:?}\n{text}");
    }
}

/// The taxi CSV of Flink's exercises is one declared layout: each line of generated rides
/// (empty coordinates too) becomes the same ride event, key and time as the taxi crate's own
/// parser makes of it.
#[test]
fn the_file_to_kafka_jobs_declared_columns_read_the_taxi_csv_as_the_taxi_parser_does() {
    use crate::engine::formats::LineFormats;
    use onceflow_taxi::{csv, generate, Ride};
    let job = Job::parse("jobs/rides-file-to-kafka.toml", FILE_TO_KAFKA).unwrap();
    let file = job.source.file.expect("a file source");
    let format = file.format.line_format(&LineFormats::new()).unwrap();
    let rides = generate::rides(generate::Config {
        rides: 300,
        ..generate::Config::default()
    })
    .unwrap();
    let mut lines: Vec<String> = rides
        .map(|r| csv::format_line(&r, r.event_time - 60_000))
        .collect();
    lines.push(
        "7,END,2013-01-01 00:16:00,2013-01-01 00:00:00,,40.77109,-73.98219,,1,2013000185,2013000186"
            .to_owned(),
    );
    for line in &lines {
        let want = csv::parse_line(line).unwrap();
        let got = format.parse(line).unwrap();
        let ride: Ride = serde_json::from_slice(&got.value).unwrap();
        assert_eq!(ride, want, "{line}");
        assert_eq!(got.key, Some(want.key()), "{line}");
        assert_eq!(got.event_time, want.event_time, "{line}");
    }
    let e = format
        .parse("7,MIDDLE,2013-01-01 00:16:00,x,1,2,3,4,1,5,6")
        .unwrap_err();
    assert_eq!(e, "column 2 (is_start): \"MIDDLE\" is not START or END");
}

/// A file source's line format: `csv` (declared columns or a header's names) and `json`, each
/// mistake named by its line and field before the job runs.
#[test]
fn malformed_line_formats_name_the_line_and_the_field() {
    let sink = "[sink]\nbrokers = \"b:1\"\ntopic = \"o\"\ndelivery.guarantee = \"at-least-once\"\n";
    let head = "name = \"j\"\n[source]\ntype = \"file\"\npath = \"x.csv\"\n";
    let csv = |rest: &str| format!("{head}format = \"csv\"\ntime = \"t\"\n{rest}{sink}");
    let column = |c: &str| {
        csv(&format!(
            "columns = [{{ name = \"t\", type = \"long\" }}, {c}]\n"
        ))
    };
    let cases: Vec<(String, usize, &str, &str)> = vec![
        (
            format!("{head}format = \"csv\"\ntime = \"t\"\n{sink}"),
            2,
            "source.columns",
            "reads declared columns or the names of a header line",
        ),
        (
            format!("{head}format = \"csv\"\nheader = true\n{sink}"),
            2,
            "source.time",
            "format = \"csv\" needs time = \"<field>\": the column",
        ),
        (
            csv("columns = []\n"),
            7,
            "source.columns",
            "no columns are listed",
        ),
        (
            csv("columns = [{ name = \"a\" }]\n"),
            7,
            "source.format",
            "the time names column \"t\", which is not a column (a)",
        ),
        (
            csv("columns = [{ name = \"t\", type = \"double\" }]\n"),
            7,
            "source.format",
            "make it a timestamp",
        ),
        (
            csv("columns = [{ name = \"t\" }, { name = \"t\" }]\n"),
            7,
            "source.format",
            "two columns are named \"t\"",
        ),
        (
            column("{ name = \"a\", type = \"int\" }"),
            7,
            "source.columns",
            "column \"a\": \"int\" is not a column type",
        ),
        (
            column("{ name = \"a\", type = \"timestamp\" }"),
            7,
            "source.columns",
            "a timestamp column needs format = ",
        ),
        (
            column("{ name = \"a\", type = \"timestamp\", format = \"yy-MM-dd\" }"),
            7,
            "source.columns",
            "\"yy\" in \"yy-MM-dd\" is not a field of a time",
        ),
        (
            column("{ name = \"a\", type = \"long\", format = \"yyyy\" }"),
            7,
            "source.columns",
            "a long column takes no format",
        ),
        (
            column("{ name = \"a\", type = \"boolean\", true = \"Y\" }"),
            7,
            "source.columns",
            "give both texts",
        ),
        (
            column("{ name = \"a\", skip = true, type = \"long\" }"),
            7,
            "source.columns",
            "a skipped column takes only its name",
        ),
        (
            column("{ name = \"a\", type = \"long\", default = \"x\" }"),
            7,
            "source.columns",
            "the default of column \"a\" is \"x\", not a whole number",
        ),
        (
            column("{ name = \"a\", colour = \"red\" }"),
            7,
            "source.columns.colour",
            "unknown field `colour`",
        ),
        (
            csv("header = true\ndelimiter = \";;\"\n"),
            8,
            "source.delimiter",
            "\";;\" is not one character",
        ),
        (
            csv("header = true\ndelimiter = \"\\\"\"\n"),
            8,
            "source.delimiter",
            "cannot separate fields",
        ),
        (
            csv("header = true\nkey = \"\"\n"),
            8,
            "source.key",
            "the key field is empty",
        ),
        (
            format!("{head}format = \"json\"\n{sink}"),
            2,
            "source.time",
            "format = \"json\" needs time = \"<field>\": the field",
        ),
        (
            format!("{head}format = \"json\"\ntime = \"a..b\"\n{sink}"),
            2,
            "source.format",
            "empty segment",
        ),
        (
            format!("{head}format = \"json\"\ntime = \"t\"\nheader = true\n{sink}"),
            7,
            "source.header",
            "only format = \"csv\" has it",
        ),
        (
            format!("{head}format = \"avro\"\n{sink}"),
            2,
            "source.time",
            "format = \"avro\" needs time = \"<field>\"",
        ),
        (
            format!("{head}format = \"avro\"\ntime = \"t\"\ncolumns = []\n{sink}"),
            7,
            "source.columns",
            "only format = \"csv\" has it",
        ),
        (
            format!("{head}format = \"lines\"\ntime = \"t\"\n{sink}"),
            6,
            "source.time",
            "format = \"lines\" is one the program running the job registers",
        ),
        (
            format!(
                "name = \"j\"\n[source]\nbrokers = \"b:1\"\ntopics = [\"t\"]\ntime = \"t\"\n{sink}"
            ),
            5,
            "source.time",
            "only a file source has it",
        ),
    ];
    for (text, line, field, part) in cases {
        let (l, f, m) = invalid(&text);
        assert_eq!((l, f.as_str()), (line, field), "{m}\n{text}");
        assert!(m.contains(part), "{m:?} lacks {part:?}\n{text}");
    }
    let avro = Job::parse(
        "j.toml",
        &format!("{head}format = \"avro\"\ntime = \"ride.at\"\nkey = \"id\"\n{sink}"),
    )
    .unwrap();
    assert_eq!(
        avro.source.file.unwrap().format,
        super::LineFormatSpec::Avro {
            time: "ride.at".into(),
            key: Some("id".into())
        }
    );
    // A header's names: the columns come from the files, the time and key are checked then.
    let job = Job::parse(
        "j.toml",
        &csv("header = true\nkey = \"k\"\ndelimiter = \"\\t\"\n"),
    )
    .unwrap();
    let file = job.source.file.unwrap();
    assert_eq!(
        file.format,
        super::LineFormatSpec::Csv {
            columns: None,
            header: true,
            delimiter: '\t',
            time: "t".into(),
            key: Some("k".into()),
        }
    );
}

/// `csv` and `raw` Kafka values: a CSV source needs its columns, a CSV sink the fields it
/// writes; neither takes a schema or the registry.
#[test]
fn csv_and_raw_kafka_values_take_their_columns_and_refuse_what_they_do_not_use() {
    let job = Job::parse(
        "j.toml",
        &format!("{HEAD}format = \"csv\"\ncolumns = [{{ name = \"a\", type = \"long\" }}]\n{SINK}format = \"raw\"\n"),
    )
    .unwrap();
    assert_eq!(job.source.value_format, RecordFormat::Csv);
    assert_eq!(
        job.source
            .value_columns
            .as_ref()
            .map(|(c, d)| (c.len(), *d)),
        Some((1, ','))
    );
    assert_eq!(job.sink.value_format, RecordFormat::Raw);
    let job = Job::parse(
        "j.toml",
        &format!("{HEAD}format = \"raw\"\n{SINK}format = \"csv\"\ncolumns = [\"a\", \"b\"]\n"),
    )
    .unwrap();
    assert_eq!(job.sink.value_columns, ["a", "b"]);
    let cases: Vec<(String, &str, &str)> = vec![
        (format!("{HEAD}format = \"csv\"\n{SINK}"), "source.columns", "reads each value as a line of declared columns"),
        (format!("{HEAD}format = \"raw\"\ncolumns = [{{ name = \"a\" }}]\n{SINK}"), "source.columns", "only format = \"csv\" has it"),
        (format!("{HEAD}delimiter = \";\"\n{SINK}"), "source.delimiter", "only format = \"csv\" has it"),
        (format!("{HEAD}header = true\n{SINK}"), "source.header", "only a file source has it"),
        (format!("{HEAD}{SINK}format = \"csv\"\n"), "sink.columns", "format = \"csv\" writes the fields columns names"),
        (format!("{HEAD}{SINK}columns = [\"a\"]\n"), "sink.columns", "only format = \"csv\" or a file sink has it"),
        (format!("{HEAD}{SINK}format = \"raw\"\nschema = \"x.avsc\"\n"), "sink.schema", "format = \"raw\" writes without a schema"),
        (format!("{HEAD}format = \"csv\"\ncolumns = [{{ name = \"a\" }}]\n{SINK}[registry]\nurl = \"http://r:8081\"\n"), "registry", "no end of this job reads or writes through the schema registry"),
    ];
    for (text, field, part) in cases {
        let (_, got_field, message) = invalid(&text);
        assert_eq!(got_field, field, "{message}\n--- in:\n{text}");
        assert!(message.contains(part), "{message} (wanted {part:?})");
    }
}

#[test]
fn cluster_mode_takes_a_short_transaction_timeout_and_refuses_what_it_cannot_run() {
    let job = Job::parse(
        "m.toml",
        &format!("{HEAD}{SINK}[settings]\nmode = \"cluster\"\ntransaction.timeout.ms = 10000\n"),
    )
    .unwrap();
    assert_eq!(job.settings.mode, Mode::Cluster);
    assert_eq!(job.settings.transaction_timeout_ms, 10_000);
    let local = Job::parse(
        "m.toml",
        &format!("{HEAD}{SINK}[settings]\nmode = \"local\"\n"),
    );
    assert_eq!(local.unwrap().settings.mode, Mode::Local);
    let cases = [
        (
            format!("{HEAD}{SINK}[settings]\nmode = \"swarm\"\n"),
            "settings.mode",
            "unknown mode \"swarm\"",
        ),
        (
            format!("{HEAD}{SINK}delivery.guarantee = \"at-least-once\"\n[settings]\nmode = \"cluster\"\n"),
            "settings.mode",
            "exactly-once only",
        ),
        (
            format!("{HEAD}{SINK}[settings]\nmode = \"cluster\"\ntransaction.timeout.ms = 1500\n"),
            "settings.transaction.timeout.ms",
            "set it to at least 2000",
        ),
        (
            format!("name = \"x\"\n[source]\nbrokers = \"b:9092\"\ntopics = [\"in\"]\nstart = \"latest\"\n{SINK}[settings]\nmode = \"cluster\"\n"),
            "settings.mode",
            "remove source.start = \"latest\"",
        ),
        (
            include_str!("../../../../jobs/hourly-top-drivers-by-tips.toml")
                .replace("parallelism = 1", "mode = \"cluster\"\nparallelism = 1"),
            "settings.mode",
            "mode = \"cluster\" runs one keyed stage",
        ),
    ];
    for (text, field, part) in cases {
        let (_, got_field, message) = invalid(&text);
        assert_eq!(got_field, field, "{message}\n--- in:\n{text}");
        assert!(message.contains(part), "{message} (wanted {part:?})");
    }
}

#[test]
fn error_tolerance_is_read_from_settings_and_its_mistakes_are_placed() {
    let tolerance = |settings: &str| {
        Job::parse("m.toml", &format!("{HEAD}{SINK}[settings]\n{settings}"))
            .unwrap()
            .settings
            .errors
    };
    assert_eq!(tolerance(""), ErrorTolerance::None);
    assert_eq!(
        tolerance("errors.tolerance = \"none\"\n"),
        ErrorTolerance::None
    );
    assert_eq!(
        tolerance("errors.tolerance = \"skip\"\n"),
        ErrorTolerance::Skip
    );
    assert_eq!(
        tolerance(
            "errors.tolerance = \"dead-letter\"\nerrors.deadletterqueue.topic.name = \"in-dlq\"\n"
        ),
        ErrorTolerance::DeadLetter {
            topic: "in-dlq".into()
        }
    );
    let file_sink = "[sink]\ntype = \"file\"\npath = \"out\"\n";
    let cases = [
        (
            format!("{HEAD}{SINK}[settings]\nerrors.tolerance = \"all\"\n"),
            "settings.errors.tolerance",
            "unknown tolerance \"all\": use \"none\"",
        ),
        (
            format!("{HEAD}{SINK}[settings]\nerrors.tolerance = \"dead-letter\"\n"),
            "settings.errors.deadletterqueue.topic.name",
            "needs the dead-letter topic",
        ),
        (
            format!("{HEAD}{SINK}[settings]\nerrors.deadletterqueue.topic.name = \"in-dlq\"\n"),
            "settings.errors.deadletterqueue.topic.name",
            "errors.tolerance is not \"dead-letter\"",
        ),
        (
            format!("{HEAD}{file_sink}[settings]\nerrors.tolerance = \"dead-letter\"\nerrors.deadletterqueue.topic.name = \"in-dlq\"\n"),
            "settings.errors.tolerance",
            "this job's sink is a file",
        ),
        (
            format!("{HEAD}{SINK}[settings]\nerrors.retries = 3\n"),
            "settings.errors.retries",
            "unknown field `retries`, expected `tolerance` or `deadletterqueue`",
        ),
    ];
    for (text, field, part) in cases {
        let (_, got_field, message) = invalid(&text);
        assert_eq!(got_field, field, "{message}\n--- in:\n{text}");
        assert!(message.contains(part), "{message} (wanted {part:?})");
    }
}

#[test]
fn record_formats_and_the_registry_are_read_and_their_mistakes_are_placed() {
    let registry = "[registry]\nurl = \"http://r:8081\"\nbasic.auth.user.info = \"a:b\"\nauto.register.schemas = false\n";
    let job = Job::parse(
        "m.toml",
        &format!("{HEAD}format = \"avro\"\n{SINK}format = \"protobuf\"\nschema = \"out.proto#nyc.Ride\"\n{registry}"),
    )
    .unwrap();
    assert_eq!(job.source.value_format, RecordFormat::Avro);
    assert_eq!(job.sink.value_format, RecordFormat::Protobuf);
    assert_eq!(job.sink.value_schema.as_deref(), Some("out.proto#nyc.Ride"));
    let mut props = job.registry.clone();
    props.sort();
    assert_eq!(
        props,
        [
            ("auto.register.schemas".to_owned(), "false".to_owned()),
            ("basic.auth.user.info".to_owned(), "a:b".to_owned()),
            ("schema.registry.url".to_owned(), "http://r:8081".to_owned()),
        ]
    );
    // JSON ends need no registry.
    let plain = Job::parse("m.toml", &format!("{HEAD}{SINK}")).unwrap();
    assert_eq!(
        (
            plain.source.value_format,
            plain.sink.value_format,
            plain.registry.len()
        ),
        (RecordFormat::Json, RecordFormat::Json, 0)
    );
    let url = "[registry]\nurl = \"http://r:8081\"\n";
    let avro_in = format!("{HEAD}format = \"avro\"\n");
    // (file, field, part of the message)
    let cases = [
        (
            format!("{HEAD}format = \"xml\"\n{SINK}"),
            "source.format",
            "\"xml\" is not a record format: use \"json\", \"avro\"",
        ),
        (
            format!("{avro_in}{SINK}"),
            "source.format",
            "add [registry] with url =",
        ),
        (
            format!("{HEAD}{SINK}{url}"),
            "registry",
            "no end of this job reads or writes through the schema registry",
        ),
        (
            format!("{avro_in}{SINK}[registry]\nbasic.auth.user.info = \"a:b\"\n"),
            "registry.url",
            "the registry's URL is missing",
        ),
        (
            format!("{avro_in}{SINK}{url}linger.ms = 5\n"),
            "registry.linger.ms",
            "linger.ms is not a schema registry setting",
        ),
        (
            format!("{avro_in}{SINK}[registry]\nurl = \"r:8081\"\n"),
            "registry",
            "http",
        ),
        (
            format!("{HEAD}{SINK}format = \"avro\"\n{url}"),
            "sink.schema",
            "add schema = \"ride.avsc\"",
        ),
        (
            format!("{HEAD}{SINK}format = \"avro\"\nschema = \"ride.proto\"\n{url}"),
            "sink.schema",
            "ending in .avsc",
        ),
        (
            format!("{HEAD}{SINK}format = \"avro\"\nschema = \"ride.avsc#Ride\"\n{url}"),
            "sink.schema",
            "only a Protobuf schema names a message",
        ),
        (
            format!("{HEAD}{SINK}schema = \"ride.avsc\"\n"),
            "sink.schema",
            "format = \"json\" writes without a schema",
        ),
        (
            format!("{HEAD}[sink]\ntype = \"file\"\npath = \"out\"\nformat = \"avro\"\n"),
            "sink.schema",
            "format = \"avro\" writes with a schema: add schema = \"ride.avsc\"",
        ),
        (
            format!("{HEAD}[sink]\ntype = \"file\"\npath = \"out\"\nformat = \"avro\"\nschema = \"r.proto\"\n"),
            "sink.schema",
            "an Avro schema file ending in .avsc",
        ),
        (
            format!("{HEAD}[sink]\ntype = \"file\"\npath = \"out\"\nformat = \"avro\"\nschema = \"r.avsc\"\ncodec = \"lzo\"\n"),
            "sink.codec",
            "\"lzo\" is not a codec",
        ),
        (
            format!("{HEAD}[sink]\ntype = \"file\"\npath = \"out\"\nformat = \"avro\"\nschema = \"r.avsc\"\ncolumns = [\"a\"]\n"),
            "sink.columns",
            "columns are for format = \"csv\"",
        ),
        (
            format!("{HEAD}[sink]\ntype = \"file\"\npath = \"out\"\nformat = \"xml\"\n"),
            "sink.format",
            "\"xml\" is not a file format",
        ),
        (
            format!("{HEAD}[sink]\ntype = \"file\"\npath = \"out\"\nschema = \"x.avsc\"\n"),
            "sink.schema",
            "only format = \"avro\" files are written with a schema",
        ),
        (
            format!("{HEAD}{SINK}codec = \"deflate\"\n"),
            "sink.codec",
            "only a file sink has it",
        ),
    ];
    let avro = Job::parse(
        "j.toml",
        &format!("{HEAD}[sink]\ntype = \"file\"\npath = \"out\"\nformat = \"avro\"\nschema = \"r.avsc\"\ncodec = \"snappy\"\n"),
    )
    .unwrap();
    assert_eq!(
        avro.sink.file.unwrap().format,
        super::OutputFormat::Avro {
            schema: PathBuf::from("r.avsc"),
            codec: "snappy".into()
        }
    );
    for (text, field, part) in cases {
        let (_, got_field, message) = invalid(&text);
        assert_eq!(got_field, field, "{message}\n--- in:\n{text}");
        assert!(message.contains(part), "{message} (wanted {part:?})");
    }
}

#[test]
fn a_job_file_holding_sql_is_named_as_one_for_the_sql_loader() {
    let e = Job::parse(
        "a.toml",
        "# SQL\nsql = '''INSERT INTO b SELECT 1 FROM a;'''\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("a.toml:2: sql: this job file holds a SQL job: `onceflow run` runs it"),
        "{e}"
    );
}

#[test]
fn the_shipped_top_tips_job_ranks_each_hours_driver_sums_in_a_second_keyed_stage() {
    let text = include_str!("../../../../jobs/hourly-top-drivers-by-tips.toml");
    let job = Job::parse("jobs/hourly-top-drivers-by-tips.toml", text).unwrap();
    let fares = [
        (1, 3_600_000, 2.5),
        (2, 3_600_001, 1.0),
        (1, 3_700_000, 0.25),
        (3, 3_700_000, 0.0),
        (4, 3_800_000, 2.75),
        (2, 7_300_000, 5.0),
    ];
    let input = fares.iter().map(|(d, t, tip)| {
        let fare = serde_json::json!({"driver_id": d, "event_time": t, "tip": tip});
        (None, fare)
    });
    let out = crate::engine::job::batch::run_batch(&job.pipeline, input);
    let values: Vec<serde_json::Value> = out.records.iter().map(|(_, v)| v.clone()).collect();
    let row = |d: u64, rank: u64, tips: f64, start: i64| {
        serde_json::json!({"driver_id": d, "rank": rank, "tips": tips,
                           "window_start": start, "window_end": start + 3_600_000})
    };
    assert_eq!(
        values,
        vec![
            row(1, 1, 2.75, 3_600_000),
            row(4, 2, 2.75, 3_600_000),
            row(2, 3, 1.0, 3_600_000),
            row(2, 1, 5.0, 7_200_000),
        ]
    );
    assert_eq!(out.records[0].0.as_deref(), Some(&b"3600000"[..]));
    let layout = job.state_layout();
    assert_eq!(layout["key_by.2"], "window_start");
    assert_eq!(layout["aggregate.2"], "rank=top(3 by tips, ranked in rank)");
}
