//! What crosses processes through the job's internal topics, as pure functions: which task
//! owns a key group, the names of the topics, the watermark markers on the repartition topic,
//! and the input ids a keyed task combines watermarks over.

use std::ops::Range;

use bytes::Bytes;

use crate::client::Header;

/// The header that makes a repartition record a watermark marker rather than an element.
pub(crate) const MARKER_HEADER: &str = "onceflow.watermark";

/// The keyed task (= repartition and changelog partition) that owns key group `kg` of `g`,
/// among `tasks`: ⌊kg·tasks/g⌋, the local runtime's keyed subtask for the same numbers, so
/// a task's key groups are one range ([`key_groups_of`]) and its timer scans one range scan.
pub(crate) fn task_of(kg: u16, key_groups: u16, tasks: u16) -> i32 {
    let g = u32::from(key_groups.max(1));
    let t = u32::from(tasks.max(1));
    i32::try_from((u32::from(kg.min(key_groups.saturating_sub(1))) * t) / g).unwrap_or(0)
}

/// The key groups keyed task `task` owns: the inverse of [`task_of`].
pub(crate) fn key_groups_of(task: i32, key_groups: u16, tasks: u16) -> Range<u16> {
    let task = usize::try_from(task).unwrap_or(0);
    super::super::routing::key_group_range(task, usize::from(tasks.max(1)), key_groups)
}

/// The job's internal topics, named after its consumer group (one job per group, as Kafka
/// Streams names them after the application id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Topics {
    /// The key exchange: keyed elements, partition = owning task.
    pub repartition: String,
    /// The keyed state's changes, partition = owning task; compacted.
    pub changelog: String,
}

impl Topics {
    pub(crate) fn of(group: &str) -> Topics {
        Topics {
            repartition: format!("{group}-repartition"),
            changelog: format!("{group}-window-changelog"),
        }
    }
}

/// A source partition as a keyed task's watermark input: topic index (in `source.topics`) in
/// the high bits, partition in the low 20.
pub(crate) fn input_id(topic_index: usize, partition: i32) -> u32 {
    let t = u32::try_from(topic_index).unwrap_or(0) & 0xfff;
    (t << 20) | (u32::try_from(partition).unwrap_or(0) & 0xf_ffff)
}

/// A source task's watermark as its keyed readers see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Marker {
    /// The source partition's watermark: no later record of it has an earlier event time
    /// (bounded out-of-orderness).
    At { input: u32, watermark: i64 },
    /// The source partition is caught up and has had nothing for the idleness timeout: leave
    /// it out of the minimum until it reports again.
    Idle { input: u32 },
}

impl Marker {
    /// The marker's header (its record has no key and an empty value).
    pub(crate) fn header(self) -> Header {
        let mut v = Vec::with_capacity(12);
        match self {
            Marker::At { input, watermark } => {
                v.extend_from_slice(&input.to_be_bytes());
                v.extend_from_slice(&watermark.to_be_bytes());
            }
            Marker::Idle { input } => v.extend_from_slice(&input.to_be_bytes()),
        }
        Header {
            key: Bytes::from_static(MARKER_HEADER.as_bytes()),
            value: Some(Bytes::from(v)),
        }
    }

    /// The marker record's timestamp: a watermark's own event time. The repartition topic is
    /// an event-time log (elements carry their event time); a marker stamped with the wall
    /// clock would mix two clocks in it, and decide by where it lands which old elements a
    /// time retention could delete. An idle marker, and a watermark before 1970 or past `now`
    /// (the end of a bounded input is `i64::MAX`; a broker refuses timestamps far ahead of its
    /// clock), take the producer's clock: `None`.
    pub(crate) fn timestamp(self, now: i64) -> Option<i64> {
        match self {
            Marker::At { watermark, .. } if (0..=now).contains(&watermark) => Some(watermark),
            _ => None,
        }
    }

    /// The marker a repartition record carries: `None` for an element; `Some(Err)` for a
    /// marker header that is not one of ours.
    pub(crate) fn of(headers: &[Header]) -> Option<Result<Marker, String>> {
        let h = headers
            .iter()
            .find(|h| h.key.as_ref() == MARKER_HEADER.as_bytes())?;
        let v = h.value.as_deref().unwrap_or_default();
        let input = v
            .get(..4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_be_bytes);
        Some(match (input, v.len()) {
            (Some(input), 4) => Ok(Marker::Idle { input }),
            (Some(input), 12) => {
                let mut w = [0u8; 8];
                w.copy_from_slice(&v[4..12]);
                Ok(Marker::At {
                    input,
                    watermark: i64::from_be_bytes(w),
                })
            }
            _ => Err(format!(
                "a {MARKER_HEADER} header of {} bytes (expected 4 or 12)",
                v.len()
            )),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_groups_map_to_tasks_in_ranges_that_invert_task_of() {
        // (key groups, tasks): every key group has exactly one task, and the task's range
        // holds it.
        for (g, t) in [
            (128u16, 1u16),
            (128, 3),
            (128, 128),
            (7, 3),
            (10, 4),
            (1, 1),
        ] {
            let mut seen = vec![0u32; usize::from(g)];
            for task in 0..i32::from(t) {
                for kg in key_groups_of(task, g, t) {
                    assert_eq!(task_of(kg, g, t), task, "g={g} t={t} kg={kg}");
                    seen[usize::from(kg)] += 1;
                }
            }
            assert!(seen.iter().all(|&n| n == 1), "g={g} t={t}: {seen:?}");
        }
        assert_eq!(task_of(127, 128, 3), 2);
        assert_eq!(task_of(0, 128, 3), 0);
    }

    #[test]
    fn markers_round_trip_and_foreign_headers_are_named() {
        for m in [
            Marker::At {
                input: input_id(1, 5),
                watermark: -3,
            },
            Marker::At {
                input: 0,
                watermark: i64::MAX,
            },
            Marker::Idle { input: 7 },
        ] {
            assert_eq!(Marker::of(&[m.header()]), Some(Ok(m)));
        }
        assert_eq!(Marker::of(&[]), None);
        let other = Header {
            key: Bytes::from_static(b"trace"),
            value: None,
        };
        assert_eq!(Marker::of(&[other]), None);
        let bad = Header {
            key: Bytes::from_static(MARKER_HEADER.as_bytes()),
            value: Some(Bytes::from_static(b"12345")),
        };
        assert!(Marker::of(&[bad]).unwrap().unwrap_err().contains("5 bytes"));
    }

    #[test]
    fn a_marker_is_stamped_with_its_watermark_when_a_timestamp_can_hold_it() {
        let now = 1_800_000_000_000;
        let at = |watermark| Marker::At {
            input: 0,
            watermark,
        };
        for (marker, stamp) in [
            (at(1_767_225_600_000), Some(1_767_225_600_000)),
            (at(0), Some(0)),
            (at(now), Some(now)),
            (at(-1), None),
            (at(now + 1), None),
            (at(i64::MAX), None),
            (Marker::Idle { input: 0 }, None),
        ] {
            assert_eq!(marker.timestamp(now), stamp, "{marker:?}");
        }
    }

    #[test]
    fn input_ids_tell_topics_and_partitions_apart() {
        assert_ne!(input_id(0, 1), input_id(1, 1));
        assert_ne!(input_id(0, 1), input_id(0, 2));
        assert_eq!(input_id(0, 0), 0);
    }
}
