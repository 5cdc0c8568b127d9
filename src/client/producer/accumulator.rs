//! Per-partition record buffers: the open batch being filled, and closed batches waiting for
//! the sender.
//!
//! A batch's life: records are appended to the partition's *open* batch until it reaches
//! batch.size or linger.ms passes (or flush/close asks); then it is *closed*: encoded once, with
//! its producer fields, into the bytes that go on the wire, and queued as *ready*. The sender
//! takes ready batches (at most max.in.flight per partition), and a batch that fails with a
//! retriable error goes back to the front of its queue. Retries resend the same bytes, which is
//! what lets the idempotent producer keep its sequence numbers stable.

use super::{RecordMetadata, Result};
use crate::client::metadata::TopicPartition;
use crate::protocol::records::{BatchBuilder, Compression, ProducerFields};
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::time::Instant;
use tokio::sync::oneshot;

/// Where one record's outcome goes.
pub(crate) struct Delivery {
    pub tx: oneshot::Sender<Result<RecordMetadata>>,
    pub timestamp: i64,
}

/// The batch being filled.
pub(crate) struct OpenBatch {
    pub builder: BatchBuilder,
    pub created: Instant,
    pub deliveries: Vec<Delivery>,
    pub memory: u32,
}

/// A closed batch: encoded bytes plus who to tell about the outcome.
pub(crate) struct ProducerBatch {
    pub tp: TopicPartition,
    pub data: Bytes,
    pub deliveries: Vec<Delivery>,
    pub created: Instant,
    pub attempts: u32,
    pub retry_at: Option<Instant>,
    /// buffer.memory permits held until the batch completes.
    pub memory: u32,
}

impl ProducerBatch {
    pub fn record_count(&self) -> usize {
        self.deliveries.len()
    }

    /// Resolves every record of the batch.
    pub fn complete(self, base_offset: i64, log_append_time: i64) -> u32 {
        let tp = self.tp;
        for (i, d) in self.deliveries.into_iter().enumerate() {
            let offset = if base_offset >= 0 {
                base_offset + i as i64
            } else {
                -1
            };
            let _ = d.tx.send(Ok(RecordMetadata {
                topic: tp.topic.clone(),
                partition: tp.partition,
                offset,
                timestamp: if log_append_time >= 0 {
                    log_append_time
                } else {
                    d.timestamp
                },
            }));
        }
        self.memory
    }

    /// Fails every record of the batch with `err`.
    pub fn fail(self, err: crate::client::Error) -> u32 {
        for d in self.deliveries {
            let _ = d.tx.send(Err(err.clone()));
        }
        self.memory
    }
}

/// One partition's buffers.
#[derive(Default)]
pub(crate) struct PartitionQueue {
    pub open: Option<OpenBatch>,
    pub ready: VecDeque<ProducerBatch>,
    pub in_flight: usize,
}

/// All partitions' buffers.
#[derive(Default)]
pub(crate) struct Accumulator {
    pub partitions: HashMap<TopicPartition, PartitionQueue>,
    /// The sticky partition of each topic for keyless records.
    pub sticky: HashMap<String, i32>,
}

/// Result of appending one record.
pub(crate) struct Appended {
    /// A batch was closed and is ready for the sender.
    pub batch_closed: bool,
    /// The record started a new open batch (the sender must arm its linger timer).
    pub new_batch: bool,
    /// buffer.memory to give back because a batch failed to encode.
    pub release: u32,
}

impl Accumulator {
    #[allow(clippy::too_many_arguments)]
    pub fn append(
        &mut self,
        tp: &TopicPartition,
        compression: Compression,
        batch_size: usize,
        record: (i64, Option<&[u8]>, Option<&[u8]>, &[crate::protocol::records::Header]),
        delivery: Delivery,
        memory: u32,
    ) -> Appended {
        let (ts, key, value, headers) = record;
        let q = self.partitions.entry(tp.clone()).or_default();
        let mut batch_closed = false;
        let mut release = 0;
        if let Some(open) = q.open.as_mut() {
            if open.builder.try_append(ts, key, value, headers, batch_size) {
                open.deliveries.push(delivery);
                open.memory += memory;
                let full = open.builder.size_estimate() >= batch_size;
                if full {
                    release += close_open(tp, q);
                    batch_closed = true;
                }
                return Appended {
                    batch_closed,
                    new_batch: false,
                    release,
                };
            }
            release += close_open(tp, q);
            batch_closed = true;
        }
        let mut builder = BatchBuilder::new(compression);
        // An empty builder always accepts one record, whatever its size.
        builder.try_append(ts, key, value, headers, batch_size);
        let full = builder.size_estimate() >= batch_size;
        q.open = Some(OpenBatch {
            builder,
            created: Instant::now(),
            deliveries: vec![delivery],
            memory,
        });
        if full {
            release += close_open(tp, q);
            batch_closed = true;
        }
        Appended {
            batch_closed,
            new_batch: true,
            release,
        }
    }
}

/// Closes the partition's open batch into a ready one. Returns the buffer.memory to release
/// when encoding failed (its records are then failed with the encoding error).
pub(crate) fn close_open(tp: &TopicPartition, q: &mut PartitionQueue) -> u32 {
    if let Some(open) = q.open.take() {
        let data = match open.builder.build(ProducerFields {
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            transactional: false,
        }) {
            Ok(data) => data,
            Err(e) => {
                let err = crate::client::Error::Record(e);
                for d in open.deliveries {
                    let _ = d.tx.send(Err(err.clone()));
                }
                return open.memory;
            }
        };
        q.ready.push_back(ProducerBatch {
            tp: tp.clone(),
            data,
            deliveries: open.deliveries,
            created: open.created,
            attempts: 0,
            retry_at: None,
            memory: open.memory,
        });
    }
    0
}
