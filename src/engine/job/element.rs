//! A keyed JSON record on its way from a source subtask to the keyed stage (the window or the
//! join), and its bytes when it crosses processes through a repartition topic; what a keyed
//! stage sends to its sink (a late record, a result through the operators after the stage).

use bytes::Bytes;
use serde_json::Value;

use crate::engine::time::interval_join::Side;

/// An input record as it came (Kafka key and bytes): what `window.late_topic` receives when
/// the record is late, so a reader can tell which input records the aggregate left out.
pub(crate) type Input = (Option<Vec<u8>>, Bytes);

/// A keyed JSON record crossing the exchange to the window or the join.
pub(crate) struct JsonElement {
    pub(crate) value: Value,
    pub(crate) input: Option<Input>,
    /// The join's side it is on (`None`: for the window).
    pub(crate) side: Option<Side>,
}

impl JsonElement {
    /// `flags (u8: 1 = with input, 2 = input has a key, 4 = the join's left side, 8 = its
    /// right side) | value JSON length (u32 BE) | value JSON [| key length (u32 BE) | key]
    /// [| input length (u32 BE) | input]`.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let value = serde_json::to_vec(&self.value).unwrap_or_default();
        let mut out = Vec::with_capacity(value.len() + 16);
        let input = match &self.input {
            None => 0u8,
            Some((None, _)) => 1,
            Some((Some(_), _)) => 3,
        };
        let side = match self.side {
            None => 0u8,
            Some(Side::Left) => 4,
            Some(Side::Right) => 8,
        };
        out.push(input | side);
        put_chunk(&mut out, &value);
        if let Some((key, raw)) = &self.input {
            if let Some(k) = key {
                put_chunk(&mut out, k);
            }
            put_chunk(&mut out, raw);
        }
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Option<JsonElement> {
        let (&flags, mut rest) = bytes.split_first()?;
        let side = match flags & 12 {
            0 => None,
            4 => Some(Side::Left),
            8 => Some(Side::Right),
            _ => return None,
        };
        if flags & !15 != 0 {
            return None;
        }
        let value = serde_json::from_slice(take_chunk(&mut rest)?).ok()?;
        let input = if flags & 1 == 1 {
            let key = if flags & 2 == 2 {
                Some(take_chunk(&mut rest)?.to_vec())
            } else {
                None
            };
            Some((key, Bytes::copy_from_slice(take_chunk(&mut rest)?)))
        } else {
            None
        };
        rest.is_empty()
            .then_some(JsonElement { value, input, side })
    }
}

fn put_chunk(out: &mut Vec<u8>, chunk: &[u8]) {
    out.extend_from_slice(&u32::try_from(chunk.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(chunk);
}

fn take_chunk<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    let chunk = rest.get(4..4 + len)?;
    *rest = &rest[4 + len..];
    Some(chunk)
}

/// A record a keyed stage found late: counted into `metrics`, and, when the job names a late
/// topic, the input as it came for it (written in the same transaction as the main output).
pub(crate) fn late(
    metrics: Option<&crate::engine::metrics::Metrics>,
    late_topic: Option<&String>,
    input: Option<Input>,
) -> Option<crate::engine::runtime::topology::Output> {
    if let Some(m) = metrics {
        m.late_record();
    }
    let (topic, (key, raw)) = late_topic.zip(input)?;
    Some(crate::engine::runtime::topology::Output {
        topic: Some(topic.clone()),
        key,
        value: raw,
        headers: Vec::new(),
    })
}

/// A keyed stage's result `record` of key `key` through the operators `after` the stage
/// (counted into `counters` when observed), onto `out` for the sink. A filter may leave it out;
/// a record they cannot compute is left out, counted and logged (`batch::result_left_out`).
pub(crate) fn emit_result(
    after: &[super::Operator],
    counters: &[std::sync::Arc<crate::engine::metrics::OperatorCounter>],
    metrics: Option<&crate::engine::metrics::Metrics>,
    key: super::batch::Carried,
    record: Value,
    out: &mut Vec<crate::engine::runtime::topology::Output>,
) {
    match super::batch::counted(after, counters, key, record) {
        Ok((carried, v, _)) => out.push(crate::engine::runtime::topology::Output {
            topic: None,
            key: carried.kafka_key(),
            value: Bytes::from(v.to_string()),
            headers: Vec::new(),
        }),
        Err(super::batch::Dropped::Bad(why)) => super::batch::result_left_out(metrics, &why),
        Err(_) => {}
    }
}
