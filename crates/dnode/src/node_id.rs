//! The d.node's identity: an id kept in the file `node-id` of the first data dir, created on
//! the first start (`dn-` and 8 random hex digits) and read on every later one, so a restarted
//! d.node is the same member with the same chunks.
//!
//! The file is written to a temporary name, synced and renamed, so a crash never leaves a
//! half-written id.

use std::io::Write as _;
use std::path::Path;

use rand::Rng as _;
use weft_proto::NAME_MAX_BYTES;

use crate::error::DnodeError;

/// The file holding the node id, in the first data dir. Not a hex name, so the chunk store,
/// which reads hex-named family dirs, ignores it.
pub const NODE_ID_FILE: &str = "node-id";
const NODE_ID_PREFIX: &str = "dn-";

/// The node id stored in `dir`, creating it (and `dir`) if there is none.
pub fn load_or_create(dir: &Path) -> Result<String, DnodeError> {
    let path = dir.join(NODE_ID_FILE);
    let err = |detail: String| DnodeError::NodeId {
        path: path.clone(),
        detail,
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let id = text.trim();
            if !is_valid(id) {
                return Err(err(format!("{id:?} is not a valid node id")));
            }
            return Ok(id.to_owned());
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(e.to_string())),
    }
    std::fs::create_dir_all(dir).map_err(|e| DnodeError::DataDir {
        path: dir.to_owned(),
        source: e,
    })?;
    let id = format!("{NODE_ID_PREFIX}{:08x}", rand::rng().random::<u32>());
    let tmp = dir.join(format!("{NODE_ID_FILE}.tmp"));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(format!("{id}\n").as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        std::fs::File::open(dir)?.sync_all()
    };
    write().map_err(|e| err(e.to_string()))?;
    tracing::info!(node_id = %id, path = %path.display(), "created node id");
    Ok(id)
}

/// Ids travel in hellos and metadata keys: short, printable, no separators.
fn is_valid(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= NAME_MAX_BYTES
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_created_once_and_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("d0");
        let id = load_or_create(&data).expect("create");
        assert!(id.starts_with("dn-") && id.len() == 11, "{id}");
        assert_eq!(load_or_create(&data).expect("reload"), id);
        std::fs::write(data.join(NODE_ID_FILE), "bad/id\n").expect("write");
        assert!(matches!(
            load_or_create(&data),
            Err(DnodeError::NodeId { .. })
        ));
    }
}
