use super::*;
use super::names::{finished_name, in_progress_name, parse_in_progress};
use crate::engine::sink::SinkCommit;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

fn config(dir: &Path, task: u32, generation: u64) -> FileWriterConfig {
    FileWriterConfig::new(dir, task, generation, FileFormat::JsonLines)
}

/// The directory's names, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// What a reader sees: the names not starting with '.', sorted.
fn visible(dir: &Path) -> Vec<String> {
    names(dir)
        .into_iter()
        .filter(|n| !n.starts_with('.'))
        .collect()
}

/// The visible files' contents, concatenated in name order.
fn read_visible(dir: &Path) -> String {
    visible(dir)
        .iter()
        .map(|n| fs::read_to_string(dir.join(n)).unwrap())
        .collect()
}

fn record(n: u32) -> Vec<u8> {
    format!("{{\"n\":{n}}}").into_bytes()
}

fn lines(range: std::ops::Range<u32>) -> String {
    range.map(|n| format!("{{\"n\":{n}}}\n")).collect()
}

#[test]
fn write_barrier_commit_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let mut sink = FileWriter::open(config(&out, 3, 7)).unwrap();
    assert!(out.is_dir());
    assert!(names(&out).is_empty(), "no file before the first record");
    for n in 0..3 {
        sink.write(&record(n)).unwrap();
    }
    let pending = sink.on_barrier(1).unwrap().unwrap();
    assert_eq!(pending.task, 3);
    assert_eq!(pending.checkpoint, 1);
    assert_eq!(pending.dir, out.display().to_string());
    assert_eq!(
        pending.files,
        vec![PendingFile {
            in_progress: ".part-00003-0000000007-00000000.jsonl.inprogress".into(),
            finished: "part-00003-0000000007-00000000.jsonl".into(),
            bytes: lines(0..3).len() as u64,
        }]
    );
    assert!(
        visible(&out).is_empty(),
        "nothing visible before the commit"
    );

    assert_eq!(sink.commit(&pending).unwrap(), SinkCommit::Committed);
    assert_eq!(names(&out), vec!["part-00003-0000000007-00000000.jsonl"]);
    assert_eq!(read_visible(&out), lines(0..3));

    // Nothing written since: no pending files, and no new file.
    assert_eq!(sink.on_barrier(2).unwrap(), None);
    assert_eq!(names(&out).len(), 1);
}

#[test]
fn rolling_by_size_gives_several_pending_files_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), 0, 1);
    // Each record is 8 bytes: a file closes after its third.
    cfg.roll_size_bytes = 20;
    let mut sink = FileWriter::open(cfg).unwrap();
    for n in 0..7 {
        sink.write(&record(n)).unwrap();
    }
    let pending = sink.on_barrier(1).unwrap().unwrap();
    let finished: Vec<&str> = pending.files.iter().map(|f| f.finished.as_str()).collect();
    assert_eq!(
        finished,
        vec![
            "part-00000-0000000001-00000000.jsonl",
            "part-00000-0000000001-00000001.jsonl",
            "part-00000-0000000001-00000002.jsonl",
        ]
    );
    let sizes: Vec<u64> = pending.files.iter().map(|f| f.bytes).collect();
    assert_eq!(sizes, vec![24, 24, 8]);
    sink.commit(&pending).unwrap();
    assert_eq!(
        fs::read_to_string(dir.path().join(finished[1])).unwrap(),
        lines(3..6)
    );
    assert_eq!(read_visible(dir.path()), lines(0..7));
}

#[test]
fn rolling_by_interval_closes_an_old_file_at_the_next_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), 0, 1);
    cfg.roll_interval = Duration::from_millis(1);
    let mut sink = FileWriter::open(cfg).unwrap();
    sink.write(&record(0)).unwrap();
    std::thread::sleep(Duration::from_millis(10));
    sink.write(&record(1)).unwrap();
    let pending = sink.on_barrier(1).unwrap().unwrap();
    assert_eq!(pending.files.len(), 2);
    sink.commit(&pending).unwrap();
    assert_eq!(read_visible(dir.path()), lines(0..2));
}

#[test]
fn commit_twice_is_already_committed() {
    let dir = tempfile::tempdir().unwrap();
    let mut sink = FileWriter::open(config(dir.path(), 0, 1)).unwrap();
    sink.write(&record(0)).unwrap();
    let pending = sink.on_barrier(1).unwrap().unwrap();
    assert_eq!(sink.commit(&pending).unwrap(), SinkCommit::Committed);
    assert_eq!(sink.commit(&pending).unwrap(), SinkCommit::AlreadyCommitted);
    // Another sink of the same directory (recovery commits other tasks' files).
    let other = FileWriter::open(config(dir.path(), 1, 2)).unwrap();
    assert_eq!(
        other.commit(&pending).unwrap(),
        SinkCommit::AlreadyCommitted
    );
    assert_eq!(read_visible(dir.path()), lines(0..1));
}

#[test]
fn commit_after_deleting_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let mut sink = FileWriter::open(config(dir.path(), 0, 1)).unwrap();
    sink.write(&record(0)).unwrap();
    let pending = sink.on_barrier(4).unwrap().unwrap();
    fs::remove_file(dir.path().join(&pending.files[0].in_progress)).unwrap();
    let error = sink.commit(&pending).unwrap_err();
    assert!(matches!(error, FileSinkError::Lost { checkpoint: 4, .. }));
    assert!(!error.is_restartable());
    let message = error.to_string();
    assert!(message.contains("part-00000-0000000001-00000000.jsonl"));
    assert!(message.contains("gone"));
    assert!(!message.contains('\n'));
}

#[test]
fn commit_refuses_a_moved_directory_a_changed_file_and_foreign_names() {
    let dir = tempfile::tempdir().unwrap();
    let mut sink = FileWriter::open(config(dir.path(), 0, 1)).unwrap();
    sink.write(&record(0)).unwrap();
    let pending = sink.on_barrier(1).unwrap().unwrap();

    let mut moved = pending.clone();
    moved.dir = "/elsewhere".into();
    moved.files[0].finished = "part-00000-0000000001-00000009.jsonl".into();
    moved.files[0].in_progress = in_progress_name(&moved.files[0].finished);
    let error = sink.commit(&moved).unwrap_err();
    assert!(matches!(error, FileSinkError::DirChanged { .. }), "{error}");
    assert!(error.to_string().contains("/elsewhere"));

    let mut escaping = pending.clone();
    escaping.files[0].finished = "../x.jsonl".into();
    escaping.files[0].in_progress = in_progress_name("../x.jsonl");
    assert!(matches!(
        sink.commit(&escaping).unwrap_err(),
        FileSinkError::InvalidCommittable { .. }
    ));

    let mut resized = pending.clone();
    resized.files[0].bytes += 1;
    assert!(matches!(
        sink.commit(&resized).unwrap_err(),
        FileSinkError::SizeMismatch { .. }
    ));
    // Nothing was renamed by the refused commits.
    assert!(visible(dir.path()).is_empty());
    assert_eq!(sink.commit(&pending).unwrap(), SinkCommit::Committed);
}

#[test]
fn recover_commits_listed_and_deletes_unlisted_in_progress_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut t0 = FileWriter::open(config(d, 0, 1)).unwrap();
    let mut t1 = FileWriter::open(config(d, 1, 1)).unwrap();
    // Checkpoint 1, committed before the crash.
    t0.write(&record(0)).unwrap();
    let p = t0.on_barrier(1).unwrap().unwrap();
    t0.commit(&p).unwrap();
    // Checkpoint 2 is durable, not committed yet.
    t0.write(&record(1)).unwrap();
    t1.write(&record(2)).unwrap();
    let p0 = t0.on_barrier(2).unwrap().unwrap();
    let p1 = t1.on_barrier(2).unwrap().unwrap();
    // Records after checkpoint 2, in files the crash leaves behind.
    t0.write(&record(3)).unwrap();
    t1.write(&record(4)).unwrap();
    t1.on_barrier(3).unwrap().unwrap();
    drop((t0, t1));
    let before_finished = visible(d);
    // Things that are not this prefix's in-progress files.
    let others = [
        ".other-00000-0000000001-00000000.jsonl.inprogress",
        ".part-extra-00000-0000000001-00000000.jsonl.inprogress",
        ".part-00000-0000000001-0000000.jsonl.inprogress",
        ".part-00000-0000000001-00000000.txt.inprogress",
        "notes.txt",
    ];
    for name in others {
        fs::write(d.join(name), "x").unwrap();
    }

    let recovery = FileWriter::recover(d, "part", true, &[p0.clone(), p1.clone()]).unwrap();
    assert_eq!(
        recovery,
        Recovery {
            restored: 2,
            files_committed: 2,
            files_already_committed: 0,
            in_progress_deleted: 2,
            leftovers_finished: 0,
            torn_bytes_dropped: 0,
        }
    );
    let mut expected: Vec<String> = others.iter().map(|s| (*s).to_owned()).collect();
    expected.extend(before_finished);
    expected.push(p0.files[0].finished.clone());
    expected.push(p1.files[0].finished.clone());
    expected.sort();
    assert_eq!(names(d), expected);
    assert_eq!(
        fs::read_to_string(d.join(&p1.files[0].finished)).unwrap(),
        lines(2..3)
    );

    // Again (a crash during the recovery): the same end state.
    let again = FileWriter::recover(d, "part", true, &[p0, p1]).unwrap();
    assert_eq!(again.files_committed, 0);
    assert_eq!(again.files_already_committed, 2);
    assert_eq!(again.in_progress_deleted, 0);
    assert_eq!(names(d), expected);
}

#[test]
fn recover_of_a_missing_directory_is_empty_unless_files_are_restored() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("never");
    let recovery = FileWriter::recover(&missing, "part", true, &[]).unwrap();
    assert_eq!(recovery, Recovery::default());
    let restored = PendingFiles {
        dir: missing.display().to_string(),
        task: 0,
        checkpoint: 5,
        files: vec![PendingFile {
            in_progress: ".part-00000-0000000001-00000000.jsonl.inprogress".into(),
            finished: "part-00000-0000000001-00000000.jsonl".into(),
            bytes: 8,
        }],
    };
    let error = FileWriter::recover(&missing, "part", true, &[restored]).unwrap_err();
    assert!(matches!(error, FileSinkError::Lost { checkpoint: 5, .. }));
    assert!(FileWriter::recover(&missing, "../x", true, &[]).is_err());
}

#[test]
fn at_least_once_renames_at_barrier_and_recover_keeps_leftovers() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut cfg = config(d, 0, 1);
    cfg.exactly_once = false;
    cfg.roll_size_bytes = 20;
    let mut sink = FileWriter::open(cfg).unwrap();
    for n in 0..4 {
        sink.write(&record(n)).unwrap();
    }
    // The roll after the third record made the first file final at once.
    assert_eq!(visible(d), vec!["part-00000-0000000001-00000000.jsonl"]);
    assert_eq!(sink.on_barrier(1).unwrap(), None);
    assert_eq!(names(d).len(), 2);
    assert_eq!(read_visible(d), lines(0..4));
    // Records after the barrier; the crash cuts the last one short.
    sink.write(&record(4)).unwrap();
    drop(sink);
    let leftover = d.join(".part-00000-0000000001-00000002.jsonl.inprogress");
    let mut file = OpenOptions::new().append(true).open(&leftover).unwrap();
    file.write_all(b"{\"n\":").unwrap();
    drop(file);
    // A leftover of another task with nothing complete in it.
    let torn_only = d.join(".part-00001-0000000001-00000000.jsonl.inprogress");
    fs::write(&torn_only, "{\"n\"").unwrap();

    let recovery = FileWriter::recover(d, "part", false, &[]).unwrap();
    assert_eq!(recovery.leftovers_finished, 1);
    assert_eq!(recovery.in_progress_deleted, 1);
    assert_eq!(recovery.torn_bytes_dropped, 5 + 4);
    assert_eq!(
        names(d),
        vec![
            "part-00000-0000000001-00000000.jsonl",
            "part-00000-0000000001-00000001.jsonl",
            "part-00000-0000000001-00000002.jsonl",
        ]
    );
    assert_eq!(read_visible(d), lines(0..5));
}

#[test]
fn csv_quoting_and_header_in_every_part_file() {
    let dir = tempfile::tempdir().unwrap();
    let columns = [
        "id", "name", "score", "ok", "gone", "none", "tags", "odd,col",
    ];
    let mut cfg = FileWriterConfig::new(
        dir.path(),
        0,
        1,
        FileFormat::Csv {
            columns: columns.iter().map(|c| (*c).to_owned()).collect(),
        },
    );
    cfg.roll_size_bytes = 1;
    let mut sink = FileWriter::open(cfg).unwrap();
    sink.write(
        br#"{"id":1,"name":"a, \"b\"\nc","score":1.5,"ok":true,"none":null,"tags":["x",2],"odd,col":"plain","extra":0}"#,
    )
    .unwrap();
    sink.write(br#"{"id":-2,"name":"","ok":false}"#).unwrap();
    let error = sink.write(b"[1,2]").unwrap_err();
    assert!(matches!(error, FileSinkError::InvalidRecord { .. }));
    assert!(!error.is_restartable());
    let pending = sink.on_barrier(1).unwrap().unwrap();
    assert_eq!(pending.files.len(), 2);
    assert!(pending.files[0].finished.ends_with(".csv"));
    sink.commit(&pending).unwrap();
    let header = "id,name,score,ok,gone,none,tags,\"odd,col\"\n";
    let files: Vec<String> = visible(dir.path())
        .iter()
        .map(|n| fs::read_to_string(dir.path().join(n)).unwrap())
        .collect();
    assert_eq!(
        files,
        vec![
            format!("{header}1,\"a, \"\"b\"\"\nc\",1.5,true,,,\"[\"\"x\"\",2]\",plain\n"),
            format!("{header}-2,,,false,,,,\n"),
        ]
    );
}

#[test]
fn a_value_with_a_newline_is_refused_and_the_sink_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut sink = FileWriter::open(config(dir.path(), 0, 1)).unwrap();
    let error = sink.write(b"{\"a\":\n1}").unwrap_err();
    assert!(matches!(error, FileSinkError::InvalidRecord { .. }));
    assert!(!error.is_restartable());
    let message = error.to_string();
    assert!(message.contains("line break at byte 5"), "{message}");
    assert!(message.contains(r#""{\"a\":\n1}""#), "{message}");
    assert!(!message.contains('\n'));
    assert!(sink.write(b"not json").is_err());
    assert!(
        names(dir.path()).is_empty(),
        "a refused record creates no file"
    );
    sink.write(&record(0)).unwrap();
    let pending = sink.on_barrier(1).unwrap().unwrap();
    sink.commit(&pending).unwrap();
    assert_eq!(read_visible(dir.path()), lines(0..1));
}

#[test]
fn names_sort_in_write_order_across_seq_9_to_10_and_generations() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = 0;
    for (generation, count) in [(9, 12), (10, 3)] {
        let mut cfg = config(dir.path(), 0, generation);
        cfg.roll_size_bytes = 1;
        let mut sink = FileWriter::open(cfg).unwrap();
        for _ in 0..count {
            sink.write(&record(n)).unwrap();
            n += 1;
        }
        let pending = sink.on_barrier(1).unwrap().unwrap();
        assert_eq!(pending.files.len(), count as usize);
        sink.commit(&pending).unwrap();
    }
    let names = visible(dir.path());
    assert!(names.contains(&"part-00000-0000000009-00000010.jsonl".to_owned()));
    assert!(names.contains(&"part-00000-0000000010-00000000.jsonl".to_owned()));
    assert_eq!(read_visible(dir.path()), lines(0..n));
}

#[test]
fn a_reused_generation_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = FileWriter::open(config(dir.path(), 0, 1)).unwrap();
    first.write(&record(0)).unwrap();
    let pending = first.on_barrier(1).unwrap().unwrap();
    first.commit(&pending).unwrap();
    let mut second = FileWriter::open(config(dir.path(), 0, 1)).unwrap();
    let error = second.write(&record(1)).unwrap_err();
    assert!(matches!(error, FileSinkError::GenerationReused { .. }));
    // The sink stops: its state is not what it would commit.
    assert!(matches!(
        second.write(&record(2)).unwrap_err(),
        FileSinkError::Failed { .. }
    ));
    assert_eq!(read_visible(dir.path()), lines(0..1));
}

#[test]
fn barriers_must_increase() {
    let dir = tempfile::tempdir().unwrap();
    let mut sink = FileWriter::open(config(dir.path(), 0, 1)).unwrap();
    assert_eq!(sink.on_barrier(2).unwrap(), None);
    assert!(matches!(
        sink.on_barrier(2).unwrap_err(),
        FileSinkError::Misuse(_)
    ));
    assert_eq!(sink.on_barrier(3).unwrap(), None);
}

#[test]
fn settings_that_cannot_work_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let bad: [fn(&mut FileWriterConfig); 8] = [
        |c| c.prefix = String::new(),
        |c| c.prefix = ".hidden".into(),
        |c| c.prefix = "a/b".into(),
        |c| c.task = 100_000,
        |c| c.generation = 10_000_000_000,
        |c| c.roll_size_bytes = 0,
        |c| c.roll_interval = Duration::ZERO,
        |c| c.format = FileFormat::Csv { columns: vec![] },
    ];
    for change in bad {
        let mut cfg = config(d, 0, 1);
        change(&mut cfg);
        let error = FileWriter::open(cfg.clone()).unwrap_err();
        assert!(
            matches!(error, FileSinkError::Config(_)),
            "{cfg:?}: {error}"
        );
        assert!(!error.is_restartable());
    }
    // A file where the directory should be.
    fs::write(d.join("file"), "x").unwrap();
    let error = FileWriter::open(config(&d.join("file").join("out"), 0, 1)).unwrap_err();
    assert!(matches!(error, FileSinkError::CreateDir { .. }), "{error}");
    assert!(error.is_restartable());
    assert!(error.to_string().contains("sink.path"), "{error}");
}

#[test]
fn in_progress_names_parse_only_for_their_prefix() {
    let finished = finished_name("a.b", 12, 345, 6, "csv");
    assert_eq!(finished, "a.b-00012-0000000345-00000006.csv");
    let name = in_progress_name(&finished);
    assert_eq!(parse_in_progress(&name, "a.b"), Some(finished.as_str()));
    assert_eq!(parse_in_progress(&name, "a"), None);
    assert_eq!(parse_in_progress(&finished, "a.b"), None);
}

/// Avro output: every part file is a whole container file (header, blocks) whose records read
/// back as the JSON written; rolling and the barrier each close one; a record that does not
/// fit the schema is refused and the sink goes on.
#[test]
fn avro_part_files_are_whole_container_files_of_the_records_written() {
    use crate::schema::Container;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let schema = r#"{"type":"record","name":"N","fields":[{"name":"n","type":"long"},{"name":"tag","type":["null","string"],"default":null}]}"#;
    for codec in ["null", "deflate", "snappy", "zstandard"] {
        let _ = fs::remove_dir_all(&out);
        let format = FileFormat::Avro {
            schema: schema.into(),
            codec: codec.into(),
        };
        let config = FileWriterConfig {
            roll_size_bytes: 2000,
            ..FileWriterConfig::new(&out, 0, 1, format)
        };
        let mut sink = FileWriter::open(config).unwrap();
        let written: Vec<String> = (0..700)
            .map(|n| match n % 3 {
                0 => format!(r#"{{"n":{n},"tag":"t{n}"}}"#),
                _ => format!(r#"{{"n":{n},"tag":null}}"#),
            })
            .collect();
        for (i, r) in written.iter().enumerate() {
            sink.write(r.as_bytes()).unwrap();
            if i == 350 {
                let e = sink.write(br#"{"n":"x"}"#).unwrap_err();
                assert!(matches!(e, FileSinkError::InvalidRecord { .. }), "{e}");
            }
        }
        let pending = sink.on_barrier(1).unwrap().unwrap();
        assert!(pending.files.len() > 1, "{codec}: rolled by size");
        sink.commit(&pending).unwrap();
        let mut read = Vec::new();
        for name in visible(&out) {
            assert!(name.ends_with(".avro"), "{name}");
            let bytes = fs::read(out.join(&name)).unwrap();
            let mut r = bytes.as_slice();
            let c = Container::read_header(&mut r).unwrap();
            while let Some(block) = c.read_block(&mut r).unwrap() {
                read.extend(c.records(&block).unwrap());
            }
        }
        let want: Vec<String> = written
            .iter()
            .map(|r| serde_json::from_str::<serde_json::Value>(r).unwrap().to_string())
            .collect();
        assert_eq!(read, want, "{codec}");
    }
    let bad = FileWriterConfig::new(
        &out,
        0,
        2,
        FileFormat::Avro {
            schema: "{".into(),
            codec: "null".into(),
        },
    );
    let e = FileWriter::open(bad).unwrap_err();
    assert!(e.to_string().contains("the Avro output: the schema does not parse"), "{e}");
}
