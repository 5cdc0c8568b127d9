//! A deterministic generator of taxi ride events: the same [`Config`] gives the same events,
//! byte for byte, on every platform and every version of onceflow's dependencies.
//!
//! **Determinism.** The random numbers come from our own SplitMix64 ([`SplitMix64`], a
//! dozen lines with published test vectors), not from `rand`: `rand` documents that `StdRng`'s
//! algorithm may change between its releases, which would silently change a data set that
//! tests, fixtures and benchmarks name by seed. Every value is drawn with integer arithmetic
//! (coordinates as whole micro-degrees, divided by 10⁶ only at the end), so no floating-point
//! rounding differs between machines. `fixtures/rides-sample.jsonl` (of this crate) pins the output: a
//! unit test fails if the generator stops reproducing it. Changing the order or number of
//! draws below changes every data set: do it only on purpose, and regenerate the fixture.
//!
//! **The model.** Ride `i` (ride ids from 1) starts at `start_ms + i·1000/rides_per_second`
//! (event time, integer division) and lasts `min_ride_ms..=max_ride_ms`; a fixed pool of
//! `drivers` drivers, each with its own taxi. A share of the rides (`outside_per_mille`) starts
//! or ends (or both) outside [`NYC`](super::NYC); every point keeps at least 0.01° from the
//! box's edges, inside or out.
//!
//! **Shifts.** A driver works shifts of `shift_ms` every `shift_period_ms` (8 h every 12 h by
//! default), the drivers' shifts staggered evenly over the period, and a ride's driver is drawn
//! among the drivers on duty at its pick-up: each driver's rides come in runs separated by the
//! hours off, which is what a session window finds (`shift_ms == shift_period_ms`: every
//! driver always on duty). On duty are the `on = drivers · shift / period` drivers with
//! indexes in the cyclic range `(hi − on, hi]`, where `hi = ⌊phase · drivers / period⌋` moves
//! on by one every `period / drivers` ms of event time; so each driver is on duty for `on` such
//! steps in a row, about `shift_ms`.
//!
//! **Out of order, bounded.** Each event "arrives" `0..max_disorder_ms` (a random delay)
//! after its event time, and events are emitted in arrival order (ties by generation order).
//! For two events emitted one after the other, `arrival(a) ≤ arrival(b)` gives
//! `event_time(b) > event_time(a) − max_disorder_ms`: every event is less than
//! `max_disorder_ms` older than the newest event emitted before it, which is what a watermark
//! with that bounded out-of-orderness tolerates (no generated event is late). Because a ride
//! lasts at least `max_disorder_ms`, its END arrives after its START: END follows START in
//! emission order as well as in event time.
//!
//! The iterator holds only the rides in progress (a heap ordered by arrival), so it streams
//! any number of rides in bounded memory.
//!
//! **In event-time order.** A file of rides (the TaxiRide CSV of [`super::csv`]) is sorted by
//! event time, as the Flink training data set is. [`rides_by_event_time`] gives the same
//! events with their times rounded down to a resolution (whole seconds for the CSV), in
//! event-time order, START before END at equal times, then by ride id. It sorts the arrival
//! order with a heap of bounded size: by the bound above, an event can go out once the newest
//! event seen is `max_disorder_ms` past it, as no later event can be older.

use crate::Ride;
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// 2025-01-01T00:00:00Z: the default first pick-up (a fixed time, not the clock: the data must
/// not depend on when it is generated).
pub const DEFAULT_START_MS: i64 = 1_735_689_600_000;

/// The first driver id; drivers are numbered from here.
const FIRST_DRIVER_ID: u64 = 2_013_000_000;
/// The first taxi id; driver `FIRST_DRIVER_ID + d` drives taxi `FIRST_TAXI_ID + d`.
const FIRST_TAXI_ID: u64 = 1_000_000_000;

/// What to generate.
#[derive(Debug, Clone, PartialEq, Eq)]
///
/// ```
/// use onceflow_taxi::generate::{rides, Config};
/// let config = Config { seed: 7, rides: 100, drivers: 10, ..Config::default() };
/// let drivers: std::collections::BTreeSet<u64> = rides(config)?.map(|r| r.driver_id).collect();
/// assert!(drivers.len() <= 10);
/// # Ok::<(), onceflow_taxi::generate::GenerateError>(())
/// ```
pub struct Config {
    /// The PRNG seed: same seed (and other settings), same events.
    pub seed: u64,
    /// How many rides (each gives two events).
    pub rides: u64,
    /// Pick-ups per second of event time (the base rate at which event time advances).
    pub rides_per_second: u32,
    /// The size of the driver pool (driver ids `2013000000..`).
    pub drivers: u64,
    /// Rides per thousand that start or end outside the NYC box.
    pub outside_per_mille: u32,
    /// The first pick-up's event time, ms since the epoch.
    pub start_ms: i64,
    /// Events arrive up to this much (exclusive) after their event time, ms.
    pub max_disorder_ms: i64,
    /// The shortest ride, ms; at least `max_disorder_ms`.
    pub min_ride_ms: i64,
    /// The longest ride, ms.
    pub max_ride_ms: i64,
    /// A driver's shift, ms: at most `shift_period_ms` (equal: always on duty).
    pub shift_ms: i64,
    /// How often a driver's shift starts, ms.
    pub shift_period_ms: i64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            seed: 1,
            rides: 1000,
            rides_per_second: 10,
            drivers: 200,
            outside_per_mille: 100,
            start_ms: DEFAULT_START_MS,
            max_disorder_ms: 60_000,
            min_ride_ms: 5 * 60_000,
            max_ride_ms: 45 * 60_000,
            shift_ms: 8 * 3_600_000,
            shift_period_ms: 12 * 3_600_000,
        }
    }
}

/// A [`Config`] that cannot be generated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GenerateError {
    /// A setting is out of range; the message names it and the range.
    #[error("{0}")]
    Setting(String),
}

impl Config {
    /// Checks the settings.
    ///
    /// # Errors
    /// [`GenerateError::Setting`] naming the setting out of range.
    ///
    /// ```
    /// use onceflow_taxi::generate::Config;
    /// assert!(Config::default().check().is_ok());
    /// let e = Config { drivers: 0, ..Config::default() }.check().unwrap_err();
    /// assert_eq!(e.to_string(), "the number of drivers must be at least 1");
    /// ```
    pub fn check(&self) -> Result<(), GenerateError> {
        let bad = |s: String| Err(GenerateError::Setting(s));
        if self.rides_per_second == 0 {
            return bad("the ride rate must be at least 1 ride per second".into());
        }
        if self.drivers == 0 {
            return bad("the number of drivers must be at least 1".into());
        }
        if self.outside_per_mille > 1000 {
            return bad(format!(
                "the share of rides outside the box is per mille, at most 1000, got {}",
                self.outside_per_mille
            ));
        }
        if self.max_disorder_ms < 1 {
            return bad(format!(
                "the out-of-orderness must be at least 1 ms, got {}",
                self.max_disorder_ms
            ));
        }
        if self.min_ride_ms < self.max_disorder_ms || self.max_ride_ms < self.min_ride_ms {
            return bad(format!(
                "ride durations must satisfy out-of-orderness ({}) <= shortest ({}) <= longest ({}) ms",
                self.max_disorder_ms, self.min_ride_ms, self.max_ride_ms
            ));
        }
        if self.shift_ms < 1 || self.shift_period_ms < self.shift_ms {
            return bad(format!(
                "shifts must satisfy 1 <= shift ({}) <= shift period ({}) ms",
                self.shift_ms, self.shift_period_ms
            ));
        }
        Ok(())
    }

    /// How many drivers are on duty at any time (module docs): at least one.
    fn on_duty(&self) -> u64 {
        let on = u128::from(self.drivers) * self.shift_ms.max(1) as u128
            / self.shift_period_ms.max(1) as u128;
        (on as u64).clamp(1, self.drivers.max(1))
    }

    /// The driver index of the `k`-th (`k < on_duty()`) driver on duty at `time`.
    fn driver_on_duty(&self, time: i64, k: u64) -> u64 {
        let period = self.shift_period_ms.max(1);
        let phase = time.saturating_sub(self.start_ms).rem_euclid(period) as u128;
        let hi = (phase * u128::from(self.drivers) / period as u128) as u64;
        (hi + self.drivers - k % self.drivers) % self.drivers
    }

    /// The event time of ride `index`'s pick-up (index from 0).
    fn start_of(&self, index: u64) -> i64 {
        let offset = u128::from(index) * 1000 / u128::from(self.rides_per_second.max(1));
        self.start_ms
            .saturating_add(i64::try_from(offset).unwrap_or(i64::MAX))
    }
}

/// SplitMix64 (Steele, Lea, Flood 2014; Vigna's public-domain reference): a tiny PRNG whose
/// output is fixed by its definition, so data sets stay the same across versions.
#[derive(Debug, Clone)]
///
/// ```
/// use onceflow_taxi::generate::SplitMix64;
/// let mut a = SplitMix64::new(1234567);
/// assert_eq!(a.next_u64(), 6457827717110365317); // the published reference output
/// assert!(a.below(6) < 6);
/// ```
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator seeded with `seed`.
    ///
    /// ```
    /// use onceflow_taxi::generate::SplitMix64;
    /// let (mut a, mut b) = (SplitMix64::new(1), SplitMix64::new(1));
    /// assert_eq!(a.next_u64(), b.next_u64());
    /// ```
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    ///
    /// ```
    /// use onceflow_taxi::generate::SplitMix64;
    /// let mut r = SplitMix64::new(1234567);
    /// assert_eq!([r.next_u64(), r.next_u64()], [6457827717110365317, 3203168211198807973]);
    /// ```
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0), by multiply-high: the bias is below n/2⁶⁴,
    /// irrelevant here, and there is no rejection loop whose draw count could vary.
    ///
    /// ```
    /// use onceflow_taxi::generate::SplitMix64;
    /// let mut r = SplitMix64::new(1);
    /// assert!((0..1000).all(|_| r.below(10) < 10));
    /// assert_eq!(r.below(0), 0);
    /// ```
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A number in `lo..=hi` (`lo` when `hi < lo`).
    fn between(&mut self, lo: i64, hi: i64) -> i64 {
        let span = hi.saturating_sub(lo).max(0) as u64;
        lo + self.below(span.saturating_add(1)) as i64
    }
}

/// An event waiting for its arrival time.
struct Pending {
    arrival: i64,
    seq: u64,
    ride: Ride,
}

impl Pending {
    fn rank(&self) -> (i64, u64) {
        (self.arrival, self.seq)
    }
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        self.rank() == other.rank()
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Pending {
    fn cmp(&self, other: &Self) -> Ordering {
        self.rank().cmp(&other.rank())
    }
}

/// The ride events of a [`Config`], in emission (arrival) order.
pub struct Rides {
    config: Config,
    rng: SplitMix64,
    /// Index of the next ride to create.
    next_ride: u64,
    /// Generation order, the tie-break between equal arrival times.
    seq: u64,
    pending: BinaryHeap<Reverse<Pending>>,
}

/// The events of `config`.
///
/// # Errors
/// [`GenerateError::Setting`] when [`Config::check`] refuses the settings.
///
/// ```
/// use onceflow_taxi::generate::{rides, Config};
/// let config = Config { rides: 50, ..Config::default() };
/// let events: Vec<_> = rides(config.clone())?.collect();
/// assert_eq!(events.len(), 100);
/// assert_eq!(events, rides(config)?.collect::<Vec<_>>()); // deterministic
/// assert!(rides(Config { rides_per_second: 0, ..Config::default() }).is_err());
/// # Ok::<(), onceflow_taxi::generate::GenerateError>(())
/// ```
pub fn rides(config: Config) -> Result<Rides, GenerateError> {
    config.check()?;
    Ok(Rides {
        rng: SplitMix64::new(config.seed),
        config,
        next_ride: 0,
        seq: 0,
        pending: BinaryHeap::new(),
    })
}

/// A whole micro-degree coordinate as degrees.
fn degrees(micro: i64) -> f64 {
    micro as f64 / 1e6
}

impl Rides {
    /// A point inside the NYC box, 0.01° clear of its edges: lon −74.04..−73.71, lat
    /// 40.51..40.99.
    fn inside(&mut self) -> (f64, f64) {
        let lon = self.rng.between(-74_040_000, -73_710_000);
        let lat = self.rng.between(40_510_000, 40_990_000);
        (degrees(lon), degrees(lat))
    }

    /// A point outside the box, 0.01° or more beyond one of its four edges.
    fn outside(&mut self) -> (f64, f64) {
        let (lon, lat) = self.inside();
        match self.rng.below(4) {
            0 => (degrees(self.rng.between(-74_400_000, -74_060_000)), lat),
            1 => (degrees(self.rng.between(-73_690_000, -73_350_000)), lat),
            2 => (lon, degrees(self.rng.between(40_150_000, 40_490_000))),
            _ => (lon, degrees(self.rng.between(41_010_000, 41_350_000))),
        }
    }

    /// Creates ride `next_ride`: queues its START and END.
    fn create_ride(&mut self) {
        let index = self.next_ride;
        self.next_ride += 1;
        let start_time = self.config.start_of(index);
        let d = self
            .config
            .driver_on_duty(start_time, self.rng.below(self.config.on_duty()));
        let duration = self
            .rng
            .between(self.config.min_ride_ms, self.config.max_ride_ms);
        let passengers = 1 + self.rng.below(4) as u32;
        let outside = self.rng.below(1000) < u64::from(self.config.outside_per_mille);
        // Which end(s) leave the box: 0 the pick-up, 1 the drop-off, 2 both.
        let which = if outside { self.rng.below(3) } else { 3 };
        let start = if which == 0 || which == 2 {
            self.outside()
        } else {
            self.inside()
        };
        let end = if which == 1 || which == 2 {
            self.outside()
        } else {
            self.inside()
        };
        let start_delay = self.rng.between(0, self.config.max_disorder_ms - 1);
        let end_delay = self.rng.between(0, self.config.max_disorder_ms - 1);
        let ride = Ride {
            ride_id: index + 1,
            driver_id: FIRST_DRIVER_ID + d,
            taxi_id: FIRST_TAXI_ID + d,
            is_start: true,
            start_lon: start.0,
            start_lat: start.1,
            end_lon: end.0,
            end_lat: end.1,
            passengers,
            event_time: start_time,
        };
        let end_event = Ride {
            is_start: false,
            event_time: start_time.saturating_add(duration),
            ..ride.clone()
        };
        for (ride, delay) in [(ride, start_delay), (end_event, end_delay)] {
            self.seq += 1;
            self.pending.push(Reverse(Pending {
                arrival: ride.event_time.saturating_add(delay),
                seq: self.seq,
                ride,
            }));
        }
    }
}

impl Iterator for Rides {
    type Item = Ride;

    fn next(&mut self) -> Option<Ride> {
        loop {
            let next_start =
                (self.next_ride < self.config.rides).then(|| self.config.start_of(self.next_ride));
            // Every event not yet created arrives at or after the next pick-up time (its
            // event time is at least that), and later in generation order: a pending event
            // arriving no later than that may go out now.
            let ready = match (self.pending.peek(), next_start) {
                (Some(Reverse(p)), Some(s)) => p.arrival <= s,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => return None,
            };
            if ready {
                return self.pending.pop().map(|Reverse(p)| p.ride);
            }
            self.create_ride();
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = (self.config.rides - self.next_ride)
            .saturating_mul(2)
            .saturating_add(self.pending.len() as u64);
        let left = usize::try_from(left).unwrap_or(usize::MAX);
        (left, Some(left))
    }
}

/// The events of `config` in event-time order (START before END at equal times, then by ride
/// id), each event time rounded down to a multiple of `resolution_ms` (1: unchanged; 1000:
/// whole seconds, as a CSV file holds them). Both events of a ride are rounded the same way, so
/// the rides stay the same apart from their times' fractions.
///
/// # Errors
/// [`GenerateError::Setting`] when [`Config::check`] refuses the settings or `resolution_ms`
/// is below 1.
///
/// ```
/// use onceflow_taxi::generate::{rides_by_event_time, Config};
/// let config = Config { rides: 50, ..Config::default() };
/// let events: Vec<_> = rides_by_event_time(config, 1000)?.collect();
/// assert!(events.windows(2).all(|w| w[0].event_time <= w[1].event_time));
/// assert!(events.iter().all(|r| r.event_time % 1000 == 0));
/// # Ok::<(), onceflow_taxi::generate::GenerateError>(())
/// ```
pub fn rides_by_event_time(
    config: Config,
    resolution_ms: i64,
) -> Result<ByEventTime, GenerateError> {
    if resolution_ms < 1 {
        return Err(GenerateError::Setting(format!(
            "the event-time resolution must be at least 1 ms, got {resolution_ms}"
        )));
    }
    let max_disorder_ms = config.max_disorder_ms;
    Ok(ByEventTime {
        arrivals: rides(config)?,
        max_disorder_ms,
        resolution_ms,
        newest: i64::MIN,
        held: BinaryHeap::new(),
    })
}

/// An event held until no later arrival can come before it.
struct Held {
    /// (rounded event time, END after START, ride id): unique per event, so the order is total.
    rank: (i64, bool, u64),
    ride: Ride,
}

impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        self.rank == other.rank
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Held {
    fn cmp(&self, other: &Self) -> Ordering {
        self.rank.cmp(&other.rank)
    }
}

/// The events of [`rides_by_event_time`].
pub struct ByEventTime {
    arrivals: Rides,
    max_disorder_ms: i64,
    resolution_ms: i64,
    /// The newest (unrounded) event time among the arrivals taken.
    newest: i64,
    held: BinaryHeap<Reverse<Held>>,
}

impl ByEventTime {
    fn round(&self, t: i64) -> i64 {
        // Saturating: before the first arrival `newest` is i64::MIN, which rounds to itself.
        t.saturating_sub(t.rem_euclid(self.resolution_ms))
    }
}

impl Iterator for ByEventTime {
    type Item = Ride;

    fn next(&mut self) -> Option<Ride> {
        loop {
            // Every arrival still to come has an event time above newest − max_disorder_ms
            // (the module's bound), so at least the rounding of newest − max_disorder_ms + 1:
            // a held event rounded below that goes before all of them.
            let floor = self.round(
                self.newest
                    .saturating_sub(self.max_disorder_ms)
                    .saturating_add(1),
            );
            if let Some(Reverse(h)) = self.held.peek() {
                if h.rank.0 < floor {
                    return self.held.pop().map(|Reverse(h)| h.ride);
                }
            }
            match self.arrivals.next() {
                Some(mut ride) => {
                    self.newest = self.newest.max(ride.event_time);
                    ride.event_time = self.round(ride.event_time);
                    self.held.push(Reverse(Held {
                        rank: (ride.event_time, !ride.is_start, ride.ride_id),
                        ride,
                    }));
                }
                None => return self.held.pop().map(|Reverse(h)| h.ride),
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let (low, high) = self.arrivals.size_hint();
        let held = self.held.len();
        (
            low.saturating_add(held),
            high.and_then(|h| h.checked_add(held)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NYC;
    use std::collections::HashMap;

    fn all(config: Config) -> Vec<Ride> {
        rides(config).unwrap().collect()
    }

    fn with_rides(n: u64) -> Config {
        Config {
            rides: n,
            ..Config::default()
        }
    }

    /// The published SplitMix64 outputs for seed 1234567: the algorithm is the reference one.
    #[test]
    fn splitmix64_matches_the_reference_outputs() {
        let mut r = SplitMix64::new(1234567);
        let got: Vec<u64> = (0..5).map(|_| r.next_u64()).collect();
        assert_eq!(
            got,
            [
                6457827717110365317,
                3203168211198807973,
                9817491932198370423,
                4593380528125082431,
                16408922859458223821
            ]
        );
    }

    #[test]
    fn the_same_seed_gives_the_same_events_and_another_seed_others() {
        let a = all(with_rides(500));
        assert_eq!(a, all(with_rides(500)));
        let b = all(Config {
            seed: 2,
            ..with_rides(500)
        });
        assert_ne!(a, b);
        assert_eq!(a.len(), 1000);
    }

    #[test]
    fn every_ride_has_one_start_and_one_end_in_order() {
        let events = all(with_rides(2000));
        let mut seen: HashMap<u64, (Option<usize>, Option<usize>)> = HashMap::new();
        for (i, e) in events.iter().enumerate() {
            let slot = seen.entry(e.ride_id).or_default();
            let which = if e.is_start { &mut slot.0 } else { &mut slot.1 };
            assert!(which.is_none(), "{} twice", e.describe());
            *which = Some(i);
        }
        assert_eq!(seen.len(), 2000);
        let by_id: HashMap<(u64, bool), &Ride> = events
            .iter()
            .map(|e| ((e.ride_id, e.is_start), e))
            .collect();
        for (id, (s, e)) in seen {
            let (s, e) = (s.unwrap(), e.unwrap());
            assert!(s < e, "ride {id}: END emitted before START");
            let (start, end) = (by_id[&(id, true)], by_id[&(id, false)]);
            assert!(start.event_time < end.event_time, "ride {id}");
            // Both events describe the same ride.
            assert_eq!(
                Ride {
                    is_start: true,
                    event_time: start.event_time,
                    ..end.clone()
                },
                *start
            );
        }
    }

    #[test]
    fn disorder_is_real_and_bounded_by_the_out_of_orderness() {
        let events = all(with_rides(5000));
        let mut max = i64::MIN;
        let mut behind = 0;
        let mut worst = 0;
        for e in &events {
            if e.event_time < max {
                behind += 1;
                worst = worst.max(max - e.event_time);
            }
            max = max.max(e.event_time);
        }
        assert!(worst < 60_000, "an event {worst} ms behind the newest");
        assert!(
            worst > 30_000,
            "disorder should come close to the bound, got {worst}"
        );
        assert!(
            behind > events.len() / 10,
            "only {behind} events out of order"
        );
    }

    #[test]
    fn the_share_outside_the_box_is_as_configured_and_clear_of_the_edges() {
        let events = all(with_rides(10_000));
        let starts: Vec<&Ride> = events.iter().filter(|e| e.is_start).collect();
        let outside = starts.iter().filter(|e| !e.inside(&NYC)).count();
        // 10 % of 10 000 rides; the binomial standard deviation is 30.
        assert!((850..=1150).contains(&outside), "{outside} outside");
        let none = all(Config {
            outside_per_mille: 0,
            ..with_rides(1000)
        });
        assert!(none.iter().all(|e| e.inside(&NYC)));
        let every = all(Config {
            outside_per_mille: 1000,
            ..with_rides(1000)
        });
        assert!(every.iter().all(|e| !e.inside(&NYC)));
        // No coordinate within 0.01° (less a rounding hair) of an edge.
        let near = |v: f64, edge: f64| (v - edge).abs() < 0.0099;
        for e in &events {
            for lon in [e.start_lon, e.end_lon] {
                assert!(!near(lon, NYC.min_lon) && !near(lon, NYC.max_lon), "{e:?}");
            }
            for lat in [e.start_lat, e.end_lat] {
                assert!(!near(lat, NYC.min_lat) && !near(lat, NYC.max_lat), "{e:?}");
            }
        }
    }

    #[test]
    fn drivers_come_from_the_fixed_pool_and_keep_their_taxi() {
        let events = all(Config {
            drivers: 7,
            shift_ms: 3_600_000,
            shift_period_ms: 3_600_000,
            ..with_rides(1000)
        });
        let drivers: std::collections::BTreeSet<u64> = events.iter().map(|e| e.driver_id).collect();
        assert_eq!(drivers.len(), 7);
        assert!(events
            .iter()
            .all(|e| e.taxi_id - FIRST_TAXI_ID == e.driver_id - FIRST_DRIVER_ID));
        assert!(events.iter().all(|e| (1..=4).contains(&e.passengers)));
    }

    /// A day of pick-ups, 20 drivers on 8-hour shifts every 12 hours: every driver drives,
    /// about 2/3 of them at any time, and a driver's pick-ups come in runs of about a shift
    /// separated by about the hours off.
    #[test]
    fn drivers_pick_up_only_on_their_shifts() {
        let h = 3_600_000;
        let config = Config {
            drivers: 20,
            rides_per_second: 1,
            ..with_rides(24 * 3600)
        };
        let mut pickups: std::collections::BTreeMap<u64, Vec<i64>> = Default::default();
        for e in all(config).into_iter().filter(|e| e.is_start) {
            pickups.entry(e.driver_id).or_default().push(e.event_time);
        }
        assert_eq!(pickups.len(), 20);
        for (driver, times) in &mut pickups {
            times.sort_unstable();
            // Runs split where a driver has no pick-up for more than an hour.
            let mut runs = vec![(times[0], times[0])];
            for &t in &times[1..] {
                let last = runs.last_mut().unwrap();
                if t - last.1 > h {
                    runs.push((t, t));
                } else {
                    last.1 = t;
                }
            }
            for pair in runs.windows(2) {
                let off = pair[1].0 - pair[0].1;
                assert!((3 * h..=5 * h).contains(&off), "driver {driver}: {runs:?}");
            }
            for &(from, to) in &runs[1..runs.len() - 1] {
                let shift = to - from;
                assert!(
                    (7 * h..=9 * h).contains(&shift),
                    "driver {driver}: {runs:?}"
                );
            }
        }
    }

    #[test]
    fn pick_ups_follow_the_base_rate() {
        let events = all(Config {
            rides_per_second: 4,
            ..with_rides(9)
        });
        let mut starts: Vec<(u64, i64)> = events
            .iter()
            .filter(|e| e.is_start)
            .map(|e| (e.ride_id, e.event_time - DEFAULT_START_MS))
            .collect();
        starts.sort();
        let times: Vec<i64> = starts.iter().map(|s| s.1).collect();
        assert_eq!(times, [0, 250, 500, 750, 1000, 1250, 1500, 1750, 2000]);
    }

    #[test]
    fn the_iterator_knows_how_many_events_are_left() {
        let mut it = rides(with_rides(10)).unwrap();
        assert_eq!(it.size_hint(), (20, Some(20)));
        it.next();
        assert_eq!(it.size_hint(), (19, Some(19)));
        assert_eq!(it.count(), 19);
    }

    #[test]
    fn settings_out_of_range_are_named() {
        for (config, needle) in [
            (
                Config {
                    rides_per_second: 0,
                    ..Config::default()
                },
                "rate",
            ),
            (
                Config {
                    drivers: 0,
                    ..Config::default()
                },
                "drivers",
            ),
            (
                Config {
                    outside_per_mille: 1001,
                    ..Config::default()
                },
                "per mille",
            ),
            (
                Config {
                    min_ride_ms: 59_999,
                    ..Config::default()
                },
                "durations",
            ),
        ] {
            let e = rides(config).err().unwrap().to_string();
            assert!(e.contains(needle), "{e}");
        }
    }

    /// The streaming sort gives what sorting all the rounded events at once gives, at rates
    /// with many events per second (ties) and few, and at every resolution.
    #[test]
    fn by_event_time_is_a_sort_of_the_rounded_events() {
        for (rides_per_second, max_disorder_ms, resolution_ms) in [
            (10, 60_000, 1000),
            (10, 60_000, 1),
            (200, 1000, 1000),
            (1, 1000, 1000),
            (3, 5, 7),
            (50, 60_000, 60_000),
        ] {
            let config = Config {
                rides: 3000,
                rides_per_second,
                max_disorder_ms,
                min_ride_ms: max_disorder_ms.max(2000),
                max_ride_ms: 90_000,
                ..Config::default()
            };
            let mut want: Vec<Ride> = all(config.clone())
                .into_iter()
                .map(|mut r| {
                    r.event_time -= r.event_time.rem_euclid(resolution_ms);
                    r
                })
                .collect();
            want.sort_by_key(|r| (r.event_time, !r.is_start, r.ride_id));
            let it = rides_by_event_time(config, resolution_ms).unwrap();
            assert_eq!(it.size_hint(), (6000, Some(6000)));
            let got: Vec<Ride> = it.collect();
            let case = format!("{rides_per_second}/s, ±{max_disorder_ms} ms, {resolution_ms} ms");
            assert_eq!(got.len(), want.len(), "{case}");
            assert!(got == want, "{case}: not the sorted events");
        }
        assert!(rides_by_event_time(Config::default(), 0)
            .err()
            .unwrap()
            .to_string()
            .contains("resolution"));
    }

    /// fixtures/rides-sample.jsonl is 200 events (100 rides) from seed 1 with the default
    /// settings. Regenerate it with ONCEFLOW_UPDATE_FIXTURES=1 after a deliberate change.
    #[test]
    fn the_sample_fixture_is_what_seed_1_generates() {
        let text: String = all(with_rides(100))
            .iter()
            .map(|e| e.to_json() + "\n")
            .collect();
        assert_eq!(text.lines().count(), 200);
        crate::assert_fixture("rides-sample.jsonl", &text);
    }
}
