//! Topic ids: what metadata's id for a topic says about the topic a partition's position
//! belongs to, and what a topic deleted and recreated under the same name does to it.

use crate::client::config::AutoOffsetReset;
use crate::client::consumer::metrics::Counters;
use crate::client::consumer::{AnswerTrace, Chunk, Offset, PartitionState, Shared};
use crate::client::error::Error;
use crate::client::metadata::TopicPartition;
use std::collections::VecDeque;
use tracing::warn;
use uuid::Uuid;

/// What metadata's topic id says about the id a partition's position belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TopicId {
    /// The same topic (or no ids to compare).
    Same,
    /// The position has no id yet (new assignment, seek, reset): it belongs to this one.
    Adopt,
    /// Metadata names another id, but no later metadata has said so yet: refreshed first.
    Suspect,
    /// The name now belongs to another topic: the old one was deleted and recreated.
    Recreated { old: [u8; 16] },
}

/// What metadata of `generation`, naming the topic's id `now`, says about the id the
/// position belongs to (`held`), given the other id seen before (`seen`: which, and in what
/// generation). Pure.
///
/// A change takes two metadata answers: one flipped bit in a Metadata answer's topic id made
/// a read_committed consumer think its topic recreated, and auto.offset.reset=latest moved it
/// past every record (the consumer under random flips: nothing read in 120 s).
pub(super) fn on_topic_id(
    held: Option<[u8; 16]>,
    now: [u8; 16],
    seen: Option<([u8; 16], u64)>,
    generation: u64,
) -> TopicId {
    const NONE: [u8; 16] = [0; 16];
    match held {
        // Metadata without ids (an old broker, a topic being created): nothing to compare.
        _ if now == NONE => TopicId::Same,
        None | Some(NONE) => TopicId::Adopt,
        Some(old) if old == now => TopicId::Same,
        Some(old) => match seen {
            Some((id, g)) if id == now && generation > g => TopicId::Recreated { old },
            _ => TopicId::Suspect,
        },
    }
}

/// The topic id a partition's position is compared against: the one it holds once a Fetch
/// answer bore it out, else none (whatever metadata names now is adopted). Pure.
///
/// A flipped bit in the very Metadata answer an assignment took its id from made that damaged
/// id the one held; the next answers, naming the real one, looked like a recreated topic, and
/// auto.offset.reset=latest moved the position past every record (the read_committed consumer
/// under random flips: nothing read). A Fetch by id (v13+) is answered only for a real id.
pub(super) fn id_to_compare(held: Option<[u8; 16]>, borne_out: bool) -> Option<[u8; 16]> {
    held.filter(|_| borne_out)
}

/// The partition's topic was deleted and recreated: its position meant the old topic. Under
/// auto.offset.reset earliest/latest the position is reset (as the Java consumer ends up
/// doing through OFFSET_OUT_OF_RANGE, but also when the new topic has already grown past the
/// old position); under none the partition halts and the returned chunk tells the application.
pub(super) fn recreated(
    shared: &Shared,
    tp: &TopicPartition,
    st: &mut PartitionState,
    old: [u8; 16],
    new: [u8; 16],
) -> Option<Chunk> {
    Counters::add(&shared.counters.topics_recreated, 1);
    let (old_id, new_id) = (Uuid::from_bytes(old), Uuid::from_bytes(new));
    let position = st.position.unwrap_or(st.fetch_offset);
    // Whatever happens, data fetched from the old topic is not to be handed out.
    st.epoch = shared.next_epoch();
    st.last_fetched_epoch = -1;
    st.topic_id = Some(new);
    st.topic_id_borne_out = false;
    let reset = match shared.config.auto_offset_reset {
        AutoOffsetReset::Earliest => Some(Offset::Beginning),
        AutoOffsetReset::Latest => Some(Offset::End),
        AutoOffsetReset::None => None,
    };
    if let Some(r) = reset {
        warn!(topic = %tp.topic, partition = tp.partition, %old_id, %new_id, position, reset = ?r, "topic deleted and recreated under a new id; resetting the position per auto.offset.reset");
        st.pending = Some(r);
        st.position = None;
        return None;
    }
    warn!(topic = %tp.topic, partition = tp.partition, %old_id, %new_id, position, "topic deleted and recreated under a new id and auto.offset.reset=none; the partition waits for a seek");
    st.halted = true;
    Some(Chunk {
        tp: tp.clone(),
        epoch: st.epoch,
        records: VecDeque::new(),
        next_offset: position,
        high_watermark: -1,
        last_stable_offset: -1,
        error: Some(Error::TopicRecreated {
            topic: tp.topic.clone(),
            partition: tp.partition,
            position,
            old_id,
            new_id,
        }),
        last_epoch: None,
        open_aborted: Vec::new(),
        trace: AnswerTrace::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the metadata's topic id means for the id a position belongs to.
    #[test]
    fn topic_id_decisions() {
        let (a, b, c, none) = ([1; 16], [2; 16], [3; 16], [0; 16]);
        // (what, held, metadata's id, seen before, metadata generation, decision)
        let cases = [
            ("no id yet: adopt", None, a, None, 5, TopicId::Adopt),
            (
                "an unknown id held: adopt",
                Some(none),
                a,
                None,
                5,
                TopicId::Adopt,
            ),
            ("the same id", Some(a), a, None, 5, TopicId::Same),
            (
                "metadata without ids",
                Some(a),
                none,
                None,
                5,
                TopicId::Same,
            ),
            ("nothing either side", None, none, None, 5, TopicId::Same),
            (
                "another id, first seen",
                Some(a),
                b,
                None,
                5,
                TopicId::Suspect,
            ),
            (
                "the same metadata again",
                Some(a),
                b,
                Some((b, 5)),
                5,
                TopicId::Suspect,
            ),
            (
                "a later metadata says so too: recreated",
                Some(a),
                b,
                Some((b, 5)),
                6,
                TopicId::Recreated { old: a },
            ),
            (
                "a third id: seen again from the start",
                Some(a),
                c,
                Some((b, 5)),
                6,
                TopicId::Suspect,
            ),
        ];
        for (what, held, now, seen, generation, want) in cases {
            assert_eq!(on_topic_id(held, now, seen, generation), want, "{what}");
        }
    }

    /// (held, borne out by a Fetch answer, compared against)
    #[test]
    fn only_an_id_a_fetch_answer_bore_out_is_compared() {
        let a = [1; 16];
        let cases = [
            (Some(a), true, Some(a)),
            (Some(a), false, None),
            (None, true, None),
            (None, false, None),
        ];
        for (held, borne_out, want) in cases {
            assert_eq!(id_to_compare(held, borne_out), want, "{held:?} {borne_out}");
        }
    }
}
