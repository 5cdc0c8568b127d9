//! The TaxiRide CSV line of the Flink training exercises (the format of `nycTaxiRides.gz`), to
//! and from a [`Ride`].
//!
//! **The line.** Eleven comma-separated columns, no quoting:
//!
//! ```text
//! rideId,START|END,time1,time2,startLon,startLat,endLon,endLat,passengerCnt,taxiId,driverId
//! 7,START,2013-01-01 00:00:00,1970-01-01 00:00:00,-73.86617,40.77109,-73.98219,40.69932,1,2013000185,2013000185
//! 7,END,2013-01-01 00:16:00,2013-01-01 00:00:00,-73.86617,40.77109,-73.98219,40.69932,1,2013000185,2013000185
//! ```
//!
//! Times are `yyyy-MM-dd HH:mm:ss` in UTC. `time1` is the event's own time (the pick-up for
//! START, the drop-off for END) and becomes [`Ride::event_time`]; `time2` is the other end of
//! the ride: for END its pick-up, for START its drop-off, which the data set does not know yet
//! at the pick-up and writes as `1970-01-01 00:00:00`. An empty coordinate (the data set has
//! some) means 0.0. The original file has no header; [`HEADER`] is our own, optional, and only
//! ever the first line of a file ([`is_header`]).
//!
//! The date arithmetic is our own ([`days_from_civil`], [`civil_from_days`]): the proleptic
//! Gregorian calendar counted in days from 1970-01-01, integers only, so no time crate is
//! needed for one fixed format.

use crate::Ride;
use std::collections::HashMap;

/// How many columns a line has.
pub const COLUMNS: usize = 11;

/// The columns' names, as errors name them and [`HEADER`] lists them.
const NAMES: [&str; COLUMNS] = [
    "rideId",
    "isStart",
    "time1",
    "time2",
    "startLon",
    "startLat",
    "endLon",
    "endLat",
    "passengerCnt",
    "taxiId",
    "driverId",
];

/// Our optional header line (the original data set has none).
pub const HEADER: &str =
    "rideId,isStart,time1,time2,startLon,startLat,endLon,endLat,passengerCnt,taxiId,driverId";

/// The `time2` of a START line in the data set: the drop-off is not known at the pick-up.
pub const UNKNOWN_TIME_MS: i64 = 0;

const MS_PER_DAY: i64 = 86_400_000;

/// A line that is not a TaxiRide CSV line; the message names the column, its value and what it
/// must be. Callers add the file and the line number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CsvError {
    /// The line is empty.
    #[error("the line is empty: remove it (every line is one ride event)")]
    Empty,
    /// The line does not have [`COLUMNS`] columns.
    #[error("expected {COLUMNS} comma-separated columns ({HEADER}), found {found}")]
    ColumnCount {
        /// How many it has.
        found: usize,
    },
    /// A column's value cannot be read.
    #[error("column {column} ({name}): '{value}' is not {wanted}")]
    Column {
        /// The column, from 1.
        column: usize,
        /// Its name.
        name: &'static str,
        /// The value found.
        value: String,
        /// What the value must be.
        wanted: &'static str,
    },
}

/// Whether `line` is our header line ([`HEADER`]): its first column is `rideId`. A data line's
/// first column is a number, so no ride is taken for a header.
///
/// ```
/// use onceflow_taxi::csv::{is_header, HEADER};
/// assert!(is_header(HEADER));
/// const START: &str = concat!(
///     "7,START,2013-01-01 00:00:00,1970-01-01 00:00:00,",
///     "-73.86617,40.77109,-73.98219,40.69932,1,2013000185,2013000186",
/// );
/// assert!(!is_header(START));
/// ```
pub fn is_header(line: &str) -> bool {
    line.split(',').next().map(str::trim) == Some(NAMES[0])
}

/// The ride event of a CSV line: `event_time` is `time1` in ms.
///
/// # Errors
/// [`CsvError`] naming the first column that cannot be read (or the column count).
///
/// ```
/// use onceflow_taxi::csv::parse_line;
/// const START: &str = concat!(
///     "7,START,2013-01-01 00:00:00,1970-01-01 00:00:00,",
///     "-73.86617,40.77109,-73.98219,40.69932,1,2013000185,2013000186",
/// );
/// let ride = parse_line(START)?;
/// assert_eq!((ride.ride_id, ride.is_start, ride.driver_id), (7, true, 2013000186));
/// assert_eq!(ride.event_time, 1_356_998_400_000); // 2013-01-01 00:00:00 UTC
/// let e = parse_line("7,START").unwrap_err();
/// assert!(e.to_string().starts_with("expected 11 comma-separated columns"));
/// # Ok::<(), onceflow_taxi::csv::CsvError>(())
/// ```
pub fn parse_line(line: &str) -> Result<Ride, CsvError> {
    parse_line_with_other_time(line).map(|(ride, _)| ride)
}

/// The ride event of a CSV line and its `time2` in ms (the other end of the ride; for START
/// lines of the data set [`UNKNOWN_TIME_MS`]).
///
/// # Errors
/// [`CsvError`] naming the first column that cannot be read (or the column count).
///
/// ```
/// use onceflow_taxi::csv::parse_line_with_other_time;
/// const END: &str = concat!(
///     "7,END,2013-01-01 00:16:00,2013-01-01 00:00:00,",
///     "-73.86617,40.77109,-73.98219,40.69932,1,2013000185,2013000186",
/// );
/// let (end, started) = parse_line_with_other_time(END)?;
/// assert_eq!(end.event_time - started, 16 * 60_000); // a 16-minute ride
/// # Ok::<(), onceflow_taxi::csv::CsvError>(())
/// ```
pub fn parse_line_with_other_time(line: &str) -> Result<(Ride, i64), CsvError> {
    // A file written on Windows ends its lines with \r\n; BufRead::lines leaves the \r to us
    // when the caller split on \n itself.
    let line = line.strip_suffix('\r').unwrap_or(line);
    if line.is_empty() {
        return Err(CsvError::Empty);
    }
    let columns: Vec<&str> = line.split(',').collect();
    let &[ride_id, kind, time1, time2, start_lon, start_lat, end_lon, end_lat, passengers, taxi_id, driver_id] =
        columns.as_slice()
    else {
        return Err(CsvError::ColumnCount {
            found: columns.len(),
        });
    };
    let bad = |index: usize, value: &str, wanted: &'static str| CsvError::Column {
        column: index + 1,
        name: NAMES[index],
        value: value.to_owned(),
        wanted,
    };
    let id = |index: usize, value: &str| {
        value
            .parse::<u64>()
            .map_err(|_| bad(index, value, "a whole number 0 or more"))
    };
    let time = |index: usize, value: &str| {
        parse_time(value).ok_or_else(|| bad(index, value, "a time yyyy-MM-dd HH:mm:ss"))
    };
    let coordinate = |index: usize, value: &str| {
        if value.is_empty() {
            return Ok(0.0);
        }
        value
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| bad(index, value, "a number of degrees (or empty for 0)"))
    };
    // Column by column, so the error names the first bad one.
    let ride_id = id(0, ride_id)?;
    let is_start = match kind {
        "START" => true,
        "END" => false,
        _ => return Err(bad(1, kind, "START or END")),
    };
    let event_time = time(2, time1)?;
    let other_time = time(3, time2)?;
    let ride = Ride {
        ride_id,
        is_start,
        event_time,
        start_lon: coordinate(4, start_lon)?,
        start_lat: coordinate(5, start_lat)?,
        end_lon: coordinate(6, end_lon)?,
        end_lat: coordinate(7, end_lat)?,
        passengers: passengers
            .parse::<u32>()
            .map_err(|_| bad(8, passengers, "a whole number of passengers 0 or more"))?,
        taxi_id: id(9, taxi_id)?,
        driver_id: id(10, driver_id)?,
    };
    Ok((ride, other_time))
}

/// The CSV line of `ride` (no line break), `time2` being `other_time_ms`. Times are rounded
/// down to whole seconds (the format has no more), so a ride round-trips exactly when its times
/// are whole seconds in the years 0000–9999; a coordinate is written in the fewest digits that
/// read back to the same number.
///
/// ```
/// use onceflow_taxi::csv::{format_line, parse_line_with_other_time};
/// const END: &str = concat!(
///     "7,END,2013-01-01 00:16:00,2013-01-01 00:00:00,",
///     "-73.86617,40.77109,-73.98219,40.69932,1,2013000185,2013000186",
/// );
/// let (ride, started) = parse_line_with_other_time(END)?;
/// assert_eq!(format_line(&ride, started), END);
/// # Ok::<(), onceflow_taxi::csv::CsvError>(())
/// ```
pub fn format_line(ride: &Ride, other_time_ms: i64) -> String {
    // Debug, not Display, prints an integral coordinate as -74.0 rather than -74, as Java's
    // Float.toString does in the data set.
    format!(
        "{},{},{},{},{:?},{:?},{:?},{:?},{},{},{}",
        ride.ride_id,
        if ride.is_start { "START" } else { "END" },
        format_time(ride.event_time),
        format_time(other_time_ms),
        ride.start_lon,
        ride.start_lat,
        ride.end_lon,
        ride.end_lat,
        ride.passengers,
        ride.taxi_id,
        ride.driver_id
    )
}

/// `yyyy-MM-dd HH:mm:ss` (UTC) as ms since the epoch; `None` when it is not that format or not
/// a real time (month 13, 30 February, hour 24, a leap second).
///
/// ```
/// use onceflow_taxi::csv::parse_time;
/// assert_eq!(parse_time("2013-01-01 00:00:01"), Some(1_356_998_401_000));
/// assert_eq!(parse_time("2013-02-30 00:00:00"), None);
/// assert_eq!(parse_time("2013-01-01T00:00:00"), None);
/// ```
pub fn parse_time(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    let separators = [(4, b'-'), (7, b'-'), (10, b' '), (13, b':'), (16, b':')];
    if b.len() != 19 || separators.iter().any(|&(i, c)| b.get(i) != Some(&c)) {
        return None;
    }
    let number = |from: usize, to: usize| -> Option<i64> {
        b.get(from..to)?.iter().try_fold(0i64, |n, &c| {
            c.is_ascii_digit().then(|| n * 10 + i64::from(c - b'0'))
        })
    };
    let (year, month, day) = (number(0, 4)?, number(5, 7)?, number(8, 10)?);
    let (hour, minute, second) = (number(11, 13)?, number(14, 16)?, number(17, 19)?);
    if !(1..=12).contains(&month)
        || !(1..=days_in_month(year, month)).contains(&day)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let seconds = ((days_from_civil(year, month, day) * 24 + hour) * 60 + minute) * 60 + second;
    Some(seconds * 1000)
}

/// ms since the epoch as `yyyy-MM-dd HH:mm:ss` (UTC), rounded down to the second. Years
/// outside 0000–9999 do not fit the format (they print with more digits or a sign).
///
/// ```
/// use onceflow_taxi::csv::format_time;
/// assert_eq!(format_time(1_356_998_401_999), "2013-01-01 00:00:01");
/// assert_eq!(format_time(-1), "1969-12-31 23:59:59");
/// ```
pub fn format_time(ms: i64) -> String {
    let days = ms.div_euclid(MS_PER_DAY);
    let seconds = ms.rem_euclid(MS_PER_DAY) / 1000;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    )
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a date of the proleptic Gregorian calendar (month 1–12).
///
/// The year is counted from March, so the leap day is the last day of its year and a month's
/// first day is a linear function of the month: `(153·m + 2) / 5` for m = 0 (March) … 11
/// (February). 400 years are exactly 146 097 days, so a date is its 400-year era plus the day
/// within the era.
///
/// ```
/// use onceflow_taxi::csv::days_from_civil;
/// assert_eq!(days_from_civil(1970, 1, 1), 0);
/// assert_eq!(days_from_civil(2000, 3, 1), 11_017); // after 2000-02-29
/// ```
pub fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400; // 0..=399
    let month_from_march = (month + 9) % 12; // March 0 … February 11
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1; // 0..=365
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    // 0000-03-01 is day 0 of era 0; 1970-01-01 is 719 468 days after it.
    era * 146_097 + day_of_era - 719_468
}

/// The date (year, month 1–12, day 1–31) of a day counted from 1970-01-01: the inverse of
/// [`days_from_civil`].
///
/// ```
/// use onceflow_taxi::csv::{civil_from_days, days_from_civil};
/// assert_eq!(civil_from_days(11_016), (2000, 2, 29));
/// assert_eq!(civil_from_days(days_from_civil(1600, 3, 1)), (1600, 3, 1));
/// ```
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097; // 0..=146096
                                           // Years of the era: 365 days each, less the leap days counted so far (one per 4 years but
                                           // none per 100, again one per 400; the era's last day is the 400th year's leap day).
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The CSV lines of ride events as the data set writes them: START with `time2`
/// [`UNKNOWN_TIME_MS`], END with `time2` its ride's START event time (an END whose START came
/// before it in `rides`; else [`UNKNOWN_TIME_MS`]). Holds only the rides in progress.
///
/// ```
/// use onceflow_taxi::csv::{lines, parse_line_with_other_time, UNKNOWN_TIME_MS};
/// use onceflow_taxi::generate::{rides_by_event_time, Config};
/// let rides = rides_by_event_time(Config { rides: 10, ..Config::default() }, 1000)?;
/// let text: Vec<String> = lines(rides).collect();
/// assert_eq!(text.len(), 20);
/// for line in &text {
///     let (ride, other) = parse_line_with_other_time(line)?;
///     // An END names the time of its START; a START, the unknown time.
///     assert_eq!(ride.is_start, other == UNKNOWN_TIME_MS);
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn lines<I: Iterator<Item = Ride>>(rides: I) -> Lines<I> {
    Lines {
        rides,
        started: HashMap::new(),
    }
}

/// The iterator of [`lines`].
pub struct Lines<I> {
    rides: I,
    /// Ride id → its START's event time, until its END.
    started: HashMap<u64, i64>,
}

impl<I: Iterator<Item = Ride>> Iterator for Lines<I> {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        let ride = self.rides.next()?;
        let other = if ride.is_start {
            self.started.insert(ride.ride_id, ride.event_time);
            UNKNOWN_TIME_MS
        } else {
            self.started
                .remove(&ride.ride_id)
                .unwrap_or(UNKNOWN_TIME_MS)
        };
        Some(format_line(&ride, other))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.rides.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::{self, Config};

    const START: &str = "7,START,2013-01-01 00:00:00,1970-01-01 00:00:00,-73.86617,40.77109,-73.98219,40.69932,1,2013000185,2013000186";
    const END: &str = "7,END,2013-01-01 00:16:00,2013-01-01 00:00:00,-73.86617,40.77109,-73.98219,40.69932,1,2013000185,2013000186";

    fn ride(is_start: bool, event_time: i64) -> Ride {
        Ride {
            ride_id: 7,
            driver_id: 2013000186,
            taxi_id: 2013000185,
            is_start,
            start_lon: -73.86617,
            start_lat: 40.77109,
            end_lon: -73.98219,
            end_lat: 40.69932,
            passengers: 1,
            event_time,
        }
    }

    #[test]
    fn times_are_utc_seconds_since_the_epoch() {
        for (text, ms) in [
            ("1970-01-01 00:00:00", 0),
            ("1969-12-31 23:59:59", -1000),
            ("2013-01-01 00:00:00", 1_356_998_400_000),
            ("2000-02-29 12:34:56", 951_827_696_000),
            ("2024-12-31 23:59:59", 1_735_689_599_000),
            ("2025-01-01 00:00:00", generate::DEFAULT_START_MS),
            ("1600-03-01 00:00:00", -11_670_912_000_000),
            ("0000-01-01 00:00:00", -62_167_219_200_000),
            ("9999-12-31 23:59:59", 253_402_300_799_000),
        ] {
            assert_eq!(parse_time(text), Some(ms), "{text}");
            assert_eq!(format_time(ms), text, "{ms}");
        }
        // Formatting rounds down to the second, before the epoch too.
        assert_eq!(format_time(999), "1970-01-01 00:00:00");
        assert_eq!(format_time(-1), "1969-12-31 23:59:59");
    }

    #[test]
    fn what_is_not_a_time_is_refused() {
        for text in [
            "",
            "2013-13-01 00:00:00",
            "2013-00-01 00:00:00",
            "2013-01-00 00:00:00",
            "2013-01-32 00:00:00",
            "2013-04-31 00:00:00",
            "2013-02-29 00:00:00",
            "1900-02-29 00:00:00",
            "2013-01-01 24:00:00",
            "2013-01-01 00:60:00",
            "2013-01-01 00:00:60",
            "2013-01-01T00:00:00",
            "2013-1-01 00:00:00",
            "2013-01-01 00:00:00.000",
            "+013-01-01 00:00:00",
            "2013-01-01 0a:00:00",
            "2013-01-01 00:00:0",
            "２013-01-01 00:00:0",
        ] {
            assert_eq!(parse_time(text), None, "{text:?}");
        }
        assert!(parse_time("2000-02-29 00:00:00").is_some());
        assert!(parse_time("2012-02-29 00:00:00").is_some());
    }

    /// Every day from 1890 to 2110 (leap years, centuries, 2000) converts both ways, one day
    /// after the other.
    #[test]
    fn the_calendar_arithmetic_is_its_own_inverse_day_by_day() {
        let first = days_from_civil(1890, 1, 1);
        let mut date = (1890, 1, 1);
        for days in first..days_from_civil(2110, 1, 1) {
            assert_eq!(civil_from_days(days), date, "day {days}");
            assert_eq!(days_from_civil(date.0, date.1, date.2), days);
            date = if date.2 < days_in_month(date.0, date.1) {
                (date.0, date.1, date.2 + 1)
            } else if date.1 < 12 {
                (date.0, date.1 + 1, 1)
            } else {
                (date.0 + 1, 1, 1)
            };
        }
        assert_eq!(days_from_civil(1970, 1, 1), 0);
    }

    #[test]
    fn start_and_end_lines_read_as_rides_and_write_back() {
        let start_ms = 1_356_998_400_000;
        let end_ms = start_ms + 16 * 60_000;
        for (line, want, other) in [
            (START, ride(true, start_ms), UNKNOWN_TIME_MS),
            (END, ride(false, end_ms), start_ms),
        ] {
            assert_eq!(
                parse_line_with_other_time(line).unwrap(),
                (want.clone(), other)
            );
            assert_eq!(parse_line(line).unwrap(), want);
            assert_eq!(format_line(&want, other), line);
        }
        // A \r\n line end is not part of the last column.
        assert_eq!(
            parse_line(&format!("{START}\r")).unwrap(),
            ride(true, start_ms)
        );
    }

    #[test]
    fn an_empty_coordinate_is_zero_and_writes_back_as_zero() {
        let line = "3,END,2013-01-01 00:10:00,2013-01-01 00:00:00,,40.7,-73.9,,2,11,12";
        let r = parse_line(line).unwrap();
        assert_eq!(
            (r.start_lon, r.start_lat, r.end_lon, r.end_lat),
            (0.0, 40.7, -73.9, 0.0)
        );
        assert_eq!(
            format_line(&r, 1_356_998_400_000),
            "3,END,2013-01-01 00:10:00,2013-01-01 00:00:00,0.0,40.7,-73.9,0.0,2,11,12"
        );
    }

    #[test]
    fn rides_round_trip_through_lines() {
        let mut rides: Vec<Ride> = generate::rides(Config {
            rides: 300,
            ..Config::default()
        })
        .unwrap()
        .collect();
        // Whole seconds round-trip; odd coordinates too.
        rides.push(Ride {
            start_lon: -74.0,
            start_lat: 0.0,
            end_lon: 1e-7,
            end_lat: -0.0,
            ..ride(true, 1000)
        });
        for r in &mut rides {
            r.event_time -= r.event_time.rem_euclid(1000);
            for other in [UNKNOWN_TIME_MS, r.event_time - 60_000] {
                let line = format_line(r, other);
                let (back, back_other) = parse_line_with_other_time(&line).unwrap();
                assert_eq!((&back, back_other), (&*r, other), "{line}");
                assert_eq!(format_line(&back, back_other), line);
            }
        }
        // Milliseconds are rounded down.
        let r = parse_line(&format_line(&ride(true, 1_356_998_400_999), 0)).unwrap();
        assert_eq!(r.event_time, 1_356_998_400_000);
    }

    #[test]
    fn a_bad_column_is_named_with_its_value_and_what_it_must_be() {
        let with = |column: usize, value: &str| {
            let mut c: Vec<&str> = START.split(',').collect();
            c[column - 1] = value;
            c.join(",")
        };
        for (line, error) in [
            (
                with(3, "2013-13-01 00:00:00"),
                "column 3 (time1): '2013-13-01 00:00:00' is not a time yyyy-MM-dd HH:mm:ss",
            ),
            (
                with(4, "0"),
                "column 4 (time2): '0' is not a time yyyy-MM-dd HH:mm:ss",
            ),
            (
                with(1, "-7"),
                "column 1 (rideId): '-7' is not a whole number 0 or more",
            ),
            (
                with(2, "start"),
                "column 2 (isStart): 'start' is not START or END",
            ),
            (
                with(5, "west"),
                "column 5 (startLon): 'west' is not a number of degrees (or empty for 0)",
            ),
            (
                with(8, "NaN"),
                "column 8 (endLat): 'NaN' is not a number of degrees (or empty for 0)",
            ),
            (
                with(9, "1.5"),
                "column 9 (passengerCnt): '1.5' is not a whole number of passengers 0 or more",
            ),
            (
                with(10, ""),
                "column 10 (taxiId): '' is not a whole number 0 or more",
            ),
            (
                with(11, "x"),
                "column 11 (driverId): 'x' is not a whole number 0 or more",
            ),
            (
                "7,START,2013-01-01 00:00:00".to_owned(),
                "expected 11 comma-separated columns (rideId,isStart,time1,time2,startLon,\
                 startLat,endLon,endLat,passengerCnt,taxiId,driverId), found 3",
            ),
            (
                format!("{START},extra"),
                "expected 11 comma-separated columns (rideId,isStart,time1,time2,startLon,\
                 startLat,endLon,endLat,passengerCnt,taxiId,driverId), found 12",
            ),
            (
                String::new(),
                "the line is empty: remove it (every line is one ride event)",
            ),
            (
                HEADER.to_owned(),
                "column 1 (rideId): 'rideId' is not a whole number 0 or more",
            ),
        ] {
            assert_eq!(parse_line(&line).unwrap_err().to_string(), error, "{line}");
        }
    }

    #[test]
    fn only_our_header_is_a_header() {
        for (line, header) in [
            (HEADER, true),
            ("rideId,whatever", true),
            (START, false),
            (END, false),
            ("", false),
            ("ride,START", false),
        ] {
            assert_eq!(is_header(line), header, "{line}");
        }
        assert_eq!(HEADER.split(',').collect::<Vec<_>>(), NAMES);
    }

    #[test]
    fn lines_give_an_end_its_start_time_and_a_start_the_unknown_time() {
        let start = ride(true, 1_356_998_400_000);
        let end = ride(false, 1_356_999_360_000);
        let orphan = Ride {
            ride_id: 8,
            ..end.clone()
        };
        let got: Vec<String> = lines([start, end, orphan].into_iter()).collect();
        assert_eq!(
            got,
            [
                START,
                END,
                "8,END,2013-01-01 00:16:00,1970-01-01 00:00:00,-73.86617,40.77109,-73.98219,\
                 40.69932,1,2013000185,2013000186"
            ]
        );
    }

    /// fixtures/rides-sample.csv is `onceflow taxi generate --format csv --count 100 --output
    /// crates/onceflow-taxi/fixtures/rides-sample.csv` (seed 1, the defaults otherwise).
    /// Regenerate it with ONCEFLOW_UPDATE_FIXTURES=1 after a deliberate change.
    #[test]
    fn the_csv_sample_fixture_is_what_seed_1_generates_in_event_time_order() {
        let config = Config {
            rides: 100,
            ..Config::default()
        };
        let sorted = generate::rides_by_event_time(config, 1000).unwrap();
        let text: String = lines(sorted).map(|l| l + "\n").collect();
        assert_eq!(text.lines().count(), 200);
        crate::assert_fixture("rides-sample.csv", &text);
        let mut previous = i64::MIN;
        for line in text.lines() {
            let r = parse_line(line).unwrap();
            assert!(r.event_time >= previous, "{line}");
            previous = r.event_time;
        }
    }
}
