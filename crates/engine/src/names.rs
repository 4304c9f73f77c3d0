//! Names of volumes and snapshots, and finding them in the cluster state: what a name may
//! contain, `VOLUME@SNAPSHOT` full names and short names, and the lookups the catalog and the
//! host mappings share (see [`resolve_snapshot`]). Pure functions of the cluster state.

use crate::error::EngineError;
use crate::metastore::{ClusterState, SnapshotRecord};

/// Volume names and snapshots' short names: what an NBD export name and a URL path segment
/// can carry without escaping.
pub(crate) const NAME_MAX_BYTES: usize = 64;
/// Between a snapshot's volume and its short name: `pgdata@monday`.
pub const SNAPSHOT_SEPARATOR: char = '@';

/// A snapshot's own part of its name: `monday` of `pgdata@monday`; a snapshot made before
/// `VOLUME@SNAPSHOT` names has no `@`, and its short name is its whole name.
pub fn snapshot_short_name(name: &str) -> &str {
    name.split_once(SNAPSHOT_SEPARATOR)
        .map_or(name, |(_, short)| short)
}

/// The full name of a new snapshot of `volume` given as `monday` or `volume@monday`.
pub(crate) fn new_snapshot_name(volume: &str, name: &str) -> Result<String, EngineError> {
    let invalid = |reason: String| EngineError::InvalidSnapshotName {
        name: name.to_string(),
        reason,
    };
    let short = match name.split_once(SNAPSHOT_SEPARATOR) {
        None => name,
        Some((of, short)) if of == volume => short,
        Some((of, _)) => {
            return Err(invalid(format!(
                "it names volume {of:?}, not {volume:?}: give the snapshot's own name, or {volume}@NAME"
            )))
        }
    };
    check_name(short).map_err(|_| {
        invalid(format!(
            "give NAME or {volume}@NAME, NAME 1-{NAME_MAX_BYTES} characters from [A-Za-z0-9._-], not starting with '.' or '-'"
        ))
    })?;
    Ok(format!("{volume}{SNAPSHOT_SEPARATOR}{short}"))
}

/// A visible snapshot by name (see [`resolve_snapshot`]).
pub(crate) fn find_snapshot(
    state: &ClusterState,
    name: &str,
) -> Result<SnapshotRecord, EngineError> {
    resolve_snapshot(state, name, None)
}

/// A visible snapshot by the name a user gave:
/// 1. for a name without `@` and a volume `prefer` (rollback's and refresh's own volume),
///    `PREFER@name`;
/// 2. the snapshot with exactly that name: a full name, or a legacy snapshot's name;
/// 3. for a name without `@`, the one snapshot whose short name it is; several is an error
///    that lists them.
pub(crate) fn resolve_snapshot(
    state: &ClusterState,
    name: &str,
    prefer: Option<&str>,
) -> Result<SnapshotRecord, EngineError> {
    let visible = || state.snapshots.iter().filter(|s| !s.hidden);
    let exact = |n: &str| visible().find(|s| s.name == n).cloned();
    let bare = !name.contains(SNAPSHOT_SEPARATOR);
    if let Some(volume) = prefer.filter(|_| bare) {
        if let Some(s) = exact(&format!("{volume}{SNAPSHOT_SEPARATOR}{name}")) {
            return Ok(s);
        }
    }
    if let Some(s) = exact(name) {
        return Ok(s);
    }
    let unknown = || EngineError::UnknownSnapshot {
        name: name.to_string(),
    };
    if !bare {
        return Err(unknown());
    }
    let candidates: Vec<&SnapshotRecord> = visible()
        .filter(|s| snapshot_short_name(&s.name) == name)
        .collect();
    match candidates.as_slice() {
        [] => Err(unknown()),
        [one] => Ok((*one).clone()),
        many => {
            let mut candidates: Vec<String> = many.iter().map(|s| s.name.clone()).collect();
            candidates.sort();
            Err(EngineError::AmbiguousSnapshot {
                name: name.to_string(),
                candidates,
            })
        }
    }
}

/// A new snapshot's full name must not be a visible snapshot's. (It never is a volume's:
/// volume names have no `@`.)
pub(crate) fn check_snapshot_free(state: &ClusterState, name: &str) -> Result<(), EngineError> {
    if state.snapshots.iter().any(|s| s.name == name && !s.hidden) {
        return Err(EngineError::SnapshotExists {
            name: name.to_string(),
        });
    }
    Ok(())
}

/// A new volume's (or consistency group's) name must not be a volume's, nor a visible legacy
/// snapshot's (made before `VOLUME@SNAPSHOT` names): both are NBD export names; nor a
/// group's (`GROUP@SNAPSHOT` must name one thing).
pub(crate) fn check_free(state: &ClusterState, name: &str) -> Result<(), EngineError> {
    if state.volumes.iter().any(|v| v.name == name) {
        return Err(EngineError::VolumeExists {
            name: name.to_string(),
        });
    }
    if state.snapshots.iter().any(|s| s.name == name && !s.hidden) {
        return Err(EngineError::NameTaken {
            name: name.to_string(),
            by: "snapshot",
        });
    }
    if state.groups.iter().any(|g| g.name == name) {
        return Err(EngineError::NameTaken {
            name: name.to_string(),
            by: "consistency group",
        });
    }
    Ok(())
}

pub(crate) fn check_name(name: &str) -> Result<(), EngineError> {
    let ok = !name.is_empty()
        && name.len() <= NAME_MAX_BYTES
        && !name.starts_with(['.', '-'])
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(EngineError::InvalidName {
            name: name.to_string(),
        })
    }
}
