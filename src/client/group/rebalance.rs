//! The classic member's rebalance, run by `poll` when the member must (re)join: it gives up
//! what it must first (every partition under an eager protocol), joins, and takes the new
//! assignment over; a membership lost meanwhile is reported first.

use super::join::{join_and_sync, Joined};
use super::member_phase::{next, MemberEvent, MemberPhase};
use super::GroupConsumer;
use crate::client::error::Result;
use crate::client::metadata::TopicPartition;
use std::collections::BTreeSet;
use tracing::{info, info_span, warn, Instrument};

impl GroupConsumer {
    /// Under the classic protocol, before a poll reads: reports a lost membership and
    /// rebalances, again while the member needs to join.
    pub(super) async fn maybe_rebalance(&mut self) -> Result<()> {
        loop {
            let (phase, fatal) = {
                let st = self.shared.lock();
                (st.phase, st.fatal.clone())
            };
            if self.topics.is_empty() {
                return Ok(());
            }
            if let Some(e) = fatal {
                // Failed during the last round (a commit answered FENCED_INSTANCE_ID): the
                // caller reports the loss and the error.
                return Err(e);
            }
            if !phase.needs_join() {
                return Ok(());
            }
            if phase == MemberPhase::Lost {
                let gone = {
                    let mut st = self.shared.lock();
                    st.on(MemberEvent::LossReported);
                    std::mem::take(&mut st.assigned)
                };
                let started: Vec<TopicPartition> = gone
                    .into_iter()
                    .filter(|tp| !self.pending.contains(tp))
                    .collect();
                self.pending.clear();
                self.consumer.assign(Vec::new()).await?;
                if !started.is_empty() {
                    warn!(partitions = started.len(), "partitions lost");
                    if let Some(l) = &self.listener {
                        l.on_lost(&started).await;
                    }
                }
            }
            let span = info_span!("rebalance", group = %self.shared.group_id);
            self.rebalance().instrument(span).await?;
        }
    }

    async fn rebalance(&mut self) -> Result<()> {
        // No heartbeats while joining: one sent with the old generation would come back
        // ILLEGAL_GENERATION and make the new assignment look lost.
        {
            let mut st = self.shared.lock();
            st.phase = next(st.phase, MemberEvent::JoinStarted)?;
        }
        let cooperative = self.shared.lock().protocol.as_deref() == Some("cooperative-sticky");
        // Eager protocol: give everything up before joining, committing with the generation
        // the partitions were owned in (still the group's until the join completes).
        if !cooperative && !self.assignment().is_empty() {
            self.revoke_all().await?;
        }
        let owned = self.assignment();
        let joined =
            match join_and_sync(&self.shared, &self.topics, &self.strategies, &owned).await? {
                Joined::Assigned(j) => j,
                Joined::Lost => {
                    // The coordinator removed us (or our generation): what we owned is lost;
                    // the caller reports it and joins again.
                    self.shared.lock().on(MemberEvent::MembershipGone);
                    return Ok(());
                }
            };
        let new: BTreeSet<TopicPartition> = joined.assignment.into_iter().collect();
        let old: BTreeSet<TopicPartition> = owned.iter().cloned().collect();
        let revoked: Vec<TopicPartition> = old.difference(&new).cloned().collect();
        let added: Vec<TopicPartition> = new.difference(&old).cloned().collect();
        let new_list: Vec<TopicPartition> = new.iter().cloned().collect();
        let cooperative = joined.protocol == "cooperative-sticky";
        // The member is in the group from here on (the generation and member id were stored
        // at JoinGroup): heartbeat from now, not only once the new partitions' offsets are
        // known — an open transaction can hold those longer than session.timeout.ms.
        {
            let mut st = self.shared.lock();
            st.assigned = new_list.clone();
            let rejoin = cooperative && !revoked.is_empty();
            st.phase = next(st.phase, MemberEvent::Joined { rejoin })?;
        }
        if !revoked.is_empty() {
            // Cooperative: give these up now; another rebalance hands them to their new owner,
            // which starts at what is committed here (with the new generation, which the
            // coordinator accepts).
            self.give_up(&revoked).await;
        }
        self.pending.retain(|tp| new.contains(tp));
        self.pending.extend(added);
        let running: Vec<TopicPartition> = new_list
            .iter()
            .filter(|tp| !self.pending.contains(tp))
            .cloned()
            .collect();
        self.consumer.assign(running).await?;
        info!(
            generation = joined.generation,
            protocol = %joined.protocol,
            partitions = new_list.len(),
            "joined group"
        );
        Ok(())
    }

    /// Eager protocol, before joining: commits (with auto commit), calls `on_revoked` and gives
    /// up every owned partition.
    async fn revoke_all(&mut self) -> Result<()> {
        let started = self.started();
        if self.shared.config.enable_auto_commit {
            if let Err(e) = self.commit_positions().await {
                warn!(error = %e, "committing before the rebalance failed");
            }
        }
        if !started.is_empty() {
            if let Some(l) = &self.listener {
                l.on_revoked(&started).await;
            }
        }
        self.shared.lock().assigned.clear();
        self.pending.clear();
        self.consumer.assign(Vec::new()).await
    }
}
