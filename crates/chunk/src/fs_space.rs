//! The file system under a path: its size, the space a writer without root may still use,
//! and an id that is the same for every path on it on this machine, so that space shared by
//! several data dirs or d.nodes (six d.nodes of a demo on one disk) is counted once.
//!
//! One libc call (statvfs) plus a stat of the path; the machine's id is read once.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

/// The file system holding a path, as statvfs sees it now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsSpace {
    /// `<machine id>:<device number>`: equal for two paths exactly when they share a file
    /// system on the same machine.
    pub fs_id: String,
    /// Size of the file system.
    pub size_bytes: u64,
    /// Bytes a writer without root may still use (statvfs `f_bavail`): what chunk files can
    /// grow into.
    pub free_bytes: u64,
}

/// The file system under `path`; `None` if it cannot be asked (a missing path).
#[allow(unsafe_code)]
// The field types are u64 on 64-bit Linux but narrower elsewhere.
#[allow(clippy::useless_conversion)]
pub fn fs_space(path: &Path) -> Option<FsSpace> {
    let dev = std::fs::metadata(path).ok()?.dev();
    let c_path = CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `c_path` is a NUL-terminated string that outlives the call, and `st` points to
    // writable memory of the type statvfs fills.
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled `st` (and it was zeroed before anyway).
    let st = unsafe { st.assume_init() };
    let frsize = u64::from(st.f_frsize);
    Some(FsSpace {
        fs_id: format!("{}:{dev:x}", machine_id()),
        size_bytes: u64::from(st.f_blocks).saturating_mul(frsize),
        free_bytes: u64::from(st.f_bavail).saturating_mul(frsize),
    })
}

/// This machine, for file-system ids: `/etc/machine-id` (systemd, dbus), else the host name.
fn machine_id() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        [
            "/etc/machine-id",
            "/var/lib/dbus/machine-id",
            "/proc/sys/kernel/hostname",
        ]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim().to_string())
        .find(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown-machine".into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_dirs_on_one_file_system_share_its_id_and_a_missing_path_has_none() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        std::fs::create_dir(&a).expect("mkdir");
        std::fs::create_dir(&b).expect("mkdir");
        let (a, b) = (fs_space(&a).expect("a"), fs_space(&b).expect("b"));
        assert_eq!(a.fs_id, b.fs_id);
        assert!(a.size_bytes > 0 && a.free_bytes <= a.size_bytes, "{a:?}");
        assert_eq!(fs_space(&dir.path().join("nope")), None);
    }

    #[test]
    fn proc_is_another_file_system() {
        let tmp = fs_space(&std::env::temp_dir()).expect("tmp");
        let proc = fs_space(Path::new("/proc")).expect("/proc");
        assert_ne!(tmp.fs_id, proc.fs_id);
    }
}
