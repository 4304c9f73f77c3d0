//! The journal: the durable half of the write buffer in `journal` durability mode.
//!
//! Every write, trim and zeroing is appended as a record before it is acknowledged; a record
//! handed to the OS survives a killed process. [`Journal::sync`] is a group commit: one
//! `fdatasync` covers every record written before it started, on every volume, so NBD FLUSH
//! and FUA are cheap under load. Files rotate at [`JOURNAL_FILE_MAX_BYTES`] and are deleted once
//! every record in them is reflected in sealed segments.
//!
//! Record layout (little-endian): magic u32 `WJR1`, CRC32C u32 of bytes 8.. of the header and
//! the payload, seq u64, volume u64, lba u64, count (blocks) u64, kind u8, 3 zero bytes,
//! payload length u32, payload. Replay stops at the first record that does not verify (the
//! torn tail of a crash); new records then go to a new file.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, IoSlice, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::IoFailure;
use crate::units::VolumeId;

/// A journal file is rotated past this size.
pub const JOURNAL_FILE_MAX_BYTES: u64 = 256 << 20;
/// Largest payload of one record: the largest NBD request we accept.
pub const JOURNAL_PAYLOAD_MAX_BYTES: u32 = 32 << 20;
const RECORD_MAGIC: u32 = u32::from_le_bytes(*b"WJR1");
const RECORD_HEADER_BYTES: usize = 48;

/// What a record does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    /// `count` blocks of data from `lba`; the payload holds them.
    Write,
    /// Unmap `count` blocks from `lba`.
    Trim,
    /// Make `count` blocks from `lba` read as zeroes, staying allocated.
    Zero,
}

impl RecordKind {
    fn code(self) -> u8 {
        match self {
            RecordKind::Write => 1,
            RecordKind::Trim => 2,
            RecordKind::Zero => 3,
        }
    }

    fn from_code(code: u8) -> Option<RecordKind> {
        match code {
            1 => Some(RecordKind::Write),
            2 => Some(RecordKind::Trim),
            3 => Some(RecordKind::Zero),
            _ => None,
        }
    }
}

/// A replayed record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalRecord {
    pub seq: u64,
    pub kind: RecordKind,
    pub volume: VolumeId,
    pub lba: u64,
    pub count: u64,
    pub payload: Vec<u8>,
}

#[derive(Debug)]
struct Inner {
    file: Arc<File>,
    file_bytes: u64,
    /// (first seq, path) of every file, oldest first; the last is `file`.
    files: VecDeque<(u64, PathBuf)>,
    next_seq: u64,
    header: [u8; RECORD_HEADER_BYTES],
}

/// The journal of one c.node.
#[derive(Debug)]
pub struct Journal {
    dir: PathBuf,
    inner: Mutex<Inner>,
    /// Highest seq written to the OS.
    written_seq: AtomicU64,
    /// Highest seq known durable (fdatasync done).
    synced_seq: AtomicU64,
    sync_lock: Mutex<()>,
}

impl Journal {
    /// Open the journal in `dir`, returning it and every valid record in it (for replay).
    /// New records continue after the highest seq seen, in a new file.
    pub fn open(dir: &Path, min_next_seq: u64) -> Result<(Journal, Vec<JournalRecord>), IoFailure> {
        let derr = |e| IoFailure::disk(dir.display().to_string(), e);
        std::fs::create_dir_all(dir).map_err(derr)?;
        let mut files: Vec<(u64, PathBuf)> = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(derr)? {
            let entry = entry.map_err(derr)?;
            let name = entry.file_name();
            let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".wal")) else { continue };
            if let Ok(first) = u64::from_str_radix(stem, 16) {
                files.push((first, entry.path()));
            }
        }
        files.sort();
        let mut records = Vec::new();
        for (_, path) in &files {
            read_records(path, &mut records)?;
        }
        let next_seq = records.last().map_or(1, |r| r.seq + 1).max(min_next_seq).max(1);
        // A file already named after `next_seq` holds no valid record (else the next seq would
        // be past it): it is replaced, and must not be listed twice.
        files.retain(|(first, _)| *first != next_seq);
        let (file, path) = create_file(dir, next_seq)?;
        let mut all: VecDeque<(u64, PathBuf)> = files.into_iter().collect();
        all.push_back((next_seq, path));
        let journal = Journal {
            dir: dir.to_path_buf(),
            inner: Mutex::new(Inner {
                file: Arc::new(file),
                file_bytes: 0,
                files: all,
                next_seq,
                header: [0; RECORD_HEADER_BYTES],
            }),
            written_seq: AtomicU64::new(next_seq - 1),
            synced_seq: AtomicU64::new(next_seq - 1),
            sync_lock: Mutex::new(()),
        };
        Ok((journal, records))
    }

    /// Append one record and hand it to the OS; returns its seq. `on_written` runs with the
    /// journal still locked, so the caller can publish the record (to the write buffer) in
    /// seq order.
    pub fn append<R>(
        &self,
        kind: RecordKind,
        volume: VolumeId,
        lba: u64,
        count: u64,
        payload: &[u8],
        on_written: impl FnOnce(u64) -> R,
    ) -> Result<R, IoFailure> {
        let payload_len = u32::try_from(payload.len()).expect("payload below 4 GiB");
        assert!(payload_len <= JOURNAL_PAYLOAD_MAX_BYTES, "front ends bound request sizes");
        let mut inner = self.inner.lock();
        if inner.file_bytes >= JOURNAL_FILE_MAX_BYTES {
            self.rotate(&mut inner)?;
        }
        let seq = inner.next_seq;
        let h = &mut inner.header;
        h[0..4].copy_from_slice(&RECORD_MAGIC.to_le_bytes());
        h[8..16].copy_from_slice(&seq.to_le_bytes());
        h[16..24].copy_from_slice(&volume.0.to_le_bytes());
        h[24..32].copy_from_slice(&lba.to_le_bytes());
        h[32..40].copy_from_slice(&count.to_le_bytes());
        h[40] = kind.code();
        h[41..44].fill(0);
        h[44..48].copy_from_slice(&payload_len.to_le_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&h[8..]), payload);
        h[4..8].copy_from_slice(&crc.to_le_bytes());
        let header = inner.header;
        let file = inner.file.clone();
        if let Err(e) = write_all_vectored(&file, &header, payload) {
            // A partial record would be a torn tail in the middle of the log: start a new file
            // so replay sees the next records. The seq is not consumed.
            let _ = self.rotate(&mut inner);
            return Err(IoFailure::disk(self.dir.display().to_string(), e));
        }
        inner.file_bytes += (RECORD_HEADER_BYTES + payload.len()) as u64;
        inner.next_seq += 1;
        self.written_seq.store(seq, Ordering::Release);
        Ok(on_written(seq))
    }

    /// Make every record with seq <= `upto` durable (group commit).
    pub fn sync(&self, upto: u64) -> Result<(), IoFailure> {
        if self.synced_seq.load(Ordering::Acquire) >= upto {
            return Ok(());
        }
        let _one_syncer = self.sync_lock.lock();
        if self.synced_seq.load(Ordering::Acquire) >= upto {
            return Ok(());
        }
        let (file, written) = {
            let inner = self.inner.lock();
            (inner.file.clone(), self.written_seq.load(Ordering::Acquire))
        };
        file.sync_data().map_err(|e| IoFailure::disk(self.dir.display().to_string(), e))?;
        self.synced_seq.fetch_max(written, Ordering::AcqRel);
        Ok(())
    }

    /// The seq of the newest record handed to the OS.
    pub fn written_seq(&self) -> u64 {
        self.written_seq.load(Ordering::Acquire)
    }

    /// Delete files whose every record has seq <= `hwm` (reflected in sealed segments).
    pub fn release_upto(&self, hwm: u64) -> Result<(), IoFailure> {
        let mut inner = self.inner.lock();
        while inner.files.len() > 1 && inner.files[1].0 <= hwm + 1 {
            let (_, path) = inner.files.pop_front().expect("two files");
            std::fs::remove_file(&path).map_err(|e| IoFailure::disk(path.display().to_string(), e))?;
        }
        Ok(())
    }

    /// Bytes of journal on disk.
    pub fn file_count(&self) -> usize {
        self.inner.lock().files.len()
    }

    fn rotate(&self, inner: &mut Inner) -> Result<(), IoFailure> {
        // Records in the old file must be as durable as `sync` promises before it stops being
        // the file `sync` looks at.
        inner.file.sync_data().map_err(|e| IoFailure::disk(self.dir.display().to_string(), e))?;
        let (file, path) = create_file(&self.dir, inner.next_seq)?;
        inner.file = Arc::new(file);
        inner.file_bytes = 0;
        if inner.files.back().map(|(s, _)| *s) == Some(inner.next_seq) {
            // The current file holds no record yet (a failed append): reuse its slot.
            inner.files.pop_back();
        }
        inner.files.push_back((inner.next_seq, path));
        Ok(())
    }
}

fn create_file(dir: &Path, first_seq: u64) -> Result<(File, PathBuf), IoFailure> {
    let path = dir.join(format!("{first_seq:016x}.wal"));
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)
        .map_err(|e| IoFailure::disk(path.display().to_string(), e))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| IoFailure::disk(dir.display().to_string(), e))?;
    Ok((file, path))
}

fn write_all_vectored(mut file: &File, header: &[u8], payload: &[u8]) -> std::io::Result<()> {
    let total = header.len() + payload.len();
    let mut done = 0;
    while done < total {
        let result = if done < header.len() {
            file.write_vectored(&[IoSlice::new(&header[done..]), IoSlice::new(payload)])
        } else {
            file.write(&payload[done - header.len()..])
        };
        match result {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn read_records(path: &Path, out: &mut Vec<JournalRecord>) -> Result<(), IoFailure> {
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(|e| IoFailure::disk(path.display().to_string(), e))?;
    let mut at = 0;
    while let Some((record, used)) = parse_record(&bytes[at..]) {
        if out.last().is_some_and(|last| last.seq >= record.seq) {
            break;
        }
        out.push(record);
        at += used;
    }
    Ok(())
}

/// Parse one record; `None` at the end of the valid log.
fn parse_record(b: &[u8]) -> Option<(JournalRecord, usize)> {
    if b.len() < RECORD_HEADER_BYTES {
        return None;
    }
    let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
    if u32_at(0) != RECORD_MAGIC {
        return None;
    }
    let payload_len = u32_at(44);
    if payload_len > JOURNAL_PAYLOAD_MAX_BYTES {
        return None;
    }
    let end = RECORD_HEADER_BYTES + payload_len as usize;
    if b.len() < end {
        return None;
    }
    let crc = crc32c::crc32c_append(crc32c::crc32c(&b[8..RECORD_HEADER_BYTES]), &b[RECORD_HEADER_BYTES..end]);
    if crc != u32_at(4) {
        return None;
    }
    let kind = RecordKind::from_code(b[40])?;
    let record = JournalRecord {
        seq: u64_at(8),
        kind,
        volume: VolumeId(u64_at(16)),
        lba: u64_at(24),
        count: u64_at(32),
        payload: b[RECORD_HEADER_BYTES..end].to_vec(),
    };
    Some((record, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_replay_in_order_and_a_torn_tail_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (j, old) = Journal::open(dir.path(), 1).unwrap();
            assert!(old.is_empty());
            assert_eq!(j.append(RecordKind::Write, VolumeId(1), 5, 1, &[7u8; 4096], |s| s).unwrap(), 1);
            assert_eq!(j.append(RecordKind::Trim, VolumeId(1), 0, 100, &[], |s| s).unwrap(), 2);
            j.sync(2).unwrap();
        }
        // Tear the last record of the file.
        let wal = std::fs::read_dir(dir.path()).unwrap().next().unwrap().unwrap().path();
        let len = std::fs::metadata(&wal).unwrap().len();
        OpenOptions::new().write(true).open(&wal).unwrap().set_len(len - 10).unwrap();
        let (j, records) = Journal::open(dir.path(), 1).unwrap();
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].payload, vec![7u8; 4096]);
        assert_eq!(j.append(RecordKind::Zero, VolumeId(1), 3, 1, &[], |s| s).unwrap(), 2);
        drop(j);
        let (j, records) = Journal::open(dir.path(), 1).unwrap();
        assert_eq!(records.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(records[1].kind, RecordKind::Zero);
        j.release_upto(2).unwrap();
        assert_eq!(j.file_count(), 1);
    }

    #[test]
    fn reopening_twice_without_writes_keeps_the_current_file() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (j, _) = Journal::open(dir.path(), 1).unwrap();
            j.append(RecordKind::Write, VolumeId(1), 0, 1, &[1u8; 4096], |s| s).unwrap();
        }
        drop(Journal::open(dir.path(), 1).unwrap());
        let (j, _) = Journal::open(dir.path(), 1).unwrap();
        j.release_upto(1).unwrap();
        assert_eq!(j.append(RecordKind::Write, VolumeId(1), 0, 1, &[2u8; 4096], |s| s).unwrap(), 2);
        drop(j);
        let (_, records) = Journal::open(dir.path(), 1).unwrap();
        assert_eq!(records.last().map(|r| r.seq), Some(2), "the record after release survives");
    }
}
