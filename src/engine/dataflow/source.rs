//! Source records and their deserializers.

use std::marker::PhantomData;

use serde::de::DeserializeOwned;

use crate::engine::runtime::topology::InputRecord;

/// An input record as the source's read_committed consumer returned it.
#[derive(Debug, Clone, Copy)]
pub struct SourceRecord<'a> {
    /// Its topic.
    pub topic: &'a str,
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
    /// Its timestamp (ms since the epoch; create or log-append time).
    pub timestamp: i64,
    /// Its key, if any.
    pub key: Option<&'a [u8]>,
    /// Its value (`None`: a tombstone).
    pub value: Option<&'a [u8]>,
}

impl<'a> SourceRecord<'a> {
    pub(crate) fn of(r: &InputRecord<'a>) -> SourceRecord<'a> {
        SourceRecord {
            topic: r.topic,
            partition: r.partition,
            offset: r.offset,
            timestamp: r.timestamp,
            key: r.key.map(|k| k.as_ref()),
            value: r.value.map(|v| v.as_ref()),
        }
    }
}

/// Turns an input record into the stream's element; `None` drops the record (counted as the
/// `source` operator's records in minus out, as a job file counts records that are not JSON).
pub trait Deserializer<T>: Send + Sync + 'static {
    /// The element of `record`, or `None` to drop it.
    fn deserialize(&self, record: &SourceRecord<'_>) -> Option<T>;
}

/// A closure over the record is a deserializer.
impl<T, F> Deserializer<T> for F
where
    F: Fn(&SourceRecord<'_>) -> Option<T> + Send + Sync + 'static,
{
    fn deserialize(&self, record: &SourceRecord<'_>) -> Option<T> {
        self(record)
    }
}

/// The record's value as JSON of `T` (serde); records that are not (tombstones included)
/// are dropped.
pub struct Json<T>(PhantomData<fn() -> T>);

impl<T> Json<T> {
    /// The JSON deserializer of `T`.
    pub fn new() -> Json<T> {
        Json(PhantomData)
    }
}

impl<T> Default for Json<T> {
    fn default() -> Self {
        Json::new()
    }
}

impl<T> std::fmt::Debug for Json<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Json<{}>", std::any::type_name::<T>())
    }
}

impl<T: DeserializeOwned + 'static> Deserializer<T> for Json<T> {
    fn deserialize(&self, record: &SourceRecord<'_>) -> Option<T> {
        serde_json::from_slice(record.value?).ok()
    }
}
