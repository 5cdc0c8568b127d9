//! A record as it goes into the part file: a JSON line, CSV columns picked from a JSON value, or an
//! Avro record's binary encoding (written in blocks by the writer).

use super::*;
use crate::schema::ContainerWriter;
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
/// An Avro record is encoded by `avro`, the writer's container writer (its schema parsed once).
pub(super) fn encode(
    format: &FileFormat,
    avro: Option<&ContainerWriter>,
    value: &[u8],
    line: &mut Vec<u8>,
) -> Result<(), FileSinkError> {
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
            crate::engine::formats::csv_line(columns, value, line)
                .map_err(|reason| invalid_record(value, reason))?;
            line.push(b'\n');
        }
        FileFormat::Avro { .. } => {
            let avro = avro.ok_or_else(|| {
                FileSinkError::Config("the Avro output has no container writer".into())
            })?;
            avro.datum(value, line)
                .map_err(|reason| invalid_record(value, reason))?;
        }
    }
    Ok(())
}
