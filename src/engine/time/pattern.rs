//! Timestamps in a declared text layout, read as epoch milliseconds: a CSV column's time
//! (`yyyy-MM-dd HH:mm:ss`, the pattern letters of Java's `DateTimeFormatter` and Flink's
//! formats), RFC 3339, or a number of epoch milliseconds or seconds.
//!
//! A pattern holds no zone: its times are read as UTC (state it in the job: data written in
//! local time needs converting first, or an RFC 3339 column with its offset).

use super::rfc3339;

/// How a column's text is a time; [`TimestampFormat::parse`] reads the job file's name for it.
///
/// ```
/// use onceflow::engine::formats::TimestampFormat;
///
/// let format = TimestampFormat::parse("yyyy-MM-dd HH:mm:ss")?;
/// assert_eq!(format.epoch_ms("2013-01-01 00:16:00"), Some(1_356_999_360_000));
/// assert_eq!(format.epoch_ms("2013-01-01"), None);
/// assert_eq!(TimestampFormat::parse("epoch-seconds")?.epoch_ms("60"), Some(60_000));
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimestampFormat {
    kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// `2024-01-02T03:04:05.123Z`, `…+02:00`.
    Rfc3339,
    /// A whole number of milliseconds since the epoch.
    EpochMillis,
    /// A whole number of seconds since the epoch.
    EpochSeconds,
    /// A pattern of `yyyy MM dd HH mm ss S…`, `'quoted text'` and other characters as they
    /// are, read as UTC.
    Pattern {
        /// The pattern as written (errors show it).
        text: String,
        /// Its pieces, in order.
        pieces: Vec<Piece>,
    },
}

/// One piece of a pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Piece {
    /// `yyyy`: four digits.
    Year,
    /// `MM`: two digits, 01–12.
    Month,
    /// `dd`: two digits, 01 to the month's last day.
    Day,
    /// `HH`: two digits, 00–23.
    Hour,
    /// `mm`: two digits, 00–59.
    Minute,
    /// `ss`: two digits, 00–59.
    Second,
    /// `S` repeated n times: exactly n digits of a fraction of a second (beyond milliseconds
    /// cut toward the past).
    Fraction(usize),
    /// A character that must be there as it is.
    Literal(char),
}

impl TimestampFormat {
    /// The format a job file names: `"rfc3339"`, `"epoch-millis"`, `"epoch-seconds"`, or a
    /// pattern such as `"yyyy-MM-dd HH:mm:ss"` or `"yyyy-MM-dd'T'HH:mm:ss.SSS"`.
    ///
    /// # Errors
    /// A pattern letter other than `y M d H m s S` (or a run of one of the wrong length), an
    /// unclosed quote, or a pattern without a year, month and day.
    pub fn parse(spec: &str) -> Result<TimestampFormat, String> {
        match spec {
            "rfc3339" => return Ok(TimestampFormat { kind: Kind::Rfc3339 }),
            "epoch-millis" => return Ok(TimestampFormat { kind: Kind::EpochMillis }),
            "epoch-seconds" => return Ok(TimestampFormat { kind: Kind::EpochSeconds }),
            _ => {}
        }
        let chars: Vec<char> = spec.chars().collect();
        let mut pieces = Vec::new();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if c == '\'' {
                let close = chars[i + 1..]
                    .iter()
                    .position(|&q| q == '\'')
                    .ok_or_else(|| format!("the quote at character {} of {spec:?} is not closed: close it with '", i + 1))?;
                let quoted = &chars[i + 1..i + 1 + close];
                if quoted.is_empty() {
                    pieces.push(Piece::Literal('\''));
                }
                pieces.extend(quoted.iter().map(|&q| Piece::Literal(q)));
                i += close + 2;
                continue;
            }
            if !c.is_ascii_alphabetic() {
                pieces.push(Piece::Literal(c));
                i += 1;
                continue;
            }
            let run = chars[i..].iter().take_while(|&&r| r == c).count();
            let piece = match (c, run) {
                ('y', 4) => Piece::Year,
                ('M', 2) => Piece::Month,
                ('d', 2) => Piece::Day,
                ('H', 2) => Piece::Hour,
                ('m', 2) => Piece::Minute,
                ('s', 2) => Piece::Second,
                ('S', 1..=9) => Piece::Fraction(run),
                ('y' | 'M' | 'd' | 'H' | 'm' | 's' | 'S', _) => {
                    return Err(format!(
                        "{:?} in {spec:?} is not a field of a time: write yyyy, MM, dd, HH, mm, ss or S to SSSSSSSSS",
                        chars[i..i + run].iter().collect::<String>()
                    ))
                }
                _ => {
                    return Err(format!(
                        "the pattern letter '{c}' in {spec:?} is not one of yyyy MM dd HH mm ss S (times are read as UTC); quote literal text as 'T'"
                    ))
                }
            };
            pieces.push(piece);
            i += run;
        }
        for (needed, name) in [
            (Piece::Year, "yyyy"),
            (Piece::Month, "MM"),
            (Piece::Day, "dd"),
        ] {
            if !pieces.contains(&needed) {
                return Err(format!(
                    "the time pattern {spec:?} has no {name}: a time needs a year, month and day (or use \"rfc3339\", \"epoch-millis\" or \"epoch-seconds\")"
                ));
            }
        }
        Ok(TimestampFormat {
            kind: Kind::Pattern {
                text: spec.to_owned(),
                pieces,
            },
        })
    }

    /// How errors describe it: `a time yyyy-MM-dd HH:mm:ss`.
    pub fn describe(&self) -> String {
        match &self.kind {
            Kind::Rfc3339 => "an RFC 3339 time (2024-01-02T03:04:05Z)".to_owned(),
            Kind::EpochMillis => "a whole number of epoch milliseconds".to_owned(),
            Kind::EpochSeconds => "a whole number of epoch seconds".to_owned(),
            Kind::Pattern { text, .. } => format!("a time {text}"),
        }
    }

    /// The epoch milliseconds of `text`, or `None` when it is not a time of this format.
    pub fn epoch_ms(&self, text: &str) -> Option<i64> {
        match &self.kind {
            Kind::Rfc3339 => rfc3339::epoch_ms(text),
            Kind::EpochMillis => whole(text),
            Kind::EpochSeconds => whole(text)?.checked_mul(1000),
            Kind::Pattern { pieces, .. } => by_pattern(pieces, text),
        }
    }
}

/// An optionally signed run of ASCII digits.
fn whole(text: &str) -> Option<i64> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

fn by_pattern(pieces: &[Piece], text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    let mut at = 0;
    let digits = |n: usize, at: &mut usize| -> Option<i64> {
        let run = bytes.get(*at..*at + n)?;
        if !run.iter().all(u8::is_ascii_digit) {
            return None;
        }
        *at += n;
        Some(run.iter().fold(0, |v, d| v * 10 + i64::from(d - b'0')))
    };
    let (mut year, mut month, mut day) = (1970, 1, 1);
    let (mut hour, mut minute, mut second, mut millis) = (0, 0, 0, 0);
    for piece in pieces {
        match *piece {
            Piece::Year => year = digits(4, &mut at)?,
            Piece::Month => month = digits(2, &mut at)?,
            Piece::Day => day = digits(2, &mut at)?,
            Piece::Hour => hour = digits(2, &mut at)?,
            Piece::Minute => minute = digits(2, &mut at)?,
            Piece::Second => second = digits(2, &mut at)?,
            Piece::Fraction(n) => {
                let fraction = digits(n, &mut at)?;
                millis = match n {
                    1..=3 => fraction * 10i64.pow(3 - n as u32),
                    _ => fraction / 10i64.pow(n as u32 - 3),
                };
            }
            Piece::Literal(c) => {
                let rest = text.get(at..)?;
                if !rest.starts_with(c) {
                    return None;
                }
                at += c.len_utf8();
            }
        }
    }
    if at != bytes.len() {
        return None;
    }
    if !(1..=12).contains(&month) || day < 1 || day > rfc3339::days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let days = rfc3339::days_from_civil(year, month, day);
    Some((days * 86_400 + hour * 3600 + minute * 60 + second) * 1000 + millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_by_format_table() {
        #[rustfmt::skip]
        let cases: &[(&str, &str, Option<i64>)] = &[
            ("yyyy-MM-dd HH:mm:ss",        "2013-01-01 00:16:00",        Some(1_356_999_360_000)),
            ("yyyy-MM-dd HH:mm:ss",        "1970-01-01 00:00:00",        Some(0)),
            ("yyyy-MM-dd HH:mm:ss",        "2013-01-01 00:16",           None),
            ("yyyy-MM-dd HH:mm:ss",        "2013-01-01 00:16:00 ",       None),
            ("yyyy-MM-dd HH:mm:ss",        "2013-02-29 00:00:00",        None),
            ("yyyy-MM-dd HH:mm:ss",        "2024-02-29 00:00:00",        Some(1_709_164_800_000)),
            ("yyyy-MM-dd HH:mm:ss",        "2013-01-01 24:00:00",        None),
            ("yyyy-MM-dd HH:mm:ss",        "2013-01-01T00:16:00",        None),
            ("yyyy-MM-dd'T'HH:mm:ss.SSS",  "2024-01-02T03:04:05.123",    Some(1_704_164_645_123)),
            ("yyyy-MM-dd'T'HH:mm:ss.S",    "2024-01-02T03:04:05.1",      Some(1_704_164_645_100)),
            ("yyyy-MM-dd'T'HH:mm:ss.SSSSSS","2024-01-02T03:04:05.123456", Some(1_704_164_645_123)),
            ("dd/MM/yyyy",                 "02/01/2024",                 Some(1_704_153_600_000)),
            ("yyyyMMdd",                   "20240102",                   Some(1_704_153_600_000)),
            ("yyyyMMdd",                   "2024010",                    None),
            ("yyyy-MM-dd",                 "1969-12-31",                 Some(-86_400_000)),
            ("rfc3339",                    "2024-01-02T05:04:05+02:00",  Some(1_704_164_645_000)),
            ("rfc3339",                    "2024-01-02 03:04:05",        None),
            ("epoch-millis",               "1704164645123",              Some(1_704_164_645_123)),
            ("epoch-millis",               "-1",                         Some(-1)),
            ("epoch-millis",               "+1",                         None),
            ("epoch-millis",               "1.5",                        None),
            ("epoch-seconds",              "1704164645",                 Some(1_704_164_645_000)),
            ("epoch-seconds",              "99999999999999999",          None),
        ];
        for (spec, text, want) in cases {
            let format = TimestampFormat::parse(spec).unwrap();
            assert_eq!(format.epoch_ms(text), *want, "{spec} {text}");
        }
    }

    #[test]
    fn a_pattern_it_cannot_read_is_named_with_what_to_write() {
        #[rustfmt::skip]
        let cases: &[(&str, &str)] = &[
            ("yy-MM-dd",            "\"yy\" in \"yy-MM-dd\" is not a field of a time: write yyyy, MM, dd, HH, mm, ss or S to SSSSSSSSS"),
            ("yyyy-MM-dd hh:mm",    "the pattern letter 'h' in \"yyyy-MM-dd hh:mm\" is not one of yyyy MM dd HH mm ss S (times are read as UTC); quote literal text as 'T'"),
            ("yyyy-MM-ddTHH",       "the pattern letter 'T' in \"yyyy-MM-ddTHH\" is not one of yyyy MM dd HH mm ss S (times are read as UTC); quote literal text as 'T'"),
            ("yyyy-MM-dd'T",        "the quote at character 11 of \"yyyy-MM-dd'T\" is not closed: close it with '"),
            ("HH:mm:ss",            "the time pattern \"HH:mm:ss\" has no yyyy: a time needs a year, month and day (or use \"rfc3339\", \"epoch-millis\" or \"epoch-seconds\")"),
        ];
        for (spec, want) in cases {
            assert_eq!(TimestampFormat::parse(spec).unwrap_err(), *want, "{spec}");
        }
        let quoted = TimestampFormat::parse("yyyy-MM-dd''HH").unwrap();
        assert_eq!(quoted.epoch_ms("1970-01-01'01"), Some(3_600_000));
    }
}
