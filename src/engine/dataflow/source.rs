//! Source records and their deserializers.

use std::marker::PhantomData;

use serde::de::DeserializeOwned;

use crate::engine::runtime::topology::InputRecord;
use crate::engine::runtime::RuntimeError;

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

/// Turns an input record into the stream's element.
///
/// A closure returning `None` drops the record on purpose (counted as the `source` operator's
/// records in minus out). A deserializer that can say why a record is not an element
/// implements [`Deserializer::element`]: such a record goes to the job's
/// `errors.tolerance` (the job stops naming it, or it is skipped and counted, or written to the
/// dead-letter topic), as [`Json`] does for a value that is not JSON of its type.
pub trait Deserializer<T>: Send + Sync + 'static {
    /// The element of `record`, or `None` to drop it.
    fn deserialize(&self, record: &SourceRecord<'_>) -> Option<T>;

    /// What must be awaited before `record` is deserialized, if anything: a deserializer that
    /// needs something fetched first (the writer schema of a record's id, as [`Avro`](super::Avro) does)
    /// returns the fetch; the runtime awaits it, then calls [`Self::element`], which must not
    /// wait. The default: nothing.
    fn prepare(&self, record: &SourceRecord<'_>) -> Option<Prefetch> {
        let _ = record;
        None
    }

    /// The element of `record`; `Err(Some(reason))` for a record the job cannot process,
    /// `Err(None)` to drop it on purpose. The default: [`Self::deserialize`], `None` dropping.
    ///
    /// # Errors
    /// As above.
    fn element(&self, record: &SourceRecord<'_>) -> Result<T, Option<String>> {
        self.deserialize(record).ok_or(None)
    }
}

/// The fetch [`Deserializer::prepare`] returns; an error stops the job (a record that cannot
/// be read is not an error here: [`Deserializer::element`] names it).
pub type Prefetch =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), RuntimeError>> + Send>>;

/// A closure over the record is a deserializer.
impl<T, F> Deserializer<T> for F
where
    F: Fn(&SourceRecord<'_>) -> Option<T> + Send + Sync + 'static,
{
    fn deserialize(&self, record: &SourceRecord<'_>) -> Option<T> {
        self(record)
    }
}

/// The record's value as JSON of `T` (serde); a record that is not (a tombstone included) is
/// one the job cannot process: its `errors.tolerance` decides.
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
        self.element(record).ok()
    }

    /// A tombstone, or a value that is not JSON of `T`, is a record the job cannot process.
    fn element(&self, record: &SourceRecord<'_>) -> Result<T, Option<String>> {
        let Some(value) = record.value else {
            return Err(Some("a tombstone (the record has no value)".into()));
        };
        serde_json::from_slice(value).map_err(|e| {
            Some(format!(
                "the value is not JSON of {} ({e})",
                std::any::type_name::<T>()
            ))
        })
    }
}
