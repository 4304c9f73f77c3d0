//! Small files in a data dir: written so that a crash leaves the old or the new contents,
//! and random ids and API tokens made at first start.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use anyhow::Context;

/// The token file, mode 0600, created at first start.
pub const TOKEN_FILE: &str = "api-token";
/// The read-only token's file (GET requests only: monitoring, the UI's viewers), mode 0600,
/// created at first start.
pub const READ_ONLY_TOKEN_FILE: &str = "api-token-read-only";

/// Where a c.node keeps the journals of the shards it owns besides its own, and the
/// mirrors of other c.nodes' (`crate::shard_host`, `crate::ha::shard_mirrors`).
pub const SHARDS_DIR: &str = "shards";

/// The dir of shard `shard` in the data dir `data_dir` of a c.node that does not own it as
/// its own shard.
pub fn shard_dir(data_dir: &Path, shard: weft_engine::ShardId) -> std::path::PathBuf {
    data_dir.join(SHARDS_DIR).join(shard.to_string())
}

/// What `path` keeps, trimmed; `None` when it is missing or empty (to be made).
fn read_kept(path: &Path) -> anyhow::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(t) if !t.trim().is_empty() => Ok(Some(t.trim().to_string())),
        Ok(_) => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// The token in `name` (the admin's or the read-only one), created if missing.
pub(crate) fn load_or_create_token_file(data_dir: &Path, name: &str) -> anyhow::Result<String> {
    let path = data_dir.join(name);
    if let Some(token) = read_kept(&path)? {
        return Ok(token);
    }
    let bytes: [u8; 32] = rand::random();
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(token.as_bytes())?;
    f.sync_all()?;
    Ok(token)
}

/// A random id kept in `file` of the data dir.
pub(crate) fn load_or_create_id(data_dir: &Path, file: &str) -> anyhow::Result<String> {
    if let Some(id) = read_kept(&data_dir.join(file))? {
        return Ok(id);
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
