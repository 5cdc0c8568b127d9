//! Rides in files, read as the records a topic would hold, so the verifier compares a job that
//! reads and writes files exactly as it compares one on topics.
//!
//! - **Input**: TaxiRide CSV ([`super::csv`]), one file or a directory of files. Each event
//!   becomes the record `taxi generate` would have produced: key the driver id, value the
//!   [`Ride`](super::Ride) JSON. Our optional header may be a file's first line.
//! - **Output**: the finished files of a file sink in a directory, one JSON record per line
//!   (`.jsonl`). The sink writes a file under a name starting with `.` and renames it when the
//!   checkpoint that holds it completes, so only names not starting with `.` are finished.
//!
//! **Which files, in which order.** A directory's regular files (subdirectories are not
//! entered) whose names do not start with `.`, in name order (byte order of the names): a sink
//! task's names sort in the order it wrote them. A name ending `.gz` is gzip (one member or
//! several), any other plain text.
//!
//! **Partitions and offsets.** The n-th file (from 0, in name order) stands for partition n and
//! its line i (from 0) for offset i, so a record sits where a topic would keep it in order:
//! the verifier's per-key order for a sink task's files, and its per-partition watermark for
//! the input (one per file: the windows a job must have closed are those closed even in the
//! file read least far, whatever the source's parallelism). [`Files::locate`] names a record
//! by its file and line (from 1) again.
//!
//! The record key is not kept: [`TopicRecord`] has none, and the verifier keys a record by its
//! value's `driver_id` field, for records from files as for records from topics.

use crate::csv::{self, CsvError};
use crate::verify::TopicRecord;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// Why files could not be read; each message names the file (and the line) and what to change.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FilesError {
    /// A file or directory cannot be opened or listed.
    #[error(
        "cannot read {}: {source}; give an existing, readable file or directory",
        path.display()
    )]
    Read {
        /// The file or directory.
        path: PathBuf,
        /// The operating system's reason.
        source: io::Error,
    },
    /// A line cannot be read: not UTF-8 text, or the gzip stream is broken.
    #[error(
        "{} line {line}: cannot read it: {source} (a name ending .gz must hold gzip, any other \
         name UTF-8 text)",
        path.display()
    )]
    Line {
        /// The file.
        path: PathBuf,
        /// The line, from 1.
        line: u64,
        /// The reader's error.
        source: io::Error,
    },
    /// A line of an input file is not a TaxiRide CSV line.
    #[error("{} line {line}: {source}", path.display())]
    Csv {
        /// The file.
        path: PathBuf,
        /// The line, from 1.
        line: u64,
        /// What is wrong with it.
        source: CsvError,
    },
    /// The input path holds no file to read.
    #[error(
        "{} holds no files to read (names starting with '.' are skipped): give a CSV file or a \
         directory holding some",
        path.display()
    )]
    NoFiles {
        /// The directory.
        path: PathBuf,
    },
    /// The output path is not a directory.
    #[error("{} is not a directory: give the directory the file sink writes to", path.display())]
    NotADirectory {
        /// The path.
        path: PathBuf,
    },
}

/// Whether a file of that name is finished (and read): its name does not start with `.`.
///
/// ```
/// use onceflow_taxi::files::is_finished_name;
/// use std::ffi::OsStr;
/// assert!(is_finished_name(OsStr::new("part-0-0-0.jsonl")));
/// assert!(!is_finished_name(OsStr::new(".part-0-0-1.jsonl.inprogress")));
/// ```
pub fn is_finished_name(name: &std::ffi::OsStr) -> bool {
    name.as_encoded_bytes().first() != Some(&b'.')
}

/// The record of line `offset` (from 0) of input file number `partition`: the ride event's
/// JSON; `None` for our header as a file's first line.
///
/// # Errors
/// [`CsvError`] when the line is not a TaxiRide CSV line (a header after the first line
/// included).
///
/// ```
/// use onceflow_taxi::csv::HEADER;
/// use onceflow_taxi::files::csv_record;
/// assert_eq!(csv_record(0, 0, HEADER)?, None); // our header, as a file's first line
/// const START: &str = concat!(
///     "7,START,2013-01-01 00:00:00,1970-01-01 00:00:00,",
///     "-73.86617,40.77109,-73.98219,40.69932,1,2013000185,2013000186",
/// );
/// let record = csv_record(2, 5, START)?;
/// let record = record.expect("a ride event");
/// assert_eq!((record.partition, record.offset), (2, 5));
/// assert!(record.value.is_some_and(|v| v.starts_with(b"{\"ride_id\":7,")));
/// # Ok::<(), onceflow_taxi::csv::CsvError>(())
/// ```
pub fn csv_record(
    partition: i32,
    offset: i64,
    line: &str,
) -> Result<Option<TopicRecord>, CsvError> {
    if offset == 0 && csv::is_header(line) {
        return Ok(None);
    }
    let ride = csv::parse_line(line)?;
    Ok(Some(TopicRecord {
        partition,
        offset,
        value: Some(ride.to_json().into_bytes()),
    }))
}

/// The record of line `offset` (from 0) of output file number `partition`: the line as it is
/// (the comparison says what is wrong with it, if anything).
///
/// ```
/// use onceflow_taxi::files::json_record;
/// let record = json_record(1, 3, "{\"ride_id\":7}");
/// assert_eq!((record.partition, record.offset), (1, 3));
/// assert_eq!(record.value.as_deref(), Some(&b"{\"ride_id\":7}"[..]));
/// ```
pub fn json_record(partition: i32, offset: i64, line: &str) -> TopicRecord {
    TopicRecord {
        partition,
        offset,
        value: Some(line.as_bytes().to_vec()),
    }
}

/// The files to read, in name order; file n is partition n.
#[derive(Debug, Clone, PartialEq, Eq)]
///
/// ```
/// use onceflow_taxi::files::Files;
/// let dir = tempfile::tempdir()?;
/// use onceflow_taxi::csv;
/// use onceflow_taxi::generate::{rides_by_event_time, Config};
/// let rides = rides_by_event_time(Config { rides: 1, ..Config::default() }, 1000)?;
/// let text: String = csv::lines(rides).map(|line| line + "\n").collect();
/// std::fs::write(dir.path().join("b.csv"), text)?;
/// std::fs::write(dir.path().join(".a.csv"), "unfinished: not read\n")?;
/// let files = Files::input(dir.path())?;
/// assert_eq!(files.paths(), [dir.path().join("b.csv")]);
/// let mut events = Vec::new();
/// assert_eq!(files.for_each_csv_record(|r| events.push(r.offset))?, 2);
/// assert_eq!(events, [0, 1]);
/// assert!(files.locate(0, 1).ends_with("b.csv line 2"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Files {
    paths: Vec<PathBuf>,
}

impl Files {
    /// A job's input: `path` itself when it is a file, else the finished files of the
    /// directory `path`.
    ///
    /// # Errors
    /// [`FilesError::Read`] when `path` cannot be read, [`FilesError::NoFiles`] for a directory
    /// without a file to read.
    ///
    /// ```
    /// use onceflow_taxi::files::Files;
    /// let dir = tempfile::tempdir()?;
    /// let file = dir.path().join("rides.csv");
    /// const START: &str = concat!(
    ///     "7,START,2013-01-01 00:00:00,1970-01-01 00:00:00,",
    ///     "-73.86617,40.77109,-73.98219,40.69932,1,2013000185,2013000186",
    /// );
    /// std::fs::write(&file, format!("{START}\n"))?;
    /// assert_eq!(Files::input(&file)?.paths(), [file.clone()]);
    /// assert!(Files::input(&dir.path().join("absent")).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn input(path: &Path) -> Result<Files, FilesError> {
        let meta = std::fs::metadata(path).map_err(|source| FilesError::Read {
            path: path.to_owned(),
            source,
        })?;
        if !meta.is_dir() {
            return Ok(Files {
                paths: vec![path.to_owned()],
            });
        }
        let files = Self::finished(path)?;
        if files.paths.is_empty() {
            return Err(FilesError::NoFiles {
                path: path.to_owned(),
            });
        }
        Ok(files)
    }

    /// A file sink's output: the finished files of the directory `dir` (none is no output,
    /// not an error: the verdict then says what is missing).
    ///
    /// # Errors
    /// [`FilesError::Read`] when `dir` cannot be listed, [`FilesError::NotADirectory`] when it
    /// is a file.
    ///
    /// ```
    /// use onceflow_taxi::files::Files;
    /// let dir = tempfile::tempdir()?;
    /// assert!(Files::output(dir.path())?.paths().is_empty()); // no output yet: not an error
    /// std::fs::write(dir.path().join("part-0-0-0.jsonl"), "{\"ride_id\":7}\n")?;
    /// assert_eq!(Files::output(dir.path())?.json_records()?.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn output(dir: &Path) -> Result<Files, FilesError> {
        let meta = std::fs::metadata(dir).map_err(|source| FilesError::Read {
            path: dir.to_owned(),
            source,
        })?;
        if !meta.is_dir() {
            return Err(FilesError::NotADirectory {
                path: dir.to_owned(),
            });
        }
        Self::finished(dir)
    }

    /// The regular files of `dir` whose names do not start with `.`, in name order.
    fn finished(dir: &Path) -> Result<Files, FilesError> {
        let read = |source| FilesError::Read {
            path: dir.to_owned(),
            source,
        };
        let mut paths = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(read)? {
            let entry = entry.map_err(read)?;
            // Through a symbolic link: a link to a file is read as the file.
            let is_file = std::fs::metadata(entry.path()).is_ok_and(|m| m.is_file());
            if is_file && is_finished_name(&entry.file_name()) {
                paths.push(entry.path());
            }
        }
        paths.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
        Ok(Files { paths })
    }

    /// The files, in name order.
    ///
    /// ```
    /// use onceflow_taxi::files::Files;
    /// let dir = tempfile::tempdir()?;
    /// for name in ["part-1.jsonl", "part-0.jsonl", ".part-2.jsonl.inprogress"] {
    ///     std::fs::write(dir.path().join(name), "")?;
    /// }
    /// let files = Files::output(dir.path())?;
    /// let names: Vec<_> = files.paths().iter().filter_map(|p| p.file_name()).collect();
    /// assert_eq!(names, ["part-0.jsonl", "part-1.jsonl"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// Where the record at (`partition`, `offset`) came from: `FILE line N`.
    ///
    /// ```
    /// use onceflow_taxi::files::Files;
    /// let dir = tempfile::tempdir()?;
    /// std::fs::write(dir.path().join("part-0.jsonl"), "")?;
    /// let files = Files::output(dir.path())?;
    /// let part = dir.path().join("part-0.jsonl");
    /// assert_eq!(files.locate(0, 9), format!("{} line 10", part.display()));
    /// assert_eq!(files.locate(7, 0), "file 7 line 1");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn locate(&self, partition: i32, offset: i64) -> String {
        let file = usize::try_from(partition)
            .ok()
            .and_then(|p| self.paths.get(p))
            .map_or_else(|| format!("file {partition}"), |p| p.display().to_string());
        format!("{file} line {}", offset.saturating_add(1))
    }

    /// Hands every ride event of the CSV files to `each`, file after file, as [`csv_record`]
    /// makes it; returns how many.
    ///
    /// # Errors
    /// The first file or line that cannot be read, or is not a TaxiRide CSV line.
    ///
    /// ```
    /// use onceflow_taxi::files::Files;
    /// let dir = tempfile::tempdir()?;
    /// let file = dir.path().join("rides.csv");
    /// const START: &str = concat!(
    ///     "7,START,2013-01-01 00:00:00,1970-01-01 00:00:00,",
    ///     "-73.86617,40.77109,-73.98219,40.69932,1,2013000185,2013000186",
    /// );
    /// std::fs::write(&file, format!("{START}\nnot a ride\n"))?;
    /// let e = Files::input(&file)?.for_each_csv_record(|_| {}).unwrap_err();
    /// assert!(e.to_string().contains("rides.csv line 2: expected 11 comma-separated columns"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn for_each_csv_record(
        &self,
        mut each: impl FnMut(&TopicRecord),
    ) -> Result<u64, FilesError> {
        let mut n = 0;
        for (partition, path) in self.numbered() {
            for_each_line(path, |offset, line| {
                let record =
                    csv_record(partition, offset, line).map_err(|source| FilesError::Csv {
                        path: path.to_owned(),
                        line: line_number(offset),
                        source,
                    })?;
                if let Some(r) = record {
                    each(&r);
                    n += 1;
                }
                Ok(())
            })?;
        }
        Ok(n)
    }

    /// Every line of the files as a record ([`json_record`]).
    ///
    /// # Errors
    /// The first file or line that cannot be read.
    ///
    /// ```
    /// use onceflow_taxi::files::Files;
    /// let dir = tempfile::tempdir()?;
    /// std::fs::write(dir.path().join("part-0.jsonl"), "{\"a\":1}\n{\"a\":2}\n")?;
    /// let records = Files::output(dir.path())?.json_records()?;
    /// let offsets: Vec<_> = records.iter().map(|r| (r.partition, r.offset)).collect();
    /// assert_eq!(offsets, [(0, 0), (0, 1)]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn json_records(&self) -> Result<Vec<TopicRecord>, FilesError> {
        let mut records = Vec::new();
        for (partition, path) in self.numbered() {
            for_each_line(path, |offset, line| {
                records.push(json_record(partition, offset, line));
                Ok(())
            })?;
        }
        Ok(records)
    }

    fn numbered(&self) -> impl Iterator<Item = (i32, &Path)> {
        self.paths
            .iter()
            .enumerate()
            .map(|(i, p)| (i32::try_from(i).unwrap_or(i32::MAX), p.as_path()))
    }
}

fn line_number(offset: i64) -> u64 {
    u64::try_from(offset).unwrap_or(0) + 1
}

/// Hands each line of `path` (gunzipped when its name ends `.gz`; without its `\n` or `\r\n`)
/// with its index from 0 to `each`.
fn for_each_line(
    path: &Path,
    mut each: impl FnMut(i64, &str) -> Result<(), FilesError>,
) -> Result<(), FilesError> {
    let file = std::fs::File::open(path).map_err(|source| FilesError::Read {
        path: path.to_owned(),
        source,
    })?;
    let gzip = path.extension().is_some_and(|e| e == "gz");
    let raw: Box<dyn Read> = if gzip {
        // Multi-member: gzip files concatenated (as `cat a.gz b.gz` makes them) are one file.
        Box::new(flate2::read::MultiGzDecoder::new(file))
    } else {
        Box::new(file)
    };
    let mut reader = BufReader::new(raw);
    let mut line = String::new();
    let mut offset = 0i64;
    loop {
        line.clear();
        let read = reader
            .read_line(&mut line)
            .map_err(|source| FilesError::Line {
                path: path.to_owned(),
                line: line_number(offset),
                source,
            })?;
        if read == 0 {
            return Ok(());
        }
        let text = line.strip_suffix('\n').unwrap_or(&line);
        each(offset, text.strip_suffix('\r').unwrap_or(text))?;
        offset += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csv::{format_line, HEADER};
    use crate::generate::{self, Config};
    use crate::verify::{compare_located, expected, Job};
    use crate::Ride;
    use std::io::Write;

    fn gzip(text: &str) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(text.as_bytes()).unwrap();
        e.finish().unwrap()
    }

    fn values(records: &[TopicRecord]) -> Vec<(i32, i64, String)> {
        records
            .iter()
            .map(|r| {
                let v = String::from_utf8(r.value.clone().unwrap()).unwrap();
                (r.partition, r.offset, v)
            })
            .collect()
    }

    fn sample(rides: u64) -> Vec<Ride> {
        generate::rides_by_event_time(
            Config {
                rides,
                drivers: 7,
                ..Config::default()
            },
            1000,
        )
        .unwrap()
        .collect()
    }

    #[test]
    fn a_directory_is_read_in_name_order_without_unfinished_files_or_subdirectories() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("part-1-0.jsonl"), "{\"b\":1}\n{\"b\":2}\n").unwrap();
        std::fs::write(d.join("part-0-0.jsonl"), "{\"a\":1}\r\n{\"a\":2}").unwrap();
        std::fs::write(d.join("part-0-1.jsonl.gz"), gzip("{\"c\":1}\n")).unwrap();
        std::fs::write(d.join(".part-0-2.jsonl.inprogress"), "{\"x\":1}\n").unwrap();
        std::fs::create_dir(d.join("sub")).unwrap();
        std::fs::write(d.join("sub").join("inner.jsonl"), "{\"y\":1}\n").unwrap();
        let files = Files::output(d).unwrap();
        let names: Vec<String> = files
            .paths()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            ["part-0-0.jsonl", "part-0-1.jsonl.gz", "part-1-0.jsonl"]
        );
        let got = values(&files.json_records().unwrap());
        let want = [
            (0, 0, "{\"a\":1}"),
            (0, 1, "{\"a\":2}"),
            (1, 0, "{\"c\":1}"),
            (2, 0, "{\"b\":1}"),
            (2, 1, "{\"b\":2}"),
        ]
        .map(|(p, o, v)| (p, o, v.to_owned()));
        assert_eq!(got, want);
        assert_eq!(
            files.locate(2, 1),
            format!("{} line 2", d.join("part-1-0.jsonl").display())
        );
        assert_eq!(files.locate(9, 0), "file 9 line 1");
        // An empty directory is no output; a file is not the sink's directory.
        let empty = tempfile::tempdir().unwrap();
        assert!(Files::output(empty.path()).unwrap().paths().is_empty());
        let e = Files::output(&d.join("part-0-0.jsonl")).unwrap_err();
        assert!(
            e.to_string()
                .ends_with("is not a directory: give the directory the file sink writes to"),
            "{e}"
        );
    }

    #[test]
    fn finished_names_are_those_not_starting_with_a_dot() {
        for (name, finished) in [
            ("part-0-0.jsonl", true),
            ("a.b", true),
            (".part-0-0.jsonl.inprogress", false),
            (".hidden", false),
            ("x.", true),
        ] {
            assert_eq!(
                is_finished_name(std::ffi::OsStr::new(name)),
                finished,
                "{name}"
            );
        }
    }

    #[test]
    fn a_csv_line_becomes_the_ride_record_and_a_first_line_header_is_skipped() {
        let ride = sample(1).remove(0);
        let line = format_line(&ride, 0);
        let json = Some(ride.to_json().into_bytes());
        for (offset, text, want) in [
            (0, line.as_str(), Some(json.clone())),
            (5, line.as_str(), Some(json.clone())),
            (0, HEADER, None),
        ] {
            let got = csv_record(3, offset, text).unwrap();
            let want = want.map(|value| TopicRecord {
                partition: 3,
                offset,
                value,
            });
            assert_eq!(got, want, "{text}");
        }
        // Our header only as the first line.
        let e = csv_record(3, 1, HEADER).unwrap_err();
        assert_eq!(
            e.to_string(),
            "column 1 (rideId): 'rideId' is not a whole number 0 or more"
        );
        assert_eq!(
            json_record(1, 2, "x"),
            TopicRecord {
                partition: 1,
                offset: 2,
                value: Some(b"x".to_vec())
            }
        );
    }

    #[test]
    fn a_csv_directory_plain_and_gzip_reads_as_the_rides_of_its_files_in_name_order() {
        let rides = sample(20);
        let lines: Vec<String> = csv::lines(rides.clone().into_iter()).collect();
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let first = format!("{HEADER}\n{}\n", lines[..15].join("\n"));
        std::fs::write(d.join("a.csv"), first).unwrap();
        std::fs::write(d.join("b.csv.gz"), gzip(&lines[15..].join("\n"))).unwrap();
        std::fs::write(d.join(".c.csv"), "garbage\n").unwrap();
        let mut got = Vec::new();
        let n = Files::input(d)
            .unwrap()
            .for_each_csv_record(|r| got.push(r.clone()))
            .unwrap();
        assert_eq!(n, 40);
        let positions: Vec<(i32, i64)> = got.iter().map(|r| (r.partition, r.offset)).collect();
        let want: Vec<(i32, i64)> = (1..=15)
            .map(|o| (0, o))
            .chain((0..25).map(|o| (1, o)))
            .collect();
        assert_eq!(positions, want);
        let back: Vec<Ride> = got
            .iter()
            .map(|r| serde_json::from_slice(r.value.as_deref().unwrap()).unwrap())
            .collect();
        assert_eq!(back, rides);
        // One file given as itself.
        let one = Files::input(&d.join("b.csv.gz")).unwrap();
        assert_eq!(one.for_each_csv_record(|_| {}).unwrap(), 25);
    }

    #[test]
    fn bad_input_files_are_named_with_the_line_and_what_to_change() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let good = format_line(&sample(1)[0], 0);
        let bad = good.replacen("2025-01-01", "2025-13-01", 1);
        let path = d.join("rides.csv");
        std::fs::write(&path, format!("{good}\n{good}\n{bad}\n")).unwrap();
        let e = Files::input(&path)
            .unwrap()
            .for_each_csv_record(|_| {})
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{} line 3: column 3 (time1): '2025-13-01 00:00:00' is not a time yyyy-MM-dd \
                 HH:mm:ss",
                path.display()
            )
        );
        let gz = d.join("broken.csv.gz");
        std::fs::write(&gz, b"not gzip at all\n").unwrap();
        let e = Files::input(&gz)
            .unwrap()
            .for_each_csv_record(|_| {})
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!("{} line 1: cannot read it: ", gz.display())),
            "{e}"
        );
        let latin1 = d.join("latin1.csv");
        std::fs::write(&latin1, b"caf\xe9\n").unwrap();
        let e = Files::input(&latin1)
            .unwrap()
            .for_each_csv_record(|_| {})
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 1: cannot read it"), "{e}");
        let empty = tempfile::tempdir().unwrap();
        std::fs::write(empty.path().join(".hidden.csv"), good).unwrap();
        let e = Files::input(empty.path()).unwrap_err().to_string();
        assert!(e.ends_with("holds no files to read (names starting with '.' are skipped): give a CSV file or a directory holding some"), "{e}");
        let e = Files::input(&d.join("absent")).unwrap_err().to_string();
        assert!(e.starts_with("cannot read "), "{e}");
    }

    /// The copy job on files: the input CSV, the sink's files holding the expected JSON lines
    /// (split over two tasks' files, reordered): OK; a line removed: missing; a line twice:
    /// duplicated, each named by file and line.
    #[test]
    fn a_copy_from_csv_to_a_sink_directory_verifies_and_its_faults_are_named() {
        let rides = sample(50);
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("rides.csv");
        let text: String = csv::lines(rides.clone().into_iter())
            .map(|l| l + "\n")
            .collect();
        std::fs::write(&input, text).unwrap();
        let mut records = Vec::new();
        Files::input(&input)
            .unwrap()
            .for_each_csv_record(|r| records.push(r.clone()))
            .unwrap();
        let want = expected(Job::Copy, 60_000, &records).unwrap();
        let json: Vec<String> = rides.iter().rev().map(Ride::to_json).collect();
        let verdict = |task0: &[String], task1: &[String]| {
            let out = tempfile::tempdir().unwrap();
            std::fs::write(out.path().join("part-0-0.jsonl"), task0.join("\n")).unwrap();
            std::fs::write(out.path().join("part-1-0.jsonl"), task1.join("\n") + "\n").unwrap();
            let files = Files::output(out.path()).unwrap();
            let actual = files.json_records().unwrap();
            let c = compare_located(&want, &actual, |p, o| files.locate(p, o));
            // The temporary directory's name differs from run to run.
            c.verdict()
                .replace(&out.path().display().to_string(), "OUT")
        };
        let (a, b) = json.split_at(40);
        assert_eq!(
            verdict(a, b),
            "verify: OK — 100 records, no loss, no duplicates, order not checked (the file \
             source reorders events by design)"
        );
        let first = rides.last().unwrap().describe();
        assert_eq!(
            verdict(&a[1..], b),
            format!(
                "verify: FAILED — 1 missing (first: {first}); 99 records read, 100 expected; \
                 order not checked"
            )
        );
        let twice = [b, &b[..1]].concat();
        let again = rides[59].describe();
        assert_eq!(
            verdict(a, &twice),
            format!(
                "verify: FAILED — 1 duplicated (first: {again} again at OUT/part-1-0.jsonl line \
                 61); 101 records read, 100 expected; order not checked"
            )
        );
    }

    /// The fixture reads back as what the generator gives in event-time order.
    #[test]
    fn the_csv_fixture_reads_as_the_generated_rides() {
        let path = crate::fixture("rides-sample.csv");
        let mut got = Vec::new();
        Files::input(&path)
            .unwrap()
            .for_each_csv_record(|r| got.push(r.value.clone().unwrap()))
            .unwrap();
        let want: Vec<Vec<u8>> = generate::rides_by_event_time(
            Config {
                rides: 100,
                ..Config::default()
            },
            1000,
        )
        .unwrap()
        .map(|r| r.to_json().into_bytes())
        .collect();
        assert_eq!(got.len(), 200);
        assert!(got == want);
    }
}
