//! `join`: the interval join of two topics, checked (the sides, the bounds, the lateness).

use std::ops::Range;

use toml::Spanned;

use crate::engine::job::join::{IntervalJoin, JoinSide};
use crate::engine::job::JobError;

use super::locator::Locator;
use super::predicate::check_pred;
use super::raw::*;

/// A `join` stage (`first`: the pipeline's first stage, as a join must be): two sides on
/// different topics under different names, `between = [lower, upper]` with lower ≤ upper.
pub(super) fn check_join(
    loc: &Locator<'_>,
    raw: Spanned<RawJoin>,
    first: bool,
) -> Result<IntervalJoin, JobError> {
    let span = raw.span();
    if !first {
        return Err(loc.at(
            &span,
            Some("join"),
            "a join is the first stage of a pipeline: filter each side with join.left.filter / join.right.filter",
        ));
    }
    let raw = raw.into_inner();
    let left = check_side(loc, "join.left", raw.left)?;
    let right = check_side(loc, "join.right", raw.right)?;
    if left.topic == right.topic {
        return Err(loc.at(
            &span,
            Some("join.right.topic"),
            format!(
                "both sides read {:?}: a join's sides read two different topics",
                left.topic
            ),
        ));
    }
    if left.name == right.name {
        return Err(loc.at(
            &span,
            Some("join.right.as"),
            format!(
                "both sides are named {:?} in the output: give one another name with as = \"...\"",
                left.name
            ),
        ));
    }
    let ((lower, upper), window) = match (raw.between, raw.window) {
        (Some(between), None) => (check_between(loc, between)?, None),
        (None, Some(w)) => ((0, 0), Some(check_join_window(loc, w)?)),
        _ => {
            return Err(loc.at(
                &span,
                Some("join"),
                "give exactly one of join.between = [\"-1m\", \"1m\"] (an interval join) or \
                 join.window = { tumbling = \"1h\" } (a window join)",
            ))
        }
    };
    if window.is_some() && raw.allowed_lateness.is_some_and(|d| d.0 != 0) {
        return Err(loc.at(
            &span,
            Some("join.allowed_lateness"),
            "a window join writes each window's pairs once, when it closes: remove \
             allowed_lateness (late records are counted, and written to join.late_topic if set)",
        ));
    }
    let late_topic = match raw.late_topic {
        Some(t) if t.get_ref().trim().is_empty() => {
            return Err(loc.at(
                &t.span(),
                Some("join.late_topic"),
                "the topic name is empty",
            ));
        }
        t => t.map(Spanned::into_inner),
    };
    Ok(IntervalJoin {
        left,
        right,
        lower,
        upper,
        window,
        out_of_orderness: raw.out_of_orderness.map_or(0, |d| d.0),
        allowed_lateness: raw.allowed_lateness.map_or(0, |d| d.0),
        late_topic,
    })
}

fn check_side(
    loc: &Locator<'_>,
    field: &str,
    raw: Spanned<RawJoinSide>,
) -> Result<JoinSide, JobError> {
    let raw = raw.into_inner();
    let topic_span = raw.topic.span();
    let topic = raw.topic.into_inner();
    if topic.trim().is_empty() {
        return Err(loc.at(
            &topic_span,
            Some(&format!("{field}.topic")),
            "the topic name is empty",
        ));
    }
    let name = match raw.name {
        Some(n) if n.get_ref().trim().is_empty() || n.get_ref().contains('.') => {
            return Err(loc.at(
                &n.span(),
                Some(&format!("{field}.as")),
                "the side's name in the output is empty or has a '.': use a plain field name like \"ride\"",
            ));
        }
        Some(n) => n.into_inner(),
        None => topic.clone(),
    };
    let filter = raw.filter.map(|p| check_pred(loc, p)).transpose()?;
    Ok(JoinSide {
        topic,
        name,
        key: raw.key,
        time: raw.time,
        filter,
        condition: None,
    })
}

/// `window = { tumbling = "1h" }` or sliding (a session of two streams is not supported).
fn check_join_window(
    loc: &Locator<'_>,
    raw: Spanned<RawJoinWindow>,
) -> Result<crate::engine::time::WindowKind, JobError> {
    let span = raw.span();
    let w = raw.into_inner();
    if let Some(s) = &w.session {
        return Err(loc.at(
            &s.span(),
            Some("join.window.session"),
            "a window join takes tumbling or sliding windows: session windows of two streams \
             are not supported",
        ));
    }
    super::window_kind::check_window_kind(loc, span, w.tumbling, w.sliding, None)
}

/// `between = ["-1m", "1m"]`: two durations, the first at most the second.
fn check_between(
    loc: &Locator<'_>,
    raw: Spanned<Vec<Spanned<SignedDuration>>>,
) -> Result<(i64, i64), JobError> {
    let span: Range<usize> = raw.span();
    match raw.get_ref().as_slice() {
        [lower, upper] if lower.get_ref().0 <= upper.get_ref().0 => {
            Ok((lower.get_ref().0, upper.get_ref().0))
        }
        [_, _] => Err(loc.at(
            &span,
            Some("join.between"),
            "the lower bound is above the upper one: write [lower, upper], e.g. [\"-1m\", \"1m\"] (the right record's time − the left one's)",
        )),
        _ => Err(loc.at(
            &span,
            Some("join.between"),
            "give two durations [lower, upper], e.g. [\"-1m\", \"1m\"]: a right record at r meets a left one at l when lower ≤ r − l ≤ upper",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::invalid;
    use crate::engine::job::batch::run_batch_of_topics;
    use crate::engine::job::{Job, Operator};
    use serde_json::json;

    const RIDES_AND_FARES: &str = include_str!("../../../../jobs/rides-and-fares.toml");

    #[test]
    fn the_shipped_rides_and_fares_job_enriches_a_start_with_its_fare() {
        let job = Job::parse("jobs/rides-and-fares.toml", RIDES_AND_FARES).unwrap();
        let [Operator::Join(join), Operator::Project(_)] = &job.pipeline[..] else {
            panic!("join, project expected, got {:?}", job.pipeline);
        };
        assert_eq!(
            (join.lower, join.upper, join.out_of_orderness),
            (-60_000, 60_000, 60_000)
        );
        let ride = |is_start: bool, t: i64| {
            json!({"ride_id": 42, "driver_id": 7, "taxi_id": 8, "is_start": is_start,
                   "start_lon": -73.9, "start_lat": 40.7, "end_lon": -73.8, "end_lat": 40.8,
                   "passengers": 2, "event_time": t})
        };
        let fare = json!({"ride_id": 42, "taxi_id": 8, "driver_id": 7, "payment_type": "CARD",
                          "tip": 2.5, "tolls": 0.0, "total_fare": 17.25, "event_time": 1000});
        let input = [
            ("rides", ride(true, 1000)),
            ("rides", ride(false, 900_000)),
            ("fares", fare),
        ]
        .map(|(t, v)| (t.to_owned(), Some(b"42".to_vec()), v));
        let out = run_batch_of_topics(&job.pipeline, input).records;
        let want = json!({"ride_id": 42, "driver_id": 7, "taxi_id": 8, "passengers": 2,
            "start_time": 1000, "start_lon": -73.9, "start_lat": 40.7, "end_lon": -73.8,
            "end_lat": 40.8, "payment_type": "CARD", "tip": 2.5, "tolls": 0.0,
            "total_fare": 17.25});
        assert_eq!(out, [(Some(b"42".to_vec()), want)]);
    }

    #[test]
    fn malformed_joins_name_the_line_and_the_field() {
        let job = |topics: &str, join: &str, after: &str| {
            format!(
                "name = \"j\"\n[source]\nbrokers = \"b:1\"\ntopics = {topics}\n\
                 [[pipeline]]\n{join}\n{after}\
                 [sink]\ntopic = \"o\"\ndelivery.guarantee = \"none\"\n"
            )
        };
        let sides = "join.left = { topic = \"a\", key = \"k\", time = \"t\" }\n\
                     join.right = { topic = \"b\", key = \"k\", time = \"t\" }";
        let with = |extra: &str| format!("{sides}\n{extra}");
        // (file text, line, field, part of the message)
        let cases: Vec<(String, usize, &str, &str)> = vec![
            (
                job(
                    "[\"a\", \"b\"]",
                    &with("join.between = [\"-1m\", \"1m\"]\njoin.window = { tumbling = \"1h\" }"),
                    "",
                ),
                6,
                "join",
                "give exactly one of join.between",
            ),
            (
                job("[\"a\", \"b\"]", sides, ""),
                6,
                "join",
                "give exactly one of join.between",
            ),
            (
                job(
                    "[\"a\", \"b\"]",
                    &with("join.window = { session = \"30m\" }"),
                    "",
                ),
                8,
                "join.window.session",
                "session windows of two streams are not supported",
            ),
            (
                job(
                    "[\"a\", \"b\"]",
                    &with("join.window = { tumbling = \"1h\" }\njoin.allowed_lateness = \"1m\""),
                    "",
                ),
                6,
                "join.allowed_lateness",
                "a window join writes each window's pairs once",
            ),
            (
                job(
                    "[\"a\", \"b\"]",
                    &with("join.between = [\"1m\", \"-1m\"]"),
                    "",
                ),
                8,
                "join.between",
                "the lower bound is above the upper one",
            ),
            (
                job("[\"a\", \"b\"]", &with("join.between = [\"1m\"]"), ""),
                8,
                "join.between",
                "give two durations [lower, upper]",
            ),
            (
                job(
                    "[\"a\", \"b\"]",
                    &with("join.between = [\"-x\", \"1m\"]"),
                    "",
                ),
                8,
                "join.between",
                "or one with a leading '-'",
            ),
            (
                job(
                    "[\"a\", \"b\"]",
                    "join.left = { topic = \"a\", key = \"k\", time = \"t\" }\n\
                     join.right = { topic = \"a\", key = \"k\", time = \"t\", as = \"x\" }\n\
                     join.between = [\"0s\", \"0s\"]",
                    "",
                ),
                6,
                "join.right.topic",
                "a join's sides read two different topics",
            ),
            (
                job(
                    "[\"a\", \"b\"]",
                    "join.left = { topic = \"a\", key = \"k\", time = \"t\", as = \"x\" }\n\
                     join.right = { topic = \"b\", key = \"k\", time = \"t\", as = \"x\" }\n\
                     join.between = [\"0s\", \"0s\"]",
                    "",
                ),
                6,
                "join.right.as",
                "give one another name",
            ),
            (
                job(
                    "[\"a\", \"b\"]",
                    "join.left = { topic = \"a\", key = \"k\", time = \"t\", as = \"x.y\" }\n\
                     join.right = { topic = \"b\", key = \"k\", time = \"t\" }\n\
                     join.between = [\"0s\", \"0s\"]",
                    "",
                ),
                6,
                "join.left.as",
                "use a plain field name",
            ),
            (
                job(
                    "[\"a\", \"c\"]",
                    &with("join.between = [\"0s\", \"0s\"]"),
                    "",
                ),
                4,
                "source.topics",
                "missing: [\"b\"], not a side: [\"c\"]",
            ),
            (
                job(
                    "[\"a\", \"b\"]",
                    &with("join.between = [\"0s\", \"0s\"]"),
                    "[[pipeline]]\nkey_by = \"k\"\n",
                ),
                10,
                "key_by",
                "after a join only filter and project may follow",
            ),
            (
                job(
                    "[\"a\", \"b\"]",
                    "filter = { field = \"k\", op = \"=\", value = 1 }",
                    &format!(
                        "[[pipeline]]\n{}\n",
                        with("join.between = [\"0s\", \"0s\"]")
                    ),
                ),
                8,
                "join",
                "a join is the first stage of a pipeline",
            ),
            (
                job(
                    "[\"a\", \"b\"]",
                    &with("join.between = [\"0s\", \"0s\"]\njoin.late_topic = \" \""),
                    "",
                ),
                9,
                "join.late_topic",
                "the topic name is empty",
            ),
        ];
        for (text, line, field, part) in cases {
            let (l, f, m) = invalid(&text);
            assert_eq!((l, f.as_str()), (line, field), "{m}\n{text}");
            assert!(m.contains(part), "{m:?} lacks {part:?}\n{text}");
        }
    }
}
