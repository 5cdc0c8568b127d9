//! [`CsvFormat`]: a CSV line as a JSON record, by declared columns or by the names of each
//! file's header line; the column reader and the line writer Kafka's `csv` values share.

use std::io::Write;
use std::sync::OnceLock;

use serde_json::Value;

use super::{LineFormat, ParsedLine};
use crate::engine::time::TimestampFormat;

/// How a column's text becomes the record field's value.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ColumnType {
    /// The text itself.
    String,
    /// A whole number in the i64 range.
    Long,
    /// A finite number.
    Double,
    /// `true`/`false` (any case), or the texts given.
    Boolean {
        /// The text of true.
        true_text: String,
        /// The text of false.
        false_text: String,
    },
    /// A time in the given format, as epoch milliseconds.
    Timestamp(TimestampFormat),
}

impl ColumnType {
    /// The type a job file names (`string`, `long`, `double`, `boolean`, `timestamp`), with
    /// what a `boolean` or `timestamp` takes beside it.
    ///
    /// # Errors
    /// A name that is not a type; a timestamp without its format; a setting another type
    /// does not take.
    ///
    /// ```
    /// use onceflow::engine::formats::ColumnType;
    /// assert_eq!(ColumnType::named("long", None, None).unwrap(), ColumnType::Long);
    /// assert!(ColumnType::named("timestamp", None, None).is_err());
    /// ```
    pub fn named(
        name: &str,
        format: Option<&str>,
        texts: Option<(String, String)>,
    ) -> Result<ColumnType, String> {
        let kind = match name {
            "string" => ColumnType::String,
            "long" => ColumnType::Long,
            "double" => ColumnType::Double,
            "boolean" => {
                let (true_text, false_text) =
                    texts.clone().unwrap_or_else(|| ("true".into(), "false".into()));
                if true_text.eq_ignore_ascii_case(&false_text) {
                    return Err(format!(
                        "true and false are both {true_text:?}: give a boolean column two different texts"
                    ));
                }
                ColumnType::Boolean {
                    true_text,
                    false_text,
                }
            }
            "timestamp" => match format {
                Some(f) => ColumnType::Timestamp(TimestampFormat::parse(f)?),
                None => {
                    return Err("a timestamp column needs format = \"yyyy-MM-dd HH:mm:ss\" (a pattern), \"rfc3339\", \"epoch-millis\" or \"epoch-seconds\"".into())
                }
            },
            other => {
                return Err(format!(
                    "{other:?} is not a column type: use \"string\", \"long\", \"double\", \"boolean\" or \"timestamp\""
                ))
            }
        };
        if format.is_some() && !matches!(kind, ColumnType::Timestamp(_)) {
            return Err(format!(
                "a {name} column takes no format: only a timestamp column has one"
            ));
        }
        if texts.is_some() && !matches!(kind, ColumnType::Boolean { .. }) {
            return Err(format!(
                "a {name} column takes no true/false texts: only a boolean column has them"
            ));
        }
        Ok(kind)
    }

    fn describe(&self) -> String {
        match self {
            ColumnType::String => "text".into(),
            ColumnType::Long => "a whole number".into(),
            ColumnType::Double => "a finite number".into(),
            ColumnType::Boolean {
                true_text,
                false_text,
            } => format!("{true_text} or {false_text}"),
            ColumnType::Timestamp(f) => f.describe(),
        }
    }

    /// The JSON value of a field's text.
    fn read(&self, text: &str) -> Option<Value> {
        match self {
            ColumnType::String => Some(Value::String(text.to_owned())),
            ColumnType::Long => text.parse::<i64>().ok().map(Value::from),
            ColumnType::Double => text
                .parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
                .map(Value::Number),
            ColumnType::Boolean {
                true_text,
                false_text,
            } => {
                if text.eq_ignore_ascii_case(true_text) {
                    Some(Value::Bool(true))
                } else if text.eq_ignore_ascii_case(false_text) {
                    Some(Value::Bool(false))
                } else {
                    None
                }
            }
            ColumnType::Timestamp(f) => f.epoch_ms(text).map(Value::from),
        }
    }
}

/// A column of a CSV file: its name (the record's field), its [`ColumnType`], the value of
/// an empty field, or skipped.
#[derive(Debug, Clone, PartialEq)]
pub struct CsvColumn {
    name: String,
    kind: ColumnType,
    default: Option<Value>,
    skip: bool,
}

impl CsvColumn {
    /// A column named `name` of type `kind`.
    ///
    /// ```
    /// use onceflow::engine::formats::{ColumnType, CsvColumn};
    /// let column = CsvColumn::new("ride_id", ColumnType::Long);
    /// assert_eq!(column.name(), "ride_id");
    /// ```
    pub fn new(name: impl Into<String>, kind: ColumnType) -> CsvColumn {
        CsvColumn {
            name: name.into(),
            kind,
            default: None,
            skip: false,
        }
    }

    /// A column read past and left out of the record.
    ///
    /// ```
    /// use onceflow::engine::formats::CsvColumn;
    /// assert_eq!(CsvColumn::skipped("time2").name(), "time2");
    /// ```
    pub fn skipped(name: impl Into<String>) -> CsvColumn {
        CsvColumn {
            skip: true,
            ..CsvColumn::new(name, ColumnType::String)
        }
    }

    /// The value an empty field has (else `null`, or `""` in a `string` column).
    ///
    /// # Errors
    /// A default that is not a value of the column's type.
    ///
    /// ```
    /// use onceflow::engine::formats::{ColumnType, CsvColumn};
    /// let lon = CsvColumn::new("start_lon", ColumnType::Double).with_default(0.0.into())?;
    /// assert!(CsvColumn::new("n", ColumnType::Long).with_default("x".into()).is_err());
    /// # Ok::<(), String>(())
    /// ```
    pub fn with_default(mut self, value: Value) -> Result<CsvColumn, String> {
        let fits = match (&self.kind, &value) {
            (ColumnType::String, Value::String(_))
            | (ColumnType::Boolean { .. }, Value::Bool(_)) => true,
            (ColumnType::Long | ColumnType::Timestamp(_), Value::Number(n)) => n.is_i64(),
            (ColumnType::Double, Value::Number(_)) => true,
            _ => false,
        };
        if !fits {
            return Err(format!(
                "the default of column {:?} is {value}, not {}: give a default of the column's type",
                self.name,
                self.kind.describe()
            ));
        }
        self.default = Some(value);
        Ok(self)
    }

    /// The column's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The value of field `text` in this column (the `i`-th, from 0).
    fn value(&self, i: usize, text: &str) -> Result<Value, String> {
        if text.is_empty() {
            return Ok(match (&self.default, &self.kind) {
                (Some(d), _) => d.clone(),
                (None, ColumnType::String) => Value::String(String::new()),
                (None, _) => Value::Null,
            });
        }
        self.kind.read(text).ok_or_else(|| {
            format!(
                "column {} ({}): {text:?} is not {}",
                i + 1,
                self.name,
                self.kind.describe()
            )
        })
    }
}

/// A record value that is one CSV line of `columns` (no header, no event time: a Kafka
/// record's value), as a JSON object of its columns but the skipped ones.
///
/// # Errors
/// The fields' count, or a field its column cannot read, named as the file source names them.
pub(crate) fn csv_value(
    columns: &[CsvColumn],
    delimiter: char,
    line: &str,
) -> Result<Value, String> {
    let fields = split(line, delimiter)?;
    if fields.len() != columns.len() {
        return Err(count_error(columns, fields.len()));
    }
    let mut record = serde_json::Map::new();
    for (i, (column, text)) in columns.iter().zip(&fields).enumerate() {
        if !column.skip {
            record.insert(column.name.clone(), column.value(i, text)?);
        }
    }
    Ok(Value::Object(record))
}

/// One CSV line (without its line break) of the fields `columns` of a JSON object: a string
/// as it is (quoted when it holds the delimiter, a quote or a line break), a number or a
/// boolean as JSON writes it, a missing field or `null` empty, an array or object as its JSON.
///
/// # Errors
/// `json` is not a JSON object.
pub(crate) fn csv_line(columns: &[String], json: &[u8], line: &mut Vec<u8>) -> Result<(), String> {
    let record: Value = serde_json::from_slice(json).map_err(|e| {
        format!("CSV output takes JSON objects and this is not JSON ({e}): make the job emit JSON objects")
    })?;
    let Value::Object(fields) = record else {
        return Err("CSV output takes JSON objects (one field per column) and this is another JSON value: make the job emit JSON objects".into());
    };
    for (i, column) in columns.iter().enumerate() {
        if i > 0 {
            line.push(b',');
        }
        match fields.get(column) {
            None | Some(Value::Null) => {}
            Some(Value::String(text)) => push_csv_field(line, text),
            Some(Value::Number(number)) => line.extend_from_slice(number.to_string().as_bytes()),
            Some(Value::Bool(flag)) => {
                line.extend_from_slice(if *flag { b"true" } else { b"false" })
            }
            Some(nested) => push_csv_field(line, &nested.to_string()),
        }
    }
    Ok(())
}

/// The header line (with its line break) of a CSV file of `columns`.
pub(crate) fn csv_header(columns: &[String]) -> Vec<u8> {
    let mut header = Vec::new();
    for (i, column) in columns.iter().enumerate() {
        if i > 0 {
            header.push(b',');
        }
        push_csv_field(&mut header, column);
    }
    header.push(b'\n');
    header
}

/// One CSV field, RFC 4180: quoted (with quotes doubled) when it holds a comma, a quote or a
/// line break, as it is otherwise.
fn push_csv_field(line: &mut Vec<u8>, text: &str) {
    if !text.contains([',', '"', '\n', '\r']) {
        line.extend_from_slice(text.as_bytes());
        return;
    }
    line.push(b'"');
    for byte in text.bytes() {
        if byte == b'"' {
            line.push(b'"');
        }
        line.push(byte);
    }
    line.push(b'"');
}

/// The columns once known (declared, or from the first header), with the key and time
/// columns' places.
#[derive(Debug)]
struct Layout {
    columns: Vec<CsvColumn>,
    time: usize,
    key: Option<usize>,
}

impl Layout {
    fn new(columns: Vec<CsvColumn>, time: &str, key: Option<&str>) -> Result<Layout, String> {
        for (i, c) in columns.iter().enumerate() {
            if c.name.is_empty() {
                return Err(format!(
                    "column {} has no name: give every column a name",
                    i + 1
                ));
            }
            if columns[..i].iter().any(|o| o.name == c.name) {
                return Err(format!(
                    "two columns are named {:?}: give each column its own name",
                    c.name
                ));
            }
        }
        let place = |name: &str, role: &str| {
            let at = columns.iter().position(|c| c.name == name).ok_or_else(|| {
                format!(
                    "the {role} names column {name:?}, which is not a column ({})",
                    columns
                        .iter()
                        .map(|c| c.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })?;
            if columns[at].skip {
                return Err(format!(
                    "the {role} names column {name:?}, which is skipped: read it (remove skip)"
                ));
            }
            Ok(at)
        };
        let time = place(time, "time")?;
        if matches!(
            columns[time].kind,
            ColumnType::Double | ColumnType::Boolean { .. }
        ) {
            return Err(format!(
                "the time column {:?} is a {}: make it a timestamp (with its format), a long of epoch milliseconds or a string",
                columns[time].name,
                if matches!(columns[time].kind, ColumnType::Double) { "double" } else { "boolean" }
            ));
        }
        let key = key.map(|k| place(k, "key")).transpose()?;
        Ok(Layout { columns, time, key })
    }
}

/// CSV lines as JSON records: a [`LineFormat`] for a file source; a job file's
/// `[source] format = "csv"` builds one.
///
/// - **Fields.** Split on the delimiter (`,` unless set); a field in double quotes may hold
///   the delimiter and doubled quotes (RFC 4180); a quoted field cannot span lines (the file
///   source reads a line at a time). Fields are not trimmed.
/// - **Columns.** Each column has a name (the record's field), a [`ColumnType`] and an
///   optional default for an empty field; an empty field without a default is `null` (a
///   `string` column's is `""`). A skipped column is read past and left out of the record. The
///   record's fields are in column order.
/// - **Header.** With `header`, each file's first line is a header and not a record: with
///   declared columns its column count must match (the declared names are the fields); without
///   them its names are the columns (every one a `string`), the same in every file.
/// - **Key and time.** The record's event time is its time column's value (a `timestamp`, a
///   `long` of epoch milliseconds, or a `string` of epoch milliseconds or RFC 3339); the Kafka
///   key, when a key column is named, is its value's text.
///
/// ```
/// use onceflow::engine::formats::{ColumnType, CsvColumn, CsvFormat, LineFormat, TimestampFormat};
///
/// let format = CsvFormat::declared(
///     vec![
///         CsvColumn::new("ride_id", ColumnType::Long),
///         CsvColumn::new("time", ColumnType::Timestamp(TimestampFormat::parse("yyyy-MM-dd HH:mm:ss")?)),
///         CsvColumn::new("driver", ColumnType::String),
///     ],
///     "time",
/// )?
/// .with_key("driver")?;
/// let record = format.parse("7,2013-01-01 00:16:00,\"Smith, J\"")?;
/// assert_eq!(record.event_time, 1_356_999_360_000);
/// assert_eq!(record.key.as_deref(), Some(&b"Smith, J"[..]));
/// assert_eq!(
///     String::from_utf8(record.value).unwrap(),
///     r#"{"ride_id":7,"time":1356999360000,"driver":"Smith, J"}"#
/// );
/// # Ok::<(), String>(())
/// ```
#[derive(Debug)]
pub struct CsvFormat {
    delimiter: char,
    header: bool,
    time: String,
    key: Option<String>,
    /// Whether the columns were declared (else the first header names them).
    declared: bool,
    /// Set at construction for declared columns, by the first header otherwise.
    layout: OnceLock<Layout>,
}

impl CsvFormat {
    /// A format of these columns, the event time read from column `time`; no header, `,`
    /// between fields.
    ///
    /// # Errors
    /// No columns, a column without a name, two of one name, or a time column that is not
    /// a column (or is skipped, or is a double or boolean).
    pub fn declared(columns: Vec<CsvColumn>, time: &str) -> Result<CsvFormat, String> {
        if columns.is_empty() {
            return Err(
                "no columns are declared: list them (or read the names from a header)".into(),
            );
        }
        let layout = Layout::new(columns, time, None)?;
        Ok(CsvFormat {
            delimiter: ',',
            header: false,
            time: time.to_owned(),
            key: None,
            declared: true,
            layout: OnceLock::from(layout),
        })
    }

    /// A format whose columns are the names of each file's first line (a header; every file's
    /// must be the same), every one a `string`; the event time read from column `time` (epoch
    /// milliseconds or RFC 3339).
    ///
    /// ```
    /// use onceflow::engine::formats::{CsvFormat, LineFormat};
    /// let format = CsvFormat::from_header("at");
    /// format.check_header("id,at")?;
    /// let record = format.parse("a7,1000")?;
    /// assert_eq!(String::from_utf8(record.value).unwrap(), r#"{"id":"a7","at":"1000"}"#);
    /// assert!(format.check_header("id,at,more").is_err());
    /// # Ok::<(), String>(())
    /// ```
    pub fn from_header(time: &str) -> CsvFormat {
        CsvFormat {
            delimiter: ',',
            header: true,
            time: time.to_owned(),
            key: None,
            declared: false,
            layout: OnceLock::new(),
        }
    }

    /// Declared columns, each file's first line a header (its column count checked, its
    /// names not: the declared names are the fields).
    pub fn with_header(mut self) -> CsvFormat {
        self.header = true;
        self
    }

    /// Fields separated by `delimiter` (e.g. `'\t'`, `';'`, `'|'`).
    ///
    /// # Errors
    /// A double quote, a line break, or a character beyond ASCII.
    pub fn with_delimiter(mut self, delimiter: char) -> Result<CsvFormat, String> {
        check_delimiter(delimiter)?;
        self.delimiter = delimiter;
        Ok(self)
    }

    /// The record's Kafka key: column `column`'s value (a string's text, any other value's
    /// JSON).
    ///
    /// # Errors
    /// With declared columns, a name that is not one of them (a header's names are checked
    /// when it is read).
    pub fn with_key(mut self, column: &str) -> Result<CsvFormat, String> {
        if let Some(layout) = self.layout.take() {
            let layout = Layout::new(layout.columns, &self.time, Some(column))?;
            self.layout = OnceLock::from(layout);
        }
        self.key = Some(column.to_owned());
        Ok(self)
    }

    /// Splits a line into its fields.
    fn split<'a>(&self, line: &'a str) -> Result<Vec<std::borrow::Cow<'a, str>>, String> {
        split(line, self.delimiter)
    }
}

impl LineFormat for CsvFormat {
    fn parse(&self, line: &str) -> Result<ParsedLine, String> {
        let Some(layout) = self.layout.get() else {
            return Err(
                "no header was read before this line: a file's first line names the columns".into(),
            );
        };
        let fields = self.split(line)?;
        if fields.len() != layout.columns.len() {
            return Err(count_error(&layout.columns, fields.len()));
        }
        let mut value = Vec::with_capacity(line.len() + 16 * fields.len());
        value.push(b'{');
        let mut event_time = None;
        let mut key = None;
        let mut first = true;
        for (i, (column, text)) in layout.columns.iter().zip(&fields).enumerate() {
            if column.skip {
                continue;
            }
            let field = column.value(i, text)?;
            if i == layout.time {
                event_time = Some(time_of(&field).ok_or_else(|| {
                    format!(
                        "column {} ({}), the event time: {} is not {}",
                        i + 1,
                        column.name,
                        if field.is_null() {
                            "empty".to_owned()
                        } else {
                            format!("{field}")
                        },
                        if matches!(column.kind, ColumnType::String) {
                            "epoch milliseconds or an RFC 3339 time"
                        } else {
                            "a time"
                        }
                    )
                })?);
            }
            if Some(i) == layout.key {
                key = match &field {
                    Value::Null => None,
                    Value::String(s) => Some(s.clone().into_bytes()),
                    other => Some(other.to_string().into_bytes()),
                };
            }
            if !first {
                value.push(b',');
            }
            first = false;
            // Writing to a Vec cannot fail, and a Value always serializes.
            let _ = serde_json::to_writer(&mut value, &column.name);
            value.push(b':');
            let _ = serde_json::to_writer(&mut value, &field);
        }
        let _ = value.write_all(b"}");
        Ok(ParsedLine {
            key,
            value,
            // The layout's time column is never skipped, so it was read above.
            event_time: event_time.ok_or("the time column was not read")?,
        })
    }

    fn has_header(&self) -> bool {
        self.header
    }

    fn check_header(&self, line: &str) -> Result<(), String> {
        let names: Vec<String> = self
            .split(line)?
            .into_iter()
            .map(|n| n.into_owned())
            .collect();
        match self.layout.get() {
            Some(layout) if self.declared => {
                if names.len() != layout.columns.len() {
                    return Err(format!(
                        "the header: {}",
                        count_error(&layout.columns, names.len())
                    ));
                }
            }
            Some(layout) => {
                if layout.columns.iter().map(|c| &c.name).ne(names.iter()) {
                    return Err(format!(
                        "the header names the columns {}, the first file's named {}: every file needs the same columns",
                        names.join(", "),
                        layout.columns.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
                    ));
                }
            }
            None => {
                let columns = names
                    .into_iter()
                    .map(|n| CsvColumn::new(n, ColumnType::String))
                    .collect();
                let layout = Layout::new(columns, &self.time, self.key.as_deref())
                    .map_err(|e| format!("the header: {e}"))?;
                // One reader sets it; were there two, the other's header is checked against
                // this one on its next file.
                let _ = self.layout.set(layout);
            }
        }
        Ok(())
    }
}

/// Whether `delimiter` can separate CSV fields: one ASCII character, not a quote or a line
/// break.
///
/// # Errors
/// What to use instead.
pub(crate) fn check_delimiter(delimiter: char) -> Result<(), String> {
    if !delimiter.is_ascii() || matches!(delimiter, '"' | '\n' | '\r') {
        return Err(format!(
            "{delimiter:?} cannot separate fields: use one ASCII character other than a quote or a line break, e.g. \",\", \";\", \"\\t\" or \"|\""
        ));
    }
    Ok(())
}

fn count_error(columns: &[CsvColumn], found: usize) -> String {
    format!(
        "expected {} columns ({}), found {found}",
        columns.len(),
        columns
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// A field's value as an event time: a whole number of epoch milliseconds, or a string of
/// them or an RFC 3339 time.
fn time_of(field: &Value) -> Option<i64> {
    match field {
        Value::String(s) => s
            .parse::<i64>()
            .ok()
            .or_else(|| crate::engine::time::epoch_ms_of(field)),
        v => crate::engine::time::epoch_ms_of(v),
    }
}

/// The fields of a line (RFC 4180 quoting within the line).
fn split(line: &str, delimiter: char) -> Result<Vec<std::borrow::Cow<'_, str>>, String> {
    use std::borrow::Cow;
    let mut fields = Vec::new();
    let mut rest = line;
    loop {
        let column = fields.len() + 1;
        if let Some(quoted) = rest.strip_prefix('"') {
            let mut text = String::new();
            let mut chars = quoted.char_indices();
            let after = loop {
                match chars.next() {
                    None => {
                        return Err(format!(
                            "column {column}: the quoted field does not end on its line (a quoted field cannot span lines here: put it on one line)"
                        ))
                    }
                    Some((i, '"')) => {
                        if quoted[i + 1..].starts_with('"') {
                            text.push('"');
                            chars.next();
                        } else {
                            break &quoted[i + 1..];
                        }
                    }
                    Some((_, c)) => text.push(c),
                }
            };
            fields.push(Cow::Owned(text));
            if after.is_empty() {
                return Ok(fields);
            }
            match after.strip_prefix(delimiter) {
                Some(next) => rest = next,
                None => {
                    return Err(format!(
                        "column {column}: text after the closing quote: quote the whole field, with a quote inside doubled (\"\")"
                    ))
                }
            }
        } else {
            match rest.find(delimiter) {
                Some(at) => {
                    fields.push(Cow::Borrowed(&rest[..at]));
                    rest = &rest[at + delimiter.len_utf8()..];
                }
                None => {
                    fields.push(Cow::Borrowed(rest));
                    return Ok(fields);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_split_on_the_delimiter_with_quoting_within_the_line() {
        #[rustfmt::skip]
        type Case<'a> = (&'a str, char, Result<&'a [&'a str], &'a str>);
        let cases: &[Case] = &[
            ("a,b,c",                ',', Ok(&["a", "b", "c"])),
            ("a,,c,",                ',', Ok(&["a", "", "c", ""])),
            ("",                     ',', Ok(&[""])),
            ("\"a,b\",c",            ',', Ok(&["a,b", "c"])),
            ("\"say \"\"hi\"\"\",x", ',', Ok(&["say \"hi\"", "x"])),
            ("\"\",x",               ',', Ok(&["", "x"])),
            ("a\tb;c",               '\t', Ok(&["a", "b;c"])),
            ("x,\"é,ü\"",            ',', Ok(&["x", "é,ü"])),
            ("x,\"open",             ',', Err("column 2: the quoted field does not end on its line (a quoted field cannot span lines here: put it on one line)")),
            ("\"a\"b,c",             ',', Err("column 1: text after the closing quote: quote the whole field, with a quote inside doubled (\"\")")),
            ("a,b\"c",               ',', Ok(&["a", "b\"c"])),
        ];
        for (line, delimiter, want) in cases {
            let got = split(line, *delimiter);
            match want {
                Ok(fields) => assert_eq!(got.unwrap(), *fields, "{line:?}"),
                Err(message) => assert_eq!(got.unwrap_err(), *message, "{line:?}"),
            }
        }
    }

    fn declared() -> CsvFormat {
        let stamp = TimestampFormat::parse("yyyy-MM-dd HH:mm:ss").unwrap();
        CsvFormat::declared(
            vec![
                CsvColumn::new("id", ColumnType::Long),
                CsvColumn::new("at", ColumnType::Timestamp(stamp)),
                CsvColumn::skipped("other"),
                CsvColumn::new("lon", ColumnType::Double)
                    .with_default(0.0.into())
                    .unwrap(),
                CsvColumn::new("n", ColumnType::Long),
                CsvColumn::new(
                    "start",
                    ColumnType::named("boolean", None, Some(("START".into(), "END".into())))
                        .unwrap(),
                ),
                CsvColumn::new("name", ColumnType::String),
            ],
            "at",
        )
        .unwrap()
        .with_key("name")
        .unwrap()
    }

    #[test]
    fn a_line_becomes_the_record_of_its_declared_columns_or_names_what_is_wrong() {
        let format = declared();
        #[rustfmt::skip]
        type Case<'a> = (&'a str, Result<(&'a str, i64, Option<&'a str>), &'a str>);
        let cases: &[Case] = &[
            (
                "7,2013-01-01 00:16:00,x,-73.5,2,START,ann",
                Ok((
                    r#"{"id":7,"at":1356999360000,"lon":-73.5,"n":2,"start":true,"name":"ann"}"#,
                    1_356_999_360_000,
                    Some("ann"),
                )),
            ),
            (
                "7,2013-01-01 00:16:00,,,,end,",
                Ok((
                    r#"{"id":7,"at":1356999360000,"lon":0.0,"n":null,"start":false,"name":""}"#,
                    1_356_999_360_000,
                    Some(""),
                )),
            ),
            (
                "7,2013-01-01 00:16:00,x,1e3,-2,START,\"O'Neil, \"\"Bo\"\"\"",
                Ok((
                    r#"{"id":7,"at":1356999360000,"lon":1000.0,"n":-2,"start":true,"name":"O'Neil, \"Bo\""}"#,
                    1_356_999_360_000,
                    Some("O'Neil, \"Bo\""),
                )),
            ),
            (
                "7,2013-01-01 00:16:00,x,1,2,START",
                Err("expected 7 columns (id, at, other, lon, n, start, name), found 6"),
            ),
            (
                "x7,2013-01-01 00:16:00,x,1,2,START,a",
                Err("column 1 (id): \"x7\" is not a whole number"),
            ),
            (
                "7,2013-01-01,x,1,2,START,a",
                Err("column 2 (at): \"2013-01-01\" is not a time yyyy-MM-dd HH:mm:ss"),
            ),
            (
                "7,,x,1,2,START,a",
                Err("column 2 (at), the event time: empty is not a time"),
            ),
            (
                "7,2013-01-01 00:16:00,x,NaN,2,START,a",
                Err("column 4 (lon): \"NaN\" is not a finite number"),
            ),
            (
                "7,2013-01-01 00:16:00,x,1,2.5,START,a",
                Err("column 5 (n): \"2.5\" is not a whole number"),
            ),
            (
                "7,2013-01-01 00:16:00,x,1,2,yes,a",
                Err("column 6 (start): \"yes\" is not START or END"),
            ),
        ];
        for (line, want) in cases {
            let got = format.parse(line);
            match want {
                Ok((value, time, key)) => {
                    let got = got.unwrap();
                    assert_eq!(String::from_utf8(got.value).unwrap(), *value, "{line}");
                    assert_eq!(got.event_time, *time, "{line}");
                    assert_eq!(got.key.as_deref(), key.map(str::as_bytes), "{line}");
                }
                Err(message) => assert_eq!(got.unwrap_err(), *message, "{line}"),
            }
        }
        assert!(!format.has_header());
    }

    #[test]
    fn a_header_names_the_columns_the_same_in_every_file_or_is_counted_against_declared_ones() {
        let named = CsvFormat::from_header("time")
            .with_delimiter(';')
            .unwrap()
            .with_key("id")
            .unwrap();
        assert!(named.has_header());
        assert_eq!(
            named.parse("a;1").unwrap_err(),
            "no header was read before this line: a file's first line names the columns"
        );
        named.check_header("id;time;note").unwrap();
        named.check_header("id;time;note").unwrap();
        assert_eq!(
            named.check_header("id;note;time").unwrap_err(),
            "the header names the columns id, note, time, the first file's named id, time, note: every file needs the same columns"
        );
        let record = named.parse("a7;2024-01-02T03:04:05Z;x").unwrap();
        assert_eq!(record.event_time, 1_704_164_645_000);
        assert_eq!(record.key.as_deref(), Some(&b"a7"[..]));
        assert_eq!(
            String::from_utf8(record.value).unwrap(),
            r#"{"id":"a7","time":"2024-01-02T03:04:05Z","note":"x"}"#
        );
        assert_eq!(named.parse("a7;1000;x").unwrap().event_time, 1000);
        assert_eq!(
            named.parse("a7;soon;x").unwrap_err(),
            "column 2 (time), the event time: \"soon\" is not epoch milliseconds or an RFC 3339 time"
        );
        // A header without the time (or key) column is named when it is read.
        let e = CsvFormat::from_header("time")
            .check_header("id,at")
            .unwrap_err();
        assert_eq!(
            e,
            "the header: the time names column \"time\", which is not a column (id, at)"
        );
        let e = CsvFormat::from_header("time")
            .check_header("id,id,time")
            .unwrap_err();
        assert_eq!(
            e,
            "the header: two columns are named \"id\": give each column its own name"
        );
        // Declared columns with a header: its count is checked, its names are not.
        let declared = declared().with_header();
        assert!(declared.has_header());
        declared.check_header("a,b,c,d,e,f,g").unwrap();
        assert_eq!(
            declared.check_header("a,b").unwrap_err(),
            "the header: expected 7 columns (id, at, other, lon, n, start, name), found 2"
        );
    }

    #[test]
    fn declarations_that_cannot_work_are_refused() {
        let long = || CsvColumn::new("t", ColumnType::Long);
        #[rustfmt::skip]
        let cases: Vec<(Result<CsvFormat, String>, &str)> = vec![
            (CsvFormat::declared(vec![], "t"), "no columns are declared: list them (or read the names from a header)"),
            (CsvFormat::declared(vec![long(), CsvColumn::new("", ColumnType::Long)], "t"), "column 2 has no name: give every column a name"),
            (CsvFormat::declared(vec![CsvColumn::skipped("t")], "t"), "the time names column \"t\", which is skipped: read it (remove skip)"),
            (CsvFormat::declared(vec![CsvColumn::new("t", ColumnType::Double)], "t"), "the time column \"t\" is a double: make it a timestamp (with its format), a long of epoch milliseconds or a string"),
            (CsvFormat::declared(vec![long()], "t").and_then(|f| f.with_key("k")), "the key names column \"k\", which is not a column (t)"),
            (CsvFormat::declared(vec![long()], "t").and_then(|f| f.with_delimiter('"')), "'\"' cannot separate fields: use one ASCII character other than a quote or a line break, e.g. \",\", \";\", \"\\t\" or \"|\""),
            (CsvFormat::declared(vec![long()], "t").and_then(|f| f.with_delimiter('é')), "'é' cannot separate fields: use one ASCII character other than a quote or a line break, e.g. \",\", \";\", \"\\t\" or \"|\""),
        ];
        for (got, want) in cases {
            assert_eq!(got.unwrap_err(), want);
        }
        assert_eq!(
            ColumnType::named("boolean", None, Some(("Y".into(), "y".into()))).unwrap_err(),
            "true and false are both \"Y\": give a boolean column two different texts"
        );
        assert_eq!(
            ColumnType::named("boolean", None, None).unwrap(),
            ColumnType::Boolean {
                true_text: "true".into(),
                false_text: "false".into()
            }
        );
        let with_default = CsvColumn::new("b", ColumnType::named("boolean", None, None).unwrap())
            .with_default(1.into())
            .unwrap_err();
        assert_eq!(with_default, "the default of column \"b\" is 1, not true or false: give a default of the column's type");
    }
}
