//! The size of the file system under a data dir (statvfs), reported as a disk's capacity when
//! none is configured. The only unsafe code of the crate: one libc call.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

/// Bytes of the file system holding `path`; `None` if it cannot be asked.
#[allow(unsafe_code)]
// The field types are u64 on 64-bit Linux but narrower elsewhere.
#[allow(clippy::useless_conversion)]
pub(crate) fn filesystem_size_bytes(path: &Path) -> Option<u64> {
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
    u64::from(st.f_blocks).checked_mul(u64::from(st.f_frsize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_real_directory_has_a_size_and_a_missing_one_none() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(filesystem_size_bytes(dir.path()).is_some_and(|b| b > 0));
        assert_eq!(filesystem_size_bytes(&dir.path().join("nope")), None);
    }
}
