//! The NYC taxi rides workload of onceflow's jobs, demo and tests, as pure code: no Kafka, no
//! I/O but reading files.
//!
//! # Map of the crate
//!
//! - [`Ride`]: one ride event, the record value of every shipped job (JSON, keyed by driver
//!   id); [`BoundingBox`] and [`NYC`], the box the cleansing job keeps.
//! - [`generate`]: a deterministic generator of ride events (the same settings give the same
//!   events on every platform), in arrival order or in event-time order.
//! - [`fare`]: one fare per ride (the rides-and-fares enrichment's second stream),
//!   deterministic per ride and apart from the rides' generator.
//! - [`csv`]: the TaxiRide CSV line of Flink's training exercises, to and from a [`Ride`].
//! - [`files`]: rides in files read as the records a topic would hold: a job's CSV input and a
//!   file sink's finished output files.
//! - [`verify`]: the verifier's pure core: a shipped job's expected output computed from its
//!   input, compared with what the job wrote, in a one-line verdict.
//! - [`latency`]: the end-to-end latency arithmetic: which input record caused an output
//!   record, and the percentiles.
//!
//! The `onceflow` binary's `taxi generate|verify|latency` and `demo` commands do the Kafka
//! reads and writes around these (a job file reads the [`csv`] lines by declaring their
//! columns: `jobs/rides-file-to-kafka.toml`).
//!
//! A ride is two events, START then END, each carrying the whole ride (both coordinates and
//! the passenger count, as in Flink's taxi training exercises), so a filter on one event can
//! see where the ride starts and ends. The record key is the driver id as a decimal string.
//!
//! ```
//! use onceflow_taxi::generate::{self, Config};
//! use onceflow_taxi::NYC;
//!
//! let rides: Vec<_> = generate::rides(Config { rides: 100, ..Config::default() })?.collect();
//! assert_eq!(rides.len(), 200); // a START and an END per ride
//! let kept = rides.iter().filter(|r| r.inside(&NYC)).count();
//! assert!(kept > 150 && kept < 200); // 10 % start or end outside the box
//! # Ok::<(), onceflow_taxi::generate::GenerateError>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod csv;
pub mod fare;
pub mod files;
pub mod generate;
pub mod latency;
pub mod verify;

use serde::{Deserialize, Serialize};

/// One ride event: the record value, as JSON with exactly these fields in this order (agreed
/// with the job operators; do not change it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ride {
    /// The ride's id, unique per ride (START and END share it).
    pub ride_id: u64,
    /// The driver's id; the record key.
    pub driver_id: u64,
    /// The taxi's id (each driver drives one taxi).
    pub taxi_id: u64,
    /// START (true) or END (false).
    pub is_start: bool,
    /// Pick-up longitude, degrees.
    pub start_lon: f64,
    /// Pick-up latitude, degrees.
    pub start_lat: f64,
    /// Drop-off longitude, degrees.
    pub end_lon: f64,
    /// Drop-off latitude, degrees.
    pub end_lat: f64,
    /// Passengers on the ride.
    pub passengers: u32,
    /// When the event happened: the pick-up (START) or the drop-off (END), ms since the epoch.
    pub event_time: i64,
}

impl Ride {
    /// The record key: the driver id as decimal digits.
    ///
    /// ```
    /// # let ride = onceflow_taxi::generate::rides(Default::default())?.next().unwrap();
    /// assert_eq!(ride.key(), ride.driver_id.to_string().into_bytes());
    /// # Ok::<(), onceflow_taxi::generate::GenerateError>(())
    /// ```
    pub fn key(&self) -> Vec<u8> {
        self.driver_id.to_string().into_bytes()
    }

    /// The record value: the JSON object, fields in declaration order.
    ///
    /// ```
    /// # let ride = onceflow_taxi::generate::rides(Default::default())?.next().unwrap();
    /// assert!(ride.to_json().starts_with(&format!("{{\"ride_id\":{},", ride.ride_id)));
    /// let back: onceflow_taxi::Ride = serde_json::from_str(&ride.to_json()).unwrap();
    /// assert_eq!(back, ride);
    /// # Ok::<(), onceflow_taxi::generate::GenerateError>(())
    /// ```
    pub fn to_json(&self) -> String {
        // Serializing a struct of numbers and booleans cannot fail; the fallback is never
        // taken but keeps this path free of a panic.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Whether the ride both starts and ends inside `area` (what the cleansing job keeps).
    ///
    /// ```
    /// use onceflow_taxi::{BoundingBox, NYC};
    /// # let ride = onceflow_taxi::generate::rides(Default::default())?.next().unwrap();
    /// let nowhere = BoundingBox { min_lon: 0.0, max_lon: 0.0, min_lat: 0.0, max_lat: 0.0 };
    /// assert!(!ride.inside(&nowhere));
    /// assert_eq!(ride.inside(&NYC), NYC.contains(ride.start_lon, ride.start_lat)
    ///     && NYC.contains(ride.end_lon, ride.end_lat));
    /// # Ok::<(), onceflow_taxi::generate::GenerateError>(())
    /// ```
    pub fn inside(&self, area: &BoundingBox) -> bool {
        area.contains(self.start_lon, self.start_lat) && area.contains(self.end_lon, self.end_lat)
    }

    /// "ride 17 START": how verdicts name the event.
    ///
    /// ```
    /// # let ride = onceflow_taxi::generate::rides(Default::default())?.next().unwrap();
    /// let kind = if ride.is_start { "START" } else { "END" };
    /// assert_eq!(ride.describe(), format!("ride {} {kind}", ride.ride_id));
    /// # Ok::<(), onceflow_taxi::generate::GenerateError>(())
    /// ```
    pub fn describe(&self) -> String {
        format!(
            "ride {} {}",
            self.ride_id,
            if self.is_start { "START" } else { "END" }
        )
    }
}

/// A longitude/latitude rectangle, bounds inclusive.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BoundingBox {
    /// Western edge (smallest longitude).
    pub min_lon: f64,
    /// Eastern edge.
    pub max_lon: f64,
    /// Southern edge (smallest latitude).
    pub min_lat: f64,
    /// Northern edge.
    pub max_lat: f64,
}

impl BoundingBox {
    /// Whether the point lies inside, edges included. The generator keeps every point at
    /// least 0.01° away from the edges (see [`generate`]), so whether a job's filter counts the
    /// edges as inside, and a last-bit difference in parsing a coordinate, never change the
    /// verdict on generated data.
    ///
    /// ```
    /// use onceflow_taxi::NYC;
    /// assert!(NYC.contains(-73.9857, 40.7484)); // the Empire State Building
    /// assert!(NYC.contains(NYC.min_lon, NYC.max_lat)); // a corner
    /// assert!(!NYC.contains(-0.1276, 51.5072)); // London
    /// ```
    pub fn contains(&self, lon: f64, lat: f64) -> bool {
        (self.min_lon..=self.max_lon).contains(&lon) && (self.min_lat..=self.max_lat).contains(&lat)
    }
}

/// New York City: lon −74.05..−73.70, lat 40.50..41.00 (the box of the cleansing job).
pub const NYC: BoundingBox = BoundingBox {
    min_lon: -74.05,
    max_lon: -73.70,
    min_lat: 40.50,
    max_lat: 41.00,
};

/// Asserts that `fixtures/<name>` holds `text` (what the generator makes of seed 1); with
/// ONCEFLOW_UPDATE_FIXTURES=1 it writes `text` there first, after a deliberate change.
#[cfg(test)]
pub(crate) fn assert_fixture(name: &str, text: &str) {
    let path = fixture(name);
    if std::env::var_os("ONCEFLOW_UPDATE_FIXTURES").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == text,
        "{} differs from what seed 1 generates: the generator changed (rerun with \
         ONCEFLOW_UPDATE_FIXTURES=1 if on purpose)",
        path.display()
    );
}

/// The path of `fixtures/<name>` of this crate.
#[cfg(test)]
pub(crate) fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_has_the_agreed_fields_in_order_and_reads_back() {
        let r = Ride {
            ride_id: 7,
            driver_id: 2013000001,
            taxi_id: 2013500001,
            is_start: true,
            start_lon: -73.912345,
            start_lat: 40.7,
            end_lon: -74.0,
            end_lat: 40.51,
            passengers: 2,
            event_time: 1735689600000,
        };
        let json = r.to_json();
        assert_eq!(
            json,
            r#"{"ride_id":7,"driver_id":2013000001,"taxi_id":2013500001,"is_start":true,"start_lon":-73.912345,"start_lat":40.7,"end_lon":-74.0,"end_lat":40.51,"passengers":2,"event_time":1735689600000}"#
        );
        assert_eq!(serde_json::from_str::<Ride>(&json).unwrap(), r);
        assert_eq!(r.key(), b"2013000001");
        assert_eq!(r.describe(), "ride 7 START");
    }

    #[test]
    fn the_box_includes_its_edges() {
        for (lon, lat, inside) in [
            (-73.9, 40.7, true),
            (-74.05, 40.5, true),
            (-73.70, 41.0, true),
            (-74.0501, 40.7, false),
            (-73.6999, 40.7, false),
            (-73.9, 40.4999, false),
            (-73.9, 41.0001, false),
        ] {
            assert_eq!(NYC.contains(lon, lat), inside, "({lon}, {lat})");
        }
    }
}
