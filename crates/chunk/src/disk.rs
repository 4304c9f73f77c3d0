//! The seam under a d.node's local chunk store: a directory of files on one disk.
//!
//! [`FileDisk`] is the real one (reads optionally O_DIRECT). [`SimDisk`] keeps files in memory
//! with the fault model of a real device: data written but not synced, and directory entries
//! created or removed but not synced, may be lost or torn (a prefix of 4 KiB pages kept) at a
//! [`SimDisk::power_cut`]; reads can be made to return corrupt or misdirected pages; stored
//! bytes can rot. A `kill -9` never shows these (the page cache survives a killed process);
//! a power cut does, so crash tests of the store and the engine use this disk.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{self, ErrorKind};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::aligned::is_direct_ready;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Open files kept for reads; beyond this, half the cache is dropped.
const OPEN_FILES_MAX: usize = 2048;
/// O_DIRECT needs buffers, offsets and lengths aligned to the logical block size.
const DIRECT_IO_ALIGN_BYTES: usize = 4096;
/// Granularity at which a power cut tears an unsynced write.
const TEAR_BYTES: usize = 4096;

/// Files in one directory tree on one disk; paths are relative, `/`-separated.
pub trait Disk: Send + Sync + std::fmt::Debug {
    /// Where this disk is, for messages.
    fn name(&self) -> String;
    fn create_dir_all(&self, dir: &str) -> io::Result<()>;
    /// Names of the entries of `dir` (empty when it does not exist).
    fn list_dir(&self, dir: &str) -> io::Result<Vec<String>>;
    /// Create `path`, which must not exist, holding `parts` back to back. Not durable until
    /// [`Disk::sync_file`] and [`Disk::sync_dir`] of its directory.
    fn write_new(&self, path: &str, parts: &[&[u8]]) -> io::Result<()>;
    /// Replace the contents of `path`, which must exist, with `parts` back to back (its
    /// length becomes theirs). Not durable until [`Disk::sync_file`].
    fn write_over(&self, path: &str, parts: &[&[u8]]) -> io::Result<()>;
    fn sync_file(&self, path: &str) -> io::Result<()>;
    fn sync_dir(&self, dir: &str) -> io::Result<()>;
    /// Fill `buf` from `offset`; a short file is `UnexpectedEof`.
    fn read_at(&self, path: &str, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// The open file behind `path` for a caller that reads it itself (the d.node's batched
    /// reads): the file and whether it was opened with O_DIRECT (then offsets, lengths and
    /// buffers must be aligned to 4 KiB). `None`: this disk has no such file (simulated).
    fn file_for_read(&self, _path: &str) -> Option<io::Result<(Arc<File>, bool)>> {
        None
    }
    fn len(&self, path: &str) -> io::Result<u64>;
    fn remove(&self, path: &str) -> io::Result<()>;
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
}

/// Real files under a root directory.
#[derive(Debug)]
pub struct FileDisk {
    root: PathBuf,
    direct_io: bool,
    /// Read handles, and whether each is O_DIRECT.
    open_files: Mutex<HashMap<String, (Arc<File>, bool)>>,
    /// Where `write_new` builds its aligned O_DIRECT write; kept between puts.
    direct_write_buffer: Mutex<Vec<u8>>,
}

impl FileDisk {
    /// With `direct_io`, reads bypass the page cache (the host's cache is the right place for
    /// hot data), falling back when the file system refuses O_DIRECT.
    pub fn open(root: impl Into<PathBuf>, direct_io: bool) -> io::Result<FileDisk> {
        let root = root.into();
        std::fs::create_dir_all(&root)?;
        Ok(FileDisk {
            root,
            direct_io,
            open_files: Mutex::new(HashMap::new()),
            direct_write_buffer: Mutex::new(Vec::new()),
        })
    }

    pub fn root(&self) -> &std::path::Path {
        &self.root
    }

    fn path(&self, p: &str) -> PathBuf {
        if p.is_empty() {
            self.root.clone()
        } else {
            self.root.join(p)
        }
    }

    fn reader(&self, p: &str) -> io::Result<Arc<File>> {
        self.open_reader(p).map(|(f, _)| f)
    }

    /// The cached read handle of `p` and whether it is O_DIRECT.
    fn open_reader(&self, p: &str) -> io::Result<(Arc<File>, bool)> {
        if let Some(f) = self.open_files.lock().get(p) {
            return Ok(f.clone());
        }
        let path = self.path(p);
        let mut opts = OpenOptions::new();
        opts.read(true);
        if self.direct_io {
            opts.custom_flags(libc::O_DIRECT);
        }
        let (file, direct) = match opts.open(&path) {
            Ok(f) => (f, self.direct_io),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (File::open(&path)?, false),
            Err(e) => return Err(e),
        };
        let file = (Arc::new(file), direct);
        let mut cache = self.open_files.lock();
        if cache.len() >= OPEN_FILES_MAX {
            let victims: Vec<String> = cache.keys().take(OPEN_FILES_MAX / 2).cloned().collect();
            for v in victims {
                cache.remove(&v);
            }
        }
        cache.insert(p.to_string(), file.clone());
        Ok(file)
    }

    /// Write `parts` back to back from offset 0 of the file and cut it to their length: one
    /// O_DIRECT write from an aligned buffer when the length allows (no page-cache copy, and
    /// the sync that follows has only metadata left to commit), else through the page cache.
    fn write_parts(&self, p: &str, target: Target, parts: &[&[u8]]) -> io::Result<()> {
        let open = |direct: bool| {
            let mut opts = OpenOptions::new();
            opts.write(true).create_new(target == Target::New);
            if direct {
                opts.custom_flags(libc::O_DIRECT);
            }
            opts.open(self.path(p))
        };
        let total: usize = parts.iter().map(|part| part.len()).sum();
        if self.direct_io && total.is_multiple_of(DIRECT_IO_ALIGN_BYTES) {
            match open(true) {
                Ok(file) => {
                    if parts
                        .iter()
                        .all(|p| p.len().is_multiple_of(DIRECT_IO_ALIGN_BYTES))
                        && parts.iter().any(|p| is_direct_ready(p))
                    {
                        // A page-aligned part (an engine segment, see `AlignedBuf`) is written
                        // where it is; only the others (the chunk header) are copied.
                        self.write_direct_in_place(&file, parts)?;
                        return cut_to(&file, total);
                    }
                    // One reused buffer: a fresh one per put cost a memset and page faults
                    // of its whole length.
                    let mut backing = self.direct_write_buffer.lock();
                    if backing.len() < total + DIRECT_IO_ALIGN_BYTES {
                        backing.resize(total + DIRECT_IO_ALIGN_BYTES, 0);
                    }
                    let skip = backing.as_ptr().align_offset(DIRECT_IO_ALIGN_BYTES);
                    let buf = &mut backing[skip..skip + total];
                    let mut at = 0;
                    for part in parts {
                        buf[at..at + part.len()].copy_from_slice(part);
                        at += part.len();
                    }
                    file.write_all_at(buf, 0)?;
                    return cut_to(&file, total);
                }
                // The file system refuses O_DIRECT (the open may have created the file):
                // write through the page cache.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    if target == Target::New {
                        let _ = std::fs::remove_file(self.path(p));
                    }
                }
                Err(e) => return Err(e),
            }
        }
        let file = open(false)?;
        let mut at = 0u64;
        for part in parts {
            file.write_all_at(part, at)?;
            at += part.len() as u64;
        }
        cut_to(&file, total)
    }
}

impl FileDisk {
    /// One `pwritev` of `parts` at offset 0 of an O_DIRECT `file`: parts that are already
    /// page-aligned go as they are, the others through the reused aligned buffer. Every
    /// part's length is a multiple of the page.
    fn write_direct_in_place(&self, file: &File, parts: &[&[u8]]) -> io::Result<()> {
        let copied: usize = parts
            .iter()
            .filter(|p| !is_direct_ready(p))
            .map(|p| p.len())
            .sum();
        let mut backing = self.direct_write_buffer.lock();
        if backing.len() < copied + DIRECT_IO_ALIGN_BYTES {
            backing.resize(copied + DIRECT_IO_ALIGN_BYTES, 0);
        }
        let skip = backing.as_ptr().align_offset(DIRECT_IO_ALIGN_BYTES);
        let mut at = skip;
        let mut places = Vec::with_capacity(parts.len());
        for part in parts {
            if is_direct_ready(part) {
                places.push(None);
            } else {
                backing[at..at + part.len()].copy_from_slice(part);
                places.push(Some(at));
                at += part.len();
            }
        }
        let pieces: Vec<&[u8]> = parts
            .iter()
            .zip(&places)
            .map(|(part, place)| match place {
                Some(start) => &backing[*start..*start + part.len()],
                None => *part,
            })
            .collect();
        pwritev_all(file, &pieces, 0)
    }
}

/// `pwritev` until every byte of `pieces` is written at `offset` (a short write goes on
/// from where it stopped; O_DIRECT stops on a block boundary).
fn pwritev_all(file: &File, pieces: &[&[u8]], offset: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut pieces: Vec<&[u8]> = pieces.iter().copied().filter(|p| !p.is_empty()).collect();
    let mut offset = offset;
    let mut first = 0;
    while first < pieces.len() {
        let iov: Vec<libc::iovec> = pieces[first..]
            .iter()
            .take(libc::UIO_MAXIOV as usize)
            .map(|p| libc::iovec {
                iov_base: p.as_ptr() as *mut libc::c_void,
                iov_len: p.len(),
            })
            .collect();
        // SAFETY: every iovec points into a live slice of `pieces` for its whole length.
        #[allow(unsafe_code)]
        let n = unsafe {
            libc::pwritev(
                file.as_raw_fd(),
                iov.as_ptr(),
                iov.len() as libc::c_int,
                offset as libc::off_t,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::new(
                ErrorKind::WriteZero,
                "pwritev wrote nothing",
            ));
        }
        let mut n = n as usize;
        offset += n as u64;
        while n > 0 {
            let len = pieces[first].len();
            if n >= len {
                n -= len;
                first += 1;
            } else {
                pieces[first] = &pieces[first][n..];
                n = 0;
            }
        }
    }
    Ok(())
}

/// Whether [`FileDisk::write_parts`] creates its file or reuses one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    New,
    Existing,
}

/// Cut a reused file to the length just written (a fresh one already has it).
fn cut_to(file: &File, len: usize) -> io::Result<()> {
    if file.metadata()?.len() > len as u64 {
        file.set_len(len as u64)?;
    }
    Ok(())
}

impl Disk for FileDisk {
    fn name(&self) -> String {
        self.root.display().to_string()
    }

    fn create_dir_all(&self, dir: &str) -> io::Result<()> {
        std::fs::create_dir_all(self.path(dir))
    }

    fn list_dir(&self, dir: &str) -> io::Result<Vec<String>> {
        let entries = match std::fs::read_dir(self.path(dir)) {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut names = Vec::new();
        for entry in entries {
            if let Some(name) = entry?.file_name().to_str() {
                names.push(name.to_string());
            }
        }
        names.sort();
        Ok(names)
    }

    fn write_new(&self, p: &str, parts: &[&[u8]]) -> io::Result<()> {
        self.write_parts(p, Target::New, parts)
    }

    fn write_over(&self, p: &str, parts: &[&[u8]]) -> io::Result<()> {
        self.open_files.lock().remove(p);
        self.write_parts(p, Target::Existing, parts)
    }

    fn sync_file(&self, p: &str) -> io::Result<()> {
        let file = OpenOptions::new().write(true).open(self.path(p))?;
        file.sync_data()?;
        // The data is durable; keep it out of the page cache (reads use O_DIRECT).
        #[allow(unsafe_code)]
        // SAFETY: the fd is valid for the lifetime of `file`; fadvise reads no memory.
        unsafe {
            libc::posix_fadvise(
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
                0,
                libc::POSIX_FADV_DONTNEED,
            );
        }
        Ok(())
    }

    fn sync_dir(&self, dir: &str) -> io::Result<()> {
        File::open(self.path(dir))?.sync_all()
    }

    fn file_for_read(&self, p: &str) -> Option<io::Result<(Arc<File>, bool)>> {
        Some(self.open_reader(p))
    }

    fn read_at(&self, p: &str, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let file = self.reader(p)?;
        if !self.direct_io {
            return file.read_exact_at(buf, offset);
        }
        let align = DIRECT_IO_ALIGN_BYTES as u64;
        let start = offset / align * align;
        let end = (offset + buf.len() as u64).div_ceil(align) * align;
        let span = usize::try_from(end - start).expect("read spans fit in memory");
        let mut scratch = vec![0u8; span + DIRECT_IO_ALIGN_BYTES];
        let shift = scratch.as_ptr().align_offset(DIRECT_IO_ALIGN_BYTES);
        let aligned = &mut scratch[shift..shift + span];
        let mut done = 0;
        while done < span {
            match file.read_at(&mut aligned[done..], start + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let skip = usize::try_from(offset - start).expect("below alignment");
        if done < skip + buf.len() {
            return Err(ErrorKind::UnexpectedEof.into());
        }
        buf.copy_from_slice(&aligned[skip..skip + buf.len()]);
        Ok(())
    }

    fn len(&self, p: &str) -> io::Result<u64> {
        Ok(std::fs::metadata(self.path(p))?.len())
    }

    fn remove(&self, p: &str) -> io::Result<()> {
        self.open_files.lock().remove(p);
        std::fs::remove_file(self.path(p))
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.open_files.lock().remove(from);
        self.open_files.lock().remove(to);
        std::fs::rename(self.path(from), self.path(to))
    }
}

/// A read fault armed on a [`SimDisk`].
#[derive(Debug, Clone)]
pub enum ReadFault {
    /// Reads covering this byte of the file return it flipped.
    Corrupt { path: String, offset: u64 },
    /// Reads of the page at `page_offset` return the page at `from_offset` instead.
    Misdirect {
        path: String,
        page_offset: u64,
        from_offset: u64,
    },
}

#[derive(Debug, Clone, Default)]
struct SimFile {
    data: Vec<u8>,
    /// Contents at the last sync; `None`: never synced.
    synced: Option<Vec<u8>>,
}

#[derive(Debug, Default)]
struct SimState {
    files: BTreeMap<String, SimFile>,
    /// Entries whose directory was synced since they were created.
    durable_names: BTreeSet<String>,
    /// Files removed since their directory was last synced: a power cut may bring them back.
    removed: BTreeMap<String, Option<Vec<u8>>>,
    faults: Vec<ReadFault>,
    power_cuts: u64,
}

/// An in-memory disk with a fault model; clones share the same disk.
#[derive(Debug, Clone, Default)]
pub struct SimDisk {
    state: Arc<Mutex<SimState>>,
}

fn parent(p: &str) -> &str {
    p.rsplit_once('/').map_or("", |(d, _)| d)
}

fn not_found(p: &str) -> io::Error {
    io::Error::new(ErrorKind::NotFound, p.to_string())
}

impl SimDisk {
    pub fn new() -> SimDisk {
        SimDisk::default()
    }

    /// Lose power: every write not synced is kept, lost or torn (a random prefix of its
    /// 4 KiB pages kept over the old contents), every unsynced directory change kept or
    /// undone, at random from `seed`.
    pub fn power_cut(&self, seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut st = self.state.lock();
        st.power_cuts += 1;
        let mut files = BTreeMap::new();
        let names: Vec<String> = st.files.keys().cloned().collect();
        for name in names {
            let f = st.files[&name].clone();
            let durable_entry = st.durable_names.contains(&name);
            if !durable_entry && rng.random_bool(0.5) {
                continue; // the directory entry never reached the disk
            }
            let data = match &f.synced {
                Some(s) if *s == f.data => f.data.clone(),
                old => {
                    let old = old.clone().unwrap_or_default();
                    match rng.random_range(0..3) {
                        0 => f.data.clone(),
                        1 => old,
                        _ => tear(&old, &f.data, &mut rng),
                    }
                }
            };
            files.insert(
                name,
                SimFile {
                    synced: Some(data.clone()),
                    data,
                },
            );
        }
        let removed = std::mem::take(&mut st.removed);
        for (name, synced) in removed {
            if st.durable_names.contains(&name) && rng.random_bool(0.5) {
                let data = synced.unwrap_or_default();
                files.insert(
                    name,
                    SimFile {
                        synced: Some(data.clone()),
                        data,
                    },
                );
            }
        }
        st.durable_names = files.keys().cloned().collect();
        st.files = files;
        st.faults.clear();
    }

    /// Arm a read fault (cleared by a power cut or [`SimDisk::clear_faults`]).
    pub fn inject(&self, fault: ReadFault) {
        self.state.lock().faults.push(fault);
    }

    pub fn clear_faults(&self) {
        self.state.lock().faults.clear();
    }

    /// Flip a stored byte (bit rot): every later read sees it.
    pub fn rot(&self, path: &str, offset: u64) -> io::Result<()> {
        let mut st = self.state.lock();
        let f = st.files.get_mut(path).ok_or_else(|| not_found(path))?;
        let at = usize::try_from(offset).map_err(|_| io::Error::from(ErrorKind::InvalidInput))?;
        let byte = f.data.get_mut(at).ok_or(ErrorKind::InvalidInput)?;
        *byte ^= 0x5a;
        if let Some(s) = f.synced.as_mut().and_then(|s| s.get_mut(at)) {
            *s ^= 0x5a;
        }
        Ok(())
    }

    /// Every file path, for tests that pick a victim.
    pub fn paths(&self) -> Vec<String> {
        self.state.lock().files.keys().cloned().collect()
    }
}

/// Keep the first pages of `new` and the rest of `old` (zero past its end).
fn tear(old: &[u8], new: &[u8], rng: &mut StdRng) -> Vec<u8> {
    let pages = new.len().div_ceil(TEAR_BYTES);
    let keep = rng.random_range(0..=pages) * TEAR_BYTES;
    let mut out = new.to_vec();
    for (i, b) in out.iter_mut().enumerate().skip(keep) {
        *b = old.get(i).copied().unwrap_or(0);
    }
    out
}

impl Disk for SimDisk {
    fn name(&self) -> String {
        "simulated disk".into()
    }

    fn create_dir_all(&self, _dir: &str) -> io::Result<()> {
        Ok(())
    }

    fn list_dir(&self, dir: &str) -> io::Result<Vec<String>> {
        let st = self.state.lock();
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        let mut names = BTreeSet::new();
        for path in st.files.keys() {
            if let Some(rest) = path.strip_prefix(&prefix) {
                names.insert(rest.split('/').next().unwrap_or(rest).to_string());
            }
        }
        Ok(names.into_iter().collect())
    }

    fn write_new(&self, p: &str, parts: &[&[u8]]) -> io::Result<()> {
        let mut st = self.state.lock();
        if st.files.contains_key(p) {
            return Err(ErrorKind::AlreadyExists.into());
        }
        st.removed.remove(p);
        st.durable_names.remove(p);
        st.files.insert(
            p.to_string(),
            SimFile {
                data: parts.concat(),
                synced: None,
            },
        );
        Ok(())
    }

    fn write_over(&self, p: &str, parts: &[&[u8]]) -> io::Result<()> {
        let mut st = self.state.lock();
        let f = st.files.get_mut(p).ok_or_else(|| not_found(p))?;
        // Until synced, a power cut keeps, loses or tears this write over the old contents.
        f.data = parts.concat();
        Ok(())
    }

    fn sync_file(&self, p: &str) -> io::Result<()> {
        let mut st = self.state.lock();
        let f = st.files.get_mut(p).ok_or_else(|| not_found(p))?;
        f.synced = Some(f.data.clone());
        Ok(())
    }

    fn sync_dir(&self, dir: &str) -> io::Result<()> {
        let mut st = self.state.lock();
        let here: Vec<String> = st
            .files
            .keys()
            .filter(|p| parent(p) == dir)
            .cloned()
            .collect();
        st.durable_names.retain(|p| parent(p) != dir);
        st.durable_names.extend(here);
        st.removed.retain(|p, _| parent(p) != dir);
        Ok(())
    }

    fn read_at(&self, p: &str, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let st = self.state.lock();
        let f = st.files.get(p).ok_or_else(|| not_found(p))?;
        let start =
            usize::try_from(offset).map_err(|_| io::Error::from(ErrorKind::InvalidInput))?;
        let end = start + buf.len();
        if end > f.data.len() {
            return Err(ErrorKind::UnexpectedEof.into());
        }
        buf.copy_from_slice(&f.data[start..end]);
        for fault in &st.faults {
            match fault {
                ReadFault::Corrupt { path, offset } if path == p => {
                    if let Some(i) = offset.checked_sub(start as u64) {
                        if let Some(b) = buf.get_mut(i as usize) {
                            *b ^= 0xff;
                        }
                    }
                }
                ReadFault::Misdirect {
                    path,
                    page_offset,
                    from_offset,
                } if path == p => {
                    let (page, from) = (*page_offset as usize, *from_offset as usize);
                    for i in 0..TEAR_BYTES {
                        let (at, src) = (page + i, from + i);
                        if at >= start && at < end && src < f.data.len() {
                            buf[at - start] = f.data[src];
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn len(&self, p: &str) -> io::Result<u64> {
        let st = self.state.lock();
        Ok(st.files.get(p).ok_or_else(|| not_found(p))?.data.len() as u64)
    }

    fn remove(&self, p: &str) -> io::Result<()> {
        let mut st = self.state.lock();
        let f = st.files.remove(p).ok_or_else(|| not_found(p))?;
        st.removed.insert(p.to_string(), f.synced);
        Ok(())
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let mut st = self.state.lock();
        let f = st.files.remove(from).ok_or_else(|| not_found(from))?;
        st.removed.insert(from.to_string(), f.synced.clone());
        if let Some(old) = st.files.insert(to.to_string(), f) {
            st.removed.insert(to.to_string(), old.synced);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power_cut_keeps_synced_files_and_may_lose_or_tear_the_rest() {
        let mut lost_or_torn = 0;
        for seed in 0..40 {
            let d = SimDisk::new();
            d.write_new("a/x", &[&[1u8; 8192]]).unwrap();
            d.sync_file("a/x").unwrap();
            d.sync_dir("a").unwrap();
            d.write_new("a/y", &[&[2u8; 16384]]).unwrap();
            d.power_cut(seed);
            let mut buf = [0u8; 8192];
            d.read_at("a/x", 0, &mut buf).unwrap();
            assert_eq!(buf, [1u8; 8192]);
            let mut y = vec![0u8; 16384];
            match d.read_at("a/y", 0, &mut y) {
                Ok(()) if y == vec![2u8; 16384] => {}
                _ => lost_or_torn += 1,
            }
        }
        assert!(lost_or_torn > 0, "unsynced writes are sometimes lost");
    }

    #[test]
    fn read_faults_corrupt_and_misdirect() {
        let d = SimDisk::new();
        let data: Vec<u8> = (0..8192u32).map(|i| (i / 4096) as u8 + 1).collect();
        d.write_new("f", &[&data]).unwrap();
        d.inject(ReadFault::Misdirect {
            path: "f".into(),
            page_offset: 0,
            from_offset: 4096,
        });
        let mut buf = [0u8; 4096];
        d.read_at("f", 0, &mut buf).unwrap();
        assert_eq!(buf, [2u8; 4096]);
        d.clear_faults();
        d.inject(ReadFault::Corrupt {
            path: "f".into(),
            offset: 10,
        });
        d.read_at("f", 0, &mut buf).unwrap();
        assert_eq!(buf[10], !1u8);
    }

    #[test]
    fn file_disk_round_trips_with_and_without_direct_io() {
        let dir = tempfile::tempdir().unwrap();
        for direct in [false, true] {
            let d = FileDisk::open(dir.path().join(format!("{direct}")), direct).unwrap();
            d.create_dir_all("fam").unwrap();
            let bytes: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
            d.write_new("fam/c", &[&bytes[..4096], &bytes[4096..]])
                .unwrap();
            d.sync_file("fam/c").unwrap();
            d.sync_dir("fam").unwrap();
            let mut buf = vec![0u8; 100];
            d.read_at("fam/c", 5000, &mut buf).unwrap();
            assert_eq!(&buf[..], &bytes[5000..5100]);
            assert_eq!(d.len("fam/c").unwrap(), 10_000);
            assert_eq!(d.list_dir("fam").unwrap(), vec!["c".to_string()]);
            assert!(d.write_new("fam/c", &[b"x"]).is_err());
            d.remove("fam/c").unwrap();
            assert!(d.read_at("fam/c", 0, &mut buf).is_err());
        }
    }

    /// A page-aligned part is written where it is (`pwritev`), an unaligned one through the
    /// bounce buffer, in either order and over a reused file: the file is the parts in order.
    #[test]
    fn aligned_parts_are_written_in_place_beside_copied_ones() {
        use crate::aligned::{is_direct_ready, AlignedBuf};
        // On a file system without O_DIRECT (tmpfs) both go through the page cache instead.
        let dir = tempfile::tempdir().unwrap();
        let d = FileDisk::open(dir.path(), true).unwrap();
        d.create_dir_all("fam").unwrap();
        let mut aligned = AlignedBuf::with_capacity(3 * 4096);
        for i in 0..3 * 4096u32 {
            aligned.extend_from_slice(&[(i % 253) as u8]);
        }
        assert!(is_direct_ready(&aligned));
        let loose: Vec<u8> = vec![0u8; 4096 + 1]
            .into_iter()
            .enumerate()
            .map(|(i, _)| (i % 7) as u8 + 1)
            .collect();
        let loose = &loose[1..];
        assert!(!is_direct_ready(loose), "a part that needs the copy");
        for (name, parts) in [
            ("fam/a", vec![loose, &aligned[..]]),
            ("fam/b", vec![&aligned[..], loose, &aligned[4096..]]),
        ] {
            d.write_new(name, &parts).unwrap();
            let want: Vec<u8> = parts.concat();
            let mut got = vec![0u8; want.len()];
            d.read_at(name, 0, &mut got).unwrap();
            assert_eq!(got, want, "{name}");
            assert_eq!(d.len(name).unwrap(), want.len() as u64);
            // Written again shorter over the same file: cut to the new length.
            d.write_over(name, &[&aligned[..4096]]).unwrap();
            assert_eq!(d.len(name).unwrap(), 4096);
        }
    }
}
