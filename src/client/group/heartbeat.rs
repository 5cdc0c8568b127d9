//! The classic member's heartbeat task: Heartbeat every heartbeat.interval.ms while the
//! membership is stable; its answers tell of a rebalance, an expired session or fencing, and
//! the task gives the membership up when poll stalls past max.poll.interval.ms.

use super::leave::poll_was_late;
use super::member_phase::MemberEvent;
use super::{fenced_error, reaction, GroupApi, Reaction, Shared};
use crate::client::coordinator::CoordinatorKind;
use crate::client::error::Error;
use crate::protocol::ErrorCode;
use kafka_protocol::messages::{GroupId, HeartbeatRequest};
use kafka_protocol::protocol::StrBytes;
use std::sync::Arc;
use std::time::Instant;
use tracing::{debug, warn};

/// Heartbeats while the membership is stable; notices rebalances, expiry, fencing, and a poll
/// loop that stalled past max.poll.interval.ms.
pub(super) async fn heartbeat_loop(shared: Arc<Shared>) {
    let cfg = shared.config.clone();
    loop {
        tokio::time::sleep(cfg.heartbeat_interval).await;
        let (phase, generation, member_id, late) = {
            let mut st = shared.lock();
            let late = st.give_up_if_poll_late(Instant::now(), cfg.max_poll_interval);
            (st.phase, st.generation, st.member_id.clone(), late)
        };
        if let Some(gone) = late {
            poll_was_late(&shared, gone).await;
            continue;
        }
        if !phase.heartbeats() {
            continue;
        }
        let req = HeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(shared.group_id.clone())))
            .with_generation_id(generation)
            .with_member_id(StrBytes::from_string(member_id.clone()))
            .with_group_instance_id(cfg.group_instance_id.clone().map(StrBytes::from_string));
        let result = async {
            let conn = shared
                .cluster
                .coordinator(CoordinatorKind::Group, &shared.group_id)
                .await?;
            let at = conn.addr().to_owned();
            conn.request(&req).await.map(|r| (r, at))
        }
        .await;
        let (code, coordinator) = match result {
            Ok((r, at)) => (ErrorCode(r.error_code), at),
            Err(e) => {
                debug!(error = %e, "heartbeat failed");
                shared
                    .cluster
                    .forget_coordinator(CoordinatorKind::Group, &shared.group_id);
                continue;
            }
        };
        let mut st = shared.lock();
        if !st.phase.heartbeats() || st.generation != generation || st.member_id != member_id {
            continue; // a rebalance happened meanwhile: this answer is about the old generation
        }
        match reaction(GroupApi::Heartbeat, code) {
            Reaction::Proceed => {}
            Reaction::Rejoin => st.on(MemberEvent::RejoinRequested),
            Reaction::ResetGenerationAndRejoin => {
                st.on(MemberEvent::MembershipGone);
                st.generation = -1;
            }
            Reaction::ResetMemberAndRejoin => {
                st.on(MemberEvent::MembershipGone);
                st.generation = -1;
                st.member_id.clear();
            }
            Reaction::FindCoordinatorAndRetry => {
                drop(st);
                shared
                    .cluster
                    .forget_coordinator(CoordinatorKind::Group, &shared.group_id);
            }
            Reaction::RetryAfterBackoff | Reaction::JoinWithGivenMemberId => {
                debug!(code = %code, "heartbeat error; sending the next one at the interval");
            }
            Reaction::Fenced => {
                let e = fenced_error(&shared.group_id, cfg.group_instance_id.as_deref());
                warn!(error = %e, "fenced");
                st.fail(e);
            }
            Reaction::Fatal => {
                let e = Error::broker(format!("heartbeat for group '{}'", shared.group_id), code)
                    .at_broker("coordinator", &coordinator);
                warn!(error = %e, "the member cannot go on");
                st.fail(e);
            }
        }
    }
}
