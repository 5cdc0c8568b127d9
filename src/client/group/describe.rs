//! What a group's coordinator says of the group (DescribeGroups): its state, protocol and
//! members — the Java AdminClient's `describeConsumerGroups`. Tests wait on the state (e.g.
//! for a rebalance to be under way); operators read who is in a group.

use super::offsets::with_coordinator;
use crate::client::cluster::Cluster;
use crate::client::error::{Error, Result};
use crate::protocol::ErrorCode;
use kafka_protocol::messages::{DescribeGroupsRequest, GroupId};
use kafka_protocol::protocol::StrBytes;
use std::time::Instant;

/// A classic group's state, as its coordinator names it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GroupState {
    /// No members (offsets may still be stored), or the group does not exist.
    Empty,
    /// Waiting for the members to (re)join: a rebalance has begun.
    PreparingRebalance,
    /// Joined; waiting for the leader's assignment (SyncGroup).
    CompletingRebalance,
    /// Every member has its assignment.
    Stable,
    /// Being removed.
    Dead,
    /// A state this client does not know (a newer broker), as named.
    Other(String),
}

impl GroupState {
    /// The state a coordinator's name stands for.
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::group::GroupState;
    /// assert_eq!(GroupState::parse("Stable"), GroupState::Stable);
    /// assert_eq!(GroupState::parse("Assigning"), GroupState::Other("Assigning".into()));
    /// ```
    pub fn parse(name: &str) -> GroupState {
        match name {
            "Empty" => GroupState::Empty,
            "PreparingRebalance" => GroupState::PreparingRebalance,
            "CompletingRebalance" => GroupState::CompletingRebalance,
            "Stable" => GroupState::Stable,
            "Dead" => GroupState::Dead,
            other => GroupState::Other(other.to_owned()),
        }
    }

    /// The name as the coordinator spells it.
    ///
    /// # Examples
    /// ```
    /// use onceflow::client::group::GroupState;
    /// assert_eq!(GroupState::PreparingRebalance.as_str(), "PreparingRebalance");
    /// ```
    pub fn as_str(&self) -> &str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
            GroupState::Other(name) => name,
        }
    }

    /// Whether a rebalance is under way (members joining or waiting for their assignment).
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(admin: onceflow::client::Admin) -> onceflow::client::Result<()> {
    /// // Wait for the group to settle after a member joined or left.
    /// while admin.describe_group("cleaners").await?.state.rebalancing() {
    ///     tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn rebalancing(&self) -> bool {
        matches!(
            self,
            GroupState::PreparingRebalance | GroupState::CompletingRebalance
        )
    }
}

impl std::fmt::Display for GroupState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One member of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMember {
    /// The id the coordinator gave it.
    pub member_id: String,
    /// Its group.instance.id (static membership), if any.
    pub group_instance_id: Option<String>,
    /// Its client.id.
    pub client_id: String,
    /// The host it connects from.
    pub client_host: String,
}

/// A group as its coordinator describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    /// The group id.
    pub group: String,
    /// Its state.
    pub state: GroupState,
    /// "consumer" for consumer groups (empty when the group has never had members).
    pub protocol_type: String,
    /// The assignor chosen in the last rebalance (e.g. "range").
    pub protocol: String,
    /// Its members (empty unless the group is stable or rebalancing).
    pub members: Vec<GroupMember>,
    /// The node id of the coordinator that answered (-1 if metadata does not list it).
    pub coordinator: i32,
}

/// Describes `group` through its coordinator, retried until default.api.timeout.ms.
pub(crate) async fn describe(cluster: &Cluster, group: &str) -> Result<GroupDescription> {
    let deadline = Instant::now() + cluster.config().api_timeout;
    let req = DescribeGroupsRequest::default()
        .with_groups(vec![GroupId(StrBytes::from_string(group.to_owned()))]);
    with_coordinator(cluster, group, deadline, |conn| {
        let req = req.clone();
        async move {
            let resp = conn.request(&req).await?;
            let g = resp
                .groups
                .into_iter()
                .find(|g| g.group_id.0.as_str() == group)
                .ok_or_else(|| {
                    Error::Protocol(format!(
                        "DescribeGroups for '{group}' answered without that group"
                    ))
                })?;
            ErrorCode::check(g.error_code)
                .map_err(|c| Error::broker(format!("describing group '{group}'"), c))?;
            Ok(GroupDescription {
                group: group.to_owned(),
                state: GroupState::parse(g.group_state.as_str()),
                protocol_type: g.protocol_type.to_string(),
                protocol: g.protocol_data.to_string(),
                members: g
                    .members
                    .into_iter()
                    .map(|m| GroupMember {
                        member_id: m.member_id.to_string(),
                        group_instance_id: m.group_instance_id.map(|s| s.to_string()),
                        client_id: m.client_id.to_string(),
                        client_host: m.client_host.to_string(),
                    })
                    .collect(),
                coordinator: cluster
                    .metadata()
                    .brokers
                    .values()
                    .find(|b| b.addr == conn.addr())
                    .map_or(-1, |b| b.node_id),
            })
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::GroupState;

    #[test]
    fn group_states_by_name() {
        let cases = [
            ("Empty", GroupState::Empty, false),
            ("PreparingRebalance", GroupState::PreparingRebalance, true),
            ("CompletingRebalance", GroupState::CompletingRebalance, true),
            ("Stable", GroupState::Stable, false),
            ("Dead", GroupState::Dead, false),
            ("Assigning", GroupState::Other("Assigning".into()), false),
        ];
        for (name, state, rebalancing) in cases {
            assert_eq!(GroupState::parse(name), state, "{name}");
            assert_eq!(state.rebalancing(), rebalancing, "{name}");
            assert_eq!(state.to_string(), name);
        }
    }
}
