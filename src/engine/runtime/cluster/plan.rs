//! What every membership of a cluster-mode process shares: the job, its topology, the client
//! configurations and the job's internal topics.

use std::sync::Arc;
use std::time::Duration;

use super::exchange::Topics;
use crate::client::{Cluster, ConsumerConfig, ProducerConfig};
use crate::engine::metrics::Metrics;
use crate::engine::runtime::topology::Topology;

/// What every membership of this process shares.
#[derive(Clone)]
pub(super) struct Plan {
    pub(super) job: crate::engine::job::Job,
    pub(super) topology: Arc<dyn Topology>,
    pub(super) cluster: Arc<Cluster>,
    pub(super) producer: ProducerConfig,
    pub(super) consumer: ConsumerConfig,
    pub(super) metrics: Arc<Metrics>,
    pub(super) group: String,
    pub(super) transactional_id: String,
    pub(super) topics: Topics,
    pub(super) keyed: bool,
    pub(super) keyed_uid: String,
    pub(super) key_groups: u16,
    /// Keyed tasks: the repartition and changelog topics' partitions.
    pub(super) tasks: u16,
    /// Every source partition, as a keyed task's watermark inputs.
    pub(super) inputs: Vec<u32>,
    pub(super) interval: Duration,
    pub(super) transaction_timeout: Duration,
    /// The changelog topic's id (hex): a local copy of another id is not read forward.
    pub(super) changelog_id: String,
    /// The changelog topic's `delete.retention.ms`: how long a local copy may be read forward.
    pub(super) delete_retention: Duration,
}
