//! Small files in a data dir: written so that a crash leaves the old or the new contents,
//! and random ids made at first start.

use std::io::Write;
use std::path::Path;

use anyhow::Context;

/// A random id kept in `file` of the data dir.
pub(crate) fn load_or_create_id(data_dir: &Path, file: &str) -> anyhow::Result<String> {
    let path = data_dir.join(file);
    match std::fs::read_to_string(&path) {
        Ok(id) if !id.trim().is_empty() => return Ok(id.trim().to_string()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    }
    let bytes: [u8; 6] = rand::random();
    let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    write_atomically(data_dir, file, id.as_bytes())?;
    Ok(id)
}

/// Write `name` in `dir` so that a crash leaves either the old or the new contents.
pub(crate) fn write_atomically(
    dir: &std::path::Path,
    name: &str,
    bytes: &[u8],
) -> anyhow::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let path = dir.join(name);
    let mut f =
        std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("renaming to {}", path.display()))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing {}", dir.display()))
}
