//! `onceflow taxi generate`: deterministic ride events ([`onceflow_taxi::generate`]) produced
//! to a topic, keyed by driver id, with the idempotent producer ([`super::feed`]) — and with
//! `--fares`, each ride's fare ([`onceflow_taxi::fare`]) to a second topic —, or written as a
//! TaxiRide CSV file ([`onceflow_taxi::csv`], `--format csv`) in event-time order.

use super::feed;
use crate::error::{CliError, Result};
use crate::props::Conn;
use bytes::Bytes;
use onceflow::client::admin::NewTopic;
use onceflow::client::{Admin, ProducerRecord};
use onceflow_taxi::fare;
use onceflow_taxi::generate::{self, Config};
use onceflow_taxi::{csv, Ride, NYC};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

#[derive(clap::Args)]
pub struct GenerateArgs {
    // -X properties apply to the producer only; the admin client gets the brokers.
    #[command(flatten)]
    conn: Conn,
    /// Topic to write (created with --partitions if missing), with --format json.
    #[arg(short = 't', long)]
    topic: Option<String>,
    /// Also a fare per ride to this topic (created like --topic), keyed by ride id, produced
    /// beside its ride's START event: the second stream of the rides-and-fares enrichment.
    #[arg(long, value_name = "TOPIC")]
    fares: Option<String>,
    /// What to write: json, the ride events as JSON records produced to --topic (keyed by
    /// driver id, in arrival order); or csv, the TaxiRide CSV lines of the Flink training
    /// exercises written to --output, in event-time order (START before END at equal times)
    /// with event times rounded down to whole seconds.
    #[arg(long, value_enum, default_value_t = Format::Json)]
    format: Format,
    /// The file --format csv writes (replaced if it exists); a name ending .gz is written
    /// gzip-compressed.
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// With --format csv: write a header line first (the original data set has none; `taxi
    /// verify --input-file` skips it).
    #[arg(long)]
    header: bool,
    /// How many rides (each is two events).
    #[arg(long)]
    count: u64,
    /// Pick-ups per second of event time: how fast event time advances (it does not throttle
    /// producing; the data set is the same at any speed).
    #[arg(long, default_value_t = 10)]
    rate: u32,
    /// Seed: the same seed and settings give the same events.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Partitions of the topic when it is created.
    #[arg(long, default_value_t = 3)]
    partitions: i32,
    /// Size of the driver pool.
    #[arg(long, default_value_t = 200)]
    drivers: u64,
    /// Hours of a driver's shift: a ride's driver is one on duty at its pick-up (the drivers'
    /// shifts staggered over the shift period), so each driver's rides come in shifts.
    #[arg(long, default_value_t = 8)]
    shift_hours: u32,
    /// Hours from the start of a driver's shift to the start of the next (equal to
    /// --shift-hours: every driver always on duty).
    #[arg(long, default_value_t = 12)]
    shift_period_hours: u32,
    /// Percent of the rides that start or end outside the NYC box.
    #[arg(long, default_value_t = 10)]
    outside_percent: u32,
    /// Events per second of wall-clock time to produce at (0: as fast as possible), for
    /// latency measurements with a job reading while the events arrive.
    #[arg(long, default_value_t = 0)]
    produce_rate: u32,
}

/// What `taxi generate` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    /// JSON ride events produced to a Kafka topic.
    #[value(alias = "kafka")]
    Json,
    /// TaxiRide CSV lines written to a file.
    Csv,
}

/// Where `taxi generate` writes, from the flags.
#[derive(Debug, PartialEq, Eq)]
enum Destination {
    /// JSON records to this topic.
    Topic(String),
    /// CSV lines to this file.
    Csv { path: PathBuf, header: bool },
}

/// The generator's settings from the flags, each checked with the flag's name.
fn generator_config(a: &GenerateArgs) -> Result<Config> {
    if a.rate == 0 {
        return Err(CliError::Usage(
            "--rate must be at least 1 ride per second".into(),
        ));
    }
    if a.drivers == 0 {
        return Err(CliError::Usage("--drivers must be at least 1".into()));
    }
    if a.outside_percent > 100 {
        return Err(CliError::Usage(format!(
            "--outside-percent is a percentage, at most 100, got {}",
            a.outside_percent
        )));
    }
    if a.shift_hours == 0 || a.shift_period_hours < a.shift_hours {
        return Err(CliError::Usage(format!(
            "--shift-hours must be at least 1 and at most --shift-period-hours ({}), got {}",
            a.shift_period_hours, a.shift_hours
        )));
    }
    if a.partitions < 1 {
        return Err(CliError::Usage(format!(
            "--partitions must be at least 1, got {}",
            a.partitions
        )));
    }
    Ok(Config {
        seed: a.seed,
        rides: a.count,
        rides_per_second: a.rate,
        drivers: a.drivers,
        outside_per_mille: a.outside_percent * 10,
        shift_ms: i64::from(a.shift_hours) * 3_600_000,
        shift_period_ms: i64::from(a.shift_period_hours) * 3_600_000,
        ..Config::default()
    })
}

/// Where to write, from --format, --topic, --output and the flags that go with them.
fn destination(a: &GenerateArgs) -> Result<Destination> {
    let usage = |s: &str| Err(CliError::Usage(s.to_owned()));
    if a.fares.is_some() && a.format == Format::Csv {
        return usage("--fares produces to a topic: leave it out with --format csv");
    }
    match (a.format, &a.topic, &a.output) {
        (Format::Json, Some(topic), None) if !a.header => Ok(Destination::Topic(topic.clone())),
        (Format::Json, _, Some(_)) => usage(
            "--output is the file of --format csv: give --topic to produce to a topic, or add \
             --format csv",
        ),
        (Format::Json, None, None) => usage(
            "--topic is needed with --format json (the default): give the topic to produce to, \
             or --format csv --output FILE",
        ),
        (Format::Json, Some(_), None) => usage("--header is for --format csv: leave it out"),
        (Format::Csv, Some(_), _) => {
            usage("--topic is for --format json: with --format csv give only --output FILE")
        }
        (Format::Csv, None, None) => {
            usage("--format csv writes a file: give --output FILE (a name ending .gz is gzip)")
        }
        (Format::Csv, None, Some(_)) if a.produce_rate > 0 => {
            usage("--produce-rate paces producing to a topic: leave it out with --format csv")
        }
        (Format::Csv, None, Some(path)) => Ok(Destination::Csv {
            path: path.clone(),
            header: a.header,
        }),
    }
}

/// Creates `topic` with `partitions` unless it exists; returns its partition count.
async fn ensure_topic(admin: &Admin, topic: &str, partitions: i32) -> Result<usize> {
    if let Some(n) = admin.list_topics().await?.get(topic) {
        return Ok(*n);
    }
    admin
        .create_topics(&[NewTopic::new(topic.to_owned(), partitions)])
        .await?;
    Ok(usize::try_from(partitions).unwrap_or(0))
}

/// What was generated, for the summary line.
#[derive(Debug, Clone, Copy)]
struct Generated {
    /// Rides leaving the NYC box (counted at their START).
    outside: u64,
    /// The smallest and largest event time.
    first: i64,
    last: i64,
}

impl Generated {
    fn new() -> Self {
        Generated {
            outside: 0,
            first: i64::MAX,
            last: i64::MIN,
        }
    }

    fn count(&mut self, ride: &Ride) {
        if ride.is_start && !ride.inside(&NYC) {
            self.outside += 1;
        }
        self.first = self.first.min(ride.event_time);
        self.last = self.last.max(ride.event_time);
    }

    /// `event time F..L ms`, or `no events`.
    fn span(&self, events: u64) -> String {
        if events == 0 {
            "no events".to_owned()
        } else {
            format!("event time {}..{} ms", self.first, self.last)
        }
    }
}

/// Runs `onceflow taxi generate`.
pub async fn run(a: GenerateArgs) -> Result<ExitCode> {
    let config = generator_config(&a)?;
    let (path, header) = match destination(&a)? {
        Destination::Topic(topic) => return generate_to_topic(&a, config, &topic).await,
        Destination::Csv { path, header } => (path, header),
    };
    let start = Instant::now();
    let to = path.clone();
    // Writing a file blocks: off the runtime's threads.
    let (events, generated) = tokio::task::spawn_blocking(move || write_csv(config, &to, header))
        .await
        .map_err(|e| CliError::Failed(format!("writing {}: {e}", path.display())))??;
    let secs = start.elapsed().as_secs_f64();
    let gzip = if is_gzip(&path) { ", gzip" } else { "" };
    println!(
        "taxi generate: {events} events ({} rides, {} leaving the NYC box) to {} (TaxiRide CSV{gzip}, event-time order, whole seconds), seed {}, {}; {secs:.2} s, {:.0} events/s",
        a.count,
        generated.outside,
        path.display(),
        a.seed,
        generated.span(events),
        events as f64 / secs.max(1e-9)
    );
    Ok(ExitCode::SUCCESS)
}

async fn generate_to_topic(a: &GenerateArgs, config: Config, topic: &str) -> Result<ExitCode> {
    let seed = config.seed;
    let events = generate::rides(config).map_err(|e| CliError::Usage(e.to_string()))?;
    let admin = Admin::new(a.conn.brokers_only()?.client()?).await?;
    let partitions = ensure_topic(&admin, topic, a.partitions).await?;
    if let Some(fares) = &a.fares {
        ensure_topic(&admin, fares, a.partitions).await?;
    }
    let producer = feed::producer(&a.conn).await?;
    let mut generated = Generated::new();
    let (rides_topic, fares_topic) = (topic.to_owned(), a.fares.clone());
    let records = events
        .inspect(|ride| generated.count(ride))
        .flat_map(move |ride| {
            let fare = match (&fares_topic, ride.is_start) {
                (Some(t), true) => {
                    let fare = fare::fare_of(&ride, seed);
                    let value = Bytes::from(fare.to_json());
                    Some(ProducerRecord::new(t.clone(), value).with_key(Bytes::from(fare.key())))
                }
                _ => None,
            };
            std::iter::once(feed::ride_record(&rides_topic, &ride)).chain(fare)
        });
    let start = Instant::now();
    let fed = feed::feed(producer, records, a.produce_rate, start).await?;
    let sent = fed.events;
    let secs = fed.secs;
    let fares = match &a.fares {
        Some(t) => format!(" and {} fares to {t}", a.count),
        None => String::new(),
    };
    println!(
        "taxi generate: {} events ({} rides, {} leaving the NYC box) to {topic} ({partitions} partitions){fares}, seed {}, {}; {secs:.2} s, {:.0} records/s",
        2 * a.count,
        a.count,
        generated.outside,
        a.seed,
        generated.span(2 * a.count),
        sent as f64 / secs.max(1e-9)
    );
    Ok(ExitCode::SUCCESS)
}

fn is_gzip(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "gz")
}

/// Writes the rides of `config` to `path` as TaxiRide CSV lines in event-time order, times in
/// whole seconds (the format has no more; the rides are rounded before sorting, so the file's
/// order and its times agree), gzip-compressed when the name ends .gz; returns how many events.
fn write_csv(config: Config, path: &Path, header: bool) -> Result<(u64, Generated)> {
    let sorted =
        generate::rides_by_event_time(config, 1000).map_err(|e| CliError::Usage(e.to_string()))?;
    let file = std::fs::File::create(path).map_err(|e| {
        CliError::Failed(format!(
            "cannot create {} (--output): {e}; give a file in a writable directory",
            path.display()
        ))
    })?;
    let failed = |e: std::io::Error| {
        CliError::Failed(format!(
            "cannot write {} (--output): {e}; the file is incomplete",
            path.display()
        ))
    };
    let mut out = std::io::BufWriter::new(file);
    let mut generated = Generated::new();
    let lines = csv::lines(sorted.inspect(|ride| generated.count(ride)));
    let events = if is_gzip(path) {
        let mut gz = flate2::write::GzEncoder::new(&mut out, flate2::Compression::default());
        let n = write_lines(&mut gz, header, lines).map_err(failed)?;
        gz.finish().map_err(failed)?;
        n
    } else {
        write_lines(&mut out, header, lines).map_err(failed)?
    };
    out.flush().map_err(failed)?;
    Ok((events, generated))
}

/// Writes `lines`, each ended by \n, after [`csv::HEADER`] when `header`; returns how many
/// lines (the header not counted).
fn write_lines(
    out: &mut impl Write,
    header: bool,
    lines: impl Iterator<Item = String>,
) -> std::io::Result<u64> {
    if header {
        writeln!(out, "{}", csv::HEADER)?;
    }
    let mut n = 0;
    for line in lines {
        writeln!(out, "{line}")?;
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(rate: u32, drivers: u64, outside_percent: u32, partitions: i32) -> GenerateArgs {
        GenerateArgs {
            conn: Conn {
                broker: "h:1".into(),
                props: Vec::new(),
                config_file: None,
            },
            topic: Some("rides".into()),
            fares: None,
            format: Format::Json,
            output: None,
            header: false,
            count: 10,
            rate,
            seed: 7,
            partitions,
            drivers,
            outside_percent,
            shift_hours: 8,
            shift_period_hours: 12,
            produce_rate: 0,
        }
    }

    #[test]
    fn generator_flags_out_of_range_are_named() {
        for (a, flag) in [
            (args(0, 1, 10, 1), "--rate"),
            (args(1, 0, 10, 1), "--drivers"),
            (args(1, 1, 101, 1), "--outside-percent"),
            (args(1, 1, 10, 0), "--partitions"),
            (
                GenerateArgs {
                    shift_hours: 13,
                    ..args(1, 1, 10, 1)
                },
                "--shift-hours",
            ),
        ] {
            let e = generator_config(&a).unwrap_err().to_string();
            assert!(e.starts_with(flag), "{e}");
        }
        let c = generator_config(&args(5, 9, 25, 3)).unwrap();
        assert_eq!(
            (
                c.seed,
                c.rides,
                c.rides_per_second,
                c.drivers,
                c.outside_per_mille
            ),
            (7, 10, 5, 9, 250)
        );
    }

    /// --format with --topic / --output / --header / --produce-rate: the destination, or the
    /// one-line error naming the flag.
    #[test]
    fn the_format_decides_between_topic_and_file_and_odd_combinations_are_named() {
        let with = |format, topic: Option<&str>, output: Option<&str>, header, produce_rate| {
            let mut a = args(10, 200, 10, 3);
            a.format = format;
            a.topic = topic.map(str::to_owned);
            a.output = output.map(PathBuf::from);
            a.header = header;
            a.produce_rate = produce_rate;
            destination(&a).map_err(|e| e.to_string())
        };
        let csv = |path: &str, header| {
            Ok(Destination::Csv {
                path: PathBuf::from(path),
                header,
            })
        };
        type Outcome<E> = std::result::Result<Destination, E>;
        let cases: Vec<(Outcome<String>, Outcome<&str>)> = vec![
            (
                with(Format::Json, Some("t"), None, false, 5),
                Ok(Destination::Topic("t".into())),
            ),
            (
                with(Format::Csv, None, Some("r.csv"), false, 0),
                csv("r.csv", false),
            ),
            (
                with(Format::Csv, None, Some("r.csv.gz"), true, 0),
                csv("r.csv.gz", true),
            ),
            (
                with(Format::Json, None, None, false, 0),
                Err("--topic is needed"),
            ),
            (
                with(Format::Json, Some("t"), Some("f"), false, 0),
                Err("--output is the file"),
            ),
            (
                with(Format::Json, Some("t"), None, true, 0),
                Err("--header is for --format csv"),
            ),
            (
                with(Format::Csv, Some("t"), Some("f"), false, 0),
                Err("--topic is for --format json"),
            ),
            (
                with(Format::Csv, None, None, false, 0),
                Err("--format csv writes a file"),
            ),
            (
                with(Format::Csv, None, Some("f"), false, 9),
                Err("--produce-rate"),
            ),
        ];
        for (got, want) in cases {
            match (got, want) {
                (Ok(g), Ok(w)) => assert_eq!(g, w),
                (Err(g), Err(w)) => assert!(g.starts_with(w), "{g}"),
                (g, w) => panic!("{g:?} but expected {w:?}"),
            }
        }
    }

    /// The CSV file: every event once, in event-time order, times in whole seconds, the same
    /// rides as the topic mode's apart from the fractions of their seconds; gzip when the name
    /// ends .gz, with the optional header.
    #[test]
    fn csv_mode_writes_the_generated_rides_in_event_time_order() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            rides: 300,
            ..Config::default()
        };
        let plain = dir.path().join("r.csv");
        let (n, generated) = write_csv(config.clone(), &plain, false).unwrap();
        assert_eq!(n, 600);
        let text = std::fs::read_to_string(&plain).unwrap();
        let rides: Vec<Ride> = text.lines().map(|l| csv::parse_line(l).unwrap()).collect();
        assert_eq!(rides.len(), 600);
        assert!(rides.windows(2).all(|w| w[0].event_time <= w[1].event_time));
        assert!(rides.iter().all(|r| r.event_time % 1000 == 0));
        assert_eq!(
            (generated.first, generated.last),
            (rides[0].event_time, rides[599].event_time)
        );
        let mut from_topic_mode: Vec<Ride> = generate::rides(config.clone())
            .unwrap()
            .map(|mut r| {
                r.event_time -= r.event_time % 1000;
                r
            })
            .collect();
        from_topic_mode.sort_by_key(|r| (r.event_time, !r.is_start, r.ride_id));
        assert!(rides == from_topic_mode);
        let gz = dir.path().join("r.csv.gz");
        write_csv(config, &gz, true).unwrap();
        let mut unzipped = String::new();
        use std::io::Read;
        flate2::read::GzDecoder::new(std::fs::File::open(&gz).unwrap())
            .read_to_string(&mut unzipped)
            .unwrap();
        assert_eq!(unzipped, format!("{}\n{text}", csv::HEADER));
        let e = write_csv(
            Config::default(),
            &dir.path().join("no/such/dir.csv"),
            false,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("cannot create ") && e.contains("(--output)"),
            "{e}"
        );
    }
}
