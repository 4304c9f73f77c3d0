//! The embedded store's file, `<dir>/meta.json`: the whole key space and revision counter as
//! JSON (values base64), replaced atomically on every mutation (write a temporary file, fsync,
//! rename over the old one, fsync the directory). The data is small (kilobytes), so rewriting
//! all of it keeps the format trivial and a crash leaves either the old or the new image.
//! The file is mode 0600: the cluster state in it holds the hosts' CHAP secrets.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::Entry;
use crate::{MetaError, Revision};

/// The file holding an embedded store's data, inside the directory given to `open`.
pub const META_FILE_NAME: &str = "meta.json";
const TMP_FILE_NAME: &str = "meta.json.tmp";
const FORMAT_VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct Image {
    format: u32,
    revision: Revision,
    kvs: Vec<ImageKv>,
}

#[derive(Serialize, Deserialize)]
struct ImageKv {
    key: String,
    /// Base64 of the value bytes.
    value: String,
    create_revision: Revision,
    mod_revision: Revision,
    /// Attached to a lease when written: such keys do not survive a restart.
    #[serde(default)]
    leased: bool,
}

/// What a file holds: the revision counter and every key (`leased` marks keys that were
/// attached to a lease, as `Entry::lease == Some(LeaseId(0))`).
pub(super) struct Loaded {
    pub revision: Revision,
    pub kvs: BTreeMap<String, (Entry, bool)>,
}

/// Read `<dir>/meta.json`; None if there is none yet.
pub(super) fn load(dir: &Path) -> Result<Option<Loaded>, MetaError> {
    let path = dir.join(META_FILE_NAME);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(MetaError::io(path, e)),
    };
    let corrupt = |detail: String| MetaError::Corrupt {
        origin: path.display().to_string(),
        detail,
    };
    let image: Image = serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
    if image.format != FORMAT_VERSION {
        return Err(corrupt(format!(
            "format version {} is not the supported {FORMAT_VERSION}",
            image.format
        )));
    }
    let mut kvs = BTreeMap::new();
    for kv in image.kvs {
        let value = B64
            .decode(&kv.value)
            .map_err(|e| corrupt(format!("value of {:?} is not base64: {e}", kv.key)))?;
        if kv.mod_revision > image.revision || kv.create_revision > kv.mod_revision {
            return Err(corrupt(format!(
                "key {:?} has revisions {}/{} beyond the store's {}",
                kv.key, kv.create_revision, kv.mod_revision, image.revision
            )));
        }
        let entry = Entry {
            value,
            create_revision: kv.create_revision,
            mod_revision: kv.mod_revision,
            lease: None,
        };
        kvs.insert(kv.key, (entry, kv.leased));
    }
    Ok(Some(Loaded {
        revision: image.revision,
        kvs,
    }))
}

/// Replace `<dir>/meta.json` with this image, durably, before returning.
pub(super) fn save(
    dir: &Path,
    revision: Revision,
    kvs: &BTreeMap<String, Entry>,
) -> Result<(), MetaError> {
    let image = Image {
        format: FORMAT_VERSION,
        revision,
        kvs: kvs
            .iter()
            .map(|(key, e)| ImageKv {
                key: key.clone(),
                value: B64.encode(&e.value),
                create_revision: e.create_revision,
                mod_revision: e.mod_revision,
                leased: e.lease.is_some(),
            })
            .collect(),
    };
    let bytes = serde_json::to_vec_pretty(&image).map_err(|e| MetaError::Encode {
        key: META_FILE_NAME.into(),
        detail: e.to_string(),
    })?;
    let tmp = dir.join(TMP_FILE_NAME);
    let write = || -> std::io::Result<()> {
        // Mode 0600: the cluster state holds CHAP secrets.
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()
    };
    write().map_err(|e| MetaError::io(&tmp, e))?;
    let path = dir.join(META_FILE_NAME);
    fs::rename(&tmp, &path).map_err(|e| MetaError::io(&path, e))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| MetaError::io(dir, e))
}
