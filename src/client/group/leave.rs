//! Leaving the group under the classic protocol: LeaveGroup when the member closes, and the
//! membership given up when the application stops polling (max.poll.interval.ms).

use super::Shared;
use crate::client::coordinator::CoordinatorKind;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::{GroupId, LeaveGroupRequest};
use kafka_protocol::protocol::StrBytes;
use tracing::{debug, warn};

/// The application did not poll within max.poll.interval.ms, and the member has already
/// recorded that its membership is gone (`MemberState::give_up_if_poll_late`: the next poll
/// reports its partitions lost): a dynamic member now leaves the group as `member_id`.
pub(super) async fn poll_was_late(shared: &Shared, member_id: String) {
    let cfg = &shared.config;
    warn!(
        "poll was not called within max.poll.interval.ms={} ms; giving up the membership",
        cfg.max_poll_interval.as_millis()
    );
    // A static member never sends LeaveGroup (as the Java client): its partitions wait
    // for it until session.timeout.ms, and it stops heartbeating so that they do not
    // wait longer.
    if cfg.group_instance_id.is_none() {
        leave_group_as(shared, member_id).await;
    }
}

/// Sends LeaveGroup for the member, if it has a member id (best effort: a failure is only
/// logged, and the coordinator removes the member when its session expires).
pub(super) async fn leave_group(shared: &Shared) {
    let member_id = shared.lock().member_id.clone();
    leave_group_as(shared, member_id).await;
}

/// Sends LeaveGroup for `member_id` (best effort, as [`leave_group`]).
async fn leave_group_as(shared: &Shared, member_id: String) {
    let instance = shared.config.group_instance_id.clone();
    if member_id.is_empty() {
        return;
    }
    if let Ok(conn) = shared
        .cluster
        .coordinator(CoordinatorKind::Group, &shared.group_id)
        .await
    {
        let Ok(v) = conn.version_for::<LeaveGroupRequest>(None) else {
            return;
        };
        let mut req = LeaveGroupRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(shared.group_id.clone())));
        // v3+ names the leaving members in a list (KIP-345); older versions take one member id.
        if v >= 3 {
            req = req.with_members(vec![MemberIdentity::default()
                .with_member_id(StrBytes::from_string(member_id))
                .with_group_instance_id(instance.map(StrBytes::from_string))]);
        } else {
            req = req.with_member_id(StrBytes::from_string(member_id));
        }
        if let Err(e) = conn.request_at(&req, v).await {
            debug!(error = %e, "LeaveGroup failed");
        }
    }
}
