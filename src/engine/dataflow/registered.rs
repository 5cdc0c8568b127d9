//! Typed sources of records in the schema registry's wire format: [`Avro`] (serde types) and
//! [`Protobuf`] (prost types). Each record's writer schema is fetched by its id before the
//! record is deserialized ([`Deserializer::prepare`], awaited by the runtime), once per id; a
//! record the deserializer cannot read (not in the wire format, an id the registry does not
//! know, a payload that does not fit its schema or the type) goes to the job's
//! `errors.tolerance`.

use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use serde::de::DeserializeOwned;

use super::source::{Deserializer, Prefetch, SourceRecord};
use crate::engine::job::codec::{WriterSchemas, NOT_FETCHED};
use crate::schema::{AvroDeserializer, ProtobufDeserializer, SchemaError, SchemaRegistry};

/// What the typed deserializers share: the serde, and which writer schemas it holds.
struct Fetched<S> {
    serde: S,
    schemas: Mutex<WriterSchemas>,
}

impl<S> Fetched<S> {
    fn new(serde: S) -> Arc<Fetched<S>> {
        Arc::new(Fetched {
            serde,
            schemas: Mutex::new(WriterSchemas::default()),
        })
    }

    fn schemas(&self) -> std::sync::MutexGuard<'_, WriterSchemas> {
        self.schemas.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The value of `record`, or why it is not an element (a tombstone, an id that failed).
    fn value<'r>(&self, record: &SourceRecord<'r>) -> Result<&'r [u8], Option<String>> {
        let Some(value) = record.value else {
            return Err(Some("a tombstone (the record has no value)".into()));
        };
        match self.schemas().failure(value) {
            Some(why) => Err(Some(why)),
            None => Ok(value),
        }
    }
}

/// The record's value in Avro (the registry's wire format) as `T` (serde), decoded with its
/// writer's schema (fetched by id, once) or resolved to a reader schema.
///
/// ```no_run
/// use onceflow::engine::dataflow::{Avro, JobBuilder, KafkaSink};
/// use onceflow::schema::{RegistryConfig, SchemaRegistry};
/// # fn f() -> Result<(), Box<dyn std::error::Error>> {
/// #[derive(serde::Deserialize, serde::Serialize)]
/// struct Ride { ride_id: i64, fare: f64 }
/// let registry = SchemaRegistry::new(RegistryConfig::from_properties([
///     ("schema.registry.url", "http://127.0.0.1:8081"),
/// ])?)?;
/// let job = JobBuilder::new("fares")
///     .brokers("localhost:9092")
///     .transactional_id_prefix("fares")
///     .source(["rides-avro"], Avro::<Ride>::new(registry))
///     .filter(|r| r.fare > 10.0)
///     .sink(KafkaSink::json("big-fares"))
///     .build()?;
/// # Ok(()) }
/// ```
pub struct Avro<T> {
    fetched: Arc<Fetched<AvroDeserializer>>,
    _type: PhantomData<fn() -> T>,
}

impl<T> Avro<T> {
    /// Avro values of `T` through `registry`, in their writer's schema.
    pub fn new(registry: SchemaRegistry) -> Avro<T> {
        Avro {
            fetched: Fetched::new(AvroDeserializer::new(registry)),
            _type: PhantomData,
        }
    }

    /// Avro values of `T` resolved to `schema` (Avro JSON) from their writer's schema.
    ///
    /// # Errors
    /// [`SchemaError::InvalidSchema`] when `schema` does not parse.
    pub fn with_reader_schema(
        registry: SchemaRegistry,
        schema: &str,
    ) -> Result<Avro<T>, SchemaError> {
        Ok(Avro {
            fetched: Fetched::new(AvroDeserializer::new(registry).with_reader_schema(schema)?),
            _type: PhantomData,
        })
    }
}

impl<T> std::fmt::Debug for Avro<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Avro<{}>", std::any::type_name::<T>())
    }
}

/// The record's value in Protobuf (the registry's wire format) as the prost message `T`:
/// the message its indexes name in its writer's schema (fetched by id, once), decoded as `T`
/// by field number (Protobuf's evolution).
pub struct Protobuf<T> {
    fetched: Arc<Fetched<ProtobufDeserializer>>,
    _type: PhantomData<fn() -> T>,
}

impl<T> Protobuf<T> {
    /// Protobuf messages of `T` through `registry`.
    pub fn new(registry: SchemaRegistry) -> Protobuf<T> {
        Protobuf {
            fetched: Fetched::new(ProtobufDeserializer::new(registry)),
            _type: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for Protobuf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Protobuf<{}>", std::any::type_name::<T>())
    }
}

/// A serde of the registry's wire format that makes a `T` of a record.
trait Reads<T>: Send + Sync + 'static {
    /// Reads `raw` (fetching its writer schema when it is not held yet).
    fn read(&self, raw: &[u8]) -> impl std::future::Future<Output = Result<T, SchemaError>> + Send;
}

impl<T: DeserializeOwned> Reads<T> for AvroDeserializer {
    async fn read(&self, raw: &[u8]) -> Result<T, SchemaError> {
        self.deserialize(raw).await?.into_serde()
    }
}

impl<T: prost::Message + Default> Reads<T> for ProtobufDeserializer {
    async fn read(&self, raw: &[u8]) -> Result<T, SchemaError> {
        self.deserialize(raw).await?.into_prost()
    }
}

/// The deserializer of `T` over `fetched`: the fetch before, then a read that does not wait.
fn element<T, S: Reads<T>>(
    fetched: &Fetched<S>,
    record: &SourceRecord<'_>,
) -> Result<T, Option<String>> {
    let value = fetched.value(record)?;
    match fetched.serde.read(value).now_or_never() {
        None => Err(Some(NOT_FETCHED.into())),
        Some(read) => read.map_err(|e| Some(e.to_string())),
    }
}

/// The fetch of `record`'s writer schema, when its id is new.
fn prefetch<T: 'static, S: Reads<T>>(
    fetched: &Arc<Fetched<S>>,
    record: &SourceRecord<'_>,
) -> Option<Prefetch> {
    let value = record.value?;
    let id = fetched.schemas().unknown(value)?;
    let fetched = fetched.clone();
    let raw = value.to_vec();
    Some(Box::pin(async move {
        // A record that does not fit `T` (a decode error) leaves its schema known: `element`
        // names the record.
        let result = Reads::<T>::read(&fetched.serde, &raw).await.map(drop);
        fetched.schemas().settle(id, result)
    }))
}

/// Implements [`Deserializer`] for a typed deserializer over [`Fetched`].
macro_rules! registered_deserializer {
    ($name:ident, $bound:path) => {
        impl<T: $bound + 'static> Deserializer<T> for $name<T> {
            fn deserialize(&self, record: &SourceRecord<'_>) -> Option<T> {
                self.element(record).ok()
            }

            fn prepare(&self, record: &SourceRecord<'_>) -> Option<Prefetch> {
                prefetch::<T, _>(&self.fetched, record)
            }

            /// A tombstone, a record not in the wire format, an unknown schema id, or a value
            /// that does not decode as `T` is a record the job cannot process.
            fn element(&self, record: &SourceRecord<'_>) -> Result<T, Option<String>> {
                element(&self.fetched, record)
            }
        }
    };
}

/// A serde type.
trait SerdeType: DeserializeOwned {}
impl<T: DeserializeOwned> SerdeType for T {}

/// A prost message.
trait ProstType: prost::Message + Default {}
impl<T: prost::Message + Default> ProstType for T {}

registered_deserializer!(Avro, SerdeType);
registered_deserializer!(Protobuf, ProstType);
