//! Files and block devices, read and written with O_DIRECT so the page cache does not stand in
//! for the device. Each queue carries one I/O (synchronous pread/pwrite); the runner gets depth
//! by opening one queue per outstanding I/O, each on its own thread.
//!
//! If the filesystem refuses O_DIRECT (tmpfs, some FUSE mounts) we fall back to buffered I/O and
//! say so on stderr and in the results (`direct_io: false`).

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;

use crate::datagen::DataGen;
use crate::sys::{AlignedBuf, DIRECT_ALIGN_BYTES};
use crate::target::{IoQueue, IoRequest, Op, Target, TargetError, TargetInfo};

/// Logical block size we require I/O sizes and offsets to be multiples of under O_DIRECT. 512
/// suits most devices; devices with 4K sectors reject 512-byte I/O with EINVAL, which we report.
const DIRECT_BLOCK_BYTES: u32 = 512;

#[derive(Debug)]
pub(crate) struct FileTarget {
    file: Arc<File>,
    info: TargetInfo,
    /// A regular file with data in it when opened (not only holes): someone's data, maybe a
    /// database file, that a write would destroy. `None` for a block device.
    held_data: Option<bool>,
}

impl FileTarget {
    pub(crate) fn open(path: &Path, want_write: bool) -> Result<Self, TargetError> {
        let shown = path.display().to_string();
        let open_err = |source| TargetError::Open {
            path: shown.clone(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(open_err)?;
        let kind = if meta.file_type().is_block_device() {
            "block"
        } else if meta.is_file() {
            "file"
        } else {
            return Err(TargetError::NotAFileOrDevice { path: shown });
        };
        let (mut file, direct) = match open_with(path, want_write, true) {
            Ok(f) => (f, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                (open_with(path, want_write, false).map_err(open_err)?, false)
            }
            Err(e) => return Err(open_err(e)),
        };
        let size_bytes = file.seek(SeekFrom::End(0)).map_err(open_err)?;
        // Some filesystems accept O_DIRECT at open and refuse it at the first I/O.
        let direct = direct && (size_bytes == 0 || probe_direct_read(&file));
        if !direct {
            eprintln!(
                "weft bench: warning: {shown} does not support O_DIRECT; using buffered I/O, \
                 so the page cache may inflate the numbers"
            );
            file = open_with(path, want_write, false).map_err(open_err)?;
        }
        warn_if_sparse(&shown, &meta);
        // Where the file system cannot tell, a file with a size holds data.
        let held_data = (kind == "file")
            .then(|| crate::sys::file_has_data(file.as_raw_fd()).unwrap_or(size_bytes > 0));
        let info = TargetInfo {
            uri: shown,
            kind: kind.to_string(),
            size_bytes,
            block_size_min_bytes: if direct { DIRECT_BLOCK_BYTES } else { 1 },
            block_size_preferred_bytes: 4096,
            block_size_max_bytes: u32::MAX,
            read_only: !want_write,
            direct_io: Some(direct),
        };
        Ok(FileTarget {
            file: Arc::new(file),
            info,
            held_data,
        })
    }
}

/// Reads of holes in a sparse file never reach the device and report fantasy numbers.
fn warn_if_sparse(shown: &str, meta: &std::fs::Metadata) {
    use std::os::unix::fs::MetadataExt;
    // st_blocks counts 512-byte units whatever the filesystem's block size.
    if meta.is_file() && meta.blocks() * 512 < meta.len() {
        eprintln!(
            "weft bench: warning: {shown} is sparse; reads of its holes do not touch the device. \
             Fill it first (e.g. fio or dd with random data) for meaningful read numbers"
        );
    }
}

fn open_with(path: &Path, write: bool, direct: bool) -> io::Result<File> {
    let mut o = OpenOptions::new();
    o.read(true).write(write);
    if direct {
        o.custom_flags(libc::O_DIRECT);
    }
    o.open(path)
}

fn probe_direct_read(file: &File) -> bool {
    let mut buf = AlignedBuf::new(DIRECT_ALIGN_BYTES);
    match file.read_at(buf.as_mut_slice(), 0) {
        Ok(_) => true,
        Err(e) => e.raw_os_error() != Some(libc::EINVAL),
    }
}

impl Target for FileTarget {
    fn info(&self) -> &TargetInfo {
        &self.info
    }

    fn queue_depth_max(&self) -> u32 {
        1
    }

    fn held_data(&self) -> Option<bool> {
        self.held_data
    }

    fn open_queue(
        &self,
        depth: u32,
        io_bytes_max: u32,
        data: DataGen,
    ) -> Result<Box<dyn IoQueue>, TargetError> {
        assert_eq!(depth, 1, "file queues are synchronous");
        Ok(Box::new(FileQueue {
            file: Arc::clone(&self.file),
            buf: AlignedBuf::new(io_bytes_max as usize),
            pending: None,
            data,
        }))
    }
}

#[derive(Debug)]
struct FileQueue {
    file: Arc<File>,
    buf: AlignedBuf,
    pending: Option<IoRequest>,
    data: DataGen,
}

impl IoQueue for FileQueue {
    fn submit(&mut self, req: IoRequest) {
        assert!(self.pending.is_none(), "file queue depth is 1");
        if req.op == Op::Write {
            self.data
                .fill(&mut self.buf.as_mut_slice()[..req.len_bytes as usize]);
        }
        self.pending = Some(req);
    }

    fn wait(&mut self, done: &mut Vec<u32>) -> Result<(), TargetError> {
        let req = self
            .pending
            .take()
            .expect("wait without an outstanding I/O");
        let len = req.len_bytes as usize;
        let r = match req.op {
            Op::Read => self
                .file
                .read_exact_at(&mut self.buf.as_mut_slice()[..len], req.offset_bytes),
            Op::Write => self
                .file
                .write_all_at(&self.buf.as_slice()[..len], req.offset_bytes),
        };
        r.map_err(|source| TargetError::Io {
            op: req.op.name(),
            offset_bytes: req.offset_bytes,
            len_bytes: req.len_bytes,
            source,
        })?;
        done.push(req.tag);
        Ok(())
    }
}
