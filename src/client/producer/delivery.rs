//! What a send resolves to: the record's [`RecordMetadata`], through a [`DeliveryFuture`] or a
//! callback; and the rule that a callback never runs while its thread holds an accumulator
//! lock (it runs once the thread holds none).

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::oneshot;

use crate::client::error::{Error, Result};

/// Where a record was written: what a [`DeliveryFuture`] (or a `send_with_callback` callback)
/// resolves to.
///
/// # Examples
/// ```no_run
/// # async fn demo(producer: onceflow::client::Producer) -> onceflow::client::Result<()> {
/// use onceflow::client::ProducerRecord;
/// let meta = producer.send(ProducerRecord::new("rides", "hello")).await?.await?;
/// println!("{}-{} at offset {} ({} ms)", meta.topic, meta.partition, meta.offset, meta.timestamp);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMetadata {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Offset, or -1 with acks=0.
    pub offset: i64,
    /// The record's timestamp (the broker's, for LogAppendTime topics).
    pub timestamp: i64,
}

/// Resolves when the record is acknowledged (or has failed for good).
///
/// Returned by [`Producer::send`](super::Producer::send) once the record is queued: keep the futures and await them
/// later to have many records in flight. Dropping one does not take its record back.
///
/// # Examples
/// ```no_run
/// # async fn demo(producer: onceflow::client::Producer) -> onceflow::client::Result<()> {
/// use onceflow::client::ProducerRecord;
/// let mut deliveries = Vec::new();
/// for i in 0..100 {
///     deliveries.push(producer.send(ProducerRecord::new("rides", format!("ride {i}"))).await?);
/// }
/// for delivery in deliveries {
///     let meta = delivery.await?; // Err: the record was not written
///     println!("offset {}", meta.offset);
/// }
/// # Ok(()) }
/// ```
pub struct DeliveryFuture {
    rx: oneshot::Receiver<Result<RecordMetadata>>,
}

impl DeliveryFuture {
    pub(super) fn new(rx: oneshot::Receiver<Result<RecordMetadata>>) -> DeliveryFuture {
        DeliveryFuture { rx }
    }
}

impl Future for DeliveryFuture {
    type Output = Result<RecordMetadata>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(Error::Closed("producer"))))
    }
}

thread_local! {
    /// How many accumulator locks this thread holds (of any producer).
    static LOCKS_HELD: Cell<usize> = const { Cell::new(0) };
    /// `send_with_callback` callbacks whose record was resolved while this thread held an
    /// accumulator lock: they run once it holds none.
    static DEFERRED: RefCell<Vec<DeferredCallback>> = const { RefCell::new(Vec::new()) };
}

pub(crate) type Callback = Box<dyn FnOnce(Result<RecordMetadata>) + Send>;
type DeferredCallback = (Callback, Result<RecordMetadata>);

/// Runs a record's callback now, or, while this thread holds an accumulator lock, as soon as
/// it releases it. Records are failed under the lock in several places (an abort, a batch that
/// cannot be encoded); running the callback there would deadlock a callback that calls the
/// producer (e.g. `metrics`, `producer_id_and_epoch`, `begin_transaction`).
pub(crate) fn run_or_defer(callback: Callback, outcome: Result<RecordMetadata>) {
    if LOCKS_HELD.with(Cell::get) == 0 {
        callback(outcome);
    } else {
        DEFERRED.with(|d| d.borrow_mut().push((callback, outcome)));
    }
}

/// This thread took an accumulator lock: callbacks resolved meanwhile wait for its release.
pub(super) fn lock_taken() {
    LOCKS_HELD.with(|n| n.set(n.get() + 1));
}

/// This thread released an accumulator lock: the last one runs the deferred callbacks.
pub(super) fn lock_released() {
    let held = LOCKS_HELD.with(|n| {
        let held = n.get().saturating_sub(1);
        n.set(held);
        held
    });
    if held == 0 {
        // Taken out first: a callback may lock the accumulator (and defer more).
        loop {
            let due = DEFERRED.with(|d| std::mem::take(&mut *d.borrow_mut()));
            if due.is_empty() {
                break;
            }
            for (callback, outcome) in due {
                callback(outcome);
            }
        }
    }
}
