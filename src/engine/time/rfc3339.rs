//! RFC 3339 timestamps (`2024-01-02T03:04:05.123Z`, `…+02:00`) as epoch milliseconds: the
//! event time of a record whose time field is a string, as the proto3 JSON mapping gives a
//! `google.protobuf.Timestamp` and many JSON producers write times.

/// A JSON value as an event time: an integer of epoch milliseconds in the i64 range, or an
/// RFC 3339 date-time string; else `None`.
pub(crate) fn epoch_ms_of(value: &serde_json::Value) -> Option<i64> {
    match value {
        serde_json::Value::String(s) => epoch_ms(s),
        v => v.as_i64(),
    }
}

/// The epoch milliseconds of an RFC 3339 date-time (fractions beyond milliseconds are cut
/// toward the past), or `None` when `text` is not one.
pub(crate) fn epoch_ms(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<i64> {
        let s = text.get(from..to)?;
        s.bytes().all(|c| c.is_ascii_digit()).then(|| s.parse().ok())?
    };
    let (year, month, day) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (hour, minute, second) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut rest = &text[19..];
    let mut millis = 0;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let first3 = &fraction[..digits.min(3)];
        millis = first3.parse::<i64>().ok()? * 10i64.pow(3 - first3.len() as u32);
        rest = &fraction[digits..];
    }
    let offset_minutes = match rest {
        "Z" | "z" => 0,
        _ => {
            let (sign, hm) = match rest.as_bytes().first()? {
                b'+' => (1, &rest[1..]),
                b'-' => (-1, &rest[1..]),
                _ => return None,
            };
            let (h, m) = hm.split_once(':')?;
            if h.len() != 2 || m.len() != 2 {
                return None;
            }
            let (h, m): (i64, i64) = (h.parse().ok()?, m.parse().ok()?);
            if h > 23 || m > 59 {
                return None;
            }
            sign * (h * 60 + m)
        }
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_minutes * 60;
    Some(seconds * 1000 + millis)
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

pub(super) fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to the proleptic Gregorian date (Howard Hinnant's algorithm).
pub(super) fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// (year, month, day) of a day count since 1970-01-01 (Howard Hinnant's algorithm).
pub(crate) fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_of_day_counts_invert_days_from_civil() {
        for (days, want) in [
            (0, (1970, 1, 1)),
            (59, (1970, 3, 1)),
            (11_016, (2000, 2, 29)),
            (-1, (1969, 12, 31)),
        ] {
            assert_eq!(civil_from_days(days), want, "{days}");
            assert_eq!(days_from_civil(want.0, want.1, want.2), days, "{want:?}");
        }
    }


    #[test]
    fn rfc3339_times_table() {
        #[rustfmt::skip]
        let cases: &[(&str, Option<i64>)] = &[
            ("1970-01-01T00:00:00Z",           Some(0)),
            ("2024-01-02T03:04:05.123Z",       Some(1_704_164_645_123)),
            ("2024-01-02T03:04:05.1234567Z",   Some(1_704_164_645_123)),
            ("2024-01-02T03:04:05.1Z",         Some(1_704_164_645_100)),
            ("2024-01-02T05:04:05+02:00",      Some(1_704_164_645_000)),
            ("2024-01-01T23:04:05-04:00",      Some(1_704_164_645_000)),
            ("2024-02-29T00:00:00Z",           Some(1_709_164_800_000)),
            ("1969-12-31T23:59:59.999Z",       Some(-1)),
            ("2023-11-14T22:13:20Z",           Some(1_700_000_000_000)),
            ("2023-02-29T00:00:00Z",           None),
            ("2024-13-01T00:00:00Z",           None),
            ("2024-01-02T24:00:00Z",           None),
            ("2024-01-02T03:04:05",            None),
            ("2024-01-02T03:04:05.Z",          None),
            ("2024-01-02T03:04:05+0200",       None),
            ("1700000000000",                  None),
            ("",                               None),
            ("2024-01-02T03:04:05Zjunk",       None),
        ];
        for (text, want) in cases {
            assert_eq!(epoch_ms(text), *want, "{text}");
        }
    }
}
