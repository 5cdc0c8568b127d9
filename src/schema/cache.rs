//! What the serdes keep for the life of a client: the writer schemas they parsed, by id.

use super::error::Result;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

/// A mutex's guard, also after a panic elsewhere poisoned it (the maps it guards hold only
/// finished entries).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Parsed writer schemas by schema id: each parsed once.
#[derive(Debug)]
pub(crate) struct Writers<P> {
    parsed: Mutex<HashMap<u32, Arc<P>>>,
}

impl<P> Writers<P> {
    pub(crate) fn new() -> Writers<P> {
        Writers {
            parsed: Mutex::new(HashMap::new()),
        }
    }

    /// The schema of `id`: held, or parsed by `parse` and kept (a failure is not kept: the
    /// next record of the id asks again).
    pub(crate) async fn get<F>(&self, id: u32, parse: impl FnOnce() -> F) -> Result<Arc<P>>
    where
        F: Future<Output = Result<P>>,
    {
        if let Some(p) = lock(&self.parsed).get(&id) {
            return Ok(p.clone());
        }
        let parsed = Arc::new(parse().await?);
        lock(&self.parsed).insert(id, parsed.clone());
        Ok(parsed)
    }
}
