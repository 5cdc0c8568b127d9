//! The shipped SQL jobs plan to what their job files compute (the batch reference of each
//! over the same generated rides and fares), and SQL mistakes name their line and column.

use serde_json::Value;

use super::SqlJob;
use crate::engine::job::batch::run_batch_of_topics;
use crate::engine::job::{Job, JobError};

const SHIFTS_SQL: &str = include_str!("../../../jobs/driver-shifts.sql");
const SHIFTS_TOML: &str = include_str!("../../../jobs/driver-shifts.toml");
const HOURLY_SQL: &str = include_str!("../../../jobs/rides-per-driver-hourly.sql");
const HOURLY_TOML: &str = include_str!("../../../jobs/rides-per-driver-hourly.toml");
const JOIN_SQL: &str = include_str!("../../../jobs/rides-and-fares.sql");
const JOIN_TOML: &str = include_str!("../../../jobs/rides-and-fares.toml");
const TOP_SQL: &str = include_str!("../../../jobs/hourly-top-drivers-by-tips.sql");
const TOP_TOML: &str = include_str!("../../../jobs/hourly-top-drivers-by-tips.toml");

/// A day of rides of 20 drivers (one ride a second) and their fares, as (topic, key, value).
fn input() -> Vec<(String, Option<Vec<u8>>, Value)> {
    use onceflow_taxi::generate::{rides, Config};
    let config = Config {
        rides: 6 * 3600,
        rides_per_second: 1,
        drivers: 20,
        ..Config::default()
    };
    let mut out = Vec::new();
    for ride in rides(config.clone()).unwrap() {
        let value: Value = serde_json::from_str(&ride.to_json()).unwrap();
        out.push(("rides".to_owned(), Some(ride.key()), value));
        if ride.is_start {
            let fare = onceflow_taxi::fare::fare_of(&ride, config.seed);
            out.push((
                "fares".to_owned(),
                Some(fare.key()),
                serde_json::to_value(&fare).unwrap(),
            ));
        }
    }
    out
}

/// The records a job computes in batch, sorted (keys and values as text).
fn computed(job: &Job, input: &[(String, Option<Vec<u8>>, Value)]) -> Vec<(Vec<u8>, String)> {
    let mut out: Vec<(Vec<u8>, String)> = run_batch_of_topics(&job.pipeline, input.iter().cloned())
        .records
        .into_iter()
        .map(|(k, v)| (k.unwrap_or_default(), v.to_string()))
        .collect();
    out.sort();
    out
}

#[test]
fn each_shipped_sql_job_computes_what_its_job_file_does() {
    let input = input();
    for (name, sql, toml) in [
        ("driver-shifts", SHIFTS_SQL, SHIFTS_TOML),
        ("rides-per-driver-hourly", HOURLY_SQL, HOURLY_TOML),
        ("rides-and-fares", JOIN_SQL, JOIN_TOML),
        ("hourly-top-drivers-by-tips", TOP_SQL, TOP_TOML),
    ] {
        let from_sql = SqlJob::parse(&format!("{name}.sql"), sql, "x").unwrap().job;
        let from_toml = Job::parse(&format!("{name}.toml"), toml).unwrap();
        assert_eq!(from_sql.name, from_toml.name);
        assert_eq!(from_sql.source.topics, from_toml.source.topics, "{name}");
        assert_eq!(from_sql.sink, from_toml.sink, "{name}");
        assert_eq!(from_sql.settings, from_toml.settings, "{name}");
        let (a, b) = (computed(&from_sql, &input), computed(&from_toml, &input));
        assert!(a.len() > 10, "{name}: only {} records", a.len());
        assert_eq!(a, b, "{name}");
    }
}

/// A window Top-N over the rides' hourly counts (`ws`, `n`), ranked in `r`.
fn top(over: &str, filter: &str, window: &str) -> String {
    format!(
        "INSERT INTO out SELECT * FROM (SELECT *, ROW_NUMBER() OVER ({over}) AS r FROM (\
         SELECT driver_id, {window}_START(event_time, INTERVAL '1' HOUR) AS ws, COUNT(*) AS n \
         FROM rides GROUP BY driver_id, {window}(event_time, INTERVAL '1' HOUR))) WHERE {filter};"
    )
}

fn sql_error(text: &str) -> (u64, u64, String) {
    match SqlJob::parse("jobs/x.sql", text, "x") {
        Ok(j) => panic!("expected an error, got {:?}\n{text}", j.job.pipeline),
        Err(JobError::Sql {
            line,
            column,
            message,
            ..
        }) => (line, column, message),
        Err(other) => panic!("expected a SQL error, got {other}"),
    }
}

#[test]
fn sql_mistakes_name_their_line_column_and_what_to_change() {
    let rides = "CREATE TABLE rides (ride_id BIGINT, driver_id BIGINT, is_start BOOLEAN, \
                 passengers INT, event_time BIGINT) WITH ('connector' = 'kafka', \
                 'topic' = 'rides', 'properties.bootstrap.servers' = 'b:1', \
                 'event_time' = 'event_time', 'watermark' = '60s');\n\
                 CREATE TABLE out WITH ('connector' = 'kafka', 'topic' = 'o', \
                 'sink.delivery-guarantee' = 'none');\n";
    let q = |query: &str| format!("{rides}{query}");
    // (text, line, column, part of the message)
    let cases: Vec<(String, u64, u64, &str)> = vec![
        (q("INSERT INTO out SELECT nope FROM rides;"), 3, 24, "table rides has no column nope: its columns are ride_id, driver_id"),
        (q("INSERT INTO out SELECT ride_id FROM ridez;"), 3, 37, "no table ridez"),
        (q("INSERT INTO out SELECT ride_id FROM rides ORDER BY ride_id;"), 3, 17, "ORDER BY is not supported"),
        (q("INSERT INTO out SELECT ride_id, ride_id FROM rides;"), 3, 33, "two columns are named ride_id"),
        (q("INSERT INTO out SELECT SOUNDEX(ride_id) FROM rides;"), 3, 24, "the function SOUNDEX is not supported"),
        (q("INSERT INTO out SELECT ride_id FROM rides WHERE ride_id LIKE 'x%';"), 3, 49, "is not supported in a SQL job"),
        (q("INSERT INTO out SELECT driver_id, COUNT(*) AS n FROM rides GROUP BY driver_id;"), 3, 17, "GROUP BY one key column and one window"),
        (q("INSERT INTO out SELECT passengers, COUNT(*) AS n FROM rides GROUP BY driver_id, TUMBLE(event_time, INTERVAL '1' HOUR);"), 3, 24, "column passengers is neither grouped nor aggregated"),
        (q("INSERT INTO out SELECT driver_id, SUM(DISTINCT passengers) AS n FROM rides GROUP BY driver_id, TUMBLE(event_time, INTERVAL '1' HOUR);"), 3, 35, "SUM(DISTINCT ...) is not supported: COUNT(DISTINCT column) is"),
        (q("INSERT INTO out SELECT driver_id FROM rides GROUP BY driver_id, TUMBLE(ride_id, INTERVAL '1' HOUR);"), 3, 72, "TUMBLE runs on table rides's event time event_time"),
        (q("INSERT INTO out SELECT driver_id FROM rides GROUP BY driver_id, HOP(event_time, INTERVAL '2' HOUR, INTERVAL '1' HOUR);"), 3, 65, "the slide is at most the size"),
        (q("INSERT INTO out SELECT driver_id FROM rides GROUP BY driver_id, TUMBLE(event_time, INTERVAL '1' FORTNIGHT);"), 3, 97, "Expected: ), found: FORTNIGHT"),
        (q("INSERT INTO out SELECT a.ride_id FROM rides a JOIN rides b ON a.ride_id = b.ride_id;"), 3, 63, "an interval join bounds the time on both sides"),
        (q("INSERT INTO out SELECT a.ride_id FROM rides a JOIN rides b ON b.event_time BETWEEN a.event_time AND a.event_time;"), 3, 63, "the join needs a key equality in ON"),
        (q("INSERT INTO out SELECT a.ride_id FROM rides a LEFT JOIN rides b ON a.ride_id = b.ride_id;"), 3, 57, "LEFT JOIN is not supported"),
        (q("INSERT INTO out SELECT ride_id FROM rides a JOIN rides b ON a.ride_id = b.ride_id AND b.event_time BETWEEN a.event_time AND a.event_time;"), 3, 24, "column ride_id is in both tables"),
        (q("SELECT 1;"), 3, 1, "a SQL job holds CREATE TABLE, SET and one INSERT INTO"),
        (rides.to_owned(), 1, 1, "no INSERT INTO"),
        (q("INSERT INTO out SELEKT 1;"), 3, 17, "Expected"),
        (q("SET 'checkpoint.interval.ms' = 'soon';\nINSERT INTO out SELECT ride_id FROM rides;"), 3, 5, "checkpoint.interval.ms"),
        ("CREATE TABLE t (a BIGINT) WITH ('connector' = 'kafka', 'topik' = 'x');".to_owned(), 1, 56, "unknown option 'topik'"),
        ("CREATE TABLE t (a BIGINT) WITH ('connector' = 'file');".to_owned(), 1, 47, "connector 'file' is not supported"),
        ("CREATE TABLE t (a TIMESTAMP) WITH ('connector' = 'kafka');".to_owned(), 1, 17, "type TIMESTAMP is not supported"),
        (q("CREATE TABLE out2 WITH ('connector' = 'kafka', 'topic' = 'o2');\nINSERT INTO out2 SELECT ride_id FROM rides;"), 3, 14, "'sink.transactional-id-prefix'"),
        (q(&top("PARTITION BY window_start ORDER BY n DESC", "r <= 3", "TUMBLE")), 3, 42, "PARTITION BY the grouped query's window start"),
        (q(&top("PARTITION BY ws ORDER BY n", "r <= 3", "TUMBLE")), 3, 86, "ORDER BY ... DESC"),
        (q(&top("PARTITION BY ws, driver_id ORDER BY n DESC", "r <= 3", "TUMBLE")), 3, 42, "PARTITION BY driver_id: a window Top-N partitions by the window"),
        (q(&top("PARTITION BY ws ORDER BY nope DESC", "r <= 3", "TUMBLE")), 3, 42, "ORDER BY nope: the grouped query has no such column"),
        (q(&top("PARTITION BY ws ORDER BY n DESC", "r >= 3", "TUMBLE")), 3, 265, "WHERE r <= N"),
        (q(&top("PARTITION BY ws ORDER BY n DESC", "r <= 0", "TUMBLE")), 3, 270, "N must be at least 1"),
        (q(&top("PARTITION BY ws ORDER BY n DESC", "r <= 3", "SESSION")), 3, 105, "ranks the rows of a TUMBLE window"),
        (q("INSERT INTO out SELECT * FROM (SELECT ride_id FROM rides);"), 3, 32, "a window Top-N reads"),
    ];
    let mut wrong = Vec::new();
    for (text, line, column, part) in cases {
        let (l, c, m) = sql_error(&text);
        if !m.contains(part) || (l, c) != (line, column) {
            wrong.push(format!("{l}:{c}: {m}  (want {line}:{column} {part:?})"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn count_of_a_column_and_count_distinct_within_a_window() {
    let text = format!(
        "{}\nINSERT INTO out SELECT driver_id, COUNT(*) AS n, COUNT(passengers) AS known, \
         COUNT(DISTINCT passengers) AS kinds FROM rides \
         GROUP BY driver_id, TUMBLE(event_time, INTERVAL '1' HOUR);",
        "CREATE TABLE rides (driver_id BIGINT, passengers INT, event_time BIGINT) WITH \
         ('connector' = 'kafka', 'topic' = 'rides', 'properties.bootstrap.servers' = 'b:1', \
         'event_time' = 'event_time');\n\
         CREATE TABLE out WITH ('connector' = 'kafka', 'topic' = 'o', \
         'sink.delivery-guarantee' = 'none');"
    );
    let job = SqlJob::parse("c.sql", &text, "c").unwrap().job;
    let input = [(1, 2), (1, 2), (1, 3), (1, -1), (2, 1)].map(|(d, p)| {
        let v = if p < 0 { Value::Null } else { Value::from(p) };
        (
            "rides".to_owned(),
            None,
            serde_json::json!({"driver_id": d, "passengers": v, "event_time": 5}),
        )
    });
    let out: Vec<Value> = run_batch_of_topics(&job.pipeline, input)
        .records
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    assert_eq!(
        out,
        [
            serde_json::json!({"driver_id": 1, "n": 4, "known": 3, "kinds": 2}),
            serde_json::json!({"driver_id": 2, "n": 1, "known": 1, "kinds": 1}),
        ]
    );
}

#[test]
fn explain_prints_the_plan_instead_of_running() {
    let text = SHIFTS_SQL.replace(
        "INSERT INTO driver_shifts",
        "EXPLAIN INSERT INTO driver_shifts",
    );
    let planned = SqlJob::parse("s.sql", &text, "x").unwrap();
    assert!(planned.explain);
    let plan = planned.job.explain();
    assert!(
        plan.contains("window session gap 1800000 ms on event_time"),
        "{plan}"
    );
    assert!(plan.contains("key_by driver_id"), "{plan}");
    assert!(!SqlJob::parse("s.sql", SHIFTS_SQL, "x").unwrap().explain);
}
