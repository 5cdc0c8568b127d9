//! A group member's identity as the transaction API needs it.

/// A consumer group's identity as TxnOffsetCommit needs it (KIP-447): with the generation and
/// member id, the group coordinator fences a zombie from an older generation. A member gets it
/// from [`super::GroupConsumer::group_metadata`]; an application that assigns partitions
/// itself uses [`GroupMetadata::new`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMetadata {
    /// The group.
    pub group_id: String,
    /// Generation id, -1 for a group without members (manual assignment).
    pub generation_id: i32,
    /// Member id, empty without membership.
    pub member_id: String,
    /// group.instance.id for static members.
    pub group_instance_id: Option<String>,
}

impl GroupMetadata {
    /// Metadata for a group used without membership (offsets only), as the Java client's
    /// `new ConsumerGroupMetadata(groupId)`.
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::group::GroupMetadata;
    /// // Partitions assigned by the application: offsets go to the group "cleaners",
    /// // with no generation to fence with.
    /// let group = GroupMetadata::new("cleaners");
    /// assert_eq!((group.generation_id, group.member_id.as_str()), (-1, ""));
    /// ```
    pub fn new(group_id: impl Into<String>) -> Self {
        GroupMetadata {
            group_id: group_id.into(),
            generation_id: -1,
            member_id: String::new(),
            group_instance_id: None,
        }
    }
}
