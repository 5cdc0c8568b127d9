//! Taxi fares: the second stream of Flink's rides-and-fares training exercises, one fare per
//! ride, which an enrichment job joins to the rides by ride id.
//!
//! **Determinism, apart from the rides.** A ride's fare is drawn from its own SplitMix64,
//! seeded by the data set's seed and the ride id ([`fare_of`]), not from the rides' generator:
//! adding fares changes no ride, and the fare of ride 42 is the same whichever rides come
//! before it or whether they are generated at all.
//!
//! **Time and order.** A fare's `event_time` is its ride's pick-up (Flink's `startTime`), and
//! [`fares`] emits them in the order of the rides' START events: each fare where its START
//! event arrives. The rides' bound carries over: every fare is less than the generator's
//! `max_disorder_ms` older than the newest fare emitted before it.
//!
//! **Amounts** are whole cents computed with integer arithmetic, written as decimal dollars: a
//! base of $2.50 plus $1.50 to $2.50 a kilometre of the ride's grid distance (its pick-up and
//! drop-off are on every event: 111 km a degree of latitude, 84 km a degree of longitude at
//! New York's), tolls on one ride in ten, and a tip on card payments (three in four) of 0–30 %
//! of the fare; `total_fare` is their sum.

use crate::generate::{self, Config, GenerateError, SplitMix64};
use crate::Ride;
use serde::{Deserialize, Serialize};

/// One fare: the record value of the fares topic, as JSON with exactly these fields in this
/// order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fare {
    /// The ride it pays for.
    pub ride_id: u64,
    /// The ride's taxi.
    pub taxi_id: u64,
    /// The ride's driver.
    pub driver_id: u64,
    /// `"CARD"` or `"CASH"`.
    pub payment_type: String,
    /// The tip, dollars (0 on cash).
    pub tip: f64,
    /// Tolls, dollars.
    pub tolls: f64,
    /// Fare, tolls and tip, dollars.
    pub total_fare: f64,
    /// The ride's pick-up, ms since the epoch.
    pub event_time: i64,
}

impl Fare {
    /// The record key: the ride id as a decimal string (the enrichment job joins on it).
    ///
    /// ```
    /// let ride = onceflow_taxi::generate::rides(Default::default())?.next().expect("a ride");
    /// let fare = onceflow_taxi::fare::fare_of(&ride, 1);
    /// assert_eq!(fare.key(), ride.ride_id.to_string().into_bytes());
    /// # Ok::<(), onceflow_taxi::generate::GenerateError>(())
    /// ```
    pub fn key(&self) -> Vec<u8> {
        self.ride_id.to_string().into_bytes()
    }

    /// The record value: the JSON object, fields in declaration order.
    pub fn to_json(&self) -> String {
        // Numbers and a string: serializing cannot fail; the fallback keeps this path free of
        // a panic.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Cents as dollars.
fn dollars(cents: u64) -> f64 {
    cents as f64 / 100.0
}

/// The ride's grid distance in metres (module docs), from whole micro-degrees.
fn metres(ride: &Ride) -> u64 {
    let micro = |a: f64, b: f64| ((a - b).abs() * 1e6).round() as u64;
    let lat = micro(ride.end_lat, ride.start_lat);
    let lon = micro(ride.end_lon, ride.start_lon);
    // 111 m and 84 m per thousandth of a degree.
    (lat * 111 + lon * 84) / 1_000
}

/// The fare of the ride of START event `ride` in the data set of `seed` (an END event gives
/// the same amounts, at its own time).
///
/// ```
/// use onceflow_taxi::fare::fare_of;
/// let ride = onceflow_taxi::generate::rides(Default::default())?.next().expect("a ride");
/// let (a, b) = (fare_of(&ride, 1), fare_of(&ride, 1));
/// assert_eq!(a, b);
/// assert!((a.total_fare - (a.tip + a.tolls)) >= 2.5);
/// # Ok::<(), onceflow_taxi::generate::GenerateError>(())
/// ```
pub fn fare_of(ride: &Ride, seed: u64) -> Fare {
    let mut rng = SplitMix64::new(seed ^ ride.ride_id.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let per_km = 150 + rng.below(101);
    let fare = 250 + metres(ride) * per_km / 1_000;
    let tolls = if rng.below(10) == 0 {
        575 + rng.below(1_000)
    } else {
        0
    };
    let card = rng.below(4) != 0;
    let tip = if card { fare * rng.below(31) / 100 } else { 0 };
    Fare {
        ride_id: ride.ride_id,
        taxi_id: ride.taxi_id,
        driver_id: ride.driver_id,
        payment_type: if card { "CARD" } else { "CASH" }.to_owned(),
        tip: dollars(tip),
        tolls: dollars(tolls),
        total_fare: dollars(fare + tolls + tip),
        event_time: ride.event_time,
    }
}

/// The fares of the rides of `config`, one per ride, in the order of their START events
/// (module docs).
///
/// # Errors
/// [`GenerateError`] when the config is out of range.
///
/// ```
/// use onceflow_taxi::generate::Config;
/// let config = Config { rides: 10, ..Config::default() };
/// let fares: Vec<_> = onceflow_taxi::fare::fares(config)?.collect();
/// assert_eq!(fares.len(), 10);
/// # Ok::<(), onceflow_taxi::generate::GenerateError>(())
/// ```
pub fn fares(config: Config) -> Result<impl Iterator<Item = Fare>, GenerateError> {
    let seed = config.seed;
    Ok(generate::rides(config)?
        .filter(|r| r.is_start)
        .map(move |r| fare_of(&r, seed)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fares_are_one_per_ride_in_start_order_and_bounded_out_of_order() {
        let config = Config {
            rides: 5_000,
            ..Config::default()
        };
        let starts: Vec<Ride> = generate::rides(config.clone())
            .unwrap()
            .filter(|r| r.is_start)
            .collect();
        let fares: Vec<Fare> = fares(config.clone()).unwrap().collect();
        assert_eq!(fares.len(), starts.len());
        let mut newest = i64::MIN;
        for (f, r) in fares.iter().zip(&starts) {
            assert_eq!(
                (f.ride_id, f.driver_id, f.event_time),
                (r.ride_id, r.driver_id, r.event_time)
            );
            assert!(
                f.event_time > newest.saturating_sub(config.max_disorder_ms),
                "{f:?}"
            );
            newest = newest.max(f.event_time);
            let cents = |x: f64| (x * 100.0).round() as i64;
            assert!(
                cents(f.total_fare) - cents(f.tip) - cents(f.tolls) >= 250,
                "{f:?}"
            );
            assert!(f.payment_type == "CARD" || f.tip == 0.0, "{f:?}");
        }
        let cards = fares.iter().filter(|f| f.payment_type == "CARD").count();
        assert!(
            (3_500..4_000).contains(&cards),
            "{cards} card payments of 5000"
        );
    }

    #[test]
    fn a_rides_fare_does_not_depend_on_the_rides_before_it() {
        let all: Vec<Fare> = fares(Config::default()).unwrap().collect();
        let end = generate::rides(Config::default())
            .unwrap()
            .find(|r| r.ride_id == all[500].ride_id && !r.is_start)
            .unwrap();
        let mut fare = fare_of(&end, 1);
        assert_ne!(fare.event_time, all[500].event_time, "an END event's time");
        fare.event_time = all[500].event_time;
        assert_eq!(fare, all[500]);
        assert_ne!(fare_of(&end, 2).total_fare, all[500].total_fare);
    }
}
