//! The producer id and epoch (`Identity`) that InitProducerId hands out, and the check that an
//! answer carries one a broker could have handed out. The accumulator stamps it on every
//! batch; the transaction requests and EndTxn carry it to the coordinator.

use crate::client::error::{Error, Result};

/// The producer id and epoch every batch carries when idempotence is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Identity {
    pub producer_id: i64,
    pub epoch: i16,
}

/// A producer id or epoch below 0 is none a broker hands out: the answer was damaged on the
/// way. Used, it would be fatal to exactly-once in silence: a broker does not deduplicate
/// batches whose producer id is negative (they count as not idempotent), so every resend after
/// a lost answer would be written again (the hostile-broker test
/// `a_negative_producer_id_is_not_used_so_a_resend_is_still_deduplicated`). Treated as a lost
/// answer: the call is retried.
pub(crate) fn check_assigned(broker: &str, id: Identity) -> Result<()> {
    if id.producer_id < 0 || id.epoch < 0 {
        return Err(Error::Io {
            broker: broker.to_owned(),
            message: format!(
                "InitProducerId answered producer id {} epoch {}, which no broker hands out (a damaged answer); asking again",
                id.producer_id, id.epoch
            ),
        });
    }
    Ok(())
}
