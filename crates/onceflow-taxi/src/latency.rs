//! End-to-end latency of a shipped job: for each output record, the time it became visible to
//! a read_committed reader tailing the output topic minus the append time (the record
//! timestamp) of the input record that caused it.
//!
//! **The cause of an output record.**
//! - [`Job::Cleansing`] and [`Job::Copy`] write a copy of an input ride event: its cause is
//!   the input record with the same ride id and START/END.
//! - [`Job::PerDriverHourly`] writes a window when its watermark (the newest event time minus
//!   the out-of-orderness) reaches the window's end: its cause is the input record whose event
//!   time first pushed the watermark there. With one task reading one partition, that is the
//!   first such record in offset order. Across partitions the task's processing order
//!   interleaves them in a way the topics do not record, so the cause is approximated by the
//!   *earliest appended* of each partition's first such record. The job cannot have fired the
//!   window before reading one of them, and with the job keeping up it reads them in about
//!   append order; the approximation can only make a latency longer, never hide one.
//! - [`Job::RidesAndFares`] writes a ride's START event joined with its fare: its cause is the
//!   later appended of the two, approximated by the START event's append time (the fares are
//!   not read; the generator appends each fare right after its ride's START event). The
//!   approximation can only make a latency longer, never hide one.
//! - [`Job::HourlyTopTips`] is not timed: its input is the fares, which [`Causes::push`]
//!   refuses as not ride events.
//!
//! The computation is pure: [`Causes`] from the input's [`Appended`] records, [`Summary`] of
//! the output's [`Visible`] records. The reader that tails the output topic and stamps each
//! record with the wall-clock time ([`now_ms`]) a poll handed it over is the `onceflow`
//! binary's (`onceflow taxi latency`, the demo).

use crate::verify::{Job, TopicRecord, VerifyError, WindowCount};
use crate::Ride;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

/// An input record with its append time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    /// Where it is and its value.
    pub record: TopicRecord,
    /// Its timestamp (CreateTime: when the producer appended it), ms since the epoch.
    pub timestamp: i64,
}

/// An output record with the time a read_committed reader first saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Visible {
    /// Where it is and its value.
    pub record: TopicRecord,
    /// When the tailing reader's poll handed it over, ms since the epoch.
    pub visible_at: i64,
}

/// One input partition's watermark history for the hourly job: for each record in offset
/// order, the newest event time so far (non-decreasing) and the record's append time.
#[derive(Debug, Default)]
struct History {
    newest: Vec<i64>,
    appended: Vec<i64>,
}

impl History {
    /// The append time of the first record whose newest event time reached `at_least`.
    fn first_reaching(&self, at_least: i64) -> Option<i64> {
        let i = self.newest.partition_point(|&t| t < at_least);
        self.appended.get(i).copied()
    }
}

/// The causes of a job's output records, built from its input (each partition in offset
/// order; partitions may interleave).
#[derive(Debug)]
///
/// ```
/// use onceflow_taxi::latency::{Appended, Causes, Summary, Visible};
/// use onceflow_taxi::verify::{Job, TopicRecord};
/// let ride = onceflow_taxi::generate::rides(Default::default())?.next().expect("an event");
/// let record = TopicRecord { partition: 0, offset: 0, value: Some(ride.to_json().into_bytes()) };
/// let mut causes = Causes::new(Job::Copy, 60_000);
/// causes.push(&Appended { record: record.clone(), timestamp: 1_000 })?;
/// assert_eq!(causes.cause(ride.to_json().as_bytes()), Some(1_000));
/// let seen = [Visible { record, visible_at: 1_250 }];
/// assert_eq!(
///     Summary::of(&causes, &seen).to_string(),
///     "latency: 1 results, p50 250 ms, p99 250 ms, max 250 ms"
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Causes {
    job: Job,
    out_of_orderness_ms: i64,
    /// Cleansing, copy, rides and fares: (ride id, START) → the first append time of that
    /// event.
    events: HashMap<(u64, bool), i64>,
    /// Per-driver-hourly: per input partition, its history.
    partitions: BTreeMap<i32, History>,
}

impl Causes {
    /// Causes for `job`, whose watermark trails the newest event time by
    /// `out_of_orderness_ms`.
    ///
    /// ```
    /// use onceflow_taxi::latency::Causes;
    /// use onceflow_taxi::verify::Job;
    /// let causes = Causes::new(Job::PerDriverHourly, 60_000);
    /// assert_eq!(causes.cause(b"not a window"), None);
    /// ```
    pub fn new(job: Job, out_of_orderness_ms: i64) -> Self {
        Causes {
            job,
            out_of_orderness_ms,
            events: HashMap::new(),
            partitions: BTreeMap::new(),
        }
    }

    /// Takes one input record.
    ///
    /// # Errors
    /// [`VerifyError::Input`] when the value is missing or not a ride event's JSON.
    ///
    /// ```
    /// use onceflow_taxi::latency::{Appended, Causes};
    /// use onceflow_taxi::verify::{Job, TopicRecord};
    /// let mut causes = Causes::new(Job::Cleansing, 60_000);
    /// let record = TopicRecord { partition: 3, offset: 4, value: Some(b"{}".to_vec()) };
    /// let e = causes.push(&Appended { record, timestamp: 0 }).unwrap_err();
    /// assert!(e.to_string().starts_with("input partition 3 offset 4 is not a ride event"));
    /// ```
    pub fn push(&mut self, input: &Appended) -> Result<(), VerifyError> {
        let r = &input.record;
        let bad = |reason: String| VerifyError::Input {
            partition: r.partition,
            offset: r.offset,
            reason,
        };
        let value = r
            .value
            .as_deref()
            .ok_or_else(|| bad("it has no value".into()))?;
        let ride: Ride = serde_json::from_slice(value).map_err(|e| bad(e.to_string()))?;
        match self.job {
            Job::Cleansing | Job::Copy | Job::RidesAndFares => {
                self.events
                    .entry((ride.ride_id, ride.is_start))
                    .or_insert(input.timestamp);
            }
            Job::PerDriverHourly | Job::DriverShifts | Job::HourlyTopTips => {
                let h = self.partitions.entry(r.partition).or_default();
                let newest = h
                    .newest
                    .last()
                    .map_or(ride.event_time, |&t| t.max(ride.event_time));
                h.newest.push(newest);
                h.appended.push(input.timestamp);
            }
        }
        Ok(())
    }

    /// The append time of the input record that caused the output `value`; `None` when the
    /// value is not the job's output or nothing in the input explains it.
    ///
    /// ```
    /// use onceflow_taxi::latency::{Appended, Causes};
    /// use onceflow_taxi::verify::{Job, TopicRecord};
    /// let ride = onceflow_taxi::generate::rides(Default::default())?.next().expect("an event");
    /// let mut causes = Causes::new(Job::Cleansing, 60_000);
    /// let value = Some(ride.to_json().into_bytes());
    /// let record = TopicRecord { partition: 0, offset: 0, value };
    /// causes.push(&Appended { record, timestamp: 5 })?;
    /// assert_eq!(causes.cause(ride.to_json().as_bytes()), Some(5));
    /// assert_eq!(causes.cause(b"{}"), None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cause(&self, value: &[u8]) -> Option<i64> {
        match self.job {
            Job::Cleansing | Job::Copy => {
                let ride: Ride = serde_json::from_slice(value).ok()?;
                self.events.get(&(ride.ride_id, ride.is_start)).copied()
            }
            Job::RidesAndFares => {
                let ride_id = serde_json::from_slice::<Value>(value)
                    .ok()?
                    .get("ride_id")?
                    .as_u64()?;
                self.events.get(&(ride_id, true)).copied()
            }
            Job::PerDriverHourly | Job::DriverShifts | Job::HourlyTopTips => {
                let w: WindowCount = serde_json::from_slice(value).ok()?;
                // Fires when newest − out_of_orderness ≥ end.
                let at_least = w.window_end.saturating_add(self.out_of_orderness_ms);
                self.partitions
                    .values()
                    .filter_map(|h| h.first_reaching(at_least))
                    .min()
            }
        }
    }
}

/// The latency of a set of output records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Summary {
    /// Output records whose cause was found.
    pub results: usize,
    /// Output records without a cause (not the job's output, or not explained by the input).
    pub unexplained: usize,
    /// Median latency, ms (`None` without results).
    pub p50: Option<i64>,
    /// 99th percentile, ms.
    pub p99: Option<i64>,
    /// Largest, ms.
    pub max: Option<i64>,
}

impl Summary {
    /// The latencies of `outputs` given their `causes`.
    ///
    /// ```
    /// use onceflow_taxi::latency::{Causes, Summary, Visible};
    /// use onceflow_taxi::verify::{Job, TopicRecord};
    /// let causes = Causes::new(Job::Cleansing, 60_000);
    /// let unexplained = Visible {
    ///     record: TopicRecord { partition: 0, offset: 0, value: Some(b"{}".to_vec()) },
    ///     visible_at: 0,
    /// };
    /// let summary = Summary::of(&causes, &[unexplained]);
    /// assert_eq!((summary.results, summary.unexplained, summary.p50), (0, 1, None));
    /// ```
    pub fn of(causes: &Causes, outputs: &[Visible]) -> Summary {
        let mut unexplained = 0;
        let mut ms: Vec<i64> = Vec::with_capacity(outputs.len());
        for o in outputs {
            match o.record.value.as_deref().and_then(|v| causes.cause(v)) {
                Some(cause) => ms.push(o.visible_at - cause),
                None => unexplained += 1,
            }
        }
        ms.sort_unstable();
        Summary {
            results: ms.len(),
            unexplained,
            p50: percentile(&ms, 50),
            p99: percentile(&ms, 99),
            max: ms.last().copied(),
        }
    }
}

/// `latency: N results, p50 X ms, p99 Y ms, max Z ms` (a dash for a percentile of nothing),
/// and how many output records had no cause when there were any.
impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |v: Option<i64>| v.map_or("-".to_owned(), |v| v.to_string());
        write!(
            f,
            "latency: {} results, p50 {} ms, p99 {} ms, max {} ms",
            self.results,
            ms(self.p50),
            ms(self.p99),
            ms(self.max)
        )?;
        if self.unexplained > 0 {
            write!(f, " ({} output records without a cause)", self.unexplained)?;
        }
        Ok(())
    }
}

/// The nearest-rank percentile of `sorted` (ascending): the smallest value with at least `p`
/// percent of the values at or below it. `None` when empty.
///
/// ```
/// use onceflow_taxi::latency::percentile;
/// assert_eq!(percentile(&[10, 20, 30, 40], 50), Some(20));
/// assert_eq!(percentile(&[10, 20, 30, 40], 99), Some(40));
/// assert_eq!(percentile(&[], 50), None);
/// ```
pub fn percentile(sorted: &[i64], p: u32) -> Option<i64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (sorted.len() * p.min(100) as usize).div_ceil(100).max(1);
    sorted.get(rank - 1).copied()
}

/// Wall-clock now, ms since the epoch (the clock record timestamps use).
///
/// ```
/// let now = onceflow_taxi::latency::now_ms();
/// assert!(now > 1_700_000_000_000); // after November 2023
/// ```
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::HOUR_MS;

    fn ride(ride_id: u64, is_start: bool, t: i64) -> Ride {
        Ride {
            ride_id,
            driver_id: 7,
            taxi_id: 1007,
            is_start,
            start_lon: -73.9,
            start_lat: 40.7,
            end_lon: -73.95,
            end_lat: 40.75,
            passengers: 1,
            event_time: t,
        }
    }

    fn appended(partition: i32, offset: i64, r: &Ride, timestamp: i64) -> Appended {
        Appended {
            record: TopicRecord {
                partition,
                offset,
                value: Some(r.to_json().into_bytes()),
            },
            timestamp,
        }
    }

    fn window(end: i64) -> Vec<u8> {
        serde_json::to_vec(&WindowCount {
            driver_id: 7,
            window_start: end - HOUR_MS,
            window_end: end,
            rides: 1,
            passengers: 1,
        })
        .unwrap()
    }

    #[test]
    fn percentile_is_nearest_rank() {
        let hundred: Vec<i64> = (1..=100).collect();
        for (values, p, want) in [
            (&[][..], 50, None),
            (&[5][..], 50, Some(5)),
            (&[5][..], 99, Some(5)),
            (&[1, 2][..], 50, Some(1)),
            (&[1, 2][..], 99, Some(2)),
            (&[1, 2, 3][..], 50, Some(2)),
            (&hundred[..], 50, Some(50)),
            (&hundred[..], 99, Some(99)),
            (&hundred[..], 100, Some(100)),
            (&hundred[..], 0, Some(1)),
        ] {
            assert_eq!(percentile(values, p), want, "{values:?} p{p}");
        }
    }

    /// Hourly windows: (input as (partition, event time, append time), window end,
    /// expected cause). Out-of-orderness 60 s: a window ending at E fires once an event at
    /// E + 60 s has been read.
    #[test]
    fn the_cause_of_a_window_is_the_earliest_first_record_pushing_the_watermark_past_its_end() {
        const H: i64 = HOUR_MS;
        const M: i64 = 60_000;
        type Input = &'static [(i32, i64, i64)];
        let cases: Vec<(&str, Input, i64, Option<i64>)> = vec![
            ("nothing read", &[], H, None),
            ("not reached", &[(0, H, 10), (0, H + M - 1, 20)], H, None),
            (
                "exactly reached",
                &[(0, H, 10), (0, H + M, 20), (0, H + 2 * M, 30)],
                H,
                Some(20),
            ),
            // An older event after the crossing does not move the cause.
            (
                "first, not later",
                &[(0, H + 2 * M, 10), (0, 5, 20), (0, H + 3 * M, 30)],
                H,
                Some(10),
            ),
            // Two partitions: each one's first crossing, the earlier appended one.
            (
                "earliest partition",
                &[(0, 0, 1), (1, H + M, 50), (0, H + M, 40)],
                H,
                Some(40),
            ),
            (
                "only one partition crossed",
                &[(0, 0, 1), (1, H + M, 50)],
                H,
                Some(50),
            ),
            (
                "a later window",
                &[(0, H + M, 10), (0, 2 * H + M, 90)],
                2 * H,
                Some(90),
            ),
        ];
        for (name, input, end, want) in cases {
            let mut c = Causes::new(Job::PerDriverHourly, M);
            let mut offsets: HashMap<i32, i64> = HashMap::new();
            for (i, &(p, t, ts)) in input.iter().enumerate() {
                let o = offsets.entry(p).or_default();
                c.push(&appended(p, *o, &ride(i as u64, false, t), ts))
                    .unwrap();
                *o += 1;
            }
            assert_eq!(c.cause(&window(end)), want, "{name}");
        }
    }

    #[test]
    fn the_cause_of_a_cleansed_event_is_its_input_copy() {
        let mut c = Causes::new(Job::Cleansing, 60_000);
        c.push(&appended(0, 0, &ride(1, true, 5), 100)).unwrap();
        c.push(&appended(1, 0, &ride(1, false, 9), 300)).unwrap();
        c.push(&appended(0, 1, &ride(2, true, 7), 200)).unwrap();
        for (value, want) in [
            (ride(1, true, 5).to_json(), Some(100)),
            (ride(1, false, 9).to_json(), Some(300)),
            (ride(2, true, 7).to_json(), Some(200)),
            (ride(2, false, 7).to_json(), None),
            ("not json".to_owned(), None),
        ] {
            assert_eq!(c.cause(value.as_bytes()), want, "{value}");
        }
        let bad = Appended {
            record: TopicRecord {
                partition: 3,
                offset: 4,
                value: Some(b"{}".to_vec()),
            },
            timestamp: 0,
        };
        let e = c.push(&bad).unwrap_err().to_string();
        assert!(e.starts_with("input partition 3 offset 4"), "{e}");
    }

    #[test]
    fn the_cause_of_a_ride_with_its_fare_is_its_start_event() {
        let mut c = Causes::new(Job::RidesAndFares, 60_000);
        c.push(&appended(0, 0, &ride(1, true, 5), 100)).unwrap();
        c.push(&appended(0, 1, &ride(1, false, 9), 300)).unwrap();
        for (value, want) in [
            (r#"{"ride_id":1,"driver_id":7,"tip":1.5}"#, Some(100)),
            (r#"{"ride_id":2,"driver_id":7,"tip":1.5}"#, None),
            ("not json", None),
        ] {
            assert_eq!(c.cause(value.as_bytes()), want, "{value}");
        }
    }

    #[test]
    fn the_summary_counts_results_and_unexplained_and_prints_one_line() {
        let mut c = Causes::new(Job::Cleansing, 0);
        for (i, ts) in [(1, 1000), (2, 1000), (3, 1000), (4, 1000)] {
            c.push(&appended(0, i as i64, &ride(i, true, 0), ts))
                .unwrap();
        }
        let visible = |id: u64, at: i64| Visible {
            record: TopicRecord {
                partition: 0,
                offset: id as i64,
                value: Some(ride(id, true, 0).to_json().into_bytes()),
            },
            visible_at: at,
        };
        let outputs = vec![
            visible(1, 1010),
            visible(2, 1020),
            visible(3, 1500),
            visible(4, 1030),
            visible(9, 2000),
        ];
        let s = Summary::of(&c, &outputs);
        assert_eq!(
            s,
            Summary {
                results: 4,
                unexplained: 1,
                p50: Some(20),
                p99: Some(500),
                max: Some(500)
            }
        );
        assert_eq!(
            s.to_string(),
            "latency: 4 results, p50 20 ms, p99 500 ms, max 500 ms (1 output records without a cause)"
        );
        assert_eq!(
            Summary::of(&c, &[]).to_string(),
            "latency: 0 results, p50 - ms, p99 - ms, max - ms"
        );
    }
}
