//! The verifier's pure core: the expected output of a shipped job computed in batch from its
//! input, and the comparison of that expectation with what the job wrote (missing, duplicated,
//! wrong, unexpected, out of order per key), summed up in a one-line verdict.
//!
//! **The jobs.**
//! - [`Job::Cleansing`] keeps the rides that start and end inside [`NYC`]. A job-file filter
//!   sees one event at a time; since every event carries both ends of its ride, the filter
//!   tests `start_*` AND `end_*` on each event, so both events of a ride inside the box pass
//!   and both of a ride outside are dropped. Output: the input event unchanged.
//! - [`Job::PerDriverHourly`]: per driver and event-time tumbling hour `[start, start + 1 h)`
//!   of `event_time`, the number of rides ended (END events) and the sum of their passengers,
//!   as [`WindowCount`]. A window with no END event has no output.
//! - [`Job::DriverShifts`]: per driver, its shifts as session windows over its END events'
//!   event times: drop-offs at most [`SHIFT_GAP_MS`] apart are one shift `[first, last +
//!   gap)`, with its rides and passengers, as [`WindowCount`]. A shift is required when the
//!   slowest partition's watermark has passed its end (no event still to come can reach it:
//!   a later event is newer than that watermark, so more than the gap after the shift's last).
//! - [`Job::Copy`]: every input event, unchanged, exactly once (e.g. a file source to a file
//!   sink). Its order is not checked: the file source reorders events by design (it emits
//!   them within a bounded delay, not in file order), so any order is right.
//! - [`Job::RidesAndFares`]: each START event of the rides joined with the fare of the same
//!   ride id whose event time is within [`FARE_WITHIN_MS`] of the START's (an interval join
//!   of two topics, the fares pushed with [`ExpectationBuilder::push_fare`]). Each pair is one
//!   output record, emitted as soon as both halves are in, so every pair is required: the
//!   ride's fields with `event_time` named `start_time`, and the fare's amounts. A ride
//!   without a fare in the bound has no output. Its output is keyed by ride id, so the order
//!   is checked per ride, not per driver.
//! - [`Job::HourlyTopTips`] reads the fares topic alone (its input records are [`Fare`]s):
//!   per event-time tumbling hour `[start, start + 1 h)` of `event_time`, the [`TOP_DRIVERS`]
//!   drivers with the largest sum of `tip` in it, one record each with its rank, 1 for the
//!   largest, as [`RankedTips`] (a window Top-N). A driver's sum is the exact sum of its tips
//!   rounded once to the nearest f64 (ties to even), the same in any record order; a driver
//!   with cash fares only sums to `0.0` and ranks too. Equal sums rank by the driver id's
//!   decimal text, ascending (`10` before `9`): the job breaks ties by the rest of the
//!   record's JSON text, in which only the driver id differs. An hour with no fare has no
//!   output; one with fewer drivers has fewer ranks.
//!
//! **Windows still open.** A streaming job emits a window once its watermark passes the
//! window's end, and the watermark stops with the input: the last windows never close. A
//! window is required only when even the slowest input partition's watermark (its newest
//! event time minus the out-of-orderness) has passed its end, so the window closed whether
//! the job tracks watermarks per partition or globally. Later windows are optional: absent
//! is fine, present must be right and not duplicated.
//!
//! **Identity and order.** An output record is identified by (ride id, START/END), by
//! (driver, window start), for rides-and-fares by its ride id, and for the hourly top tips by
//! (window start, rank); the key for ordering is what the job keys its output by: the driver
//! id, the ride id for rides-and-fares, or the hour's start for the hourly top tips. The
//! expected order per driver is the input's order (cleansing: the input is keyed by driver,
//! so a driver's events sit in one partition, in order) or ascending window start; per hour,
//! ascending rank. When one
//! identity is expected more than once (a ride with two fares in the bound), each output
//! record of it matches any one of the expected values not matched yet, in any order.
//!
//! Values are compared field by field as JSON: integers exactly, other numbers within 10⁻⁹
//! (a job that parses and re-prints a coordinate may differ in the last bit), and a field
//! added or dropped is a difference. The hourly top tips are the exception: their sums are
//! exact by design, so every number is compared exactly (a float bit for bit, read from the
//! output's text correctly rounded).

use crate::fare::Fare;
use crate::{Ride, NYC};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// One hour in ms: the per-driver window's size.
pub const HOUR_MS: i64 = 3_600_000;

/// The driver-shifts job's session gap: 30 minutes without a drop-off end a shift.
pub const SHIFT_GAP_MS: i64 = 30 * 60_000;

/// The rides-and-fares join's bound: a START event meets the fares of its ride whose event
/// time is at most this many ms before or after its own, both ends inclusive (the job file's
/// `join.between = ["-1m", "1m"]`).
pub const FARE_WITHIN_MS: i64 = 60_000;

/// The hourly top tips job's ranking: how many drivers an hour keeps.
pub const TOP_DRIVERS: usize = 3;

/// Coordinates may differ by this much and still count as equal.
const FLOAT_TOLERANCE: f64 = 1e-9;

/// 2⁷⁰: a tip times this is a whole number (see [`tip_units`]).
const TIP_SCALE: f64 = (1u128 << 70) as f64;

/// 2⁻⁷⁰ dollars, the unit of an exact tip sum (exact: a power of two).
const TIP_UNIT: f64 = 1.0 / TIP_SCALE;

/// The largest tip taken, in [`TIP_UNIT`]s: 2¹⁰⁰ (2³⁰ dollars, about 10⁹), far above any
/// fare, and low enough that 2²⁶ of them still sum inside an i128 (the sum is checked too).
const TIP_UNITS_MAX: f64 = (1u128 << 100) as f64;

/// A shipped job whose output can be verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Job {
    /// Keep the rides that start and end in the NYC box (`jobs/` ride cleansing).
    Cleansing,
    /// Rides and passengers per driver per event-time hour.
    PerDriverHourly,
    /// Every input event unchanged, in any order.
    Copy,
    /// Rides and passengers per driver per shift (session windows of drop-offs).
    DriverShifts,
    /// Each ride's START event joined with its fare (`jobs/rides-and-fares.toml`).
    RidesAndFares,
    /// The three drivers with the most tips per event-time hour, from the fares
    /// (`jobs/hourly-top-drivers-by-tips.toml`).
    HourlyTopTips,
}

impl Job {
    /// The job's name on the command line.
    ///
    /// ```
    /// use onceflow_taxi::verify::Job;
    /// assert_eq!(Job::PerDriverHourly.name(), "per-driver-hourly");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Job::Cleansing => "cleansing",
            Job::PerDriverHourly => "per-driver-hourly",
            Job::Copy => "copy",
            Job::DriverShifts => "driver-shifts",
            Job::RidesAndFares => "rides-and-fares",
            Job::HourlyTopTips => "hourly-top-drivers-by-tips",
        }
    }

    /// Whether the order of the job's output per key (module docs) is checked (not for
    /// [`Job::Copy`]: its file source reorders events by design).
    ///
    /// ```
    /// use onceflow_taxi::verify::Job;
    /// assert!(Job::Cleansing.checks_order());
    /// assert!(!Job::Copy.checks_order());
    /// ```
    pub fn checks_order(self) -> bool {
        self != Job::Copy
    }
}

/// The per-driver-hourly and driver-shifts jobs' output record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowCount {
    /// The driver.
    pub driver_id: u64,
    /// The window's first ms (inclusive): a multiple of an hour since the epoch, or a
    /// shift's first drop-off.
    pub window_start: i64,
    /// The window's end (exclusive): `window_start` + 1 h, or the shift's last drop-off + the
    /// gap.
    pub window_end: i64,
    /// Rides that ended in the window (END events).
    pub rides: u64,
    /// Passengers of those rides.
    pub passengers: u64,
}

/// The hourly top tips job's output record: one driver's rank in an hour.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankedTips {
    /// The driver.
    pub driver_id: u64,
    /// 1 for the largest sum of the hour, up to [`TOP_DRIVERS`] (ties: module docs).
    pub rank: u64,
    /// The sum of the driver's tips in the hour, dollars (module docs).
    pub tips: f64,
    /// The hour's first ms (inclusive): a multiple of an hour since the epoch.
    pub window_start: i64,
    /// The hour's end (exclusive): `window_start` + 1 h.
    pub window_end: i64,
}

/// What identifies an output record: the unit of missing and duplicated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RecordId {
    /// A ride event (cleansing).
    Event {
        /// The ride.
        ride_id: u64,
        /// START or END.
        is_start: bool,
    },
    /// A driver's window (per-driver-hourly).
    Window {
        /// The driver.
        driver_id: u64,
        /// The window's start, ms since the epoch.
        window_start: i64,
    },
    /// A ride's START event joined with its fare (rides-and-fares).
    Enriched {
        /// The ride.
        ride_id: u64,
    },
    /// A rank of an hour (hourly top tips).
    Rank {
        /// The hour's start, ms since the epoch.
        window_start: i64,
        /// 1 for the largest sum.
        rank: u64,
    },
}

impl fmt::Display for RecordId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordId::Event { ride_id, is_start } => write!(
                f,
                "ride {ride_id} {}",
                if *is_start { "START" } else { "END" }
            ),
            RecordId::Window {
                driver_id,
                window_start,
            } => write!(f, "driver {driver_id} window {window_start}"),
            RecordId::Enriched { ride_id } => write!(f, "ride {ride_id} with its fare"),
            RecordId::Rank { window_start, rank } => {
                write!(f, "hour {window_start} rank {rank}")
            }
        }
    }
}

/// A record read from a topic: where it was and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicRecord {
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// Value (`None`: a tombstone).
    pub value: Option<Vec<u8>>,
}

/// An input record the verifier cannot compute from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// The input record is not a ride event; the message names where it is and why.
    #[error("input partition {partition} offset {offset} is not a ride event: {reason}")]
    Input {
        /// Partition.
        partition: i32,
        /// Offset.
        offset: i64,
        /// What is wrong with it.
        reason: String,
    },
    /// A record of the fares topic that is not a fare (or one whose tip the hourly top tips
    /// cannot sum exactly), or a fare given to a job that does not join fares.
    #[error("fares partition {partition} offset {offset} is not a fare: {reason}")]
    Fare {
        /// Partition.
        partition: i32,
        /// Offset.
        offset: i64,
        /// What is wrong with it.
        reason: String,
    },
    /// A record of the late topic that the input cannot explain.
    #[error("late record at partition {partition} offset {offset}: {reason}")]
    Late {
        /// Partition.
        partition: i32,
        /// Offset.
        offset: i64,
        /// What is wrong with it.
        reason: String,
    },
}

/// One record the job should write.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpectedRecord {
    /// Its identity.
    pub id: RecordId,
    /// The driver: the ordering key of every job but [`Job::RidesAndFares`], which keys its
    /// output by ride, and [`Job::HourlyTopTips`], which keys it by hour (module docs).
    pub driver_id: u64,
    /// Its value, as JSON.
    pub value: Value,
    /// False for a window the job need not have closed yet (see the module docs).
    pub required: bool,
}

/// The job's expected output, in the expected order per driver.
#[derive(Debug, Clone, PartialEq)]
pub struct Expected {
    /// The job.
    pub job: Job,
    /// The records, each driver's in the order the job must keep.
    pub records: Vec<ExpectedRecord>,
}

/// Records by ride id, each with its position (partition, offset) in its topic.
type ByRide<T> = BTreeMap<u64, Vec<((i32, i64), T)>>;

/// Builds [`Expected`] from the input read record by record (each partition in offset order;
/// partitions may interleave), keeping only what the expectation needs.
#[derive(Debug)]
///
/// ```
/// use onceflow_taxi::verify::{ExpectationBuilder, Job, TopicRecord};
/// let mut builder = ExpectationBuilder::new(Job::Copy, 60_000);
/// for (offset, ride) in onceflow_taxi::generate::rides(Default::default())?.take(10).enumerate() {
///     let value = Some(ride.to_json().into_bytes());
///     builder.push(&TopicRecord { partition: 0, offset: offset as i64, value })?;
/// }
/// assert_eq!(builder.finish().records.len(), 10);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ExpectationBuilder {
    job: Job,
    out_of_orderness_ms: i64,
    /// Cleansing and copy: the passing events by input position.
    events: Vec<((i32, i64), Ride)>,
    /// Per-driver-hourly: (driver, window start) → (rides, passengers).
    windows: BTreeMap<(u64, i64), (u64, u64)>,
    /// The newest event time per input partition.
    newest: BTreeMap<i32, i64>,
    /// Per-driver-hourly: the END events' ride ids not yet found late.
    ends: std::collections::HashSet<u64>,
    /// Driver shifts: each driver's drop-offs (event time, passengers).
    drop_offs: BTreeMap<u64, Vec<(i64, u32)>>,
    /// Rides and fares: the START events by ride id, each with its input position.
    starts: ByRide<Ride>,
    /// Rides and fares: the fares by ride id, each with its position in the fares topic.
    fares: ByRide<Fare>,
    /// Hourly top tips: (hour start, driver) → the exact sum of the tips, in [`TIP_UNIT`]s.
    tips: BTreeMap<(i64, u64), i128>,
}

impl ExpectationBuilder {
    /// A builder for `job`, whose watermark trails the newest event time by
    /// `out_of_orderness_ms`.
    ///
    /// ```
    /// use onceflow_taxi::verify::{ExpectationBuilder, Job};
    /// let expected = ExpectationBuilder::new(Job::Cleansing, 60_000).finish();
    /// assert!(expected.records.is_empty());
    /// ```
    pub fn new(job: Job, out_of_orderness_ms: i64) -> Self {
        ExpectationBuilder {
            job,
            out_of_orderness_ms,
            events: Vec::new(),
            windows: BTreeMap::new(),
            newest: BTreeMap::new(),
            ends: std::collections::HashSet::new(),
            drop_offs: BTreeMap::new(),
            starts: BTreeMap::new(),
            fares: BTreeMap::new(),
            tips: BTreeMap::new(),
        }
    }

    /// The job whose expectation this builds.
    ///
    /// ```
    /// use onceflow_taxi::verify::{ExpectationBuilder, Job};
    /// assert_eq!(ExpectationBuilder::new(Job::HourlyTopTips, 0).job(), Job::HourlyTopTips);
    /// ```
    pub fn job(&self) -> Job {
        self.job
    }

    /// Takes one input record: a ride event, or for [`Job::HourlyTopTips`] a fare.
    ///
    /// # Errors
    /// [`VerifyError::Input`] when the value is missing or not a ride event's JSON;
    /// for [`Job::HourlyTopTips`], [`VerifyError::Fare`] when it is not a fare's JSON or its
    /// tip cannot be summed exactly (not a whole multiple of 2⁻⁷⁰ dollars, which every tip
    /// of at least 2⁻¹⁸ is, or beyond 2³⁰ dollars).
    ///
    /// ```
    /// use onceflow_taxi::verify::{ExpectationBuilder, Job, TopicRecord};
    /// let mut builder = ExpectationBuilder::new(Job::Cleansing, 60_000);
    /// let tombstone = TopicRecord { partition: 1, offset: 2, value: None };
    /// let e = builder.push(&tombstone).unwrap_err();
    /// assert_eq!(
    ///     e.to_string(),
    ///     "input partition 1 offset 2 is not a ride event: it has no value"
    /// );
    /// ```
    pub fn push(&mut self, record: &TopicRecord) -> Result<(), VerifyError> {
        if self.job == Job::HourlyTopTips {
            return self.push_tip(record);
        }
        let bad = |reason: String| VerifyError::Input {
            partition: record.partition,
            offset: record.offset,
            reason,
        };
        let value = record
            .value
            .as_deref()
            .ok_or_else(|| bad("it has no value".into()))?;
        let ride: Ride = serde_json::from_slice(value).map_err(|e| bad(e.to_string()))?;
        let newest = self.newest.entry(record.partition).or_insert(i64::MIN);
        *newest = (*newest).max(ride.event_time);
        match self.job {
            Job::Cleansing | Job::Copy => {
                if self.job == Job::Copy || ride.inside(&NYC) {
                    self.events.push(((record.partition, record.offset), ride));
                }
            }
            Job::PerDriverHourly => {
                if !ride.is_start {
                    self.ends.insert(ride.ride_id);
                    let start = ride.event_time - ride.event_time.rem_euclid(HOUR_MS);
                    let w = self.windows.entry((ride.driver_id, start)).or_default();
                    w.0 += 1;
                    w.1 += u64::from(ride.passengers);
                }
            }
            Job::DriverShifts => {
                if !ride.is_start {
                    self.drop_offs
                        .entry(ride.driver_id)
                        .or_default()
                        .push((ride.event_time, ride.passengers));
                }
            }
            Job::RidesAndFares => {
                if ride.is_start {
                    self.starts
                        .entry(ride.ride_id)
                        .or_default()
                        .push(((record.partition, record.offset), ride));
                }
            }
            // Its input records are fares, taken by `push_tip` above.
            Job::HourlyTopTips => {}
        }
        Ok(())
    }

    /// [`ExpectationBuilder::push`] for [`Job::HourlyTopTips`]: a fare's tip added to its
    /// driver's sum for its hour.
    fn push_tip(&mut self, record: &TopicRecord) -> Result<(), VerifyError> {
        let bad = |reason: String| VerifyError::Fare {
            partition: record.partition,
            offset: record.offset,
            reason,
        };
        let value = record
            .value
            .as_deref()
            .ok_or_else(|| bad("it has no value".into()))?;
        let fare: Fare = serde_json::from_slice(value).map_err(|e| bad(e.to_string()))?;
        let units = tip_units(fare.tip).ok_or_else(|| {
            bad(format!(
                "its tip {:?} cannot be summed exactly: not a whole multiple of 2^-70 dollars \
                 below 2^30 dollars (the generator's tips are whole cents)",
                fare.tip
            ))
        })?;
        let newest = self.newest.entry(record.partition).or_insert(i64::MIN);
        *newest = (*newest).max(fare.event_time);
        let sum = self
            .tips
            .entry((hour_of(fare.event_time), fare.driver_id))
            .or_default();
        *sum = sum.checked_add(units).ok_or_else(|| {
            bad(format!(
                "driver {}'s tips in its hour overflow the exact sum",
                fare.driver_id
            ))
        })?;
        Ok(())
    }

    /// Takes one record of the fares topic, the second input of [`Job::RidesAndFares`] (each
    /// partition in offset order; partitions may interleave; before or after the rides).
    ///
    /// # Errors
    /// [`VerifyError::Fare`] when the value is missing or not a fare's JSON, or when the job
    /// is not rides-and-fares (no other job has fares as a second input; the fares of
    /// [`Job::HourlyTopTips`] are its input, taken by [`ExpectationBuilder::push`]).
    ///
    /// ```
    /// use onceflow_taxi::generate::Config;
    /// use onceflow_taxi::verify::{ExpectationBuilder, Job, TopicRecord};
    /// let config = Config { rides: 10, ..Config::default() };
    /// let mut builder = ExpectationBuilder::new(Job::RidesAndFares, 60_000);
    /// for (offset, ride) in onceflow_taxi::generate::rides(config.clone())?.enumerate() {
    ///     let value = Some(ride.to_json().into_bytes());
    ///     builder.push(&TopicRecord { partition: 0, offset: offset as i64, value })?;
    /// }
    /// for (offset, fare) in onceflow_taxi::fare::fares(config)?.enumerate() {
    ///     let value = Some(fare.to_json().into_bytes());
    ///     builder.push_fare(&TopicRecord { partition: 0, offset: offset as i64, value })?;
    /// }
    /// assert_eq!(builder.finish().records.len(), 10); // every ride with its fare
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn push_fare(&mut self, record: &TopicRecord) -> Result<(), VerifyError> {
        let bad = |reason: String| VerifyError::Fare {
            partition: record.partition,
            offset: record.offset,
            reason,
        };
        if self.job == Job::HourlyTopTips {
            return Err(bad(
                "the fares are the hourly-top-drivers-by-tips job's only input: push them as \
                 its input records, not as a second input"
                    .into(),
            ));
        }
        if self.job != Job::RidesAndFares {
            return Err(bad(format!(
                "the {} job reads no fares: only rides-and-fares takes fares",
                self.job.name()
            )));
        }
        let value = record
            .value
            .as_deref()
            .ok_or_else(|| bad("it has no value".into()))?;
        let fare: Fare = serde_json::from_slice(value).map_err(|e| bad(e.to_string()))?;
        self.fares
            .entry(fare.ride_id)
            .or_default()
            .push(((record.partition, record.offset), fare));
        Ok(())
    }

    /// Takes out a record the job wrote to its `window.late_topic`: the job found it late and
    /// left it out of its windows, so the expectation does too (call after every input
    /// record is pushed).
    ///
    /// # Errors
    /// [`VerifyError::Late`] when it is not a ride END event, when the job has no window, or
    /// when the input holds no such END event for its driver and hour (a late record the job
    /// made up, or one written twice).
    ///
    /// ```
    /// use onceflow_taxi::verify::{ExpectationBuilder, Job, TopicRecord};
    /// let ride = onceflow_taxi::generate::rides(Default::default())?.next().expect("an event");
    /// let value = Some(ride.to_json().into_bytes());
    /// let record = TopicRecord { partition: 0, offset: 0, value };
    /// let mut builder = ExpectationBuilder::new(Job::Copy, 60_000);
    /// builder.push(&record)?;
    /// assert!(builder.exclude_late(&record).is_err()); // a copy has no windows: nothing is late
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn exclude_late(&mut self, record: &TopicRecord) -> Result<(), VerifyError> {
        let bad = |reason: String| VerifyError::Late {
            partition: record.partition,
            offset: record.offset,
            reason,
        };
        let ride: Ride = serde_json::from_slice(record.value.as_deref().unwrap_or_default())
            .map_err(|e| bad(format!("not a ride event: {e}")))?;
        if self.job != Job::PerDriverHourly || ride.is_start {
            return Err(bad(format!(
                "{} cannot be late: only the END events of a windowed job can",
                ride.describe()
            )));
        }
        let start = ride.event_time - ride.event_time.rem_euclid(HOUR_MS);
        let w = self
            .windows
            .get_mut(&(ride.driver_id, start))
            .filter(|w| w.0 > 0 && self.ends.remove(&ride.ride_id))
            .ok_or_else(|| {
                bad(format!(
                    "{} is not in the input (or is late twice)",
                    ride.describe()
                ))
            })?;
        w.0 -= 1;
        w.1 = w.1.saturating_sub(u64::from(ride.passengers));
        if w.0 == 0 {
            self.windows.remove(&(ride.driver_id, start));
        }
        Ok(())
    }

    /// The expectation.
    ///
    /// ```
    /// use onceflow_taxi::verify::{ExpectationBuilder, Job};
    /// assert_eq!(ExpectationBuilder::new(Job::Copy, 0).finish().job, Job::Copy);
    /// ```
    pub fn finish(mut self) -> Expected {
        let records = match self.job {
            Job::Cleansing | Job::Copy => {
                self.events.sort_by_key(|(at, _)| *at);
                self.events
                    .into_iter()
                    .map(|(_, ride)| ExpectedRecord {
                        id: RecordId::Event {
                            ride_id: ride.ride_id,
                            is_start: ride.is_start,
                        },
                        driver_id: ride.driver_id,
                        value: serde_json::to_value(&ride).unwrap_or(Value::Null),
                        required: true,
                    })
                    .collect()
            }
            Job::DriverShifts => {
                let closed_by = self.closed_by();
                shifts(self.drop_offs)
                    .into_iter()
                    .map(|w| window_record(w, closed_by))
                    .collect()
            }
            Job::RidesAndFares => joined(self.starts, self.fares),
            Job::HourlyTopTips => {
                let closed_by = self.closed_by();
                top_tips(self.tips)
                    .into_iter()
                    .map(|r| ExpectedRecord {
                        id: RecordId::Rank {
                            window_start: r.window_start,
                            rank: r.rank,
                        },
                        driver_id: r.driver_id,
                        required: r.window_end <= closed_by,
                        value: serde_json::to_value(&r).unwrap_or(Value::Null),
                    })
                    .collect()
            }
            Job::PerDriverHourly => {
                let closed_by = self.closed_by();
                self.windows
                    .into_iter()
                    .map(|((driver_id, window_start), (rides, passengers))| {
                        let w = WindowCount {
                            driver_id,
                            window_start,
                            window_end: window_start + HOUR_MS,
                            rides,
                            passengers,
                        };
                        window_record(w, closed_by)
                    })
                    .collect()
            }
        };
        Expected {
            job: self.job,
            records,
        }
    }
}

impl ExpectationBuilder {
    /// The slowest partition's watermark: every window ending by it has closed.
    fn closed_by(&self) -> i64 {
        self.newest
            .values()
            .min()
            .map_or(i64::MIN, |t| t.saturating_sub(self.out_of_orderness_ms))
    }
}

/// Each driver's drop-offs cut into shifts: sorted by time, a new shift wherever two are more
/// than [`SHIFT_GAP_MS`] apart; `[first, last + gap)`.
fn shifts(drop_offs: BTreeMap<u64, Vec<(i64, u32)>>) -> Vec<WindowCount> {
    let mut out = Vec::new();
    for (driver_id, mut times) in drop_offs {
        times.sort_unstable();
        let mut current: Option<WindowCount> = None;
        for (t, passengers) in times {
            match &mut current {
                Some(w) if t <= w.window_end => {
                    w.window_end = w.window_end.max(t + SHIFT_GAP_MS);
                    w.rides += 1;
                    w.passengers += u64::from(passengers);
                }
                _ => {
                    out.extend(current.take());
                    current = Some(WindowCount {
                        driver_id,
                        window_start: t,
                        window_end: t + SHIFT_GAP_MS,
                        rides: 1,
                        passengers: u64::from(passengers),
                    });
                }
            }
        }
        out.extend(current);
    }
    out
}

/// The start of the event-time hour of `t` (rounded down, also before the epoch).
fn hour_of(t: i64) -> i64 {
    // Saturating: an absurd event time must not overflow; its hour is then clamped.
    t.div_euclid(HOUR_MS).saturating_mul(HOUR_MS)
}

/// A tip in [`TIP_UNIT`]s (2⁻⁷⁰ dollars), exactly; `None` when it is not finite, not a whole
/// number of them, or above [`TIP_UNITS_MAX`].
///
/// Summing these integers and rounding the total once gives the exact sum of the f64 tips
/// correctly rounded, as the job's sum does, whatever the order: every f64 of at least 2⁻¹⁸
/// (a cent is 0.01) is a whole multiple of 2⁻⁷⁰, since an f64 has 53 significant bits.
fn tip_units(tip: f64) -> Option<i128> {
    // Multiplying by a power of two only moves the exponent: exact for any finite tip that
    // does not overflow, which the bound below rules out.
    let scaled = tip * TIP_SCALE;
    // `as` is exact here: a whole number below 2¹⁰⁰ in magnitude.
    (scaled.is_finite() && scaled.fract() == 0.0 && scaled.abs() <= TIP_UNITS_MAX)
        .then_some(scaled as i128)
}

/// An exact sum of tips, in [`TIP_UNIT`]s, as dollars: rounded once to the nearest f64, ties
/// to even (what Rust's i128 to f64 `as` does); the scaling by 2⁻⁷⁰ is exact.
fn tip_dollars(units: i128) -> f64 {
    units as f64 * TIP_UNIT
}

/// Each hour's ranking (hours ascending, then ranks): its drivers by their sum of tips,
/// largest first, equal sums by the driver id's decimal text ascending, at most
/// [`TOP_DRIVERS`].
fn top_tips(sums: BTreeMap<(i64, u64), i128>) -> Vec<RankedTips> {
    let mut hours: BTreeMap<i64, Vec<(f64, u64)>> = BTreeMap::new();
    for ((window_start, driver_id), units) in sums {
        hours
            .entry(window_start)
            .or_default()
            .push((tip_dollars(units), driver_id));
    }
    let mut out = Vec::new();
    for (window_start, mut drivers) in hours {
        // The job ranks the rounded sums, so two exact sums that round to the same f64 are a
        // tie; it breaks ties by the record's JSON text, which for equal tips in one hour
        // differs only in the driver id's digits.
        drivers.sort_by(|(a_tips, a_driver), (b_tips, b_driver)| {
            b_tips
                .total_cmp(a_tips)
                .then_with(|| a_driver.to_string().cmp(&b_driver.to_string()))
        });
        out.extend(
            (1..)
                .zip(drivers)
                .take(TOP_DRIVERS)
                .map(|(rank, (tips, driver_id))| RankedTips {
                    driver_id,
                    rank,
                    tips,
                    window_start,
                    window_end: window_start.saturating_add(HOUR_MS),
                }),
        );
    }
    out
}

/// The rides-and-fares join: for each ride id (ascending), each START event with each fare
/// of that ride within [`FARE_WITHIN_MS`] of it, the STARTs and the fares each in input
/// order (partition, offset), so the expectation does not depend on how partitions
/// interleaved while they were read.
fn joined(starts: ByRide<Ride>, mut fares: ByRide<Fare>) -> Vec<ExpectedRecord> {
    let mut out = Vec::new();
    for (ride_id, mut rides) in starts {
        let Some(its_fares) = fares.get_mut(&ride_id) else {
            continue;
        };
        rides.sort_by_key(|(at, _)| *at);
        its_fares.sort_by_key(|(at, _)| *at);
        for (_, ride) in &rides {
            for (_, fare) in its_fares.iter() {
                let apart = fare.event_time.saturating_sub(ride.event_time);
                if (-FARE_WITHIN_MS..=FARE_WITHIN_MS).contains(&apart) {
                    out.push(ExpectedRecord {
                        id: RecordId::Enriched { ride_id },
                        driver_id: ride.driver_id,
                        value: enriched(ride, fare),
                        required: true,
                    });
                }
            }
        }
    }
    out
}

/// The rides-and-fares output value: the job's projection of the ride and its fare (the
/// ride's `event_time` named `start_time`).
fn enriched(ride: &Ride, fare: &Fare) -> Value {
    serde_json::json!({
        "ride_id": ride.ride_id,
        "driver_id": ride.driver_id,
        "taxi_id": ride.taxi_id,
        "passengers": ride.passengers,
        "start_time": ride.event_time,
        "start_lon": ride.start_lon,
        "start_lat": ride.start_lat,
        "end_lon": ride.end_lon,
        "end_lat": ride.end_lat,
        "payment_type": fare.payment_type,
        "tip": fare.tip,
        "tolls": fare.tolls,
        "total_fare": fare.total_fare,
    })
}

/// The expected record of a window, required when it closed by `closed_by`.
fn window_record(w: WindowCount, closed_by: i64) -> ExpectedRecord {
    ExpectedRecord {
        id: RecordId::Window {
            driver_id: w.driver_id,
            window_start: w.window_start,
        },
        driver_id: w.driver_id,
        required: w.window_end <= closed_by,
        value: serde_json::to_value(&w).unwrap_or(Value::Null),
    }
}

/// The expected output of `job` for `input`.
///
/// # Errors
/// [`VerifyError::Input`] for the first input record that is not a ride event.
///
/// ```
/// use onceflow_taxi::verify::{compare, expected, Job, TopicRecord};
/// let input: Vec<TopicRecord> = onceflow_taxi::generate::rides(Default::default())?
///     .take(100)
///     .enumerate()
///     .map(|(i, r)| {
///         let value = Some(r.to_json().into_bytes());
///         TopicRecord { partition: 0, offset: i as i64, value }
///     })
///     .collect();
/// let want = expected(Job::Copy, 60_000, &input)?;
/// assert_eq!(want.records.len(), 100);
/// assert!(compare(&want, &input).is_ok()); // a copy job that wrote its input back
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn expected<'a>(
    job: Job,
    out_of_orderness_ms: i64,
    input: impl IntoIterator<Item = &'a TopicRecord>,
) -> Result<Expected, VerifyError> {
    let mut b = ExpectationBuilder::new(job, out_of_orderness_ms);
    for r in input {
        b.push(r)?;
    }
    Ok(b.finish())
}

/// How many records have one kind of fault, and the first one's description.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// How many.
    pub count: usize,
    /// The first, described for the verdict.
    pub first: Option<String>,
}

impl Tally {
    fn add(&mut self, n: usize, describe: impl FnOnce() -> String) {
        if n > 0 && self.first.is_none() {
            self.first = Some(describe());
        }
        self.count += n;
    }
}

/// The result of comparing the expectation with the job's output.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Comparison {
    /// Required records expected.
    pub expected: usize,
    /// Output records read.
    pub read: usize,
    /// Output records that are right (each expected record counted once).
    pub right: usize,
    /// Optional windows (still open at the input's end) that were absent.
    pub open_absent: usize,
    /// Expected records not in the output.
    pub missing: Tally,
    /// Extra copies of right records.
    pub duplicated: Tally,
    /// Records with an expected identity but a different value.
    pub wrong: Tally,
    /// Records that are not expected at all (unreadable, or an identity not expected).
    pub unexpected: Tally,
    /// Records that came before one of their driver's records expected earlier.
    pub out_of_order: Tally,
    /// The job's output order was not checked ([`Job::checks_order`]), so `out_of_order`
    /// stays empty.
    pub order_not_checked: bool,
}

impl Comparison {
    /// No fault of any kind.
    ///
    /// ```
    /// use onceflow_taxi::verify::{compare, expected, Job};
    /// let nothing = expected(Job::Cleansing, 0, &[])?;
    /// assert!(compare(&nothing, &[]).is_ok());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_ok(&self) -> bool {
        self.missing.count == 0
            && self.duplicated.count == 0
            && self.wrong.count == 0
            && self.unexpected.count == 0
            && self.out_of_order.count == 0
    }

    /// The one-line verdict, e.g. `verify: OK — 19734 records, no loss, no duplicates, order
    /// kept per key` or `verify: FAILED — 3 missing (first: ride 17 END), 2 duplicated (first:
    /// ride 4 START); 19731 records read, 19734 expected`. Without the order checked, the OK
    /// line ends `order not checked (the file source reorders events by design)` and the
    /// FAILED line `; order not checked`.
    ///
    /// ```
    /// use onceflow_taxi::verify::{compare, expected, Job, TopicRecord};
    /// let input: Vec<TopicRecord> = onceflow_taxi::generate::rides(Default::default())?
    ///     .take(4)
    ///     .enumerate()
    ///     .map(|(i, r)| {
    ///         let value = Some(r.to_json().into_bytes());
    ///         TopicRecord { partition: 0, offset: i as i64, value }
    ///     })
    ///     .collect();
    /// let want = expected(Job::Copy, 60_000, &input)?;
    /// let verdict = compare(&want, &input[1..]).verdict();
    /// assert!(verdict.starts_with("verify: FAILED — 1 missing"), "{verdict}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn verdict(&self) -> String {
        if self.is_ok() {
            let order = if self.order_not_checked {
                "order not checked (the file source reorders events by design)"
            } else {
                "order kept per key"
            };
            let mut s = format!(
                "verify: OK — {} records, no loss, no duplicates, {order}",
                self.right
            );
            if self.open_absent > 0 {
                s += &format!(
                    " ({} windows still open at the input's end not yet written, as allowed)",
                    self.open_absent
                );
            }
            return s;
        }
        let mut parts = Vec::new();
        for (tally, what) in [
            (&self.missing, "missing"),
            (&self.duplicated, "duplicated"),
            (&self.wrong, "wrong"),
            (&self.unexpected, "unexpected"),
            (&self.out_of_order, "out of order"),
        ] {
            if tally.count > 0 {
                let first = tally.first.as_deref().unwrap_or("?");
                parts.push(format!("{} {what} (first: {first})", tally.count));
            }
        }
        format!(
            "verify: FAILED — {}; {} records read, {} expected{}",
            parts.join(", "),
            self.read,
            self.expected,
            if self.order_not_checked {
                "; order not checked"
            } else {
                ""
            }
        )
    }
}

/// An output record parsed: its identity, driver and JSON value.
struct Parsed {
    id: RecordId,
    driver_id: u64,
    value: Value,
}

impl Parsed {
    /// The key whose records' order the job keeps (module docs), described for a verdict.
    fn order_key(&self) -> (u64, String) {
        match self.id {
            RecordId::Enriched { ride_id } => (ride_id, format!("ride {ride_id}")),
            // Reinterpreting the i64 is one to one, and a comparison has one kind of key.
            RecordId::Rank { window_start, .. } => {
                (window_start as u64, format!("hour {window_start}"))
            }
            _ => (self.driver_id, format!("driver {}", self.driver_id)),
        }
    }
}

/// What identifies a rides-and-fares output record; its other fields are only compared.
#[derive(Deserialize)]
struct EnrichedId {
    ride_id: u64,
    driver_id: u64,
}

/// What identifies an hourly top tips output record; its other fields are only compared.
#[derive(Deserialize)]
struct RankId {
    window_start: i64,
    rank: u64,
}

fn parse(job: Job, value: Option<&[u8]>) -> Result<Parsed, String> {
    let bytes = value.ok_or("no value (a tombstone)")?;
    let value: Value = serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
    match job {
        Job::Cleansing | Job::Copy => {
            let r: Ride = serde_json::from_value(value.clone())
                .map_err(|e| format!("not a ride event: {e}"))?;
            Ok(Parsed {
                id: RecordId::Event {
                    ride_id: r.ride_id,
                    is_start: r.is_start,
                },
                driver_id: r.driver_id,
                value,
            })
        }
        Job::PerDriverHourly | Job::DriverShifts => {
            let w: WindowCount = serde_json::from_value(value.clone())
                .map_err(|e| format!("not a per-driver window count: {e}"))?;
            Ok(Parsed {
                id: RecordId::Window {
                    driver_id: w.driver_id,
                    window_start: w.window_start,
                },
                driver_id: w.driver_id,
                value,
            })
        }
        Job::RidesAndFares => {
            let e: EnrichedId = serde_json::from_value(value.clone())
                .map_err(|e| format!("not a ride with its fare: {e}"))?;
            Ok(Parsed {
                id: RecordId::Enriched { ride_id: e.ride_id },
                driver_id: e.driver_id,
                value,
            })
        }
        Job::HourlyTopTips => {
            // The sums are compared bit for bit: serde_json reads floats correctly rounded
            // (its `float_roundtrip` feature, Cargo.toml).
            let r: RankId = serde_json::from_value(value.clone())
                .map_err(|e| format!("not a driver's rank by tips in an hour: {e}"))?;
            Ok(Parsed {
                id: RecordId::Rank {
                    window_start: r.window_start,
                    rank: r.rank,
                },
                // Not the ordering key (the hour is), and not required to identify the record:
                // a wrong or absent driver id is a wrong record.
                driver_id: 0,
                value,
            })
        }
    }
}

fn numbers_equal(a: &serde_json::Number, b: &serde_json::Number) -> bool {
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
        return x == y;
    }
    if let (Some(x), Some(y)) = (a.as_u64(), b.as_u64()) {
        return x == y;
    }
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => (x - y).abs() <= FLOAT_TOLERANCE,
        _ => false,
    }
}

/// Whether two numbers are the same exactly: integers equal, floats equal bit for bit, and an
/// integer equal to a float only when the float is that whole number (`30` is `30.0`).
fn numbers_exactly_equal(a: &serde_json::Number, b: &serde_json::Number) -> bool {
    let int = |n: &serde_json::Number| {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    };
    match (int(a), int(b)) {
        (Some(x), Some(y)) => x == y,
        // `as` saturates beyond i128, where no 64-bit integer is.
        (Some(i), None) => b
            .as_f64()
            .is_some_and(|f| f.fract() == 0.0 && f as i128 == i),
        (None, Some(i)) => a
            .as_f64()
            .is_some_and(|f| f.fract() == 0.0 && f as i128 == i),
        (None, None) => match (a.as_f64(), b.as_f64()) {
            (Some(x), Some(y)) => x.to_bits() == y.to_bits(),
            _ => false,
        },
    }
}

/// How a comparison takes numbers (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Numbers {
    /// Floats within [`FLOAT_TOLERANCE`].
    Tolerant,
    /// [`numbers_exactly_equal`].
    Exact,
}

impl Numbers {
    /// How `job`'s output numbers compare: exactly for the hourly top tips, whose sums are
    /// exact by design, else with the tolerance.
    fn of(job: Job) -> Numbers {
        if job == Job::HourlyTopTips {
            Numbers::Exact
        } else {
            Numbers::Tolerant
        }
    }

    fn equal(self, a: &serde_json::Number, b: &serde_json::Number) -> bool {
        match self {
            Numbers::Tolerant => numbers_equal(a, b),
            Numbers::Exact => numbers_exactly_equal(a, b),
        }
    }
}

fn values_equal(a: &Value, b: &Value, numbers: Numbers) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => numbers.equal(x, y),
        _ => a == b,
    }
}

/// The fields in which `actual` differs from `expected`, as `field got G (expected E)`;
/// empty when they match.
fn differences(expected: &Value, actual: &Value, numbers: Numbers) -> Vec<String> {
    let empty = Map::new();
    let e = expected.as_object().unwrap_or(&empty);
    let a = actual.as_object().unwrap_or(&empty);
    let mut out = Vec::new();
    for (k, ev) in e {
        match a.get(k) {
            None => out.push(format!("{k} absent (expected {ev})")),
            Some(av) if !values_equal(ev, av, numbers) => {
                out.push(format!("{k} {av} (expected {ev})"))
            }
            Some(_) => {}
        }
    }
    for (k, av) in a {
        if !e.contains_key(k) {
            out.push(format!("{k} {av} not expected"));
        }
    }
    out
}

/// Compares the job's output (`actual`, in any order: it is sorted by partition and offset)
/// with `expected`; the verdict names an output record by its partition and offset.
///
/// ```
/// use onceflow_taxi::verify::{compare, expected, Job, TopicRecord};
/// let want = expected(Job::Cleansing, 0, &[])?;
/// let stray = TopicRecord { partition: 0, offset: 0, value: Some(b"not json".to_vec()) };
/// assert_eq!(compare(&want, &[stray]).unexpected.count, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn compare(expected: &Expected, actual: &[TopicRecord]) -> Comparison {
    compare_located(expected, actual, |partition, offset| {
        format!("partition {partition} offset {offset}")
    })
}

/// [`compare`], the verdict naming an output record by `locate(partition, offset)` (e.g. a
/// file and line, for records read from files).
///
/// ```
/// use onceflow_taxi::verify::{compare_located, expected, Job, TopicRecord};
/// let want = expected(Job::Cleansing, 0, &[])?;
/// let stray = TopicRecord { partition: 2, offset: 9, value: Some(b"not json".to_vec()) };
/// let cmp = compare_located(&want, &[stray], |p, o| format!("part-{p}.jsonl line {}", o + 1));
/// assert!(cmp.verdict().contains("part-2.jsonl line 10"), "{}", cmp.verdict());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn compare_located(
    expected: &Expected,
    actual: &[TopicRecord],
    locate: impl Fn(i32, i64) -> String,
) -> Comparison {
    let mut cmp = Comparison {
        expected: expected.records.iter().filter(|r| r.required).count(),
        read: actual.len(),
        order_not_checked: !expected.job.checks_order(),
        ..Comparison::default()
    };
    // Per identity: its positions in the expectation (the first is its place in the order),
    // which of them a right record matched, and how many right and wrong copies were read.
    struct Seen {
        indices: Vec<usize>,
        matched: Vec<bool>,
        right: usize,
        wrong: usize,
        counted: bool,
    }
    let mut seen: HashMap<RecordId, Seen> = HashMap::new();
    for (index, r) in expected.records.iter().enumerate() {
        let s = seen.entry(r.id).or_insert(Seen {
            indices: Vec::new(),
            matched: Vec::new(),
            right: 0,
            wrong: 0,
            counted: false,
        });
        s.indices.push(index);
        s.matched.push(false);
    }
    let numbers = Numbers::of(expected.job);
    let mut sorted: Vec<&TopicRecord> = actual.iter().collect();
    sorted.sort_by_key(|r| (r.partition, r.offset));
    // Per ordering key: the latest expected position among its right records read so far.
    let mut latest: HashMap<u64, usize> = HashMap::new();
    for r in sorted {
        let at = || locate(r.partition, r.offset);
        let p = match parse(expected.job, r.value.as_deref()) {
            Ok(p) => p,
            Err(why) => {
                cmp.unexpected.add(1, || format!("{}: {why}", at()));
                continue;
            }
        };
        let Some(s) = seen.get_mut(&p.id) else {
            cmp.unexpected.add(1, || {
                format!("{} at {}, which the job should not write", p.id, at())
            });
            continue;
        };
        // The expected values of this identity the record equals: the first not matched yet
        // makes it right; equal only to matched ones, it is a duplicate; equal to none, wrong.
        let equal: Vec<usize> = (0..s.indices.len())
            .filter(|&i| {
                differences(&expected.records[s.indices[i]].value, &p.value, numbers).is_empty()
            })
            .collect();
        if equal.is_empty() {
            s.wrong += 1;
            let diff = differences(&expected.records[s.indices[0]].value, &p.value, numbers);
            cmp.wrong
                .add(1, || format!("{} at {}: {}", p.id, at(), diff.join(", ")));
            continue;
        }
        let Some(&free) = equal.iter().find(|&&i| !s.matched[i]) else {
            cmp.duplicated
                .add(1, || format!("{} again at {}", p.id, at()));
            continue;
        };
        s.matched[free] = true;
        s.right += 1;
        cmp.right += 1;
        // Order per key: a record whose expected position is before that of an earlier
        // record of the same key was written out of order. An identity's place is its first
        // position, so its copies (several fares of one ride) may come in any order among
        // themselves, and a duplicate is not also an order violation.
        let index = s.indices[0];
        if s.right == 1 && !cmp.order_not_checked {
            let (key, key_name) = p.order_key();
            match latest.get(&key) {
                Some(&before) if before > index => {
                    let earlier = expected.records[before].id;
                    cmp.out_of_order.add(1, || {
                        format!("{key_name}: {} at {} after {earlier}", p.id, at())
                    });
                }
                _ => {
                    latest.insert(key, index);
                }
            }
        }
    }
    // Missing, in expected order (the first named is the earliest expected).
    for r in &expected.records {
        let Some(s) = seen.get_mut(&r.id) else {
            continue;
        };
        if s.counted {
            continue; // already counted under another copy of the id
        }
        let absent = s.indices.len().saturating_sub(s.right + s.wrong);
        if r.required {
            cmp.missing.add(absent, || r.id.to_string());
        } else {
            cmp.open_absent += absent;
        }
        s.counted = true;
    }
    cmp
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::{self, Config};

    fn ride(ride_id: u64, driver: u64, is_start: bool, inside: bool, t: i64, p: u32) -> Ride {
        Ride {
            ride_id,
            driver_id: driver,
            taxi_id: 1000 + driver,
            is_start,
            start_lon: -73.9,
            start_lat: 40.7,
            end_lon: if inside { -73.95 } else { -74.2 },
            end_lat: 40.75,
            passengers: p,
            event_time: t,
        }
    }

    fn rec(partition: i32, offset: i64, value: &str) -> TopicRecord {
        TopicRecord {
            partition,
            offset,
            value: Some(value.as_bytes().to_vec()),
        }
    }

    /// Input records for rides, one partition per driver (as keying by driver would).
    fn input(rides: &[Ride]) -> Vec<TopicRecord> {
        let mut next: HashMap<u64, i64> = HashMap::new();
        rides
            .iter()
            .map(|r| {
                let o = next.entry(r.driver_id).or_default();
                *o += 1;
                rec(r.driver_id as i32, *o - 1, &r.to_json())
            })
            .collect()
    }

    /// The expected records written as a job would: each driver's to its own partition.
    fn written(e: &Expected) -> Vec<TopicRecord> {
        let mut next: HashMap<u64, i64> = HashMap::new();
        e.records
            .iter()
            .filter(|r| r.required)
            .map(|r| {
                let o = next.entry(r.driver_id).or_default();
                *o += 1;
                rec(r.driver_id as i32, *o - 1, &r.value.to_string())
            })
            .collect()
    }

    fn sample() -> Vec<Ride> {
        vec![
            ride(1, 1, true, true, 1_000, 2),
            ride(2, 2, true, false, 2_000, 1),
            ride(1, 1, false, true, 5_000, 2),
            ride(3, 1, true, true, 6_000, 3),
            ride(2, 2, false, false, 7_000, 1),
            ride(3, 1, false, true, HOUR_MS + 10, 3),
            ride(4, 2, true, true, 3 * HOUR_MS, 4),
        ]
    }

    #[test]
    fn cleansing_keeps_both_events_of_rides_inside_the_box_in_input_order() {
        let e = expected(Job::Cleansing, 60_000, &input(&sample())).unwrap();
        let ids: Vec<String> = e.records.iter().map(|r| r.id.to_string()).collect();
        assert_eq!(
            ids,
            [
                "ride 1 START",
                "ride 1 END",
                "ride 3 START",
                "ride 3 END",
                "ride 4 START"
            ]
        );
        assert!(e.records.iter().all(|r| r.required));
        assert_eq!(
            e.records[0].value,
            serde_json::to_value(&sample()[0]).unwrap()
        );
    }

    #[test]
    fn per_driver_hourly_counts_ended_rides_and_passengers_per_hour() {
        let e = expected(Job::PerDriverHourly, 60_000, &input(&sample())).unwrap();
        let got: Vec<(WindowCount, bool)> = e
            .records
            .iter()
            .map(|r| (serde_json::from_value(r.value.clone()).unwrap(), r.required))
            .collect();
        let w = |driver_id, start: i64, rides, passengers| WindowCount {
            driver_id,
            window_start: start,
            window_end: start + HOUR_MS,
            rides,
            passengers,
        };
        // Partition 1 (driver 1) reaches 1 h + 10 ms, partition 2 (driver 2) 3 h: the slowest
        // watermark is 1 h + 10 ms − 60 s, so only windows ending by then are required — none.
        assert_eq!(
            got,
            [
                (w(1, 0, 1, 2), false),
                (w(1, HOUR_MS, 1, 3), false),
                (w(2, 0, 1, 1), false)
            ]
        );
        // With no out-of-orderness, the first hour has closed everywhere.
        let e = expected(Job::PerDriverHourly, 0, &input(&sample())).unwrap();
        let required: Vec<bool> = e.records.iter().map(|r| r.required).collect();
        assert_eq!(required, [true, false, true]);
    }

    #[test]
    fn a_late_record_leaves_the_expectation_and_one_the_input_cannot_explain_is_named() {
        // Driver 1: two ENDs in the first hour (2 + 3 passengers), one of them late.
        let late = ride(2, 1, false, true, 20, 3);
        let rides = [ride(1, 1, false, true, 10, 2), late.clone()];
        let mut b = ExpectationBuilder::new(Job::PerDriverHourly, 0);
        for r in input(&rides) {
            b.push(&r).unwrap();
        }
        b.exclude_late(&rec(0, 0, &late.to_json())).unwrap();
        let again = b.exclude_late(&rec(0, 1, &late.to_json())).unwrap_err();
        assert_eq!(
            again.to_string(),
            "late record at partition 0 offset 1: ride 2 END is not in the input (or is late twice)"
        );
        let start = ride(3, 1, true, true, 5, 1);
        assert!(b.exclude_late(&rec(0, 2, &start.to_json())).is_err());
        let e = b.finish();
        let got: Vec<WindowCount> = e
            .records
            .iter()
            .map(|r| serde_json::from_value(r.value.clone()).unwrap())
            .collect();
        assert_eq!((got[0].rides, got[0].passengers), (1, 2));
        // Every END of a window late: the window is not expected at all.
        let mut b = ExpectationBuilder::new(Job::PerDriverHourly, 0);
        for r in input(std::slice::from_ref(&late)) {
            b.push(&r).unwrap();
        }
        b.exclude_late(&rec(0, 0, &late.to_json())).unwrap();
        assert!(b.finish().records.is_empty());
    }

    #[test]
    fn an_input_record_that_is_not_a_ride_is_named() {
        let e = expected(Job::Cleansing, 0, &[rec(2, 7, "{\"ride_id\":1}")]).unwrap_err();
        let s = e.to_string();
        assert!(
            s.starts_with("input partition 2 offset 7 is not a ride event"),
            "{s}"
        );
        let tomb = TopicRecord {
            partition: 0,
            offset: 0,
            value: None,
        };
        assert!(expected(Job::Cleansing, 0, &[tomb]).is_err());
    }

    /// One verdict per kind of fault: (what the job wrote, the verdict's expected text).
    #[test]
    fn each_kind_of_fault_has_its_verdict() {
        let e = expected(Job::Cleansing, 60_000, &input(&sample())).unwrap();
        let good = written(&e);
        let with_value = |mut r: TopicRecord, v: &str| {
            r.value = Some(v.as_bytes().to_vec());
            r
        };
        let mut changed = sample()[2].clone();
        changed.passengers = 5;
        let cases: Vec<(&str, Vec<TopicRecord>, &str)> = vec![
            (
                "exact",
                good.clone(),
                "verify: OK — 5 records, no loss, no duplicates, order kept per key",
            ),
            (
                "missing",
                good[1..].to_vec(),
                "verify: FAILED — 1 missing (first: ride 1 START); 4 records read, 5 expected",
            ),
            (
                "duplicated",
                [good.clone(), vec![rec(9, 0, &sample()[3].to_json())]].concat(),
                "verify: FAILED — 1 duplicated (first: ride 3 START again at partition 9 offset 0); \
                 6 records read, 5 expected",
            ),
            (
                "wrong",
                vec![
                    good[0].clone(),
                    with_value(good[1].clone(), &changed.to_json()),
                    good[2].clone(),
                    good[3].clone(),
                    good[4].clone(),
                ],
                "verify: FAILED — 1 wrong (first: ride 1 END at partition 1 offset 1: \
                 passengers 5 (expected 2)); 5 records read, 5 expected",
            ),
            (
                "unexpected",
                [
                    good.clone(),
                    vec![rec(9, 0, &sample()[1].to_json()), rec(9, 1, "nope")],
                ]
                .concat(),
                "verify: FAILED — 2 unexpected (first: ride 2 START at partition 9 offset 0, \
                 which the job should not write); 7 records read, 5 expected",
            ),
            (
                "out of order",
                vec![
                    with_value(good[0].clone(), &sample()[2].to_json()),
                    with_value(good[1].clone(), &sample()[0].to_json()),
                    good[2].clone(),
                    good[3].clone(),
                    good[4].clone(),
                ],
                "verify: FAILED — 1 out of order (first: driver 1: ride 1 START at partition 1 \
                 offset 1 after ride 1 END); 5 records read, 5 expected",
            ),
        ];
        for (name, actual, verdict) in cases {
            let c = compare(&e, &actual);
            assert_eq!(c.verdict(), verdict, "{name}");
            assert_eq!(c.is_ok(), name == "exact", "{name}");
        }
    }

    /// Copy: every input event, inside the box or not, once; any order is right, and the
    /// verdict says the order was not checked.
    #[test]
    fn copy_expects_every_event_once_in_any_order() {
        let e = expected(Job::Copy, 60_000, &input(&sample())).unwrap();
        // Every event, in input order: driver 1's partition, then driver 2's.
        let ids: Vec<String> = e.records.iter().map(|r| r.id.to_string()).collect();
        assert_eq!(
            ids,
            [
                "ride 1 START",
                "ride 1 END",
                "ride 3 START",
                "ride 3 END",
                "ride 2 START",
                "ride 2 END",
                "ride 4 START"
            ]
        );
        let good = written(&e);
        // Everything in one partition, reversed: every driver's order broken.
        let one_partition_reversed = |records: &[TopicRecord]| -> Vec<TopicRecord> {
            records
                .iter()
                .rev()
                .enumerate()
                .map(|(i, r)| TopicRecord {
                    partition: 0,
                    offset: i as i64,
                    value: r.value.clone(),
                })
                .collect()
        };
        let reversed = one_partition_reversed(&good);
        let cases: Vec<(&str, Vec<TopicRecord>, &str)> = vec![
            (
                "exact",
                good.clone(),
                "verify: OK — 7 records, no loss, no duplicates, order not checked (the file \
                 source reorders events by design)",
            ),
            (
                "reversed",
                reversed.clone(),
                "verify: OK — 7 records, no loss, no duplicates, order not checked (the file \
                 source reorders events by design)",
            ),
            (
                "missing",
                reversed[1..].to_vec(),
                "verify: FAILED — 1 missing (first: ride 4 START); 6 records read, 7 expected; \
                 order not checked",
            ),
            (
                "duplicated",
                [reversed.clone(), vec![rec(1, 0, &sample()[1].to_json())]].concat(),
                "verify: FAILED — 1 duplicated (first: ride 2 START again at partition 1 offset \
                 0); 8 records read, 7 expected; order not checked",
            ),
        ];
        for (name, actual, verdict) in cases {
            let c = compare(&e, &actual);
            assert_eq!(c.verdict(), verdict, "{name}");
            assert_eq!(c.is_ok(), verdict.starts_with("verify: OK"), "{name}");
        }
        // The same reversed output is out of order for cleansing-like checks.
        let e = expected(Job::Cleansing, 60_000, &input(&sample())).unwrap();
        let c = compare(&e, &one_partition_reversed(&written(&e)));
        assert!(c.out_of_order.count > 0, "{}", c.verdict());
        // A copy has no window, so no record of it can be late.
        let mut b = ExpectationBuilder::new(Job::Copy, 0);
        for r in input(&sample()) {
            b.push(&r).unwrap();
        }
        assert!(b.exclude_late(&rec(0, 0, &sample()[2].to_json())).is_err());
        assert_eq!(
            (Job::Copy.name(), Job::Copy.checks_order()),
            ("copy", false)
        );
    }

    #[test]
    fn compare_located_names_records_by_the_given_location() {
        let e = expected(Job::Cleansing, 60_000, &input(&sample())).unwrap();
        let mut actual = written(&e);
        actual.push(rec(1, 9, "nope"));
        let c = compare_located(&e, &actual, |p, o| format!("file{p}.jsonl line {}", o + 1));
        assert!(
            c.verdict()
                .contains("1 unexpected (first: file1.jsonl line 10: not JSON"),
            "{}",
            c.verdict()
        );
    }

    #[test]
    fn missing_and_duplicated_together_name_both() {
        let e = expected(Job::Cleansing, 60_000, &input(&sample())).unwrap();
        let good = written(&e);
        // Drop ride 3 END (partition 1, offset 3) and write ride 4 START twice.
        let mut actual: Vec<TopicRecord> = good
            .iter()
            .filter(|r| (r.partition, r.offset) != (1, 3))
            .cloned()
            .collect();
        actual.push(rec(2, 1, &sample()[6].to_json()));
        let c = compare(&e, &actual);
        assert_eq!(
            c.verdict(),
            "verify: FAILED — 1 missing (first: ride 3 END), 1 duplicated (first: ride 4 START \
             again at partition 2 offset 1); 5 records read, 5 expected"
        );
    }

    #[test]
    fn a_reprinted_coordinate_or_integer_float_still_matches_but_an_added_field_does_not() {
        let e = expected(Job::Cleansing, 0, &input(&sample()[..1])).unwrap();
        let mut v = serde_json::to_value(&sample()[0]).unwrap();
        v["start_lon"] = serde_json::json!(-73.9 + 1e-12);
        let c = compare(&e, &[rec(1, 0, &v.to_string())]);
        assert!(c.is_ok(), "{}", c.verdict());
        // A float field printed as an integer (-74.0 as -74) is the same number.
        let n = |v: Value| v.as_number().cloned().unwrap();
        assert!(numbers_equal(
            &n(serde_json::json!(-74)),
            &n(serde_json::json!(-74.0))
        ));
        assert!(!numbers_equal(
            &n(serde_json::json!(3)),
            &n(serde_json::json!(4))
        ));
        v["extra"] = serde_json::json!(1);
        let c = compare(&e, &[rec(1, 0, &v.to_string())]);
        assert!(
            c.verdict().contains(
                "1 wrong (first: ride 1 START at partition 1 offset 0: extra 1 not expected)"
            ),
            "{}",
            c.verdict()
        );
    }

    #[test]
    fn open_windows_may_be_absent_but_not_wrong() {
        let e = expected(Job::PerDriverHourly, 0, &input(&sample())).unwrap();
        // Only the two required windows written: OK, the open one is mentioned.
        let c = compare(&e, &written(&e));
        assert_eq!(
            c.verdict(),
            "verify: OK — 2 records, no loss, no duplicates, order kept per key (1 windows still \
             open at the input's end not yet written, as allowed)"
        );
        // The open window written with a wrong count is wrong.
        let mut open: WindowCount = serde_json::from_value(e.records[1].value.clone()).unwrap();
        open.rides = 9;
        let mut actual = written(&e);
        actual.push(rec(1, 9, &serde_json::to_string(&open).unwrap()));
        let c = compare(&e, &actual);
        assert_eq!(c.wrong.count, 1, "{}", c.verdict());
        assert!(
            c.verdict().contains("rides 9 (expected 1)"),
            "{}",
            c.verdict()
        );
        // Windows written out of order per driver.
        let all: Vec<TopicRecord> = e
            .records
            .iter()
            .rev()
            .enumerate()
            .map(|(i, r)| rec(0, i as i64, &r.value.to_string()))
            .collect();
        let c = compare(&e, &all);
        assert_eq!(c.out_of_order.count, 1, "{}", c.verdict());
    }

    #[test]
    fn an_empty_expectation_and_output_is_ok() {
        let e = expected(Job::Cleansing, 0, &[]).unwrap();
        assert_eq!(
            compare(&e, &[]).verdict(),
            "verify: OK — 0 records, no loss, no duplicates, order kept per key"
        );
    }

    /// The generator's data through the cleansing expectation: about 90 % of the rides kept,
    /// both events each, and the exact output verifies.
    #[test]
    fn generated_rides_verify_against_their_own_expected_output() {
        let events: Vec<Ride> = generate::rides(Config {
            rides: 2000,
            drivers: 20,
            ..Config::default()
        })
        .unwrap()
        .collect();
        let inp = input(&events);
        for job in [Job::Cleansing, Job::PerDriverHourly] {
            let e = expected(job, 60_000, &inp).unwrap();
            let c = compare(&e, &written(&e));
            assert!(c.is_ok(), "{}: {}", job.name(), c.verdict());
        }
        let e = expected(Job::Cleansing, 60_000, &inp).unwrap();
        assert!(
            (3400..=3800).contains(&e.records.len()),
            "{}",
            e.records.len()
        );
    }

    /// Three hours of pick-ups (drop-offs until 3 h 45 min): the windows of the first three
    /// hours are required, they sum up to every ride ended in them, and dropping one is
    /// missing.
    #[test]
    fn hours_of_generated_rides_give_required_windows() {
        let events: Vec<Ride> = generate::rides(Config {
            rides: 3 * 3600,
            rides_per_second: 1,
            drivers: 5,
            shift_ms: HOUR_MS,
            shift_period_ms: HOUR_MS,
            ..Config::default()
        })
        .unwrap()
        .collect();
        let e = expected(Job::PerDriverHourly, 60_000, &input(&events)).unwrap();
        let windows: Vec<(WindowCount, bool)> = e
            .records
            .iter()
            .map(|r| (serde_json::from_value(r.value.clone()).unwrap(), r.required))
            .collect();
        let first_hour = generate::DEFAULT_START_MS;
        let required: Vec<&WindowCount> = windows
            .iter()
            .filter(|(_, req)| *req)
            .map(|(w, _)| w)
            .collect();
        assert_eq!(required.len(), 15, "5 drivers × the first 3 hours");
        assert!(required
            .iter()
            .all(|w| w.window_start < first_hour + 3 * HOUR_MS));
        let ended_in_first_three = events
            .iter()
            .filter(|r| !r.is_start && r.event_time < first_hour + 3 * HOUR_MS)
            .count() as u64;
        assert_eq!(
            required.iter().map(|w| w.rides).sum::<u64>(),
            ended_in_first_three
        );
        let mut actual = written(&e);
        assert!(compare(&e, &actual).is_ok());
        actual.remove(0);
        let c = compare(&e, &actual);
        assert!(
            c.verdict().starts_with(
                "verify: FAILED — 1 missing (first: driver 2013000000 window 1735689600000)"
            ),
            "{}",
            c.verdict()
        );
    }

    fn fare(ride_id: u64, t: i64, tip: f64) -> Fare {
        Fare {
            ride_id,
            taxi_id: 1000 + ride_id,
            driver_id: ride_id,
            payment_type: "CARD".into(),
            tip,
            tolls: 0.0,
            total_fare: 12.5 + tip,
            event_time: t,
        }
    }

    /// Fares topic records, partitioned by ride id (the generator keys fares by it).
    fn fares_input(fares: &[Fare]) -> Vec<TopicRecord> {
        let mut next: HashMap<u64, i64> = HashMap::new();
        fares
            .iter()
            .map(|f| {
                let p = f.ride_id % 3;
                let o = next.entry(p).or_default();
                *o += 1;
                rec(p as i32, *o - 1, &f.to_json())
            })
            .collect()
    }

    /// The rides-and-fares expectation of `rides` and `fares`.
    fn joined_expected(rides: &[Ride], fares: &[Fare]) -> Expected {
        let mut b = ExpectationBuilder::new(Job::RidesAndFares, 60_000);
        for r in input(rides) {
            b.push(&r).unwrap();
        }
        for f in fares_input(fares) {
            b.push_fare(&f).unwrap();
        }
        b.finish()
    }

    /// The expected records written as the job writes them: keyed by ride id, so a driver's
    /// records spread over partitions.
    fn written_by_ride(e: &Expected) -> Vec<TopicRecord> {
        let mut next: HashMap<u64, i64> = HashMap::new();
        e.records
            .iter()
            .map(|r| {
                let RecordId::Enriched { ride_id } = r.id else {
                    panic!("not a joined record: {}", r.id);
                };
                let p = ride_id % 4;
                let o = next.entry(p).or_default();
                *o += 1;
                rec(p as i32, *o - 1, &r.value.to_string())
            })
            .collect()
    }

    /// The generator's rides and fares: every ride joined with its fare once, the value the
    /// job's projection, and the exact output (keyed by ride id) verifies.
    #[test]
    fn generated_rides_and_fares_verify_against_their_own_expected_output() {
        let config = Config {
            rides: 2000,
            drivers: 20,
            ..Config::default()
        };
        let rides: Vec<Ride> = generate::rides(config.clone()).unwrap().collect();
        let fares: Vec<Fare> = crate::fare::fares(config).unwrap().collect();
        let e = joined_expected(&rides, &fares);
        assert_eq!(e.records.len(), 2000);
        assert!(e.records.iter().all(|r| r.required));
        let ids: Vec<u64> = e
            .records
            .iter()
            .map(|r| match r.id {
                RecordId::Enriched { ride_id } => ride_id,
                _ => panic!("{}", r.id),
            })
            .collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "sorted by ride id");
        let start = rides.iter().find(|r| r.is_start).unwrap();
        let its_fare = fares.iter().find(|f| f.ride_id == start.ride_id).unwrap();
        let record = e
            .records
            .iter()
            .find(|r| {
                r.id == RecordId::Enriched {
                    ride_id: start.ride_id,
                }
            })
            .unwrap();
        assert_eq!(record.driver_id, start.driver_id);
        assert_eq!(
            record.id.to_string(),
            format!("ride {} with its fare", start.ride_id)
        );
        assert_eq!(
            record.value,
            serde_json::json!({
                "ride_id": start.ride_id, "driver_id": start.driver_id, "taxi_id": start.taxi_id,
                "passengers": start.passengers, "start_time": start.event_time,
                "start_lon": start.start_lon, "start_lat": start.start_lat,
                "end_lon": start.end_lon, "end_lat": start.end_lat,
                "payment_type": its_fare.payment_type, "tip": its_fare.tip,
                "tolls": its_fare.tolls, "total_fare": its_fare.total_fare,
            })
        );
        assert!(record.value["start_time"].is_i64() && record.value["passengers"].is_u64());
        let c = compare(&e, &written_by_ride(&e));
        assert_eq!(
            c.verdict(),
            "verify: OK — 2000 records, no loss, no duplicates, order kept per key"
        );
        // The fares pushed before the rides give the same expectation.
        let mut b = ExpectationBuilder::new(Job::RidesAndFares, 60_000);
        for f in fares_input(&fares) {
            b.push_fare(&f).unwrap();
        }
        for r in input(&rides) {
            b.push(&r).unwrap();
        }
        assert_eq!(b.finish(), e);
        assert_eq!(
            (Job::RidesAndFares.name(), Job::RidesAndFares.checks_order()),
            ("rides-and-fares", true)
        );
    }

    #[test]
    fn a_ride_without_a_fare_has_no_expected_record() {
        // Rides 1 and 3 have a fare, ride 2 none; a fare without a ride (9) joins nothing.
        let fares = [
            fare(1, 1_000, 1.0),
            fare(3, 6_000, 0.0),
            fare(9, 6_000, 0.0),
        ];
        let e = joined_expected(&sample(), &fares);
        let ids: Vec<String> = e.records.iter().map(|r| r.id.to_string()).collect();
        assert_eq!(ids, ["ride 1 with its fare", "ride 3 with its fare"]);
        // Ride 2 written anyway is not expected.
        let mut actual = written_by_ride(&e);
        let mut extra = e.records[0].value.clone();
        extra["ride_id"] = serde_json::json!(2);
        actual.push(rec(7, 0, &extra.to_string()));
        assert_eq!(
            compare(&e, &actual).verdict(),
            "verify: FAILED — 1 unexpected (first: ride 2 with its fare at partition 7 offset \
             0, which the job should not write); 3 records read, 2 expected"
        );
    }

    #[test]
    fn a_fare_outside_the_bound_is_not_joined() {
        // Ride 1 starts at 1 000, ride 3 at 6 000, ride 4 at 3 h, ride 2 at 2 000.
        let fares = [
            fare(1, 1_000 + FARE_WITHIN_MS, 1.0), // the bound's upper end: joined
            fare(3, 6_000 + FARE_WITHIN_MS + 1, 2.0), // 1 ms after it: not
            fare(4, 3 * HOUR_MS - FARE_WITHIN_MS, 3.0), // the lower end: joined
            fare(2, 2_000 - FARE_WITHIN_MS - 1, 4.0), // 1 ms before it: not
        ];
        let e = joined_expected(&sample(), &fares);
        let ids: Vec<String> = e.records.iter().map(|r| r.id.to_string()).collect();
        assert_eq!(ids, ["ride 1 with its fare", "ride 4 with its fare"]);
        // A ride with two fares in the bound: a record each, matched in either order.
        let two = [fare(1, 0, 1.0), fare(1, 2_000, 2.0)];
        let e = joined_expected(&sample(), &two);
        assert_eq!(e.records.len(), 2);
        let mut actual = written_by_ride(&e);
        actual.reverse();
        for (i, r) in actual.iter_mut().enumerate() {
            r.offset = i as i64;
        }
        let c = compare(&e, &actual);
        assert!(c.is_ok(), "{}", c.verdict());
        // The same fare twice instead: one duplicated, one missing.
        let c = compare(
            &e,
            &[
                actual[0].clone(),
                rec(1, 5, &e.records[1].value.to_string()),
            ],
        );
        assert_eq!(
            (c.duplicated.count, c.missing.count),
            (1, 1),
            "{}",
            c.verdict()
        );
    }

    #[test]
    fn a_duplicated_rides_and_fares_record_is_reported_as_duplicated() {
        let fares = [
            fare(1, 1_000, 1.0),
            fare(3, 6_000, 0.0),
            fare(4, 3 * HOUR_MS, 2.5),
        ];
        let e = joined_expected(&sample(), &fares);
        let good = written_by_ride(&e);
        let again = rec(9, 0, &e.records[1].value.to_string());
        let c = compare(&e, &[good.clone(), vec![again]].concat());
        assert_eq!(
            c.verdict(),
            "verify: FAILED — 1 duplicated (first: ride 3 with its fare again at partition 9 \
             offset 0); 4 records read, 3 expected"
        );
        // A changed amount is wrong, named by its field.
        let mut changed = e.records[2].value.clone();
        changed["tip"] = serde_json::json!(3.0);
        let c = compare(
            &e,
            &[
                good[0].clone(),
                good[1].clone(),
                rec(0, 9, &changed.to_string()),
            ],
        );
        assert!(
            c.verdict()
                .contains("1 wrong (first: ride 4 with its fare at partition 0 offset 9: tip 3.0 (expected 2.5))"),
            "{}",
            c.verdict()
        );
    }

    #[test]
    fn a_fares_record_that_is_not_a_fare_is_named() {
        let mut b = ExpectationBuilder::new(Job::RidesAndFares, 60_000);
        let e = b.push_fare(&rec(2, 7, "{\"ride_id\":1}")).unwrap_err();
        let s = e.to_string();
        assert!(
            s.starts_with("fares partition 2 offset 7 is not a fare: missing field"),
            "{s}"
        );
        let tomb = TopicRecord {
            partition: 0,
            offset: 3,
            value: None,
        };
        assert_eq!(
            b.push_fare(&tomb).unwrap_err().to_string(),
            "fares partition 0 offset 3 is not a fare: it has no value"
        );
        // Only rides-and-fares takes fares.
        let mut b = ExpectationBuilder::new(Job::Cleansing, 60_000);
        let e = b
            .push_fare(&rec(0, 0, &fare(1, 0, 0.0).to_json()))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "fares partition 0 offset 0 is not a fare: the cleansing job reads no fares: only \
             rides-and-fares takes fares"
        );
    }

    /// A fare of `driver_id` at `t`: by card with `tip`, or in cash when `tip` is 0.
    fn tip_fare(ride_id: u64, driver_id: u64, t: i64, tip: f64) -> Fare {
        Fare {
            ride_id,
            taxi_id: 1000 + driver_id,
            driver_id,
            payment_type: if tip == 0.0 { "CASH" } else { "CARD" }.into(),
            tip,
            tolls: 0.0,
            total_fare: 10.0 + tip,
            event_time: t,
        }
    }

    /// The hourly top tips expectation of fares, each given with its input partition.
    fn top_tips_expected(fares: &[(i32, Fare)], out_of_orderness_ms: i64) -> Expected {
        let mut next: HashMap<i32, i64> = HashMap::new();
        let mut b = ExpectationBuilder::new(Job::HourlyTopTips, out_of_orderness_ms);
        for (p, f) in fares {
            let o = next.entry(*p).or_default();
            *o += 1;
            b.push(&rec(*p, *o - 1, &f.to_json())).unwrap();
        }
        b.finish()
    }

    /// The required expected records written as the job writes them: keyed by the hour, so
    /// an hour's ranks sit in one partition (here the hour's number modulo 2), in rank order.
    fn written_by_hour(e: &Expected) -> Vec<TopicRecord> {
        let mut next: HashMap<i32, i64> = HashMap::new();
        e.records
            .iter()
            .filter(|r| r.required)
            .map(|r| {
                let RecordId::Rank { window_start, .. } = r.id else {
                    panic!("not a rank: {}", r.id);
                };
                let p = window_start.div_euclid(HOUR_MS).rem_euclid(2) as i32;
                let o = next.entry(p).or_default();
                *o += 1;
                rec(p, *o - 1, &r.value.to_string())
            })
            .collect()
    }

    /// A rank record as the job writes it.
    fn ranked(driver_id: u64, rank: u64, tips: f64, window_start: i64) -> Value {
        serde_json::json!({"driver_id": driver_id, "rank": rank, "tips": tips,
                           "window_start": window_start, "window_end": window_start + HOUR_MS})
    }

    /// Two hours of fares on two partitions, and a third hour that is still open: hour 0 has
    /// a tie (drivers 10 and 9) and a fourth driver left out, hour 1 a cash-only driver.
    fn two_hours_of_fares() -> Vec<(i32, Fare)> {
        let h = HOUR_MS;
        vec![
            (0, tip_fare(1, 7, 1_000, 5.25)),
            (1, tip_fare(2, 10, 2_000, 3.0)),
            (0, tip_fare(3, 9, 3_000, 1.0)),
            (1, tip_fare(4, 4, 4_000, 1.0)),
            (1, tip_fare(5, 7, h - 1, 2.5)),
            (0, tip_fare(6, 9, 10_000, 2.0)),
            (0, tip_fare(7, 7, h, 0.0)),
            (1, tip_fare(8, 1, h + 5_000, 2.0)),
            (1, tip_fare(9, 7, 2 * h - 1, 0.0)),
            // Both partitions past 2 h + 60 s: hour 1 closed, hour 2 open.
            (0, tip_fare(10, 2, 2 * h + 60_000, 1.0)),
            (1, tip_fare(11, 3, 2 * h + 61_000, 1.5)),
        ]
    }

    #[test]
    fn hourly_top_tips_rank_each_hours_drivers_by_their_tips() {
        let e = top_tips_expected(&two_hours_of_fares(), 60_000);
        let got: Vec<(String, Value, bool)> = e
            .records
            .iter()
            .map(|r| (r.id.to_string(), r.value.clone(), r.required))
            .collect();
        let h = HOUR_MS;
        let want = |id: &str, value: Value, required: bool| (id.to_owned(), value, required);
        assert_eq!(
            got,
            [
                want("hour 0 rank 1", ranked(7, 1, 7.75, 0), true),
                want("hour 0 rank 2", ranked(10, 2, 3.0, 0), true),
                want("hour 0 rank 3", ranked(9, 3, 3.0, 0), true),
                want("hour 3600000 rank 1", ranked(1, 1, 2.0, h), true),
                want("hour 3600000 rank 2", ranked(7, 2, 0.0, h), true),
                want("hour 7200000 rank 1", ranked(3, 1, 1.5, 2 * h), false),
                want("hour 7200000 rank 2", ranked(2, 2, 1.0, 2 * h), false),
            ]
        );
        // The cash-only driver's sum is a float, as the job writes it.
        assert!(e.records[4].value.to_string().contains(r#""tips":0.0"#));
        assert_eq!(e.records[4].driver_id, 7);
        let c = compare(&e, &written_by_hour(&e));
        assert_eq!(
            c.verdict(),
            "verify: OK — 5 records, no loss, no duplicates, order kept per key (2 windows \
             still open at the input's end not yet written, as allowed)"
        );
        // Partition 1 not past 2 h + 60 s: hour 1 has not closed everywhere.
        let mut fares = two_hours_of_fares();
        fares.pop();
        let required: Vec<bool> = top_tips_expected(&fares, 60_000)
            .records
            .iter()
            .map(|r| r.required)
            .collect();
        assert_eq!(required, [true, true, true, false, false, false]);
        // Ties by the driver id's text: 1 before 10 before 9.
        let tied = [
            (0, tip_fare(1, 9, 0, 1.0)),
            (0, tip_fare(2, 10, 0, 1.0)),
            (1, tip_fare(3, 1, 0, 1.0)),
        ];
        let ids: Vec<u64> = top_tips_expected(&tied, 0)
            .records
            .iter()
            .map(|r| r.driver_id)
            .collect();
        assert_eq!(ids, [1, 10, 9]);
        assert_eq!(
            (Job::HourlyTopTips.name(), Job::HourlyTopTips.checks_order()),
            ("hourly-top-drivers-by-tips", true)
        );
    }

    #[test]
    fn hourly_tips_are_summed_exactly_in_any_order() {
        // 0.1 + 0.2 + 0.3 rounds twice (to 0.6000000000000001); the exact sum of the three
        // f64s, rounded once, is the f64 0.6.
        assert_ne!(0.1 + 0.2 + 0.3, 0.6);
        let tips = [0.1, 0.2, 0.3];
        for order in [[0, 1, 2], [2, 1, 0], [1, 2, 0]] {
            let fares: Vec<(i32, Fare)> = order
                .iter()
                .map(|&i| (0, tip_fare(i as u64, 5, 1_000, tips[i])))
                .collect();
            let e = top_tips_expected(&fares, 60_000);
            let tips = e.records[0].value["tips"].as_f64();
            assert_eq!(tips.map(f64::to_bits), Some(0.6f64.to_bits()));
        }
        // Before the epoch, an hour starts at the multiple of an hour below.
        assert_eq!(
            (hour_of(-1), hour_of(0), hour_of(HOUR_MS - 1)),
            (-HOUR_MS, 0, 0)
        );
        // A tip that is not a whole number of 2^-70 dollars is named, not rounded.
        assert_eq!(tip_units(1e-30), None);
        assert_eq!(tip_units(f64::NAN), None);
        assert_eq!(tip_units(0.01).map(tip_dollars), Some(0.01));
        let mut b = ExpectationBuilder::new(Job::HourlyTopTips, 60_000);
        let s = b
            .push(&rec(1, 4, &tip_fare(1, 5, 0, 1e-30).to_json()))
            .unwrap_err()
            .to_string();
        assert!(
            s.starts_with("fares partition 1 offset 4 is not a fare: its tip ")
                && s.ends_with(
                    "tip 1e-30 cannot be summed exactly: not a whole multiple of 2^-70 dollars below \
                     2^30 dollars (the generator's tips are whole cents)"
                ),
            "{s}"
        );
        let e = b.push(&rec(0, 2, &sample()[0].to_json())).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("fares partition 0 offset 2 is not a fare: missing field"),
            "{e}"
        );
        // Its fares are its input, not a second one.
        let e = b
            .push_fare(&rec(0, 0, &tip_fare(1, 5, 0, 1.0).to_json()))
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("the fares are the hourly-top-drivers-by-tips job's only input"),
            "{e}"
        );
    }

    /// A sum whose shortest text has 17 digits, which serde_json's default float parsing
    /// reads one unit in the last place off (as 0.21), verifies; 0.21 itself does not,
    /// although it is well within the tolerance of the other jobs. (The hour is still open:
    /// 0 expected, but what is written must be right.)
    #[test]
    fn hourly_tips_are_compared_bit_for_bit() {
        let fares = [(0, tip_fare(1, 5, 0, 0.01)), (1, tip_fare(2, 5, 1, 0.2))];
        let e = top_tips_expected(&fares, 0);
        let exact = e.records[0].value.to_string();
        assert!(exact.contains(r#""tips":0.21000000000000002"#), "{exact}");
        assert!(compare(&e, &[rec(0, 0, &exact)]).is_ok());
        let off = exact.replace("0.21000000000000002", "0.21");
        assert_eq!(
            compare(&e, &[rec(0, 0, &off)]).verdict(),
            "verify: FAILED — 1 wrong (first: hour 0 rank 1 at partition 0 offset 0: tips 0.21 \
             (expected 0.21000000000000002)); 1 records read, 0 expected"
        );
        // A whole sum printed as an integer is the same number.
        let e = top_tips_expected(&[(0, tip_fare(1, 5, 0, 30.0))], 0);
        let int = e.records[0].value.to_string().replace("30.0", "30");
        assert!(compare(&e, &[rec(0, 0, &int)]).is_ok(), "{int}");
    }

    #[test]
    fn a_wrong_missing_duplicated_or_reordered_rank_is_reported() {
        let e = top_tips_expected(&two_hours_of_fares(), 60_000);
        // Hour 0's ranks on partition 0 (offsets 0–2), hour 1's on partition 1 (offsets 0–1).
        let good = written_by_hour(&e);
        let value = |i: usize| e.records[i].value.clone();
        let replaced = |i: usize, v: &Value| {
            let mut out = good.clone();
            out[i].value = Some(v.to_string().into_bytes());
            out
        };
        // 7.75 one unit in the last place off: within 10⁻⁹, still wrong.
        let mut off = value(0);
        off["tips"] = serde_json::json!(f64::from_bits(7.75f64.to_bits() + 1));
        let mut swapped = good.clone();
        swapped[1].value = Some(ranked(9, 2, 3.0, 0).to_string().into_bytes());
        swapped[2].value = Some(ranked(10, 3, 3.0, 0).to_string().into_bytes());
        let mut reordered = good.clone();
        reordered.swap(0, 1);
        reordered[0].offset = 0;
        reordered[1].offset = 1;
        let cases: Vec<(&str, Vec<TopicRecord>, &str)> =
            vec![
            (
                "wrong tips",
                replaced(0, &off),
                "verify: FAILED — 1 wrong (first: hour 0 rank 1 at partition 0 offset 0: tips \
                 7.750000000000001 (expected 7.75)); 5 records read, 5 expected",
            ),
            (
                "tie broken the other way",
                swapped,
                "verify: FAILED — 2 wrong (first: hour 0 rank 2 at partition 0 offset 1: \
                 driver_id 9 (expected 10)); 5 records read, 5 expected",
            ),
            (
                "missing hour",
                good[..3].to_vec(),
                "verify: FAILED — 2 missing (first: hour 3600000 rank 1); 3 records read, 5 \
                 expected",
            ),
            (
                "duplicated",
                [good.clone(), vec![rec(1, 2, &value(3).to_string())]].concat(),
                "verify: FAILED — 1 duplicated (first: hour 3600000 rank 1 again at partition \
                 1 offset 2); 6 records read, 5 expected",
            ),
            (
                "out of order",
                reordered,
                "verify: FAILED — 1 out of order (first: hour 0: hour 0 rank 1 at partition 0 \
                 offset 1 after hour 0 rank 2); 5 records read, 5 expected",
            ),
            (
                "a fourth rank",
                [good.clone(), vec![rec(0, 3, &ranked(4, 4, 1.0, 0).to_string())]].concat(),
                "verify: FAILED — 1 unexpected (first: hour 0 rank 4 at partition 0 offset 3, \
                 which the job should not write); 6 records read, 5 expected",
            ),
            (
                "not a rank",
                [good.clone(), vec![rec(1, 2, r#"{"window_start": 0}"#)]].concat(),
                "verify: FAILED — 1 unexpected (first: partition 1 offset 2: not a driver's rank \
                 by tips in an hour: missing field `rank`); 6 records read, 5 expected",
            ),
        ];
        for (name, actual, verdict) in cases {
            assert_eq!(compare(&e, &actual).verdict(), verdict, "{name}");
        }
        // The open hour written wrong is wrong too; written right, it is fine.
        let mut open = value(6);
        open["tips"] = serde_json::json!(1.25);
        let c = compare(
            &e,
            &[good.clone(), vec![rec(0, 3, &open.to_string())]].concat(),
        );
        assert_eq!(c.wrong.count, 1, "{}", c.verdict());
        let open = [
            rec(0, 3, &value(5).to_string()),
            rec(0, 4, &value(6).to_string()),
        ];
        let c = compare(&e, &[good, open.to_vec()].concat());
        assert_eq!(
            c.verdict(),
            "verify: OK — 7 records, no loss, no duplicates, order kept per key"
        );
    }
}
