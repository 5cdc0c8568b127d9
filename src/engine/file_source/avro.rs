//! [`AvroFile`]: an Avro container file read record by record for the file source, each
//! record as its plain JSON text (the line a [`JsonLinesFormat`](crate::engine::formats::JsonLinesFormat)
//! reads), its place a block's start and the records of that block already read.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufReader, Seek, SeekFrom};
use std::path::Path;

use super::FileSourceError;
use crate::schema::Container;

/// One open Avro container file.
pub(super) struct AvroFile {
    container: Container,
    file: BufReader<File>,
    /// Where the block the pending records came from starts.
    block_start: u64,
    /// Where the next block starts (the file reader is there).
    next_block: u64,
    /// The current block's records not yet read, as plain JSON text, in order.
    pending: VecDeque<String>,
    /// Records of the current block already read.
    in_block: u64,
    /// How errors name the file.
    shown: String,
}

impl AvroFile {
    /// Opens `path` at a block's start `offset` (0: the first block) with `in_block` of its
    /// records already read (a checkpoint's position).
    ///
    /// # Errors
    /// [`FileSourceError::Container`] for a file that is not a container file or whose
    /// position is not a block of it; [`FileSourceError::Io`].
    pub(super) fn open(
        path: &Path,
        shown: &str,
        offset: u64,
        in_block: u64,
    ) -> Result<AvroFile, FileSourceError> {
        let io = |action: &str, e| FileSourceError::Io {
            action: action.to_owned(),
            path: shown.to_owned(),
            source: e,
        };
        let mut file = BufReader::new(File::open(path).map_err(|e| io("opening", e))?);
        let container = Container::read_header(&mut file).map_err(|m| unreadable(shown, m))?;
        let start = if offset == 0 {
            container.header_len
        } else {
            file.seek(SeekFrom::Start(offset))
                .map_err(|e| io(&format!("seeking to byte {offset} of"), e))?;
            offset
        };
        let mut avro = AvroFile {
            container,
            file,
            block_start: start,
            next_block: start,
            pending: VecDeque::new(),
            in_block: 0,
            shown: shown.to_owned(),
        };
        if in_block > 0 {
            let count = avro.fill()?.ok_or_else(|| {
                unreadable(
                    shown,
                    format!("the checkpoint's block at byte {offset} is past the file's end: the file changed since the checkpoint; put the original back, or start the job without the checkpoint"),
                )
            })?;
            if in_block > count {
                return Err(unreadable(
                    shown,
                    format!("the checkpoint read {in_block} records of the block at byte {offset}, which holds {count}: the file changed since the checkpoint"),
                ));
            }
            avro.pending.drain(..usize::try_from(in_block).unwrap_or(usize::MAX));
            avro.in_block = in_block;
        }
        Ok(avro)
    }

    /// Reads the next block into `pending`; its record count, or `None` at the file's end.
    fn fill(&mut self) -> Result<Option<u64>, FileSourceError> {
        let at = self.next_block;
        let block = self
            .container
            .read_block(&mut self.file)
            .map_err(|m| unreadable(&self.shown, format!("the block at byte {at}: {m}")))?;
        let Some(block) = block else {
            return Ok(None);
        };
        let records = self
            .container
            .records(&block)
            .map_err(|m| unreadable(&self.shown, format!("the block at byte {at}: {m}")))?;
        self.block_start = at;
        self.next_block = at + block.len;
        self.in_block = 0;
        self.pending = records.into();
        Ok(Some(block.count))
    }

    /// The next record's plain JSON text; `None` at the file's end.
    ///
    /// # Errors
    /// A damaged block, or a record that does not decode with the file's schema.
    pub(super) fn next(&mut self) -> Result<Option<String>, FileSourceError> {
        while self.pending.is_empty() {
            if self.fill()?.is_none() {
                return Ok(None);
            }
        }
        self.in_block += 1;
        Ok(self.pending.pop_front())
    }

    /// Where the next record is: (its block's start, records of that block already read).
    pub(super) fn position(&self) -> (u64, u64) {
        if self.pending.is_empty() {
            (self.next_block, 0)
        } else {
            (self.block_start, self.in_block)
        }
    }
}

fn unreadable(shown: &str, message: String) -> FileSourceError {
    FileSourceError::Container {
        file: shown.to_owned(),
        message,
    }
}
