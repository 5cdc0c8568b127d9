//! One operator's state: the in-memory delta buffers over its fjall keyspace, and the
//! value / map / list handles that read and write through them.

use std::collections::{BTreeMap, HashMap};
use std::ops::{Bound, Range};
use std::path::PathBuf;
use std::sync::Arc;

use super::error::{fjall_error, Result, StateError, RESTORE_OLDER};
use super::timer_head::TimerHead;
use super::keys::{
    decode_list, decode_timer_key, decode_value, encode_list, encode_value, key_group,
    map_entry_key, prefix_end, state_key, timer_key, timer_prefix,
};

/// Changes since the last snapshot: stored key → stored value (format byte included), or
/// `None` for a delete. A BTreeMap keeps one entry per key (a fjall batch must not carry the
/// same key twice: its items share one sequence number) and gives ordered map scans.
pub(crate) type Entries = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// The frozen changes of one operator for one checkpoint, on their way to
/// [`super::StateStore::persist`]. Cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct FrozenDelta {
    pub(crate) checkpoint: u64,
    pub(crate) operator: u32,
    pub(crate) entries: Arc<Entries>,
    pub(crate) bytes: usize,
}

impl FrozenDelta {
    /// The checkpoint the delta belongs to.
    pub fn checkpoint(&self) -> u64 {
        self.checkpoint
    }
    /// How many keys it changes.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// Approximate bytes of keys and values (the checkpoint's size metric).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// A delta that is not a snapshot: the changes a restore applies to the local store
    /// (a task's state read back from its changelog topic, `runtime::cluster`).
    pub(crate) fn restored(checkpoint: u64, operator: u32, entries: Entries) -> FrozenDelta {
        let bytes = entries
            .iter()
            .map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len))
            .sum();
        FrozenDelta {
            checkpoint,
            operator,
            entries: Arc::new(entries),
            bytes,
        }
    }

    /// The changes, stored key → stored value (`None`: deleted).
    pub(crate) fn entries(&self) -> &Entries {
        &self.entries
    }

    /// One delta per (checkpoint, operator): the keyed subtasks of an operator snapshot their
    /// own key-group ranges, and [`super::StateStore::persist`] takes one delta per operator.
    /// The ranges are disjoint, so no key is in two deltas (if one were, the later would win).
    pub fn merge(deltas: impl IntoIterator<Item = FrozenDelta>) -> Vec<FrozenDelta> {
        let mut merged: BTreeMap<(u64, u32), FrozenDelta> = BTreeMap::new();
        for d in deltas {
            match merged.entry((d.checkpoint, d.operator)) {
                std::collections::btree_map::Entry::Vacant(slot) => {
                    slot.insert(d);
                }
                std::collections::btree_map::Entry::Occupied(mut slot) => {
                    let into = slot.get_mut();
                    let entries = Arc::make_mut(&mut into.entries);
                    let more =
                        Arc::try_unwrap(d.entries).unwrap_or_else(|shared| (*shared).clone());
                    entries.extend(more);
                    into.bytes += d.bytes;
                }
            }
        }
        merged.into_values().collect()
    }
}

/// Where an operator's delta buffers stand: at most one checkpoint in flight.
#[derive(Debug)]
enum Phase {
    /// No checkpoint in flight: reads go active → fjall.
    Open,
    /// Checkpoint N's changes are frozen and being persisted: reads go active → frozen → fjall.
    InFlight(FrozenDelta),
}

/// What [`OperatorState::some_entries_of`] found: live entries (stored key, user bytes), and
/// the stored key the next scan goes on after (`None`: it starts over).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScanStep {
    pub entries: Vec<(Vec<u8>, Vec<u8>)>,
    pub resume: Option<Vec<u8>>,
}

/// One stateful operator's state, owned by its task. Writes land in the active delta; fjall
/// only ever sees whole checkpoints (written by the persister), so a crash before
/// [`super::StateStore::persist`] loses exactly the writes since the last checkpoint.
pub struct OperatorState {
    pub(crate) uid: String,
    pub(crate) index: u32,
    pub(crate) keyspace: fjall::Keyspace,
    pub(crate) key_groups: u16,
    pub(crate) dir: PathBuf,
    /// The key groups this handle's task owns: timer scans visit only these.
    groups: Range<u16>,
    active: Entries,
    active_bytes: usize,
    phase: Phase,
    /// Per (timer state id, key group) this handle has scanned, the head of its timers
    /// ([`TimerHead`]): the scans it answers do not read the store.
    timer_heads: HashMap<(u8, u16), TimerHead>,
}

impl std::fmt::Debug for OperatorState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OperatorState")
            .field("uid", &self.uid)
            .field("index", &self.index)
            .field("active_keys", &self.active.len())
            .field("active_bytes", &self.active_bytes)
            .field("in_flight", &self.in_flight())
            .finish_non_exhaustive()
    }
}

impl OperatorState {
    pub(crate) fn new(
        uid: String,
        index: u32,
        keyspace: fjall::Keyspace,
        key_groups: u16,
        dir: PathBuf,
    ) -> Self {
        Self {
            uid,
            index,
            keyspace,
            key_groups,
            dir,
            groups: 0..key_groups,
            active: Entries::new(),
            active_bytes: 0,
            phase: Phase::Open,
            timer_heads: HashMap::new(),
        }
    }

    /// This handle restricted to the key groups `groups` (a keyed subtask's range, kg·P/G):
    /// its timer scans visit only them, so a subtask never fires another's restored timers.
    pub fn for_key_groups(mut self, groups: Range<u16>) -> Self {
        self.groups = groups.start.min(self.key_groups)..groups.end.min(self.key_groups);
        self
    }

    /// The key groups this handle scans.
    pub fn key_groups(&self) -> Range<u16> {
        self.groups.clone()
    }

    /// The operator's index in the layout (its deltas carry it).
    pub(crate) fn index(&self) -> u32 {
        self.index
    }

    /// Every key stored in fjall for the key groups `groups` (the deltas are not looked at):
    /// what a restore from a changelog deletes when the local copy cannot be trusted.
    ///
    /// # Errors
    /// Storage errors.
    pub(crate) fn stored_keys_in(&self, groups: Range<u16>) -> Result<Vec<Vec<u8>>> {
        let mut keys = Vec::new();
        let from = groups.start.to_be_bytes().to_vec();
        for guard in self.keyspace.range(from..) {
            let k = guard.key().map_err(|e| fjall_error(&self.dir, e))?;
            let kg = k.get(..2).map(|b| u16::from_be_bytes([b[0], b[1]]));
            if kg.is_none_or(|kg| kg >= groups.end) {
                break;
            }
            keys.push(k.to_vec());
        }
        Ok(keys)
    }

    /// The operator's uid.
    pub fn uid(&self) -> &str {
        &self.uid
    }

    /// The key group of a serialized key in this job.
    pub fn key_group(&self, key: &[u8]) -> u16 {
        key_group(key, self.key_groups)
    }

    /// Approximate bytes written since the last snapshot: over the job's budget, the runtime
    /// triggers an early checkpoint and then back-pressures.
    pub fn uncommitted_bytes(&self) -> usize {
        self.active_bytes
    }

    /// The checkpoint in flight, if any.
    pub fn in_flight(&self) -> Option<u64> {
        match &self.phase {
            Phase::Open => None,
            Phase::InFlight(f) => Some(f.checkpoint),
        }
    }

    /// Freezes the changes since the last snapshot as checkpoint `n`'s and starts a new,
    /// empty active buffer (O(1): a swap). Hand the result to the persister.
    ///
    /// # Errors
    /// [`StateError::Misuse`] when another checkpoint is still in flight.
    pub fn snapshot(&mut self, n: u64) -> Result<FrozenDelta> {
        if let Phase::InFlight(f) = &self.phase {
            return Err(StateError::Misuse(format!(
                "operator {:?}: snapshot of checkpoint {n} while checkpoint {} is in flight",
                self.uid, f.checkpoint
            )));
        }
        let frozen = FrozenDelta {
            checkpoint: n,
            operator: self.index,
            entries: Arc::new(std::mem::take(&mut self.active)),
            bytes: std::mem::take(&mut self.active_bytes),
        };
        self.phase = Phase::InFlight(frozen.clone());
        Ok(frozen)
    }

    /// Checkpoint `n` is durable: drop its frozen buffer (reads now find it in fjall).
    ///
    /// # Errors
    /// [`StateError::Misuse`] when `n` is not the checkpoint in flight.
    pub fn complete(&mut self, n: u64) -> Result<()> {
        match &self.phase {
            Phase::InFlight(f) if f.checkpoint == n => {
                self.phase = Phase::Open;
                Ok(())
            }
            other => Err(StateError::Misuse(format!(
                "operator {:?}: complete({n}) but the checkpoint in flight is {:?}",
                self.uid,
                match other {
                    Phase::Open => None,
                    Phase::InFlight(f) => Some(f.checkpoint),
                }
            ))),
        }
    }

    /// Checkpoint `n` was cancelled (declined, timed out): its changes are still
    /// uncommitted, so they go back under the active buffer (newer writes win) and into the
    /// next checkpoint.
    ///
    /// # Errors
    /// [`StateError::Misuse`] when `n` is not the checkpoint in flight.
    pub fn cancel(&mut self, n: u64) -> Result<()> {
        match std::mem::replace(&mut self.phase, Phase::Open) {
            Phase::InFlight(f) if f.checkpoint == n => {
                let entries = Arc::try_unwrap(f.entries).unwrap_or_else(|shared| (*shared).clone());
                for (k, v) in entries {
                    if let std::collections::btree_map::Entry::Vacant(slot) = self.active.entry(k) {
                        self.active_bytes += slot.key().len() + v.as_ref().map_or(0, Vec::len);
                        slot.insert(v);
                    }
                }
                Ok(())
            }
            other => {
                let in_flight = match &other {
                    Phase::Open => None,
                    Phase::InFlight(f) => Some(f.checkpoint),
                };
                self.phase = other;
                Err(StateError::Misuse(format!(
                    "operator {:?}: cancel({n}) but the checkpoint in flight is {in_flight:?}",
                    self.uid
                )))
            }
        }
    }

    /// The stored value of `key`: active delta, then the frozen one, then fjall.
    fn read(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if let Some(v) = self.active.get(key) {
            return Ok(v.clone());
        }
        if let Phase::InFlight(f) = &self.phase {
            if let Some(v) = f.entries.get(key) {
                return Ok(v.clone());
            }
        }
        let stored = self
            .keyspace
            .get(key)
            .map_err(|e| fjall_error(&self.dir, e))?;
        Ok(stored.map(|s| s.to_vec()))
    }

    /// The user bytes of `key`.
    fn read_user(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.read(key)? {
            None => Ok(None),
            Some(stored) => match decode_value(&stored) {
                Some(v) => Ok(Some(v.to_vec())),
                None => Err(self.corrupt("a value with an unknown format byte")),
            },
        }
    }

    fn write(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) {
        // A write under a key group's timers not made by [`TimerState`] (which keeps the
        // head exact) leaves its head unknown.
        if !self.timer_heads.is_empty() {
            if let Some(&[hi, lo, id]) = key.get(..3) {
                self.timer_heads.remove(&(id, u16::from_be_bytes([hi, lo])));
            }
        }
        let key_len = key.len();
        let new_len = value.as_ref().map_or(0, Vec::len);
        match self.active.insert(key, value) {
            // The key was counted already; only the value is replaced.
            Some(old) => {
                self.active_bytes =
                    self.active_bytes.saturating_sub(old.map_or(0, |o| o.len())) + new_len;
            }
            None => self.active_bytes += key_len + new_len,
        }
    }

    /// Every stored entry under `prefix`, with both deltas laid over fjall. Fjall's read ends
    /// at the prefix's end: the deleted keys after it (tombstones until a compaction drops
    /// them, such as a join's expired rows) are never stepped over.
    fn scan(&self, prefix: &[u8]) -> Result<Entries> {
        self.scan_until(prefix, prefix, prefix_end(prefix).as_deref(), |_| false)
    }

    /// The stored entries under `prefix` from `start` on, before `end` (exclusive, if given)
    /// and up to the first key for which `past_end` holds, with both deltas laid over fjall
    /// (a delete in a delta removes the key from the result's values: it stays as `None`).
    /// `end` bounds fjall's own iteration: without it, the deleted keys after the last one
    /// wanted (tombstones until a compaction drops them) are all stepped over on the way to
    /// the first live key `past_end` would stop at.
    fn scan_until(
        &self,
        prefix: &[u8],
        start: &[u8],
        end: Option<&[u8]>,
        past_end: impl Fn(&[u8]) -> bool,
    ) -> Result<Entries> {
        let mut merged = Entries::new();
        let range: Box<dyn Iterator<Item = _>> = match end {
            Some(end) => Box::new(self.keyspace.range(start.to_vec()..end.to_vec())),
            None => Box::new(self.keyspace.range(start.to_vec()..)),
        };
        for guard in range {
            let (k, v) = guard.into_inner().map_err(|e| fjall_error(&self.dir, e))?;
            if !k.starts_with(prefix) || past_end(&k) {
                break;
            }
            merged.insert(k.to_vec(), Some(v.to_vec()));
        }
        let mut overlay = |entries: &Entries| {
            for (k, v) in entries.range(start.to_vec()..) {
                if !k.starts_with(prefix) || past_end(k) {
                    break;
                }
                merged.insert(k.clone(), v.clone());
            }
        };
        if let Phase::InFlight(f) = &self.phase {
            overlay(&f.entries);
        }
        overlay(&self.active);
        Ok(merged)
    }

    /// Live entries (stored key, user bytes) of state `id`, in key order through this
    /// handle's key groups from after the stored key `after` (`None`: from the first group):
    /// `limit` stored keys looked at (deleted ones count), and the key to go on after; `None`
    /// once the last group's end was reached (the next scan starts over). Fjall and both
    /// deltas are merged as they are walked, so a scan costs `limit` keys however many the
    /// deltas hold.
    ///
    /// # Errors
    /// A fjall read error, or a stored value with an unknown format byte.
    pub(crate) fn some_entries_of(
        &self,
        id: u8,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<ScanStep> {
        let mut out = Vec::new();
        let mut looked = 0;
        let no_flight = Entries::new();
        let frozen = match &self.phase {
            Phase::InFlight(f) => &f.entries,
            Phase::Open => &no_flight,
        };
        let first = after
            .and_then(|k| k.get(..2))
            .map_or(self.groups.start, |b| u16::from_be_bytes([b[0], b[1]]))
            .max(self.groups.start);
        for kg in first..self.groups.end {
            let prefix = timer_prefix(kg, id);
            // The next state id's prefix (a typed state's id is below 240).
            let end = timer_prefix(kg, id.saturating_add(1));
            let start = match after {
                Some(k) if k.starts_with(&prefix) => [k, &[0]].concat(),
                _ => prefix,
            };
            let range = (Bound::Included(start), Bound::Excluded(end));
            let (n, stopped) = self.walk_merged(range, frozen, limit - looked, &mut out)?;
            looked += n;
            if stopped.is_some() {
                return Ok(ScanStep {
                    entries: out,
                    resume: stopped,
                });
            }
        }
        Ok(ScanStep {
            entries: out,
            resume: None,
        })
    }

    /// Walks the stored keys in `range`, fjall's merged with the `frozen` delta's and the active
    /// one's, pushing the live ones onto `out`, until `budget` keys were looked at: returns how
    /// many were, and the last one when the budget ran out first.
    fn walk_merged(
        &self,
        range: (Bound<Vec<u8>>, Bound<Vec<u8>>),
        frozen: &Entries,
        budget: usize,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<(usize, Option<Vec<u8>>)> {
        let mut stored = self
            .keyspace
            .range(range.clone())
            .map(|g| g.into_inner())
            .peekable();
        let mut in_flight = frozen.range(range.clone()).peekable();
        let mut active = self.active.range(range).peekable();
        let mut looked = 0;
        loop {
            let on_disk = match stored.peek() {
                None => None,
                Some(Ok((k, _))) => Some(k.to_vec()),
                Some(Err(_)) => match stored.next() {
                    Some(Err(e)) => return Err(fjall_error(&self.dir, e)),
                    _ => None,
                },
            };
            let next = [
                on_disk.as_deref(),
                in_flight.peek().map(|(k, _)| k.as_slice()),
                active.peek().map(|(k, _)| k.as_slice()),
            ]
            .into_iter()
            .flatten()
            .min()
            .map(<[u8]>::to_vec);
            let Some(key) = next else {
                return Ok((looked, None));
            };
            // The newest write of the key wins: active, then the frozen delta, then fjall.
            let mut value = None;
            if on_disk.as_deref() == Some(key.as_slice()) {
                if let Some(Ok((_, v))) = stored.next() {
                    value = Some(v.to_vec());
                }
            }
            if in_flight.peek().is_some_and(|(k, _)| **k == key) {
                value = in_flight.next().and_then(|(_, v)| v.clone());
            }
            if active.peek().is_some_and(|(k, _)| **k == key) {
                value = active.next().and_then(|(_, v)| v.clone());
            }
            looked += 1;
            if let Some(v) = value {
                let user = decode_value(&v)
                    .ok_or_else(|| self.corrupt("a value with an unknown format byte"))?;
                out.push((key.clone(), user.to_vec()));
            }
            if looked >= budget {
                return Ok((looked, Some(key)));
            }
        }
    }

    /// The first `n` live stored keys from `start` on, before `end` (fjall's and both deltas'
    /// merged), and whether they are all there are.
    ///
    /// # Errors
    /// A fjall read error, or a stored value with an unknown format byte.
    fn first_live_in(&self, start: &[u8], end: &[u8], n: usize) -> Result<(Vec<Vec<u8>>, bool)> {
        let no_flight = Entries::new();
        let frozen = match &self.phase {
            Phase::InFlight(f) => &f.entries,
            Phase::Open => &no_flight,
        };
        let mut live = Vec::new();
        let mut start = start.to_vec();
        loop {
            let range = (Bound::Included(start), Bound::Excluded(end.to_vec()));
            let (_, stopped) = self.walk_merged(range, frozen, n, &mut live)?;
            if live.len() >= n {
                live.truncate(n);
                return Ok((live.into_iter().map(|(k, _)| k).collect(), false));
            }
            match stopped {
                // `n` keys looked at, some of them deleted: go on after the last.
                Some(last) => start = [last.as_slice(), &[0]].concat(),
                None => return Ok((live.into_iter().map(|(k, _)| k).collect(), true)),
            }
        }
    }

    /// Writes (`live`) or deletes the timer of state `id` for `key` at `time`, keeping its key
    /// group's head exact (any other write under the timer prefix drops the head).
    fn write_timer(&mut self, id: u8, key: &[u8], time: i64, live: bool) {
        let kg = self.key_group(key);
        let head = self.timer_heads.remove(&(id, kg));
        let value = live.then(|| encode_value(&[]));
        self.write(timer_key(kg, id, time, key), value);
        if let Some(mut head) = head {
            if live {
                head.registered(time, key);
            } else {
                head.deleted(time, key);
            }
            self.timer_heads.insert((id, kg), head);
        }
    }

    /// How many timers a key group's head holds: a few thousand over all the handle's key
    /// groups, at least 8 and at most 256 each.
    fn head_size(&self) -> usize {
        let groups = usize::from(self.groups.end.saturating_sub(self.groups.start)).max(1);
        (8192 / groups).clamp(8, 256)
    }

    /// Writes user bytes `value` (`None`: deletes) under a stored key one of this handle's
    /// scans returned.
    pub(crate) fn put_stored(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) {
        self.write(key, value.map(|v| encode_value(&v)));
    }

    fn corrupt(&self, what: &str) -> StateError {
        StateError::Corrupt {
            dir: self.dir.clone(),
            what: format!("operator {:?} holds {what}", self.uid),
            remedy: RESTORE_OLDER,
        }
    }
}

/// A single value per key. `id` tells the operator's states apart (0, 1, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValueState {
    id: u8,
}

impl ValueState {
    /// The value state with this id within its operator.
    pub const fn new(id: u8) -> Self {
        Self { id }
    }

    fn key(&self, op: &OperatorState, key: &[u8]) -> Vec<u8> {
        state_key(op.key_group(key), self.id, key)
    }

    /// The value of `key`.
    ///
    /// # Errors
    /// A fjall read error, or a corrupt stored value.
    pub fn get(&self, op: &OperatorState, key: &[u8]) -> Result<Option<Vec<u8>>> {
        op.read_user(&self.key(op, key))
    }

    /// Sets the value of `key`.
    pub fn set(&self, op: &mut OperatorState, key: &[u8], value: &[u8]) {
        let k = self.key(op, key);
        op.write(k, Some(encode_value(value)));
    }

    /// Deletes the value of `key`.
    pub fn clear(&self, op: &mut OperatorState, key: &[u8]) {
        let k = self.key(op, key);
        op.write(k, None);
    }

    /// The value of `key` stored in key group `kg` (not the key's own group): state of a
    /// task rather than of a key, such as a keyed subtask's watermark, kept in a key group
    /// of its range so that it moves with that range when the job is rescaled.
    ///
    /// # Errors
    /// A fjall read error, or a corrupt stored value.
    pub fn get_in_group(&self, op: &OperatorState, kg: u16, key: &[u8]) -> Result<Option<Vec<u8>>> {
        op.read_user(&state_key(kg, self.id, key))
    }

    /// Sets the value of `key` in key group `kg` (see [`Self::get_in_group`]).
    pub fn set_in_group(&self, op: &mut OperatorState, kg: u16, key: &[u8], value: &[u8]) {
        op.write(state_key(kg, self.id, key), Some(encode_value(value)));
    }
}

/// A map per key (map keys ordered as bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapState {
    id: u8,
}

impl MapState {
    /// The map state with this id within its operator.
    pub const fn new(id: u8) -> Self {
        Self { id }
    }

    /// The value under `map_key` in `key`'s map.
    ///
    /// # Errors
    /// A fjall read error, or a corrupt stored value.
    pub fn get(&self, op: &OperatorState, key: &[u8], map_key: &[u8]) -> Result<Option<Vec<u8>>> {
        op.read_user(&map_entry_key(op.key_group(key), self.id, key, map_key))
    }

    /// Puts `value` under `map_key` in `key`'s map.
    pub fn insert(&self, op: &mut OperatorState, key: &[u8], map_key: &[u8], value: &[u8]) {
        let k = map_entry_key(op.key_group(key), self.id, key, map_key);
        op.write(k, Some(encode_value(value)));
    }

    /// Removes `map_key` from `key`'s map.
    pub fn remove(&self, op: &mut OperatorState, key: &[u8], map_key: &[u8]) {
        let k = map_entry_key(op.key_group(key), self.id, key, map_key);
        op.write(k, None);
    }

    /// All entries of `key`'s map, ordered by map key.
    ///
    /// # Errors
    /// A fjall read error, or a corrupt stored value.
    pub fn entries(&self, op: &OperatorState, key: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let prefix = state_key(op.key_group(key), self.id, key);
        let mut out = Vec::new();
        for (k, v) in op.scan(&prefix)? {
            let Some(stored) = v else { continue };
            let value = decode_value(&stored)
                .ok_or_else(|| op.corrupt("a map value with an unknown format byte"))?;
            out.push((k[prefix.len()..].to_vec(), value.to_vec()));
        }
        Ok(out)
    }

    /// Removes every entry of `key`'s map.
    ///
    /// # Errors
    /// A fjall read error.
    pub fn clear(&self, op: &mut OperatorState, key: &[u8]) -> Result<()> {
        let prefix = state_key(op.key_group(key), self.id, key);
        let present: Vec<Vec<u8>> = op
            .scan(&prefix)?
            .into_iter()
            .filter_map(|(k, v)| v.map(|_| k))
            .collect();
        for k in present {
            op.write(k, None);
        }
        Ok(())
    }
}

/// A list per key (stored as one value: fine for the short lists operators keep, such as a
/// window's pending elements).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListState {
    id: u8,
}

impl ListState {
    /// The list state with this id within its operator.
    pub const fn new(id: u8) -> Self {
        Self { id }
    }

    fn key(&self, op: &OperatorState, key: &[u8]) -> Vec<u8> {
        state_key(op.key_group(key), self.id, key)
    }

    /// `key`'s list (empty when absent).
    ///
    /// # Errors
    /// A fjall read error, or a corrupt stored list.
    pub fn get(&self, op: &OperatorState, key: &[u8]) -> Result<Vec<Vec<u8>>> {
        match op.read_user(&self.key(op, key))? {
            None => Ok(Vec::new()),
            Some(bytes) => decode_list(&bytes).ok_or_else(|| op.corrupt("a truncated list")),
        }
    }

    /// Appends `item` to `key`'s list.
    ///
    /// # Errors
    /// A fjall read error, or a corrupt stored list.
    pub fn push(&self, op: &mut OperatorState, key: &[u8], item: &[u8]) -> Result<()> {
        let mut items = self.get(op, key)?;
        items.push(item.to_vec());
        self.update(op, key, &items);
        Ok(())
    }

    /// Replaces `key`'s list (an empty list deletes it).
    pub fn update(&self, op: &mut OperatorState, key: &[u8], items: &[Vec<u8>]) {
        let k = self.key(op, key);
        if items.is_empty() {
            op.write(k, None);
        } else {
            op.write(k, Some(encode_value(&encode_list(items))));
        }
    }

    /// Deletes `key`'s list.
    pub fn clear(&self, op: &mut OperatorState, key: &[u8]) {
        self.update(op, key, &[]);
    }
}

/// Timers: (event time, key) pairs an operator fires once the watermark passes them, stored
/// as `kg | id | time (order-preserving u64 BE) | key` so due timers are a range scan per key
/// group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimerState {
    id: u8,
}

impl TimerState {
    /// The timer state with this id within its operator.
    pub const fn new(id: u8) -> Self {
        Self { id }
    }

    /// Registers a timer for `key` at `time` (ms); registering it twice keeps one.
    pub fn register(&self, op: &mut OperatorState, key: &[u8], time: i64) {
        op.write_timer(self.id, key, time, true);
    }

    /// Deletes the timer for `key` at `time` (fired or no longer needed).
    pub fn delete(&self, op: &mut OperatorState, key: &[u8], time: i64) {
        op.write_timer(self.id, key, time, false);
    }

    /// The timers of key group `kg` at or before `up_to`, ordered by time, then key: one key
    /// group's share of [`TimerState::due`], so that an operator can fire a watermark's timers
    /// a key group at a time, in bounded memory.
    ///
    /// # Errors
    /// A fjall read error, or a corrupt timer key.
    pub fn due_in_group(
        &self,
        op: &mut OperatorState,
        kg: u16,
        up_to: i64,
    ) -> Result<Vec<(i64, Vec<u8>)>> {
        self.due_in_group_after(op, kg, None, up_to)
    }

    /// [`TimerState::due_in_group`], only the timers after `after` (`None`: all): an operator
    /// that fired every timer up to `after` before, and registers none at or below its
    /// watermark, scans from there, and the deleted timers before it (tombstones until the
    /// store compacts them) are never visited again.
    ///
    /// After reading the store, a scan reads on to the key group's next live timers and the
    /// handle keeps them ([`TimerHead`]): later calls it answers (`after` at or past this
    /// call's `up_to`, `up_to` within what it holds) do not read the store, so an operator
    /// that asks on every watermark reads it about once per head's worth of timers.
    ///
    /// # Errors
    /// A fjall read error, or a corrupt timer key.
    pub fn due_in_group_after(
        &self,
        op: &mut OperatorState,
        kg: u16,
        after: Option<i64>,
        up_to: i64,
    ) -> Result<Vec<(i64, Vec<u8>)>> {
        if let Some(due) = op
            .timer_heads
            .get(&(self.id, kg))
            .and_then(|head| head.answer(after, up_to))
        {
            return Ok(due);
        }
        let prefix = timer_prefix(kg, self.id);
        let start = match after.and_then(|a| a.checked_add(1)) {
            Some(from) => timer_key(kg, self.id, from, &[]),
            None if after.is_some() => return Ok(Vec::new()),
            None => prefix.clone(),
        };
        let past = |k: &[u8]| decode_timer_key(k).is_none_or(|(t, _)| t > up_to);
        let end = up_to.checked_add(1).map(|e| timer_key(kg, self.id, e, &[]));
        let decode = |k: &[u8]| -> Result<(i64, Vec<u8>)> {
            let (time, key) = decode_timer_key(k)
                .ok_or_else(|| op.corrupt("a timer key too short for its time"))?;
            Ok((time, key.to_vec()))
        };
        let mut out = Vec::new();
        for (k, v) in op.scan_until(&prefix, &start, end.as_deref(), past)? {
            if v.is_some() {
                out.push(decode(&k)?);
            }
        }
        let next = match (&end, prefix_end(&prefix)) {
            (Some(end), Some(group_end)) => {
                let (keys, complete) = op.first_live_in(end, &group_end, op.head_size())?;
                let next = keys.iter().map(|k| decode(k)).collect::<Result<Vec<_>>>()?;
                Some(TimerHead::after_scan(up_to, next, complete))
            }
            (None, _) => Some(TimerHead::after_scan(up_to, Vec::new(), true)),
            // A prefix of 0xFF bytes only (key group 65535): no head.
            (Some(_), None) => None,
        };
        if let Some(head) = next {
            op.timer_heads.insert((self.id, kg), head);
        }
        Ok(out)
    }

    /// Every timer at or before `up_to`, ordered by time, then key group, then key. They stay
    /// registered until [`TimerState::delete`]d.
    ///
    /// # Errors
    /// A fjall read error, or a corrupt timer key.
    pub fn due(&self, op: &mut OperatorState, up_to: i64) -> Result<Vec<(i64, Vec<u8>)>> {
        let mut out = Vec::new();
        for kg in op.groups.clone() {
            for (time, key) in self.due_in_group(op, kg, up_to)? {
                out.push((time, kg, key));
            }
        }
        out.sort();
        Ok(out.into_iter().map(|(t, _, k)| (t, k)).collect())
    }
}
