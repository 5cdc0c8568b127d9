//! The plumbing of typed chains: operators as closures composed at build time, counted into
//! the job's per-operator metrics by index.
//!
//! - Before the key exchange ([`SourceFn`]) the chain is pushed forward: an input record in,
//!   `(timestamp, element)` pairs out through a callback, the record's event time returned
//!   (the source's watermark sees every record, also those a filter drops).
//! - After the keyed stage ([`Downstream`]) the chain is built backwards
//!   (continuation-passing): the sink's serializer is the last continuation, and each `map`
//!   or `filter` wraps the one after it, so the keyed stage's output type need not be known
//!   to the operators that follow it.

use std::sync::Arc;

use crate::engine::metrics::OperatorCounter;
use crate::engine::runtime::topology::{InputRecord, Output};
use crate::engine::runtime::RuntimeError;

/// The job's operator counters, by index (empty: not observed).
pub(crate) type Counters = [Arc<OperatorCounter>];

/// Operator `i` took a record.
pub(crate) fn count_in(c: &Counters, i: usize) {
    if let Some(c) = c.get(i) {
        c.record_in();
    }
}

/// Operator `i` emitted `n` records.
pub(crate) fn count_out(c: &Counters, i: usize, n: u64) {
    if let (Some(c), true) = (c.get(i), n > 0) {
        c.records_out(n);
    }
}

/// The chain in a source subtask up to an element of type `T`: pushes `(timestamp, T)` for
/// each element the record makes; returns the record's event time, when the job has one, and
/// why the record cannot be an element, when it cannot.
pub(crate) type SourceFn<T> =
    Arc<dyn Fn(&InputRecord<'_>, &Counters, &mut dyn FnMut(i64, T)) -> Sourced + Send + Sync>;

/// What the head of a typed chain made of an input record besides its elements.
#[derive(Debug, Default)]
pub(crate) struct Sourced {
    /// The record's event time (for the source's watermark), when the job has one.
    pub time: Option<i64>,
    /// The deserializer's reason the record cannot be an element (the job's
    /// `errors.tolerance` decides what happens to it).
    pub bad: Option<String>,
}

/// The chain after the keyed stage from an element of type `T` to the sink's records.
pub(crate) type Downstream<T> =
    Arc<dyn Fn(T, &Counters, &mut Vec<Output>) -> Result<(), RuntimeError> + Send + Sync>;

/// `filter` as operator `i` before the exchange.
pub(crate) fn filter<T: 'static>(
    prev: SourceFn<T>,
    i: usize,
    f: impl Fn(&T) -> bool + Send + Sync + 'static,
) -> SourceFn<T> {
    Arc::new(move |r, c, emit| {
        prev(r, c, &mut |t, x| {
            count_in(c, i);
            if f(&x) {
                count_out(c, i, 1);
                emit(t, x);
            }
        })
    })
}

/// `map` as operator `i` before the exchange.
pub(crate) fn map<T: 'static, U: 'static>(
    prev: SourceFn<T>,
    i: usize,
    f: impl Fn(T) -> U + Send + Sync + 'static,
) -> SourceFn<U> {
    Arc::new(move |r, c, emit| {
        prev(r, c, &mut |t, x| {
            count_in(c, i);
            count_out(c, i, 1);
            emit(t, f(x));
        })
    })
}

/// `flat_map` as operator `i` before the exchange (each output keeps the input's timestamp).
pub(crate) fn flat_map<T: 'static, U: 'static, I: IntoIterator<Item = U>>(
    prev: SourceFn<T>,
    i: usize,
    f: impl Fn(T) -> I + Send + Sync + 'static,
) -> SourceFn<U> {
    Arc::new(move |r, c, emit| {
        prev(r, c, &mut |t, x| {
            count_in(c, i);
            for u in f(x) {
                count_out(c, i, 1);
                emit(t, u);
            }
        })
    })
}

/// `filter` as operator `i` after the keyed stage, in front of `next`.
pub(crate) fn filter_down<T: 'static>(
    next: Downstream<T>,
    i: usize,
    f: Arc<dyn Fn(&T) -> bool + Send + Sync>,
) -> Downstream<T> {
    Arc::new(move |x, c, out| {
        count_in(c, i);
        if !f(&x) {
            return Ok(());
        }
        count_out(c, i, 1);
        next(x, c, out)
    })
}

/// `map` as operator `i` after the keyed stage, in front of `next`.
pub(crate) fn map_down<T: 'static, U: 'static>(
    next: Downstream<U>,
    i: usize,
    f: Arc<dyn Fn(T) -> U + Send + Sync>,
) -> Downstream<T> {
    Arc::new(move |x, c, out| {
        count_in(c, i);
        count_out(c, i, 1);
        next(f(x), c, out)
    })
}

/// `flat_map` as operator `i` after the keyed stage, in front of `next`.
pub(crate) fn flat_map_down<T: 'static, U: 'static, I: IntoIterator<Item = U> + 'static>(
    next: Downstream<U>,
    i: usize,
    f: Arc<dyn Fn(T) -> I + Send + Sync>,
) -> Downstream<T> {
    Arc::new(move |x, c, out| {
        count_in(c, i);
        for u in f(x) {
            count_out(c, i, 1);
            next(u, c, out)?;
        }
        Ok(())
    })
}
