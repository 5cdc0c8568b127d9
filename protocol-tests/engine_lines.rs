//! The file source's own line formats end to end, a child `onceflow run` writing to the real
//! broker: JSON Lines (each line the record's value as written, keyed and timed by its fields)
//! and a CSV whose header names its columns, SIGKILLed in the middle of its files and
//! restarted (the restored reader learns the columns from the file it resumes in); and the
//! Kafka values' `csv` and `raw` formats.
//! Transactional: runs at TV2 and TV1.

use crate::engine_errors::{committed, wait_for};
use crate::engine_features::scratch;
use crate::engine_run::{log_of, start_job, stop};
use crate::support::*;
use onceflow::client::ConsumerRecord;
use onceflow_taxi::Ride;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// A job from a file source in `format` (with its settings) to `output`, exactly once.
fn job(dir: &Path, name: &str, source: &str, output: &TestTopic) -> std::path::PathBuf {
    let text = format!(
        "name = \"{name}\"\n\
         [source]\ntype = \"file\"\n{source}\n\
         [sink]\nbrokers = \"{broker}\"\ntopic = \"{topic}\"\n\
         delivery.guarantee = \"exactly-once\"\ntransactional.id.prefix = \"{prefix}\"\n\
         [settings]\ncheckpoint.interval.ms = 200\nstate.dir = \"{state}\"\n",
        broker = broker(),
        topic = output.name,
        prefix = unique_topic(name),
        state = dir.join("state").display(),
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

/// Each record's value by its key, asserting no value arrived twice.
fn once_each(records: &[ConsumerRecord]) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut seen = BTreeMap::new();
    for r in records {
        let value = r.value.as_deref().unwrap().to_vec();
        let key = r.key.as_deref().unwrap_or_default().to_vec();
        assert!(
            seen.insert(value.clone(), key).is_none(),
            "twice: {}",
            String::from_utf8_lossy(&value)
        );
    }
    seen
}

/// `format = "json"`: every line of a JSON Lines file arrives once, as written, its Kafka key
/// the `key` field's value; the `time` field is read as epoch ms or RFC 3339 (a line whose
/// time cannot be read stops the job).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_arrive_once_each_as_written_keyed_and_timed_by_their_fields() {
    let dir = scratch("json-lines");
    let output = TestTopic::create("json-lines-out", 2).await;
    let rides: Vec<Ride> = onceflow_taxi::generate::rides(onceflow_taxi::generate::Config {
        rides: 100,
        ..Default::default()
    })
    .unwrap()
    .collect();
    // Every tenth line has its time as an RFC 3339 string: the source reads either.
    let mut lines = Vec::new();
    for (i, r) in rides.iter().enumerate() {
        let mut v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        if i % 10 == 0 {
            v["event_time"] = rfc3339(r.event_time).into();
        }
        lines.push(v.to_string());
    }
    let mut file = std::fs::File::create(dir.join("rides.jsonl")).unwrap();
    for l in &lines {
        writeln!(file, "{l}").unwrap();
    }
    drop(file);
    let job = job(
        &dir,
        "json-lines",
        &format!(
            "path = \"{}\"\nformat = \"json\"\ntime = \"event_time\"\nkey = \"driver_id\"",
            dir.join("rides.jsonl").display()
        ),
        &output,
    );
    let log = dir.join("run.log");
    let mut child = start_job(&job, &log, &["--fresh"]);
    let records = wait_for(&output, lines.len(), &mut child, &log).await;
    stop(child, &log).await;
    let seen = once_each(&records);
    assert_eq!(seen.len(), lines.len(), "{}", log_of(&log));
    for (line, ride) in lines.iter().zip(&rides) {
        let key = seen
            .get(line.as_bytes())
            .unwrap_or_else(|| panic!("missing: {line}"));
        assert_eq!(key, &ride.driver_id.to_string().into_bytes());
    }
    assert_eq!(committed(&output).await.len(), lines.len());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `job` until its first output is committed, SIGKILLs it (still inside its files),
/// runs it again to the end: `output` holds each value of `want` once, keyed by its field
/// `key`. Removes `dir`.
async fn killed_and_restarted(
    dir: &Path,
    job: &Path,
    output: &TestTopic,
    mut want: Vec<String>,
    key: &str,
) {
    let first = dir.join("run1.log");
    let mut child = start_job(job, &first, &["--fresh"]);
    wait_for(output, 1, &mut child, &first).await;
    child.kill().unwrap();
    child.wait().unwrap();
    let before = committed(output).await.len();
    assert!(
        before < want.len(),
        "the first run wrote everything ({before}) before its kill: nothing was restored mid-file"
    );
    let second = dir.join("run2.log");
    let mut child = start_job(job, &second, &[]);
    let records = wait_for(output, want.len(), &mut child, &second).await;
    stop(child, &second).await;
    let seen = once_each(&records);
    let mut got: Vec<String> = seen
        .keys()
        .map(|v| String::from_utf8(v.clone()).unwrap())
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want, "{}", log_of(&second));
    for (value, k) in &seen {
        let v: serde_json::Value = serde_json::from_slice(value).unwrap();
        assert_eq!(v[key].as_str().unwrap().as_bytes(), &k[..]);
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` of epoch milliseconds (the test's own arithmetic).
fn rfc3339(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rest = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60,
        ms.rem_euclid(1000)
    )
}

/// `format = "csv"` with `header = true` and no declared columns: each file's header names
/// the columns (every record a JSON object of them, in order). The job is SIGKILLed once its
/// first output is committed, while it is still inside the files (served at a speed), and
/// restarted: the restored reader reads the header of the file it resumes in before its
/// buffered lines, and every line arrives exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_csv_with_a_header_killed_inside_its_files_and_restarted_writes_each_line_once() {
    let dir = scratch("csv-header");
    let input = dir.join("in");
    std::fs::create_dir_all(&input).unwrap();
    let output = TestTopic::create("csv-header-out", 2).await;
    const PER_FILE: u64 = 300;
    let mut want = Vec::new();
    for (f, name) in ["a.csv", "b.csv"].iter().enumerate() {
        let mut text = String::from("id,at,note\n");
        for i in 0..PER_FILE {
            let n = f as u64 * PER_FILE + i;
            // 50 ms of event time apart: 30 s of events, served at 10x: ~3 s a run.
            let at = 1_700_000_000_000 + 50 * n;
            let note = if n.is_multiple_of(7) {
                "\"a, quoted \"\"note\"\"\""
            } else {
                "plain"
            };
            text.push_str(&format!("r{n},{at},{note}\n"));
            let shown = if n.is_multiple_of(7) {
                "a, quoted \\\"note\\\""
            } else {
                "plain"
            };
            want.push(format!(r#"{{"id":"r{n}","at":"{at}","note":"{shown}"}}"#));
        }
        std::fs::write(input.join(name), text).unwrap();
    }
    let job = job(
        &dir,
        "csv-header",
        &format!(
            "path = \"{}\"\nformat = \"csv\"\nheader = true\ntime = \"at\"\nkey = \"id\"\n\
             serving_speed_factor = 10\nmax_delay_s = 1",
            input.display()
        ),
        &output,
    );
    killed_and_restarted(&dir, &job, &output, want, "id").await;
}

/// `[source] format = "csv"` on a topic: each value one line of declared, typed columns, which
/// the pipeline filters by a number and projects; `[sink] format = "raw"` writes the projected
/// field's text as the value. A value that is not a line of the columns stops the job by
/// default: here every one fits, and each kept line arrives once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csv_values_filtered_by_a_typed_column_are_written_as_raw_text_once_each() {
    let dir = scratch("csv-values");
    let input = TestTopic::create("csv-values-in", 2).await;
    let output = TestTopic::create("csv-values-out", 2).await;
    let producer = onceflow::client::Producer::new(producer_config(&broker(), &[]))
        .await
        .unwrap();
    let mut want = Vec::new();
    for i in 0..60u32 {
        let name = if i % 5 == 0 {
            format!("\"n;{i}\"")
        } else {
            format!("n{i}")
        };
        let line = format!("{i};{name};{}", i % 3);
        if i % 3 >= 1 {
            want.push(name.trim_matches('"').to_owned());
        }
        producer
            .send(onceflow::client::ProducerRecord::new(
                input.name.clone(),
                bytes::Bytes::from(line),
            ))
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let source = format!(
        "brokers = \"{}\"\ntopics = [\"{}\"]\nformat = \"csv\"\ndelimiter = \";\"\n\
         columns = [{{ name = \"id\", type = \"long\" }}, {{ name = \"name\" }}, {{ name = \"n\", type = \"long\" }}]\n\
         [[pipeline]]\nfilter = {{ field = \"n\", op = \">=\", value = 1 }}\n\
         [[pipeline]]\nproject = {{ keep = [\"name\"], rename = {{ name = \"value\" }} }}\n",
        broker(),
        input.name
    );
    let text = format!(
        "name = \"csv-values\"\n[source]\n{source}\
         [sink]\ntopic = \"{}\"\nformat = \"raw\"\n\
         delivery.guarantee = \"exactly-once\"\ntransactional.id.prefix = \"{}\"\n\
         [settings]\ncheckpoint.interval.ms = 200\nstate.dir = \"{}\"\n",
        output.name,
        unique_topic("csv-values"),
        dir.join("state").display()
    );
    let job = dir.join("csv-values.toml");
    std::fs::write(&job, text).unwrap();
    let log = dir.join("run.log");
    let mut child = start_job(&job, &log, &["--fresh"]);
    let records = wait_for(&output, want.len(), &mut child, &log).await;
    stop(child, &log).await;
    let mut got: Vec<String> = records
        .iter()
        .map(|r| String::from_utf8(r.value.as_deref().unwrap().to_vec()).unwrap())
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want, "{}", log_of(&log));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `format = "avro"` on a file source: Avro container files (several blocks, one deflated),
/// each record handed on as plain JSON, keyed and timed by its fields. SIGKILLed once its first
/// output is committed, inside the files, and restarted: the restored reader seeks to the
/// checkpoint's block and skips the records of it already read, and every record arrives once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn avro_container_files_killed_inside_a_block_and_restarted_write_each_record_once() {
    use onceflow::schema::apache_avro::{
        types::Record, types::Value as Avro, Codec, Schema, Writer,
    };
    let dir = scratch("avro-files");
    let input = dir.join("in");
    std::fs::create_dir_all(&input).unwrap();
    let output = TestTopic::create("avro-files-out", 2).await;
    let schema = Schema::parse_str(
        r#"{"type":"record","name":"Reading","namespace":"test","fields":[
            {"name":"sensor","type":"string"},
            {"name":"zone","type":["null","string"],"default":null},
            {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
            {"name":"celsius","type":"double"}]}"#,
    )
    .unwrap();
    const PER_FILE: i64 = 300;
    let mut want = Vec::new();
    for (f, (name, codec)) in [
        ("a.avro", Codec::Null),
        ("b.avro", Codec::Deflate(Default::default())),
    ]
    .into_iter()
    .enumerate()
    {
        let mut w = Writer::with_codec(&schema, Vec::new(), codec).unwrap();
        for i in 0..PER_FILE {
            let n = f as i64 * PER_FILE + i;
            // 50 ms of event time apart, served at 10x: ~3 s a run.
            let at = 1_700_000_000_000 + 50 * n;
            let mut r = Record::new(&schema).unwrap();
            r.put("sensor", format!("s{n}"));
            r.put(
                "zone",
                if n % 2 == 0 {
                    Avro::Union(1, Box::new(Avro::String(format!("z{}", n % 5))))
                } else {
                    Avro::Union(0, Box::new(Avro::Null))
                },
            );
            r.put("at", Avro::TimestampMillis(at));
            r.put("celsius", n as f64 / 4.0);
            w.append_value(r).unwrap();
            if i % 64 == 63 {
                w.flush().unwrap();
            }
            let zone = if n % 2 == 0 {
                format!("\"z{}\"", n % 5)
            } else {
                "null".to_owned()
            };
            want.push(format!(
                r#"{{"at":{at},"celsius":{:?},"sensor":"s{n}","zone":{zone}}}"#,
                n as f64 / 4.0
            ));
        }
        std::fs::write(input.join(name), w.into_inner().unwrap()).unwrap();
    }
    let job = job(
        &dir,
        "avro-files",
        &format!(
            "path = \"{}\"\nformat = \"avro\"\ntime = \"at\"\nkey = \"sensor\"\n\
             serving_speed_factor = 10\nmax_delay_s = 1",
            input.display()
        ),
        &output,
    );
    killed_and_restarted(&dir, &job, &output, want, "sensor").await;
}

/// Every record of the finished Avro part files in `out`, as plain JSON (hidden in-progress
/// files left out, as a reader of the directory does).
fn avro_files(out: &Path) -> Vec<serde_json::Value> {
    let mut names: Vec<String> = std::fs::read_dir(out)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    let mut records = Vec::new();
    for name in names.iter().filter(|n| !n.starts_with('.')) {
        assert!(name.ends_with(".avro"), "{name}");
        let bytes = std::fs::read(out.join(name)).unwrap();
        let reader = onceflow::schema::apache_avro::Reader::new(bytes.as_slice())
            .unwrap_or_else(|e| panic!("{name} is not a whole container file: {e}"));
        for value in reader {
            let value = value.unwrap_or_else(|e| panic!("{name}: {e}"));
            let json: serde_json::Value = value.try_into().unwrap();
            records.push(json);
        }
    }
    records
}

/// The cleansing job (d) into Avro container files (`[sink] type = "file"`, `format = "avro"`,
/// the shipped taxi ride schema, deflate blocks): each finished part file is a whole container
/// file that apache_avro's own reader reads, and it holds exactly the rides inside the NYC box,
/// each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cleansing_job_writes_avro_container_files_of_exactly_the_kept_rides() {
    let dir = scratch("avro-out");
    let input = TestTopic::create("avro-out-in", 2).await;
    let out = dir.join("out");
    let rides: Vec<Ride> = onceflow_taxi::generate::rides(onceflow_taxi::generate::Config {
        rides: 150,
        ..Default::default()
    })
    .unwrap()
    .collect();
    let producer = onceflow::client::Producer::new(producer_config(&broker(), &[]))
        .await
        .unwrap();
    for r in &rides {
        let mut record = onceflow::client::ProducerRecord::new(
            input.name.clone(),
            bytes::Bytes::from(r.to_json()),
        );
        record.key = Some(bytes::Bytes::from(r.key()));
        producer.send(record).await.unwrap().await.unwrap();
    }
    let schema = repo().join("fixtures/schemas/taxi-ride.avsc");
    let job = crate::engine_files::job_from(
        &dir,
        "rides-cleansing-to-files.toml",
        &[
            ("topics = ", format!("topics = [\"{}\"]", input.name)),
            ("path = ", format!("path = \"{}\"", out.display())),
            (
                "format = ",
                format!(
                    "format = \"avro\"\nschema = \"{}\"\ncodec = \"deflate\"",
                    schema.display()
                ),
            ),
            (
                "checkpoint.interval.ms = ",
                "checkpoint.interval.ms = 200".into(),
            ),
        ],
    );
    let mut want: Vec<(u64, bool)> = rides
        .iter()
        .filter(|r| r.inside(&onceflow_taxi::NYC))
        .map(|r| (r.ride_id, r.is_start))
        .collect();
    want.sort();
    let log = dir.join("run.log");
    let mut child = start_job(&job, &log, &["--fresh"]);
    let deadline = std::time::Instant::now() + crate::engine_run::DEADLINE;
    while avro_files(&out).len() < want.len() {
        assert!(child.try_wait().unwrap().is_none(), "{}", log_of(&log));
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {} rides in {}:\n{}",
            avro_files(&out).len(),
            want.len(),
            out.display(),
            log_of(&log)
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    stop(child, &log).await;
    let mut got: Vec<(u64, bool)> = avro_files(&out)
        .into_iter()
        .map(|v| {
            let ride: Ride =
                serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{v}: {e}"));
            (ride.ride_id, ride.is_start)
        })
        .collect();
    got.sort();
    assert_eq!(got, want, "{}", log_of(&log));
    let _ = std::fs::remove_dir_all(&dir);
}
