//! Part file names: finished and in-progress, and which task, generation and sequence they
//! carry.

use super::*;

pub(super) fn finished_name(prefix: &str, task: u32, generation: u64, seq: u64, ext: &str) -> String {
    format!("{prefix}-{task:05}-{generation:010}-{seq:08}.{ext}")
}

pub(super) fn in_progress_name(finished: &str) -> String {
    format!(".{finished}{IN_PROGRESS_SUFFIX}")
}

/// The finished name of `name` if it is an in-progress file of `prefix`: exactly
/// `.<prefix>-<5 digits>-<10 digits>-<8 digits>.<jsonl|csv|avro>.inprogress`, so that another
/// prefix that merely starts with this one never matches.
pub(super) fn parse_in_progress<'a>(name: &'a str, prefix: &str) -> Option<&'a str> {
    let finished = name.strip_prefix('.')?.strip_suffix(IN_PROGRESS_SUFFIX)?;
    let rest = finished.strip_prefix(prefix)?.strip_prefix('-')?;
    let (stem, ext) = rest.rsplit_once('.')?;
    if !matches!(ext, "jsonl" | "csv" | "avro") {
        return None;
    }
    let mut parts = stem.split('-');
    for width in [5, 10, 8] {
        let part = parts.next()?;
        if part.len() != width || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
    }
    if parts.next().is_some() {
        return None;
    }
    Some(finished)
}
