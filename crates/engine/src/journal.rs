//! The journal: the durable half of the write buffer in `journal` durability mode.
//!
//! Every write, trim and zeroing is appended as a record before it is acknowledged; a record
//! handed to the OS survives a killed process. [`Journal::sync`] is a group commit: one
//! `fdatasync` covers every record written before it started, on every volume, so NBD FLUSH
//! and FUA are cheap under load.
//!
//! Files have a fixed size, [`JOURNAL_FILE_BYTES`], and are zero-filled before use (by a
//! background thread, one file ahead), so an append never changes the file's size or
//! allocation: `fdatasync` then writes the data pages and flushes the device, with no file
//! system journal commit. That is what keeps a flushed write as cheap as a write to a raw
//! preallocated file. Once every record in a file is reflected in sealed segments the file is
//! released: kept for reuse (its first block zeroed, so its old records are unreachable; any
//! old record after the new tail has a lower seq and ends replay) or deleted.
//!
//! Record layout (little-endian): magic u32 `WJR2`, CRC32C u32 of bytes 8.. of the header and
//! the payload, seq u64, layer u64, lba u64, count (blocks) u64, kind u8, 3 zero bytes,
//! payload length u32, payload. Kinds (`write_log::RecordKind`): 1 write (payload = the
//! blocks), 2 trim, 3 zero, 4 drop layer, 5 merge layer, 6 write-through (no payload: the data
//! goes to a stripe, and the write is acknowledged only once a written segment reflects it;
//! replay starts after the high-water mark of the segments recovery replays, and a written
//! segment it cannot read makes it wait rather than replay past it (`recovery::proof`)).
//!
//! A record names the layer it changes, not the volume: a snapshot or refresh changes which
//! layer a volume writes to, and replay must put every record where it went live. Layer
//! operations (drop, merge) are records too, so replay applies them at the same point of the
//! sequence. Replay stops at the first record that does not verify (the torn tail of a
//! crash); new records then go to a new file.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

mod writeback;
use writeback::Writeback;

use crate::error::IoFailure;
use crate::units::LayerId;

/// Default size of every journal file; a record that does not fit in the rest of a file goes
/// to the next one (a record bigger than a whole file makes that file grow).
pub const JOURNAL_FILE_BYTES: u64 = 64 << 20;

/// How journal files are laid out.
#[derive(Debug, Clone, Copy)]
pub struct JournalOptions {
    pub file_bytes: u64,
    /// Zero-fill files before use (fast flushes). Without it files are sparse, which is
    /// correct but makes every flush also commit file system metadata; for tests.
    pub prefill: bool,
}

impl Default for JournalOptions {
    fn default() -> JournalOptions {
        JournalOptions {
            file_bytes: JOURNAL_FILE_BYTES,
            prefill: true,
        }
    }
}
/// Largest payload of one record: the largest NBD request we accept.
pub const JOURNAL_PAYLOAD_MAX_BYTES: u32 = 32 << 20;
const RECORD_MAGIC: u32 = u32::from_le_bytes(*b"WJR2");
const RECORD_HEADER_BYTES: usize = 48;
/// Zero-filled files being prepared carry this suffix until they are put in use.
const SPARE_SUFFIX: &str = ".spare";
/// Released files kept for reuse carry this suffix.
const RECYCLED_SUFFIX: &str = ".recycled";
/// Released files kept for reuse: reusing a file costs no zero-fill writes. Enough to cover a
/// full default write buffer (512 MiB in 64 MiB files) so a steady write load never zero-fills.
const RECYCLED_FILES_MAX: usize = 12;

pub use crate::write_log::{JournalRecord, RecordHeader, RecordKind};

/// Appends records while holding the journal lock (see [`Journal::with_lock`]).
pub struct Appender<'a> {
    journal: &'a Journal,
    inner: parking_lot::MutexGuard<'a, Inner>,
}

impl crate::write_log::LogAppender for Appender<'_> {
    fn append(&mut self, header: RecordHeader, payload: &[u8]) -> Result<u64, IoFailure> {
        self.journal.append_locked(&mut self.inner, header, payload)
    }
}

impl crate::write_log::WriteLog for Journal {
    fn with_lock(&self, f: &mut dyn FnMut(&mut dyn crate::write_log::LogAppender)) {
        let mut appender = Appender {
            journal: self,
            inner: self.inner.lock(),
        };
        f(&mut appender);
    }

    fn sync(&self, upto: u64) -> Result<(), IoFailure> {
        Journal::sync(self, upto)
    }

    fn written_seq(&self) -> u64 {
        Journal::written_seq(self)
    }

    fn release_upto(&self, hwm: u64) -> Result<(), IoFailure> {
        Journal::release_upto(self, hwm)
    }

    fn pieces_in_use(&self) -> usize {
        self.file_count()
    }
}

#[derive(Debug)]
struct Inner {
    file: Arc<File>,
    /// Where the next record goes in `file`.
    write_offset: u64,
    /// Reused buffer holding one record (header and payload) for a single write.
    record: Vec<u8>,
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
    options: JournalOptions,
    /// Released files kept for reuse.
    recycled: Mutex<Vec<PathBuf>>,
    /// The next file, zero-filled in the background.
    spare: Arc<Mutex<Option<std::thread::JoinHandle<std::io::Result<PathBuf>>>>>,
    writeback: Arc<Writeback>,
    writeback_thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.writeback.stop();
        if let Some(t) = self.writeback_thread.take() {
            let _ = t.join();
        }
    }
}

impl Journal {
    /// Every valid record in the journal in `dir`, changing nothing (none if it does not
    /// exist).
    pub fn scan(dir: &Path) -> Result<Vec<JournalRecord>, IoFailure> {
        let derr = |e| IoFailure::disk(dir.display().to_string(), e);
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(derr(e)),
        };
        let mut files: Vec<(u64, PathBuf)> = Vec::new();
        for entry in entries {
            let entry = entry.map_err(derr)?;
            let name = entry.file_name();
            let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".wal")) else {
                continue;
            };
            if let Ok(first) = u64::from_str_radix(stem, 16) {
                files.push((first, entry.path()));
            }
        }
        files.sort();
        let mut records = Vec::new();
        for (_, path) in &files {
            read_records(path, &mut records)?;
        }
        Ok(records)
    }

    /// Open the journal in `dir`, returning it and every valid record in it (for replay).
    /// New records continue after the highest seq seen, in a new file.
    pub fn open(
        dir: &Path,
        min_next_seq: u64,
        options: JournalOptions,
    ) -> Result<(Journal, Vec<JournalRecord>), IoFailure> {
        let derr = |e| IoFailure::disk(dir.display().to_string(), e);
        std::fs::create_dir_all(dir).map_err(derr)?;
        let mut files: Vec<(u64, PathBuf)> = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(derr)? {
            let entry = entry.map_err(derr)?;
            let name = entry.file_name();
            if name
                .to_str()
                .is_some_and(|n| n.ends_with(SPARE_SUFFIX) || n.ends_with(RECYCLED_SUFFIX))
            {
                // A spare that was being prepared: its contents are not known to be zero.
                let _ = std::fs::remove_file(entry.path());
                continue;
            }
            let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".wal")) else {
                continue;
            };
            if let Ok(first) = u64::from_str_radix(stem, 16) {
                files.push((first, entry.path()));
            }
        }
        files.sort();
        let mut records = Vec::new();
        for (_, path) in &files {
            read_records(path, &mut records)?;
        }
        let next_seq = records
            .last()
            .map_or(1, |r| r.seq + 1)
            .max(min_next_seq)
            .max(1);
        // A file already named after `next_seq` holds no valid record (else the next seq would
        // be past it): it is replaced, and must not be listed twice.
        files.retain(|(first, _)| *first != next_seq);
        let (file, path) = create_file(dir, next_seq, prepare_spare(dir, 0, options), options)?;
        let mut all: VecDeque<(u64, PathBuf)> = files.into_iter().collect();
        all.push_back((next_seq, path));
        let writeback = Arc::new(Writeback::default());
        let runner = writeback.clone();
        let writeback_thread = std::thread::Builder::new()
            .name("weft-writeback".into())
            .spawn(move || runner.run())
            .map_err(derr)?;
        let journal = Journal {
            writeback,
            writeback_thread: Some(writeback_thread),
            dir: dir.to_path_buf(),
            inner: Mutex::new(Inner {
                file: Arc::new(file),
                write_offset: 0,
                record: Vec::new(),
                files: all,
                next_seq,
                header: [0; RECORD_HEADER_BYTES],
            }),
            written_seq: AtomicU64::new(next_seq - 1),
            synced_seq: AtomicU64::new(next_seq - 1),
            sync_lock: Mutex::new(()),
            spare: Arc::new(Mutex::new(None)),
            recycled: Mutex::new(Vec::new()),
            options,
        };
        journal.prepare_next_spare(1);
        Ok((journal, records))
    }

    /// Append one record and hand it to the OS; returns what `on_written` returns. It runs
    /// with the journal still locked, so the caller can publish the record (to the write
    /// buffer) in seq order.
    pub fn append<R>(
        &self,
        header: RecordHeader,
        payload: &[u8],
        on_written: impl FnOnce(u64) -> R,
    ) -> Result<R, IoFailure> {
        let mut inner = self.inner.lock();
        let seq = self.append_locked(&mut inner, header, payload)?;
        Ok(on_written(seq))
    }

    /// Append `records` (header and payload) in order under one lock, each under the
    /// journal's next seq, with one write per journal file they land in (a partner mirroring
    /// an owner's stream appends what arrived together this way, from its read buffer);
    /// returns the last seq, 0 for none.
    pub fn append_batch(&self, records: &[(RecordHeader, &[u8])]) -> Result<u64, IoFailure> {
        let mut inner = self.inner.lock();
        let mut rest = records;
        while !rest.is_empty() {
            let first_bytes = (RECORD_HEADER_BYTES + rest[0].1.len()) as u64;
            if inner.write_offset > 0 && inner.write_offset + first_bytes > self.options.file_bytes
            {
                self.rotate(&mut inner)?;
            }
            // As many as fit in this file (at least one: a new file takes any record).
            let room = self.options.file_bytes.saturating_sub(inner.write_offset);
            let mut bytes = 0u64;
            let fit = rest
                .iter()
                .take_while(|(_, payload)| {
                    bytes += (RECORD_HEADER_BYTES + payload.len()) as u64;
                    bytes <= room
                })
                .count()
                .max(1);
            let (now, later) = rest.split_at(fit);
            inner.record.clear();
            let first_seq = inner.next_seq;
            for (i, (header, payload)) in now.iter().enumerate() {
                Self::encode(&mut inner, first_seq + i as u64, *header, payload);
            }
            self.write_encoded(&mut inner, now.len() as u64)?;
            rest = later;
        }
        Ok(if records.is_empty() {
            0
        } else {
            inner.next_seq - 1
        })
    }

    fn append_locked(
        &self,
        inner: &mut Inner,
        header: RecordHeader,
        payload: &[u8],
    ) -> Result<u64, IoFailure> {
        let record_bytes = (RECORD_HEADER_BYTES + payload.len()) as u64;
        if inner.write_offset > 0 && inner.write_offset + record_bytes > self.options.file_bytes {
            self.rotate(inner)?;
        }
        let seq = inner.next_seq;
        inner.record.clear();
        Self::encode(inner, seq, header, payload);
        self.write_encoded(inner, 1)?;
        Ok(seq)
    }

    /// Add the record `seq` to `inner.record`.
    fn encode(inner: &mut Inner, seq: u64, header: RecordHeader, payload: &[u8]) {
        let payload_len = u32::try_from(payload.len()).expect("payload below 4 GiB");
        assert!(
            payload_len <= JOURNAL_PAYLOAD_MAX_BYTES,
            "front ends bound request sizes"
        );
        let Inner {
            header: h, record, ..
        } = inner;
        h[0..4].copy_from_slice(&RECORD_MAGIC.to_le_bytes());
        h[8..16].copy_from_slice(&seq.to_le_bytes());
        h[16..24].copy_from_slice(&header.layer.0.to_le_bytes());
        h[24..32].copy_from_slice(&header.lba.to_le_bytes());
        h[32..40].copy_from_slice(&header.count.to_le_bytes());
        h[40] = header.kind.code();
        h[41..44].fill(0);
        h[44..48].copy_from_slice(&payload_len.to_le_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&h[8..]), payload);
        h[4..8].copy_from_slice(&crc.to_le_bytes());
        record.extend_from_slice(h);
        record.extend_from_slice(payload);
    }

    /// Hand the `count` records encoded in `inner.record` to the OS at the write offset.
    fn write_encoded(&self, inner: &mut Inner, count: u64) -> Result<(), IoFailure> {
        let Inner {
            record,
            file,
            write_offset,
            ..
        } = inner;
        let bytes = record.len() as u64;
        if let Err(e) = file.write_all_at(record, *write_offset) {
            // A partial record would be a torn tail in the middle of the log: start a new file
            // so replay sees the next records. The seqs are not consumed.
            let _ = self.rotate(inner);
            return Err(IoFailure::disk(self.dir.display().to_string(), e));
        }
        self.writeback.note(file, *write_offset, bytes);
        if record.capacity() > 1 << 20 {
            *record = Vec::new();
        }
        inner.write_offset += bytes;
        inner.next_seq += count;
        self.written_seq
            .store(inner.next_seq - 1, Ordering::Release);
        Ok(())
    }

    pub fn sync(&self, upto: u64) -> Result<(), IoFailure> {
        if self.synced_seq.load(Ordering::Acquire) >= upto {
            return Ok(());
        }
        let _one_syncer = self.sync_lock.lock();
        if self.synced_seq.load(Ordering::Acquire) >= upto {
            return Ok(());
        }
        let (file, written, offset) = {
            let inner = self.inner.lock();
            (
                inner.file.clone(),
                self.written_seq.load(Ordering::Acquire),
                inner.write_offset,
            )
        };
        file.sync_data()
            .map_err(|e| IoFailure::disk(self.dir.display().to_string(), e))?;
        self.writeback.synced(&file, offset);
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
            let (first, path) = inner.files.pop_front().expect("two files");
            let err = |e| IoFailure::disk(path.display().to_string(), e);
            let mut recycled = self.recycled.lock();
            let full_size =
                std::fs::metadata(&path).is_ok_and(|m| m.len() == self.options.file_bytes);
            if recycled.len() < RECYCLED_FILES_MAX && full_size && self.options.prefill {
                let keep = self.dir.join(format!("{first:016x}{RECYCLED_SUFFIX}"));
                std::fs::rename(&path, &keep).map_err(err)?;
                recycled.push(keep);
            } else {
                std::fs::remove_file(&path).map_err(err)?;
            }
        }
        Ok(())
    }

    /// Journal files in use (not counting files kept for reuse).
    pub fn file_count(&self) -> usize {
        self.inner.lock().files.len()
    }

    fn rotate(&self, inner: &mut Inner) -> Result<(), IoFailure> {
        // Records in the old file must be as durable as `sync` promises before it stops being
        // the file `sync` looks at.
        inner
            .file
            .sync_data()
            .map_err(|e| IoFailure::disk(self.dir.display().to_string(), e))?;
        let reuse = self.recycled.lock().pop();
        let (file, path) = match reuse {
            Some(old) => reuse_file(&self.dir, inner.next_seq, &old)?,
            None => {
                let spare = self.spare.lock().take();
                let created = create_file(&self.dir, inner.next_seq, spare, self.options)?;
                self.prepare_next_spare(inner.next_seq);
                created
            }
        };
        inner.file = Arc::new(file);
        inner.write_offset = 0;
        if inner.files.back().map(|(s, _)| *s) == Some(inner.next_seq) {
            // The current file holds no record yet (a failed append): reuse its slot.
            inner.files.pop_back();
        }
        inner.files.push_back((inner.next_seq, path));
        Ok(())
    }
}

impl Journal {
    /// Start zero-filling the file after the current one.
    fn prepare_next_spare(&self, salt: u64) {
        let mut slot = self.spare.lock();
        if slot.is_none() {
            *slot = prepare_spare(&self.dir, salt, self.options);
        }
    }
}

/// Zero-fill a spare file in the background; `None` if no thread could be started (the next
/// rotation then fills one itself).
fn prepare_spare(
    dir: &Path,
    salt: u64,
    options: JournalOptions,
) -> Option<std::thread::JoinHandle<std::io::Result<PathBuf>>> {
    let path = dir.join(format!("{salt:016x}-{}{SPARE_SUFFIX}", std::process::id()));
    std::thread::Builder::new()
        .name("weft-journal-prep".into())
        .spawn(move || {
            let file = OpenOptions::new()
                .create(true)
                .truncate(true)
                .write(true)
                .open(&path)?;
            if !options.prefill {
                file.set_len(options.file_bytes)?;
                return Ok(path);
            }
            let zeroes = vec![0u8; 1 << 20];
            let mut at = 0;
            while at < options.file_bytes {
                file.write_all_at(&zeroes, at)?;
                at += zeroes.len() as u64;
            }
            file.sync_all()?;
            Ok(path)
        })
        .ok()
}

/// Put a released file back in use: zero its first block (so none of its old records is
/// reachable before new ones overwrite them), then name it after `first_seq`.
fn reuse_file(dir: &Path, first_seq: u64, old: &Path) -> Result<(File, PathBuf), IoFailure> {
    let path = dir.join(format!("{first_seq:016x}.wal"));
    let err = |p: &Path, e| IoFailure::disk(p.display().to_string(), e);
    let file = OpenOptions::new()
        .write(true)
        .open(old)
        .map_err(|e| err(old, e))?;
    file.write_all_at(&[0u8; 4096], 0)
        .and_then(|()| file.sync_data())
        .map_err(|e| err(old, e))?;
    std::fs::rename(old, &path).map_err(|e| err(&path, e))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| err(dir, e))?;
    Ok((file, path))
}

/// Put a zero-filled file in use as the file whose first record is `first_seq`.
fn create_file(
    dir: &Path,
    first_seq: u64,
    spare: Option<std::thread::JoinHandle<std::io::Result<PathBuf>>>,
    options: JournalOptions,
) -> Result<(File, PathBuf), IoFailure> {
    let path = dir.join(format!("{first_seq:016x}.wal"));
    let err = |p: &Path, e| IoFailure::disk(p.display().to_string(), e);
    let prepared = match spare.map(std::thread::JoinHandle::join) {
        Some(Ok(Ok(spare_path))) => Some(spare_path),
        _ => None,
    };
    let source = match prepared {
        Some(p) => p,
        None => prepare_spare(dir, first_seq, options)
            .ok_or_else(|| err(dir, std::io::Error::other("cannot start a thread")))?
            .join()
            .map_err(|_| err(dir, std::io::Error::other("journal preparation panicked")))?
            .map_err(|e| err(dir, e))?,
    };
    std::fs::rename(&source, &path).map_err(|e| err(&path, e))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| err(dir, e))?;
    let file = OpenOptions::new()
        .write(true)
        .open(&path)
        .map_err(|e| err(&path, e))?;
    Ok((file, path))
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
    let crc = crc32c::crc32c_append(
        crc32c::crc32c(&b[8..RECORD_HEADER_BYTES]),
        &b[RECORD_HEADER_BYTES..end],
    );
    if crc != u32_at(4) {
        return None;
    }
    let kind = RecordKind::from_code(b[40])?;
    let record = JournalRecord {
        seq: u64_at(8),
        header: RecordHeader {
            kind,
            layer: LayerId(u64_at(16)),
            lba: u64_at(24),
            count: u64_at(32),
        },
        payload: b[RECORD_HEADER_BYTES..end].to_vec(),
    };
    Some((record, end))
}

/// The local journal in a directory.
#[derive(Debug, Clone)]
pub struct JournalSource {
    pub dir: std::path::PathBuf,
    pub options: JournalOptions,
}

impl crate::write_log::WriteLogSource for JournalSource {
    fn open(
        &self,
        min_next_seq: u64,
    ) -> Result<(Box<dyn crate::write_log::WriteLog>, Vec<JournalRecord>), IoFailure> {
        let (journal, records) = Journal::open(&self.dir, min_next_seq, self.options)?;
        Ok((Box::new(journal), records))
    }

    fn scan(&self) -> Result<Vec<JournalRecord>, IoFailure> {
        Journal::scan(&self.dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(kind: RecordKind, lba: u64, count: u64) -> RecordHeader {
        RecordHeader {
            kind,
            layer: LayerId(1),
            lba,
            count,
        }
    }

    const TEST_OPTIONS: JournalOptions = JournalOptions {
        file_bytes: 1 << 20,
        prefill: true,
    };

    #[test]
    fn records_replay_in_order_and_a_torn_tail_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (j, old) = Journal::open(dir.path(), 1, TEST_OPTIONS).unwrap();
            assert!(old.is_empty());
            assert_eq!(
                j.append(header(RecordKind::Write, 5, 1), &[7u8; 4096], |s| s)
                    .unwrap(),
                1
            );
            assert_eq!(
                j.append(header(RecordKind::Trim, 0, 100), &[], |s| s)
                    .unwrap(),
                2
            );
            j.sync(2).unwrap();
        }
        // Tear the last record of the file.
        let wal = dir.path().join(format!("{:016x}.wal", 1));
        let f = OpenOptions::new().write(true).open(&wal).unwrap();
        f.write_all_at(&[0u8; 10], (2 * RECORD_HEADER_BYTES + 4096 - 10) as u64)
            .unwrap();
        let (j, records) = Journal::open(dir.path(), 1, TEST_OPTIONS).unwrap();
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].payload, vec![7u8; 4096]);
        assert_eq!(
            j.append(header(RecordKind::Zero, 3, 1), &[], |s| s)
                .unwrap(),
            2
        );
        drop(j);
        let (j, records) = Journal::open(dir.path(), 1, TEST_OPTIONS).unwrap();
        assert_eq!(
            records.iter().map(|r| r.seq).collect::<Vec<_>>(),
            vec![1, 2]
        );
        assert_eq!(records[1].header.kind, RecordKind::Zero);
        j.release_upto(2).unwrap();
        assert_eq!(j.file_count(), 1);
    }

    /// A batch that crosses file boundaries replays as if appended one by one, and appends
    /// after it go on from its last seq.
    #[test]
    fn a_batch_spanning_files_replays_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let payloads: Vec<Vec<u8>> = (0..700u64).map(|i| vec![(i % 251) as u8; 4096]).collect();
        let records: Vec<(RecordHeader, &[u8])> = payloads
            .iter()
            .enumerate()
            .map(|(i, p)| (header(RecordKind::Write, i as u64, 1), &p[..]))
            .collect();
        {
            let (j, _) = Journal::open(dir.path(), 10, TEST_OPTIONS).unwrap();
            assert_eq!(j.append_batch(&[]).unwrap(), 0);
            assert_eq!(j.append_batch(&records[..1]).unwrap(), 10);
            assert_eq!(j.append_batch(&records[1..]).unwrap(), 709);
            assert_eq!(j.written_seq(), 709);
            assert!(j.file_count() >= 3, "700 x 4 KiB spans 1 MiB files");
            assert_eq!(
                j.append(header(RecordKind::Write, 9999, 1), &[1u8; 512], |s| s)
                    .unwrap(),
                710
            );
            j.sync(710).unwrap();
        }
        let (_, replayed) = Journal::open(dir.path(), 1, TEST_OPTIONS).unwrap();
        assert_eq!(replayed.len(), 701);
        for (i, r) in replayed.iter().take(700).enumerate() {
            assert_eq!(r.seq, 10 + i as u64);
            assert_eq!(r.header.lba, i as u64);
            assert_eq!(r.payload, payloads[i]);
        }
        assert_eq!(replayed[700].header.lba, 9999);
    }

    #[test]
    fn reopening_twice_without_writes_keeps_the_current_file() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (j, _) = Journal::open(dir.path(), 1, TEST_OPTIONS).unwrap();
            j.append(header(RecordKind::Write, 0, 1), &[1u8; 4096], |s| s)
                .unwrap();
        }
        drop(Journal::open(dir.path(), 1, TEST_OPTIONS).unwrap());
        let (j, _) = Journal::open(dir.path(), 1, TEST_OPTIONS).unwrap();
        j.release_upto(1).unwrap();
        assert_eq!(
            j.append(header(RecordKind::Write, 0, 1), &[2u8; 4096], |s| s)
                .unwrap(),
            2
        );
        drop(j);
        let (_, records) = Journal::open(dir.path(), 1, TEST_OPTIONS).unwrap();
        assert_eq!(
            records.last().map(|r| r.seq),
            Some(2),
            "the record after release survives"
        );
    }

    #[test]
    fn recycled_files_never_replay_old_records() {
        let dir = tempfile::tempdir().unwrap();
        let opts = JournalOptions {
            file_bytes: 64 << 10,
            prefill: true,
        };
        let (j, _) = Journal::open(dir.path(), 1, opts).unwrap();
        // Fill several files so some are released and reused.
        for i in 0..60u64 {
            let seq = j
                .append(header(RecordKind::Write, i, 1), &[i as u8; 4096], |s| s)
                .unwrap();
            j.release_upto(seq.saturating_sub(20)).unwrap();
        }
        drop(j);
        let (_, records) = Journal::open(dir.path(), 1, opts).unwrap();
        let seqs: Vec<u64> = records.iter().map(|r| r.seq).collect();
        assert!(
            seqs.windows(2).all(|w| w[1] == w[0] + 1),
            "replay is one increasing run: {seqs:?}"
        );
        assert_eq!(seqs.last(), Some(&60));
        for r in &records {
            assert_eq!(
                r.payload[0],
                (r.seq - 1) as u8,
                "record {} holds its own data",
                r.seq
            );
        }
    }
}
