//! A record as a line of the part file: JSON lines, or CSV columns picked from a JSON value.

use super::*;
use serde::de::IgnoredAny;

pub(super) fn invalid_record(value: &[u8], reason: String) -> FileSinkError {
    let shown = &value[..value.len().min(PREVIEW_BYTES)];
    let mut preview = format!("{:?}", String::from_utf8_lossy(shown));
    if value.len() > PREVIEW_BYTES {
        preview.push_str("...");
    }
    FileSinkError::InvalidRecord {
        reason,
        len: value.len(),
        preview,
    }
}

/// Encodes one record into `line`, checked whole before anything reaches the file.
pub(super) fn encode(format: &FileFormat, value: &[u8], line: &mut Vec<u8>) -> Result<(), FileSinkError> {
    match format {
        FileFormat::JsonLines => {
            // A lone '\r' ends a line for many readers too.
            if let Some(at) = value.iter().position(|&b| b == b'\n' || b == b'\r') {
                return Err(invalid_record(
                    value,
                    format!("it has a line break at byte {at}, and JSON Lines holds one document per line: make the job emit compact JSON (no pretty-printing)"),
                ));
            }
            serde_json::from_slice::<IgnoredAny>(value).map_err(|error| {
                invalid_record(
                    value,
                    format!("it is not one JSON document ({error}): make the job emit JSON values, or write another format"),
                )
            })?;
            line.extend_from_slice(value);
            line.push(b'\n');
        }
        FileFormat::Csv { columns } => {
            let record: serde_json::Value = serde_json::from_slice(value).map_err(|error| {
                invalid_record(
                    value,
                    format!("CSV output takes JSON objects and this is not JSON ({error}): make the job emit JSON objects"),
                )
            })?;
            let serde_json::Value::Object(fields) = record else {
                return Err(invalid_record(
                    value,
                    "CSV output takes JSON objects (one field per column) and this is another JSON value: make the job emit JSON objects".into(),
                ));
            };
            for (i, column) in columns.iter().enumerate() {
                if i > 0 {
                    line.push(b',');
                }
                match fields.get(column) {
                    None | Some(serde_json::Value::Null) => {}
                    Some(serde_json::Value::String(text)) => push_csv_field(line, text),
                    Some(serde_json::Value::Number(number)) => {
                        line.extend_from_slice(number.to_string().as_bytes());
                    }
                    Some(serde_json::Value::Bool(flag)) => {
                        line.extend_from_slice(if *flag { b"true" } else { b"false" });
                    }
                    Some(nested) => push_csv_field(line, &nested.to_string()),
                }
            }
            line.push(b'\n');
        }
    }
    Ok(())
}

/// One CSV field, RFC 4180: quoted (with quotes doubled) when it holds a comma, a quote or a
/// line break, as it is otherwise.
pub(super) fn push_csv_field(line: &mut Vec<u8>, text: &str) {
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
