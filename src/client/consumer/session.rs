//! Fetch sessions (KIP-227): per leader broker, what the broker remembers of our last Fetch,
//! so that the next one names only what changed.
//!
//! Pure bookkeeping, no I/O. A session starts with a *full* request (epoch 0) naming every
//! partition wanted; the broker answers a session id. Each later request is *incremental*
//! (epoch 1, 2, …, wrapping from `i32::MAX` back to 1): it names only the partitions added or
//! whose fetch state (offset, log start, leader epochs, byte limit, topic id) changed since
//! they were last sent, and lists in `forgotten_topics_data` those no longer wanted. The
//! broker answers an incremental request with only the partitions that have records or news
//! (watermarks, log start, an error); a partition of the session it leaves out has nothing new.
//!
//! Any error at the top of a response, a lost connection, or an answer naming a partition the
//! session does not hold, starts over with a full request (epoch 0, closing the broker's old
//! session if it had one). A broker that answers a full request with session id 0 has no room
//! (or sessions disabled): the next request is full again and asks once more, as the Java
//! client's `FetchSessionHandler` does.

use crate::client::metadata::TopicPartition;
use crate::protocol::ErrorCode;
use std::collections::HashMap;

/// The session id of "no session".
pub(crate) const INVALID_SESSION_ID: i32 = 0;
/// The epoch of a full request that creates a session.
pub(crate) const INITIAL_EPOCH: i32 = 0;
/// The epoch of a request outside any session (and of one that closes a session).
pub(crate) const FINAL_EPOCH: i32 = -1;

/// One partition's fetch state as a request carries it: what the broker remembers once sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PartitionFetch {
    /// The topic's id (KIP-516), all zero when unknown or when the request is by name.
    pub topic_id: [u8; 16],
    pub fetch_offset: i64,
    pub log_start_offset: i64,
    pub current_leader_epoch: i32,
    pub last_fetched_epoch: i32,
    pub max_bytes: i32,
}

/// What one request sends, as decided by [`FetchSession::plan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    pub session_id: i32,
    pub epoch: i32,
    /// Indexes into the wanted list of the partitions to put on the wire, in its order.
    pub send: Vec<usize>,
    /// Partitions the broker must drop from the session, with the topic id they were sent
    /// under.
    pub forget: Vec<(TopicPartition, [u8; 16])>,
}

impl Plan {
    /// A full request names every partition; the broker answers every one of them.
    pub fn is_full(&self) -> bool {
        self.epoch <= INITIAL_EPOCH
    }
}

/// What a response means for the partitions its request wanted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The answers are good; a wanted partition left out of an incremental answer has nothing
    /// new.
    Answered,
    /// The session is gone or out of step (the top-level error): nothing was fetched, the
    /// next request is full.
    Restart(ErrorCode),
    /// Another top-level error: nothing was fetched; the partitions back off.
    Failed(ErrorCode),
}

/// One leader's session as this side sees it.
#[derive(Debug, Clone, Default)]
pub(crate) struct FetchSession {
    /// The broker's session id, [`INVALID_SESSION_ID`] when there is none.
    id: i32,
    /// The epoch of the next request: [`INITIAL_EPOCH`] for a full one.
    next_epoch: i32,
    /// Whether the session's requests address topics by id (Fetch v13+): a change of mode
    /// needs a new session.
    by_id: bool,
    /// What the broker holds: every partition of the last request, as last sent.
    sent: HashMap<TopicPartition, PartitionFetch>,
}

/// The epoch after `epoch` in a session: 1, 2, …, `i32::MAX`, then 1 again.
pub(crate) fn next_epoch(epoch: i32) -> i32 {
    if epoch < INITIAL_EPOCH {
        FINAL_EPOCH
    } else if epoch == i32::MAX {
        1
    } else {
        epoch + 1
    }
}

impl FetchSession {
    /// The request for `wanted` (every partition this leader should fetch now, in fetch
    /// order): the full list on a new session, otherwise only what changed, and what to forget.
    /// The broker's view becomes `wanted` as of this request.
    pub fn plan(&mut self, wanted: &[(TopicPartition, PartitionFetch)], by_id: bool) -> Plan {
        if by_id != self.by_id {
            // Names and ids do not mix within a session.
            self.restart();
            self.by_id = by_id;
        }
        let plan = if self.next_epoch == INITIAL_EPOCH {
            Plan {
                session_id: self.id,
                epoch: INITIAL_EPOCH,
                send: (0..wanted.len()).collect(),
                forget: Vec::new(),
            }
        } else {
            let send = wanted
                .iter()
                .enumerate()
                .filter(|(_, (tp, now))| self.sent.get(tp) != Some(now))
                .map(|(i, _)| i)
                .collect();
            let keep: HashMap<&TopicPartition, &PartitionFetch> =
                wanted.iter().map(|(tp, f)| (tp, f)).collect();
            let mut forget: Vec<(TopicPartition, [u8; 16])> = self
                .sent
                .iter()
                .filter_map(|(tp, was)| match keep.get(tp) {
                    // Gone, or the topic was recreated under a new id: the old one goes.
                    None => Some((tp.clone(), was.topic_id)),
                    Some(now) if now.topic_id != was.topic_id => Some((tp.clone(), was.topic_id)),
                    Some(_) => None,
                })
                .collect();
            forget.sort();
            Plan {
                session_id: self.id,
                epoch: self.next_epoch,
                send,
                forget,
            }
        };
        self.sent = wanted.iter().cloned().collect();
        plan
    }

    /// Takes the response to `plan`: its top-level error, its session id, and whether it named
    /// a partition the session does not hold.
    pub fn on_response(
        &mut self,
        plan: &Plan,
        error: ErrorCode,
        session_id: i32,
        stranger: bool,
    ) -> Outcome {
        if error != ErrorCode(0) {
            self.next_epoch = INITIAL_EPOCH;
            return match error {
                ErrorCode::INVALID_FETCH_SESSION_EPOCH
                | ErrorCode::FETCH_SESSION_TOPIC_ID_ERROR => Outcome::Restart(error),
                ErrorCode::FETCH_SESSION_ID_NOT_FOUND => {
                    // The broker has no such session: nothing to close.
                    self.id = INVALID_SESSION_ID;
                    Outcome::Restart(error)
                }
                _ => {
                    // The broker failed the request: nothing of the session is sent again (a
                    // Kafka 4.1 broker fails every request naming a negative session id with
                    // UNKNOWN_SERVER_ERROR, its cache shard being the id modulo a count). The
                    // next request starts a new session; the old one expires at the broker.
                    self.id = INVALID_SESSION_ID;
                    Outcome::Failed(error)
                }
            };
        }
        if session_id < 0 {
            // Kafka draws session ids from the positive ints: damaged on the way (the sign bit
            // of one made every later request fail at the broker). Not adopted.
            self.id = INVALID_SESSION_ID;
            self.next_epoch = INITIAL_EPOCH;
        } else if session_id == INVALID_SESSION_ID {
            // No room for a session, or the broker closed it: full requests, asking again.
            self.id = INVALID_SESSION_ID;
            self.next_epoch = INITIAL_EPOCH;
        } else if stranger || (!plan.is_full() && session_id != self.id) {
            // Out of step with the broker: start over (the answers still count).
            self.id = session_id;
            self.next_epoch = INITIAL_EPOCH;
        } else {
            self.id = session_id;
            self.next_epoch = next_epoch(plan.epoch);
        }
        Outcome::Answered
    }

    /// The request got no answer (connection lost, timed out): the broker may or may not have
    /// moved the session's epoch, so the next request is full and replaces the session.
    pub fn restart(&mut self) {
        self.next_epoch = INITIAL_EPOCH;
    }

    /// The broker's session id, if there is one.
    pub fn id(&self) -> Option<i32> {
        (self.id != INVALID_SESSION_ID).then_some(self.id)
    }

    /// Whether the next request continues the session (is incremental).
    pub fn is_incremental(&self) -> bool {
        self.next_epoch > INITIAL_EPOCH
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID_A: [u8; 16] = [1; 16];
    const ID_B: [u8; 16] = [2; 16];

    fn at(offset: i64) -> PartitionFetch {
        PartitionFetch {
            topic_id: ID_A,
            fetch_offset: offset,
            log_start_offset: -1,
            current_leader_epoch: 3,
            last_fetched_epoch: 2,
            max_bytes: 1024,
        }
    }

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("t", p)
    }

    fn wanted(list: &[(i32, PartitionFetch)]) -> Vec<(TopicPartition, PartitionFetch)> {
        list.iter().map(|(p, f)| (tp(*p), *f)).collect()
    }

    /// A session that has sent `first` and had it answered with session id 77.
    fn established(first: &[(i32, PartitionFetch)]) -> FetchSession {
        let mut s = FetchSession::default();
        let plan = s.plan(&wanted(first), true);
        assert_eq!(
            s.on_response(&plan, ErrorCode(0), 77, false),
            Outcome::Answered
        );
        s
    }

    /// What an incremental request sends and forgets, given what the session last sent.
    #[test]
    fn an_incremental_request_names_only_what_changed() {
        let base = [(0, at(10)), (1, at(20)), (2, at(30))];
        let epoch_moved = PartitionFetch {
            current_leader_epoch: 4,
            ..at(20)
        };
        let last_moved = PartitionFetch {
            last_fetched_epoch: 3,
            ..at(20)
        };
        let log_start = PartitionFetch {
            log_start_offset: 5,
            ..at(20)
        };
        let recreated = PartitionFetch {
            topic_id: ID_B,
            ..at(20)
        };
        type Case = (
            &'static str,
            Vec<(i32, PartitionFetch)>,
            Vec<usize>,
            Vec<i32>,
        );
        let cases: Vec<Case> = vec![
            ("nothing changed", base.to_vec(), vec![], vec![]),
            (
                "an offset moved",
                vec![(0, at(10)), (1, at(25)), (2, at(30))],
                vec![1],
                vec![],
            ),
            (
                "a leader epoch moved",
                vec![(0, at(10)), (1, epoch_moved), (2, at(30))],
                vec![1],
                vec![],
            ),
            (
                "the last fetched epoch moved",
                vec![(0, at(10)), (1, last_moved), (2, at(30))],
                vec![1],
                vec![],
            ),
            (
                "the log start moved",
                vec![(0, at(10)), (1, log_start), (2, at(30))],
                vec![1],
                vec![],
            ),
            (
                "a partition no longer wanted is forgotten",
                vec![(0, at(10)), (2, at(30))],
                vec![],
                vec![1],
            ),
            (
                "a partition added is sent",
                vec![(0, at(10)), (1, at(20)), (2, at(30)), (3, at(0))],
                vec![3],
                vec![],
            ),
            (
                "a recreated topic: the old id forgotten, the new one sent",
                vec![(0, at(10)), (1, recreated), (2, at(30))],
                vec![1],
                vec![1],
            ),
            (
                "order does not matter",
                vec![(2, at(30)), (0, at(10)), (1, at(20))],
                vec![],
                vec![],
            ),
        ];
        for (what, next, send, forget) in cases {
            let mut s = established(&base);
            assert!(s.is_incremental(), "{what}");
            let plan = s.plan(&wanted(&next), true);
            assert_eq!((plan.session_id, plan.epoch), (77, 1), "{what}");
            assert_eq!(plan.send, send, "{what}");
            let forgotten: Vec<i32> = plan.forget.iter().map(|(t, _)| t.partition).collect();
            assert_eq!(forgotten, forget, "{what}");
            if what.starts_with("a recreated") {
                assert_eq!(plan.forget[0].1, ID_A, "forgotten under the old id");
            }
        }
    }

    /// A new session sends everything; a partition sent is remembered as sent, so the next
    /// request after an answer sends nothing for it.
    #[test]
    fn a_full_request_sends_everything_and_the_next_only_changes() {
        let mut s = FetchSession::default();
        let list = wanted(&[(0, at(1)), (1, at(2))]);
        let plan = s.plan(&list, false);
        assert_eq!((plan.session_id, plan.epoch), (0, 0));
        assert_eq!(plan.send, vec![0, 1]);
        assert!(plan.is_full());
        s.on_response(&plan, ErrorCode(0), 9, false);
        let plan = s.plan(&list, false);
        assert_eq!((plan.session_id, plan.epoch, plan.send.len()), (9, 1, 0));
        assert!(!plan.is_full());
    }

    /// What a response does to the session: (what, top-level error, session id answered,
    /// stranger in the answer, outcome, next session id, next epoch).
    #[test]
    fn responses_move_the_session() {
        type Case = (&'static str, i16, i32, bool, Outcome, Option<i32>, i32);
        let code = ErrorCode;
        let cases: Vec<Case> = vec![
            ("answered", 0, 77, false, Outcome::Answered, Some(77), 2),
            (
                "session id not found: a new session",
                70,
                0,
                false,
                Outcome::Restart(code(70)),
                None,
                0,
            ),
            (
                "invalid epoch: close this one, start another",
                71,
                0,
                false,
                Outcome::Restart(code(71)),
                Some(77),
                0,
            ),
            (
                "topic id error: close, start another",
                106,
                0,
                false,
                Outcome::Restart(code(106)),
                Some(77),
                0,
            ),
            (
                "another top-level error: a new session next",
                2,
                0,
                false,
                Outcome::Failed(code(2)),
                None,
                0,
            ),
            (
                "a negative session id (damaged): a new session next",
                0,
                -2_097_227_956,
                false,
                Outcome::Answered,
                None,
                0,
            ),
            (
                "the broker closed the session (id 0)",
                0,
                0,
                false,
                Outcome::Answered,
                None,
                0,
            ),
            (
                "a partition the session does not hold",
                0,
                77,
                true,
                Outcome::Answered,
                Some(77),
                0,
            ),
            (
                "another session id",
                0,
                78,
                false,
                Outcome::Answered,
                Some(78),
                0,
            ),
        ];
        for (what, error, id, stranger, outcome, next_id, next_epoch) in cases {
            let mut s = established(&[(0, at(1))]);
            let plan = s.plan(&wanted(&[(0, at(1))]), true);
            assert_eq!(plan.epoch, 1, "{what}");
            assert_eq!(
                s.on_response(&plan, ErrorCode(error), id, stranger),
                outcome,
                "{what}"
            );
            assert_eq!((s.id(), s.next_epoch), (next_id, next_epoch), "{what}");
        }
    }

    /// Sessions disabled or full on the broker (it answers id 0 to a full request): every
    /// request is full and asks again for a session.
    #[test]
    fn a_broker_without_room_gets_full_requests_that_ask_again() {
        let mut s = FetchSession::default();
        let list = wanted(&[(0, at(1))]);
        for _ in 0..3 {
            let plan = s.plan(&list, true);
            assert_eq!((plan.session_id, plan.epoch, plan.send.len()), (0, 0, 1));
            s.on_response(&plan, ErrorCode(0), 0, false);
            assert!(!s.is_incremental());
        }
    }

    /// A lost connection, or switching between names and ids, sends everything again, closing
    /// the broker's old session (its id with epoch 0).
    #[test]
    fn restarts_send_everything_and_close_the_old_session() {
        let list = wanted(&[(0, at(1)), (1, at(2))]);
        let mut s = established(&[(0, at(1)), (1, at(2))]);
        s.restart();
        let plan = s.plan(&list, true);
        assert_eq!((plan.session_id, plan.epoch, plan.send.len()), (77, 0, 2));
        assert!(plan.forget.is_empty());

        let mut s = established(&[(0, at(1)), (1, at(2))]);
        let plan = s.plan(&list, false);
        assert_eq!((plan.session_id, plan.epoch, plan.send.len()), (77, 0, 2));
    }

    /// Epochs count 1, 2, … and wrap from i32::MAX to 1, never to 0 (a new session) or
    /// negative (no session).
    #[test]
    fn epochs_wrap_past_max_to_one() {
        let cases = [
            (0, 1),
            (1, 2),
            (i32::MAX - 1, i32::MAX),
            (i32::MAX, 1),
            (-1, -1),
        ];
        for (from, to) in cases {
            assert_eq!(next_epoch(from), to, "after {from}");
        }
        let mut s = established(&[(0, at(1))]);
        s.next_epoch = i32::MAX;
        let plan = s.plan(&wanted(&[(0, at(1))]), true);
        s.on_response(&plan, ErrorCode(0), 77, false);
        assert_eq!(s.next_epoch, 1);
    }
}
