//! The metadata cache's data: which broker leads which partition.

use std::collections::{BTreeMap, HashMap};

/// Where to start reading a partition.
///
/// # Examples
/// ```no_run
/// # fn demo(consumer: &mut onceflow::client::Consumer) -> onceflow::client::Result<()> {
/// use onceflow::client::{Offset, TopicPartition};
/// use std::time::{SystemTime, UNIX_EPOCH};
/// // Replay the last hour of partition 0.
/// let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_millis() as i64;
/// consumer.seek(&TopicPartition::new("rides", 0), Offset::Timestamp(now_ms - 3_600_000))?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Offset {
    /// The log start offset.
    Beginning,
    /// The end of the log (the LSO under read_committed).
    End,
    /// An absolute offset.
    At(i64),
    /// The first offset whose timestamp is at or after this one (ms since the epoch).
    Timestamp(i64),
}

/// A topic and partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
}

impl TopicPartition {
    /// Builds one.
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::TopicPartition;
    /// let tp = TopicPartition::new("rides", 3);
    /// assert_eq!((tp.topic.as_str(), tp.partition), ("rides", 3));
    /// assert_eq!(tp.to_string(), "rides-3");
    /// ```
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

impl std::fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// One partition's leadership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionMetadata {
    /// Leader node id, -1 while there is none.
    pub leader: i32,
    /// Leader epoch (fences stale leaders in Fetch and ListOffsets).
    pub leader_epoch: i32,
    /// Error code the broker reported for the partition (0 when fine).
    pub error_code: i16,
}

/// One topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetadata {
    /// Topic name.
    pub name: String,
    /// Topic id (KIP-516).
    pub id: [u8; 16],
    /// Partitions by index (dense: index i is partition i).
    pub partitions: Vec<PartitionMetadata>,
    /// Whether the topic is internal (`__consumer_offsets`, `__transaction_state`).
    pub internal: bool,
}

/// A broker's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerAddr {
    /// Node id.
    pub node_id: i32,
    /// host:port.
    pub addr: String,
}

/// One immutable view of the cluster, replaced whole on refresh.
#[derive(Debug, Clone, Default)]
pub struct MetadataSnapshot {
    /// Brokers by node id.
    pub brokers: HashMap<i32, BrokerAddr>,
    /// Topics known to the cache.
    pub topics: HashMap<String, TopicMetadata>,
    /// The controller's node id.
    pub controller: i32,
    /// Increases by one on every refresh; lets callers tell whether a refresh happened since
    /// they last looked, so that many failing requests trigger one refresh, not many.
    pub generation: u64,
}

impl MetadataSnapshot {
    /// The leader of a partition if known.
    ///
    /// # Examples
    /// ```no_run
    /// # fn demo(cluster: &onceflow::client::Cluster) {
    /// use onceflow::client::TopicPartition;
    /// match cluster.metadata().leader(&TopicPartition::new("rides", 0)) {
    ///     Some(node) => println!("rides-0 is led by node {node}"),
    ///     None => println!("no leader known (yet)"),
    /// }
    /// # }
    /// ```
    pub fn leader(&self, tp: &TopicPartition) -> Option<i32> {
        let p = self
            .topics
            .get(&tp.topic)?
            .partitions
            .get(usize::try_from(tp.partition).ok()?)?;
        (p.leader >= 0).then_some(p.leader)
    }

    /// The partition's metadata.
    ///
    /// # Examples
    /// ```no_run
    /// # fn demo(cluster: &onceflow::client::Cluster) {
    /// use onceflow::client::TopicPartition;
    /// if let Some(p) = cluster.metadata().partition(&TopicPartition::new("rides", 0)) {
    ///     println!("leader {} at epoch {}", p.leader, p.leader_epoch);
    /// }
    /// # }
    /// ```
    pub fn partition(&self, tp: &TopicPartition) -> Option<&PartitionMetadata> {
        self.topics
            .get(&tp.topic)?
            .partitions
            .get(usize::try_from(tp.partition).ok()?)
    }

    /// Number of partitions of a topic, if known.
    ///
    /// # Examples
    /// ```no_run
    /// # fn demo(cluster: &onceflow::client::Cluster) {
    /// // From the cache only: None for a topic not looked up yet.
    /// let count = cluster.metadata().partition_count("rides");
    /// # }
    /// ```
    pub fn partition_count(&self, topic: &str) -> Option<usize> {
        self.topics.get(topic).map(|t| t.partitions.len())
    }
}

/// What kind of coordinator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CoordinatorKind {
    /// A consumer group's coordinator.
    Group,
    /// A transactional id's coordinator.
    Transaction,
}

impl CoordinatorKind {
    pub(crate) fn wire(self) -> i8 {
        match self {
            CoordinatorKind::Group => 0,
            CoordinatorKind::Transaction => 1,
        }
    }
}

/// Partitions grouped by topic, topics sorted, partitions in the order given: the shape of
/// every request that lists partitions per topic.
pub(crate) fn by_topic(tps: &[TopicPartition]) -> BTreeMap<&str, Vec<i32>> {
    let mut out: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in tps {
        out.entry(tp.topic.as_str()).or_default().push(tp.partition);
    }
    out
}
