//! The `taxi-csv` line format of a job file's file source: the TaxiRide CSV of Flink's
//! training exercises ([`onceflow_taxi::csv`]), registered by `onceflow run`
//! ([`line_formats`]).

use onceflow::engine::formats::{LineFormat, LineFormats, ParsedLine};
use onceflow_taxi::csv;
use std::sync::Arc;

/// The name a job file's `[source] format` gives [`TaxiCsv`].
pub const TAXI_CSV: &str = "taxi-csv";

/// The line formats `onceflow run` offers a job's file source: [`TAXI_CSV`].
pub fn line_formats() -> LineFormats {
    LineFormats::new().with(TAXI_CSV, Arc::new(TaxiCsv))
}

/// The TaxiRide CSV of Flink's training exercises: each line becomes the ride event `taxi
/// generate` writes (JSON, keyed by driver id, event time the line's `time1`), so the same
/// jobs run on a file and on a topic.
pub struct TaxiCsv;

impl LineFormat for TaxiCsv {
    fn parse(&self, line: &str) -> Result<ParsedLine, String> {
        let ride = csv::parse_line(line).map_err(|e| e.to_string())?;
        Ok(ParsedLine {
            key: Some(ride.key()),
            value: ride.to_json().into_bytes(),
            event_time: ride.event_time,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_csv_line_becomes_the_ride_record_keyed_by_driver_and_a_bad_one_is_named() {
        let formats = line_formats();
        assert_eq!(formats.names().collect::<Vec<_>>(), [TAXI_CSV]);
        let format = formats.resolve(TAXI_CSV).unwrap();
        let line = "7,END,2013-01-01 00:16:00,2013-01-01 00:00:00,-73.86617,40.77109,-73.98219,\
                    40.69932,1,2013000185,2013000186";
        let ride = csv::parse_line(line).unwrap();
        let record = format.parse(line).unwrap();
        assert_eq!(
            record,
            ParsedLine {
                key: Some(b"2013000186".to_vec()),
                value: ride.to_json().into_bytes(),
                event_time: 1_356_999_360_000,
            }
        );
        assert_eq!(
            format.parse(csv::HEADER).unwrap_err(),
            "column 1 (rideId): 'rideId' is not a whole number 0 or more"
        );
    }
}
