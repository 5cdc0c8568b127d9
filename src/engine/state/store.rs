//! The fjall database of a job: checkpoint records, the one atomic batch per checkpoint,
//! retention, rollback through undo images, and restore.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use serde::{Deserialize, Serialize};

use crate::engine::sink::PreparedOutput;
use crate::engine::file_source::FilePosition;

use super::error::{fjall_error, Result, StateError, RESTORE_OLDER};
use super::keys::{
    checkpoint_key, decode_undo, encode_undo, parse_checkpoint_key, parse_undo_key, undo_key,
    CHECKPOINT_PREFIX, GENERATION_KEY, LAYOUT_KEY, UNDO_FLOOR_KEY,
};
use super::layout::Layout;
use super::operator::{FrozenDelta, OperatorState};

/// The format byte in front of every checkpoint record's JSON.
const RECORD_FORMAT: u8 = 1;
/// Keys tombstoned per batch while `--fresh` wipes old state.
const WIPE_CHUNK: usize = 10_000;
/// The keyspace of checkpoint records, the layout and the generation.
const META: &str = "meta";
/// The keyspace of undo images.
const UNDO: &str = "undo";

/// Where to start from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestoreFrom {
    /// The latest complete checkpoint.
    Latest,
    /// A chosen retained checkpoint (`--from-checkpoint N`): later ones are rolled back.
    Checkpoint(u64),
    /// No state, on purpose (`--fresh`): existing state in the directory is wiped.
    Fresh,
}

/// Settings of the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreOptions {
    /// K: how many checkpoints are retained (restorable); at least 1. With K ≥ 2 every
    /// checkpoint writes undo images so a restore can go back K − 1 checkpoints.
    pub retain: u32,
    /// fjall's block cache, bytes (`None`: fjall's default, 32 MiB).
    pub cache_bytes: Option<u64>,
    /// Each keyspace's memtable limit, bytes (`None`: fjall's default, 64 MiB). fjall keeps
    /// the size a keyspace was created with, so it applies to a new state directory only.
    pub memtable_bytes: Option<u64>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            retain: 2,
            cache_bytes: None,
            memtable_bytes: None,
        }
    }
}

/// A source partition's position: the next offset to fetch (not last + 1: transaction
/// markers take up offsets).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourcePosition {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The next offset to fetch.
    pub next_offset: i64,
}

/// The record `c/N`: what a checkpoint restores besides the operator state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointRecord {
    /// N.
    pub id: u64,
    /// The generation (process incarnation) that wrote it.
    pub generation: u64,
    /// The layout it was written with.
    pub layout: Layout,
    /// Source positions.
    pub positions: Vec<SourcePosition>,
    /// The file source's position (a job reading files; absent in records of other jobs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_position: Option<FilePosition>,
    /// Every committable not yet known to be committed, in checkpoint order.
    pub committables: Vec<PreparedOutput>,
    /// A cluster member's local copy of its changelog (absent in records of other jobs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changelog: Option<ChangelogCopy>,
}

/// What a cluster member's store copies of the job's changelog topic, besides the offsets
/// it is current to (the record's positions): which topic, by id, and when the copy of each
/// partition was last known current. A copy older than the topic's `delete.retention.ms`
/// may have missed tombstones the cleaner removed since; one of another topic id (the topic
/// was deleted and created again) is not a prefix of the log at all.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangelogCopy {
    /// The changelog topic's id (KIP-516), in hex.
    pub topic_id: String,
    /// Changelog partition → when (wall-clock ms) the copy was last current.
    pub current_at_ms: BTreeMap<i32, u64>,
}

/// What a checkpoint's record says about its sources: the partitions' next offsets and,
/// for a job reading files, the file reader's position.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordPositions {
    /// Per input partition, the next offset to fetch.
    pub partitions: Vec<SourcePosition>,
    /// The file source's position.
    pub file: Option<FilePosition>,
    /// A cluster member's changelog copy.
    pub changelog: Option<ChangelogCopy>,
}

impl From<Vec<SourcePosition>> for RecordPositions {
    fn from(partitions: Vec<SourcePosition>) -> Self {
        RecordPositions {
            partitions,
            file: None,
            changelog: None,
        }
    }
}

/// The job's state database (one per job, one process at a time).
pub struct StateStore {
    dir: PathBuf,
    db: Database,
    meta: Keyspace,
    undo: Keyspace,
    /// `op-<uid>` keyspaces, indexed as in the layout.
    operators: Vec<Keyspace>,
    layout: Layout,
    retain: u32,
    generation: u64,
    latest: u64,
    /// What the restore of a checkpoint older than the latest undid (`--from-checkpoint`).
    rollback: Option<Rollback>,
}

/// A restore of checkpoint `to` when `from` was the latest: the input read after `to` is read
/// again, and the output its checkpoints committed is written again (read_committed readers
/// see it twice), as when Flink restores an older checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Rollback {
    /// The latest checkpoint before the restore.
    pub from: u64,
    /// The checkpoint restored.
    pub to: u64,
    /// `from`'s source positions (`None` when its record could not be read).
    pub from_positions: Option<Vec<SourcePosition>>,
    /// Committables of `to` that were committed after it (left out of its record: never
    /// resumed again).
    pub committed_since: usize,
}

impl std::fmt::Debug for StateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateStore")
            .field("dir", &self.dir)
            .field("layout", &self.layout)
            .field("retain", &self.retain)
            .field("generation", &self.generation)
            .field("latest", &self.latest)
            .finish_non_exhaustive()
    }
}

impl StateStore {
    /// Opens the state in `dir` for a job with `layout` and restores `from`; returns the store
    /// and the record of the checkpoint the job resumes from (a fresh start is checkpoint 0,
    /// with no positions and no committables, so a crash before the first checkpoint restarts
    /// cleanly from `Latest`). Every open bumps the generation (fsynced).
    ///
    /// # Errors
    /// [`StateError::MissingDirectory`], [`StateError::NoCheckpoint`],
    /// [`StateError::CheckpointNotFound`], [`StateError::NotRetained`],
    /// [`StateError::LayoutMismatch`], [`StateError::Corrupt`], [`StateError::Locked`],
    /// [`StateError::InvalidSetting`] and storage errors.
    pub fn open(
        dir: impl AsRef<Path>,
        layout: Layout,
        options: StoreOptions,
        from: RestoreFrom,
    ) -> Result<(Self, CheckpointRecord)> {
        let dir = dir.as_ref().to_path_buf();
        validate(&layout, options)?;
        let mut store = Self::open_database(dir, layout, options, from)?;
        store.generation = store.read_u64(GENERATION_KEY)?.unwrap_or(0) + 1;
        let record = match from {
            RestoreFrom::Fresh => store.start_fresh()?,
            RestoreFrom::Latest => store.restore(None)?,
            RestoreFrom::Checkpoint(n) => store.restore(Some(n))?,
        };
        // The generation tells incarnations apart (in records and logs); durable before use.
        let mut batch = store.batch();
        batch.insert(&store.meta, GENERATION_KEY, store.generation.to_be_bytes());
        store.commit(batch)?;
        tracing::info!(
            dir = %store.dir.display(),
            checkpoint = record.id,
            generation = store.generation,
            "state restored"
        );
        Ok((store, record))
    }

    /// The fjall database in `dir` with the store's keyspaces (created when missing), before
    /// anything is read. A restore needs the directory to exist: fjall would create it and
    /// the restore would silently start fresh.
    fn open_database(
        dir: PathBuf,
        layout: Layout,
        options: StoreOptions,
        from: RestoreFrom,
    ) -> Result<Self> {
        let exists = dir
            .join("version")
            .try_exists()
            .map_err(|e| StateError::Storage {
                dir: dir.clone(),
                message: e.to_string(),
            })?;
        if !exists && from != RestoreFrom::Fresh {
            return Err(StateError::MissingDirectory { dir });
        }
        let mut builder = Database::builder(&dir);
        if let Some(bytes) = options.cache_bytes {
            builder = builder.cache_size(bytes);
        }
        let db = builder.open().map_err(|e| fjall_error(&dir, e))?;
        let create = || match options.memtable_bytes {
            Some(bytes) => KeyspaceCreateOptions::default().max_memtable_size(bytes),
            None => KeyspaceCreateOptions::default(),
        };
        let ks = |name: &str| db.keyspace(name, create).map_err(|e| fjall_error(&dir, e));
        let meta = ks(META)?;
        let undo = ks(UNDO)?;
        let operators = layout
            .operators
            .iter()
            .map(|op| ks(&format!("op-{}", op.uid)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            dir,
            db,
            meta,
            undo,
            operators,
            layout,
            retain: options.retain,
            generation: 0,
            latest: 0,
            rollback: None,
        })
    }

    /// The record a restore resumes from: checkpoint `requested`, or the latest when `None`;
    /// an older one than the latest rolls the store back to it.
    fn restore(&mut self, requested: Option<u64>) -> Result<CheckpointRecord> {
        let Some(latest) = self.last_checkpoint()? else {
            return Err(StateError::NoCheckpoint {
                dir: self.dir.clone(),
            });
        };
        self.latest = latest;
        let target = requested.unwrap_or(latest);
        if target > latest {
            return Err(StateError::CheckpointNotFound {
                dir: self.dir.clone(),
                requested: target,
                latest,
            });
        }
        // Only the target's record is decoded: a damaged newer record must not stop
        // `--from-checkpoint` from going back past it.
        let record = self.record(target)?;
        if let Some(difference) = self.layout.difference(&record.layout) {
            return Err(StateError::LayoutMismatch { difference });
        }
        if target < latest {
            self.rollback_to(target)
        } else {
            Ok(record)
        }
    }

    /// A handle on operator `uid`'s state, for its task. Take handles after restore and any
    /// rollback: a handle's delta buffers are not rolled back.
    ///
    /// # Errors
    /// [`StateError::Misuse`] when the layout has no such operator.
    pub fn operator(&self, uid: &str) -> Result<OperatorState> {
        let index = self
            .layout
            .operators
            .iter()
            .position(|op| op.uid == uid)
            .ok_or_else(|| {
                StateError::Misuse(format!("the job layout has no stateful operator {uid:?}"))
            })?;
        Ok(OperatorState::new(
            uid.to_string(),
            index as u32,
            self.operators[index].clone(),
            self.layout.key_groups,
            self.dir.clone(),
        ))
    }

    /// What opening this store rolled back, when it restored a checkpoint older than the
    /// latest.
    pub fn rollback(&self) -> Option<&Rollback> {
        self.rollback.as_ref()
    }

    /// The latest complete checkpoint.
    pub fn latest(&self) -> u64 {
        self.latest
    }

    /// This incarnation's generation.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The state directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The retained checkpoint ids, oldest first.
    ///
    /// # Errors
    /// Storage errors, or a corrupt `c/` key.
    pub fn list(&self) -> Result<Vec<u64>> {
        let mut ids = Vec::new();
        for guard in self.meta.prefix(CHECKPOINT_PREFIX) {
            let key = guard.key().map_err(|e| fjall_error(&self.dir, e))?;
            ids.push(parse_checkpoint_key(&key).ok_or_else(|| self.corrupt_key(&key))?);
        }
        Ok(ids)
    }

    /// The record of checkpoint `n`.
    ///
    /// # Errors
    /// [`StateError::NotRetained`] when it is not kept, [`StateError::Corrupt`] when it does
    /// not decode or names another id.
    pub fn record(&self, n: u64) -> Result<CheckpointRecord> {
        let Some(bytes) = self
            .meta
            .get(checkpoint_key(n))
            .map_err(|e| fjall_error(&self.dir, e))?
        else {
            return Err(self.not_retained(n)?);
        };
        let corrupt = |what: String| StateError::Corrupt {
            dir: self.dir.clone(),
            what: format!("checkpoint record {n}: {what}"),
            remedy: RESTORE_OLDER,
        };
        let json = match bytes.split_first() {
            Some((&RECORD_FORMAT, json)) => json,
            Some((other, _)) => return Err(corrupt(format!("unknown format {other}"))),
            None => return Err(corrupt("empty".to_string())),
        };
        let record: CheckpointRecord =
            serde_json::from_slice(json).map_err(|e| corrupt(e.to_string()))?;
        if record.id != n {
            return Err(corrupt(format!("it says it is checkpoint {}", record.id)));
        }
        Ok(record)
    }

    /// Writes where the sources of a job without checkpoints start into checkpoint 0's record
    /// (fsynced), so that a restart before the first checkpoint starts there too instead of
    /// resolving `source.start = "latest"` again and skipping what arrived in between.
    /// Returns the record as written.
    ///
    /// # Errors
    /// [`StateError::Misuse`] once a checkpoint above 0 is complete (its positions are the
    /// start then); storage errors.
    pub fn record_start(&mut self, positions: RecordPositions) -> Result<CheckpointRecord> {
        if self.latest != 0 {
            return Err(StateError::Misuse(format!(
                "recording the sources' start, but checkpoint {} is complete already",
                self.latest
            )));
        }
        let mut record = self.record(0)?;
        record.positions = positions.partitions;
        record.file_position = positions.file;
        record.generation = self.generation;
        let mut batch = self.batch();
        batch.insert(&self.meta, checkpoint_key(0), self.encode_record(&record)?);
        self.commit(batch)?;
        tracing::info!(dir = %self.dir.display(), partitions = record.positions.len(), "the sources' start recorded in checkpoint 0");
        Ok(record)
    }

    /// Makes checkpoint `n` durable: ONE batch with every operator's changes, their undo
    /// images (K ≥ 2), the record `c/n` and the retention tombstones, committed with SyncAll.
    /// Only after this returns does `n` count as complete; a crash before leaves `n − 1`.
    /// Returns the bytes the batch wrote (keys and values, undo images and the record
    /// included: the checkpoint's size as the metrics show it).
    ///
    /// # Errors
    /// [`StateError::Misuse`] for an id not above the latest or a delta of another
    /// checkpoint; storage errors (after which fjall is poisoned: crash and recover).
    pub fn persist(
        &mut self,
        n: u64,
        deltas: &[FrozenDelta],
        positions: impl Into<RecordPositions>,
        committables: Vec<PreparedOutput>,
    ) -> Result<u64> {
        let positions = positions.into();
        if n <= self.latest {
            return Err(StateError::Misuse(format!(
                "persist of checkpoint {n}, but checkpoint {} is already complete",
                self.latest
            )));
        }
        let mut seen = vec![false; self.operators.len()];
        for d in deltas {
            let index = d.operator as usize;
            if d.checkpoint != n || index >= seen.len() || std::mem::replace(&mut seen[index], true)
            {
                return Err(StateError::Misuse(format!(
                    "persist of checkpoint {n} got a delta of checkpoint {} for operator index {} (or twice)",
                    d.checkpoint, d.operator
                )));
            }
        }
        let keep_undo = self.retain >= 2;
        let mut batch = self.batch();
        let mut bytes = 0usize;
        for d in deltas {
            let ks = &self.operators[d.operator as usize];
            for (key, value) in d.entries.iter() {
                if keep_undo {
                    // The persister is fjall's only writer and persists in order, so what
                    // fjall holds now is exactly checkpoint n − 1's value of the key.
                    let before = ks.get(key).map_err(|e| fjall_error(&self.dir, e))?;
                    let (ukey, undo) =
                        (undo_key(n, d.operator, key), encode_undo(before.as_deref()));
                    bytes += ukey.len() + undo.len();
                    batch.insert(&self.undo, ukey, undo);
                }
                bytes += key.len() + value.as_ref().map_or(0, Vec::len);
                match value {
                    Some(v) => batch.insert(ks, key.clone(), v.clone()),
                    None => batch.remove(ks, key.clone()),
                }
            }
        }
        let record = CheckpointRecord {
            id: n,
            generation: self.generation,
            layout: self.layout.clone(),
            positions: positions.partitions,
            file_position: positions.file,
            committables,
            changelog: positions.changelog,
        };
        let encoded = self.encode_record(&record)?;
        bytes += encoded.len();
        batch.insert(&self.meta, checkpoint_key(n), encoded);

        // Retention: keep c/ records n−K+1..=n and undo images n−K+2..=n.
        let k = u64::from(self.retain);
        let oldest_record = (n + 1).saturating_sub(k);
        let undo_floor = (n + 2).saturating_sub(k);
        for id in self.list()? {
            if id < oldest_record {
                batch.remove(&self.meta, checkpoint_key(id));
            }
        }
        self.drop_undo_below(undo_floor, &mut batch)?;
        self.commit(batch)?;
        self.latest = n;
        Ok(u64::try_from(bytes).unwrap_or(u64::MAX))
    }

    /// Tombstones the undo images of the checkpoints below `undo_floor` and raises the stored
    /// floor to it, in `batch`. The images below the last floor went in the batch that raised
    /// it: the read starts there, not over their tombstones (until a compaction drops them, one
    /// per key written in every checkpoint since).
    fn drop_undo_below(&self, undo_floor: u64, batch: &mut fjall::OwnedWriteBatch) -> Result<()> {
        let last_floor = self.read_u64(UNDO_FLOOR_KEY)?.unwrap_or(0);
        if last_floor < undo_floor {
            let gone = last_floor.to_be_bytes().to_vec()..undo_floor.to_be_bytes().to_vec();
            for guard in self.undo.range(gone) {
                let key = guard.key().map_err(|e| fjall_error(&self.dir, e))?;
                batch.remove(&self.undo, key);
            }
        }
        let floor = last_floor.max(undo_floor);
        batch.insert(&self.meta, UNDO_FLOOR_KEY, floor.to_be_bytes());
        Ok(())
    }

    /// Rewrites checkpoint `n`'s list of unresolved committables (fsynced), once commits are
    /// known to have succeeded, so a restart loop does not resume them again.
    ///
    /// # Errors
    /// [`StateError::NotRetained`], [`StateError::Corrupt`] and storage errors.
    pub fn update_committables(&mut self, n: u64, committables: Vec<PreparedOutput>) -> Result<()> {
        let mut record = self.record(n)?;
        record.committables = committables;
        let mut batch = self.batch();
        batch.insert(&self.meta, checkpoint_key(n), self.encode_record(&record)?);
        self.commit(batch)
    }

    /// Rolls the state back to retained checkpoint `n` in one fsynced batch: applies the undo
    /// images of every later checkpoint (the oldest image of a key wins) and deletes their
    /// records and images. Recovery uses it when checkpoint n + 1's transactions were lost
    /// before any committed; `--from-checkpoint` uses it through [`StateStore::open`].
    ///
    /// # Errors
    /// [`StateError::CheckpointNotFound`] above the latest, [`StateError::NotRetained`] when
    /// `n`'s record or a later checkpoint's undo images are gone; corrupt images; storage.
    pub fn rollback_to(&mut self, n: u64) -> Result<CheckpointRecord> {
        if n > self.latest {
            return Err(StateError::CheckpointNotFound {
                dir: self.dir.clone(),
                requested: n,
                latest: self.latest,
            });
        }
        if n == self.latest {
            return self.record(n);
        }
        let floor = self.read_u64(UNDO_FLOOR_KEY)?.unwrap_or(u64::MAX);
        if n + 1 < floor || !self.list()?.contains(&n) {
            return Err(self.not_retained(n)?);
        }
        let mut record = self.record(n)?;
        // The latest record lists every committable not known to be committed when it was
        // written: one of n's it no longer lists was committed after n. It must not be resumed
        // again: its transactional id may carry a later checkpoint's transaction by now (the
        // resume would see a prefix clash, or data loss, where there is none). Kept out of n's
        // record in the same batch, so a crash after the rollback cannot bring it back.
        let latest = match self.record(self.latest) {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), latest = self.latest, error = %e,
                    "the latest checkpoint record cannot be read: checkpoint {n}'s committables are resumed as it lists them");
                None
            }
        };
        let mut committed_since = 0;
        if let Some(latest) = &latest {
            let listed = record.committables.len();
            record
                .committables
                .retain(|c| latest.committables.contains(c));
            committed_since = listed - record.committables.len();
        }
        let mut batch = self.batch();
        batch.insert(&self.meta, checkpoint_key(n), self.encode_record(&record)?);
        self.undo_after(n, &mut batch)?;
        for id in self.list()? {
            if id > n {
                batch.remove(&self.meta, checkpoint_key(id));
            }
        }
        let from = self.latest;
        self.commit(batch)?;
        self.latest = n;
        tracing::info!(dir = %self.dir.display(), from, to = n, committed_since, "state rolled back");
        self.rollback = Some(Rollback {
            from,
            to: n,
            from_positions: latest.map(|r| r.positions),
            committed_since,
        });
        Ok(record)
    }

    /// Puts into `batch` what undoes the checkpoints after `n`: every key they changed back
    /// to its value at `n`, and their undo images removed.
    fn undo_after(&self, n: u64, batch: &mut fjall::OwnedWriteBatch) -> Result<()> {
        // The images of n+1, n+2, ... in key order (checkpoint first): the first image of a key
        // is its value at n. A batch must carry each key once, hence the map.
        let mut images: BTreeMap<(u32, Vec<u8>), Option<Vec<u8>>> = BTreeMap::new();
        for guard in self.undo.range((n + 1).to_be_bytes().to_vec()..) {
            let (key, image) = guard.into_inner().map_err(|e| fjall_error(&self.dir, e))?;
            let (_, op, state_key) = parse_undo_key(&key).ok_or_else(|| self.corrupt_key(&key))?;
            let before = decode_undo(&image).ok_or_else(|| StateError::Corrupt {
                dir: self.dir.clone(),
                what: "an undo image with an unknown tag".to_string(),
                remedy: RESTORE_OLDER,
            })?;
            if op as usize >= self.operators.len() {
                return Err(self.corrupt_key(&key));
            }
            images
                .entry((op, state_key.to_vec()))
                .or_insert_with(|| before.map(<[u8]>::to_vec));
            batch.remove(&self.undo, key);
        }
        for ((op, key), before) in images {
            let ks = &self.operators[op as usize];
            match before {
                Some(v) => batch.insert(ks, key, v),
                None => batch.remove(ks, key),
            }
        }
        Ok(())
    }

    /// `--fresh`: wipes whatever the directory holds and writes checkpoint 0 (empty).
    fn start_fresh(&mut self) -> Result<CheckpointRecord> {
        // Records first, in their own fsynced batch: a crash during the wipe then leaves a
        // store without checkpoints (NoCheckpoint, which says --fresh), never a checkpoint
        // over half-wiped state.
        let mut batch = self.batch();
        for guard in self.meta.iter() {
            let key = guard.key().map_err(|e| fjall_error(&self.dir, e))?;
            if key.as_ref() != GENERATION_KEY {
                batch.remove(&self.meta, key);
            }
        }
        self.commit(batch)?;
        let mut spaces = vec![self.undo.clone()];
        for name in self.db.list_keyspace_names() {
            if name.starts_with("op-") {
                spaces.push(
                    self.db
                        .keyspace(&name, KeyspaceCreateOptions::default)
                        .map_err(|e| fjall_error(&self.dir, e))?,
                );
            }
        }
        for ks in &spaces {
            loop {
                let mut batch = self.batch();
                for guard in ks.iter().take(WIPE_CHUNK) {
                    let key = guard.key().map_err(|e| fjall_error(&self.dir, e))?;
                    batch.remove(ks, key);
                }
                if batch.is_empty() {
                    break;
                }
                self.commit(batch)?;
            }
        }
        let record = CheckpointRecord {
            id: 0,
            generation: self.generation,
            layout: self.layout.clone(),
            positions: Vec::new(),
            file_position: None,
            committables: Vec::new(),
            changelog: None,
        };
        let mut batch = self.batch();
        batch.insert(&self.meta, checkpoint_key(0), self.encode_record(&record)?);
        batch.insert(
            &self.meta,
            LAYOUT_KEY,
            serde_json::to_vec(&self.layout).map_err(|e| StateError::Misuse(e.to_string()))?,
        );
        batch.insert(&self.meta, UNDO_FLOOR_KEY, 1u64.to_be_bytes());
        self.commit(batch)?;
        self.latest = 0;
        tracing::info!(dir = %self.dir.display(), "starting with fresh state (--fresh)");
        Ok(record)
    }

    fn batch(&self) -> fjall::OwnedWriteBatch {
        self.db.batch().durability(Some(PersistMode::SyncAll))
    }

    fn commit(&self, batch: fjall::OwnedWriteBatch) -> Result<()> {
        batch.commit().map_err(|e| fjall_error(&self.dir, e))
    }

    fn last_checkpoint(&self) -> Result<Option<u64>> {
        match self.meta.prefix(CHECKPOINT_PREFIX).next_back() {
            None => Ok(None),
            Some(guard) => {
                let key = guard.key().map_err(|e| fjall_error(&self.dir, e))?;
                parse_checkpoint_key(&key)
                    .map(Some)
                    .ok_or_else(|| self.corrupt_key(&key))
            }
        }
    }

    fn read_u64(&self, key: &[u8]) -> Result<Option<u64>> {
        match self.meta.get(key).map_err(|e| fjall_error(&self.dir, e))? {
            None => Ok(None),
            Some(v) => match <[u8; 8]>::try_from(v.as_ref()) {
                Ok(b) => Ok(Some(u64::from_be_bytes(b))),
                Err(_) => Err(self.corrupt_key(key)),
            },
        }
    }

    fn encode_record(&self, record: &CheckpointRecord) -> Result<Vec<u8>> {
        let mut out = vec![RECORD_FORMAT];
        serde_json::to_writer(&mut out, record)
            .map_err(|e| StateError::Misuse(format!("checkpoint record: {e}")))?;
        Ok(out)
    }

    /// The error for a checkpoint `n` that is gone, naming what a restore can reach.
    fn not_retained(&self, n: u64) -> Result<StateError> {
        let ids = self.list()?;
        let floor = self.read_u64(UNDO_FLOOR_KEY)?.unwrap_or(u64::MAX);
        // Reachable: retained records m with every later checkpoint's undo kept (m+1 >= floor).
        let oldest = ids
            .iter()
            .copied()
            .find(|&m| m + 1 >= floor)
            .unwrap_or(self.latest)
            .min(self.latest);
        Ok(StateError::NotRetained {
            dir: self.dir.clone(),
            requested: n,
            oldest,
            latest: self.latest,
        })
    }

    /// The checkpoints that have undo images (tests check retention with it).
    #[cfg(test)]
    pub(crate) fn undo_checkpoints(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self
            .undo
            .iter()
            .filter_map(|g| g.key().ok())
            .filter_map(|k| parse_undo_key(&k).map(|(c, _, _)| c))
            .collect();
        ids.dedup();
        ids
    }

    fn corrupt_key(&self, key: &[u8]) -> StateError {
        StateError::Corrupt {
            dir: self.dir.clone(),
            what: format!("unexpected key {key:02x?}"),
            remedy: RESTORE_OLDER,
        }
    }
}

/// Checks the job's layout and options before touching the directory.
fn validate(layout: &Layout, options: StoreOptions) -> Result<()> {
    if options.retain == 0 {
        return Err(StateError::InvalidSetting(
            "state retention must keep at least 1 checkpoint".to_string(),
        ));
    }
    if layout.key_groups == 0 {
        return Err(StateError::InvalidSetting(
            "key groups must be at least 1".to_string(),
        ));
    }
    for (i, op) in layout.operators.iter().enumerate() {
        // fjall panics on keyspace names that are empty or longer than 255 bytes.
        if op.uid.is_empty() || op.uid.len() > 250 {
            return Err(StateError::InvalidSetting(format!(
                "operator uid {:?} must be 1 to 250 bytes long",
                op.uid
            )));
        }
        if layout.operators[..i].iter().any(|o| o.uid == op.uid) {
            return Err(StateError::InvalidSetting(format!(
                "operator uid {:?} is used twice; give each stateful operator its own uid",
                op.uid
            )));
        }
    }
    Ok(())
}
