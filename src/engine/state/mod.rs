//! Operator state on fjall (docs/design/state.md).
//!
//! Keyed value / map / list state per operator, split by key group
//! (kg = murmur2(serialized key) mod G). Writes go to an in-memory delta buffer; at a
//! checkpoint the buffer is frozen (O(1)), and the persister writes every operator's frozen
//! changes, the source positions and the unresolved sink committables to fjall in ONE batch
//! committed with SyncAll. fjall therefore only ever holds complete checkpoints: after a crash
//! the state is exactly the latest complete one. K checkpoints are retained through undo
//! images, so a restore can also start from an older one.
//!
//! An operator's states ([`ValueState`], [`MapState`], [`ListState`], [`TimerState`]) are told
//! apart by a `u8` id, unique within the operator across all kinds.
//!
//! ```text
//! op-<uid>: kg (u16 BE) | state id (u8) | key len (u32 BE) | key [| map key] → 0x01 | value
//!           kg (u16 BE) | timer state id (u8) | time (u64 BE, sign flipped) | key → 0x01
//! undo:     ckpt (u64 BE) | operator index (u32 BE) | state key      → absent | present+value
//! meta:     c/ + ckpt (u64 BE) → record (JSON); layout; gen; undo-floor
//! ```

mod error;
mod keys;
mod layout;
mod operator;
mod store;
mod timer_head;
#[cfg(test)]
mod tests;

pub use error::{Result, StateError};
pub use keys::key_group;
pub(crate) use keys::{decode_list, encode_list};
pub use layout::{Layout, OperatorLayout};
pub use operator::{FrozenDelta, ListState, MapState, OperatorState, TimerState, ValueState};
pub use store::{
    ChangelogCopy, CheckpointRecord, RecordPositions, RestoreFrom, Rollback, SourcePosition,
    StateStore, StoreOptions,
};
