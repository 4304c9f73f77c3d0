//! Typed access on top of any [`MetaStore`]: values stored as JSON, and a read-modify-write
//! loop (`update_json`) that retries its compare-and-swap when another writer got there first.

use std::time::Duration;

use rand::Rng as _;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{LeaseId, MetaError, MetaStore, Revision};

/// How many times [`update_json`] tries before giving up with [`MetaError::Contended`].
pub const UPDATE_ATTEMPTS_MAX: u32 = 16;
/// Upper bound of the random pause between two [`update_json`] attempts, times the attempt number.
const UPDATE_BACKOFF_STEP_MAX: Duration = Duration::from_millis(2);

fn decode<T: DeserializeOwned>(key: &str, bytes: &[u8]) -> Result<T, MetaError> {
    serde_json::from_slice(bytes).map_err(|e| MetaError::Decode {
        key: key.into(),
        type_name: std::any::type_name::<T>(),
        detail: e.to_string(),
    })
}

fn encode<T: Serialize>(key: &str, value: &T) -> Result<Vec<u8>, MetaError> {
    serde_json::to_vec(value).map_err(|e| MetaError::Encode {
        key: key.into(),
        detail: e.to_string(),
    })
}

/// The value of `key` decoded from JSON, with its mod revision; None if absent.
pub fn get_json<T: DeserializeOwned>(
    store: &(impl MetaStore + ?Sized),
    key: &str,
) -> Result<Option<(T, Revision)>, MetaError> {
    match store.get(key)? {
        Some(v) => Ok(Some((decode(key, &v.value)?, v.mod_revision))),
        None => Ok(None),
    }
}

/// Every key under `prefix` with its value decoded from JSON and its mod revision, by key.
pub fn list_json<T: DeserializeOwned>(
    store: &(impl MetaStore + ?Sized),
    prefix: &str,
) -> Result<Vec<(String, T, Revision)>, MetaError> {
    store
        .list(prefix)?
        .into_iter()
        .map(|(k, v)| {
            let value = decode(&k, &v.value)?;
            Ok((k, value, v.mod_revision))
        })
        .collect()
}

/// Store `value` as JSON if `key`'s mod revision is `expected` (0: only if absent); returns the
/// new revision, or [`MetaError::Conflict`].
pub fn cas_json<T: Serialize>(
    store: &(impl MetaStore + ?Sized),
    key: &str,
    expected: Revision,
    value: &T,
    lease: Option<LeaseId>,
) -> Result<Revision, MetaError> {
    store.compare_and_put(key, expected, &encode(key, value)?, lease)
}

/// Read-modify-write: `f` gets the current value (None if absent) and returns the new one, which
/// is stored with a compare-and-swap; on a conflict the loop re-reads and calls `f` again, up to
/// [`UPDATE_ATTEMPTS_MAX`] times ([`MetaError::Contended`] after that). An error from `f` ends
/// the loop and is returned as is. The key is written without a lease.
///
/// Returns the stored value and its revision.
pub fn update_json<T, E, F>(
    store: &(impl MetaStore + ?Sized),
    key: &str,
    mut f: F,
) -> Result<(T, Revision), E>
where
    T: Serialize + DeserializeOwned,
    E: From<MetaError>,
    F: FnMut(Option<T>) -> Result<T, E>,
{
    for attempt in 1..=UPDATE_ATTEMPTS_MAX {
        let (current, expected) = match get_json::<T>(store, key)? {
            Some((value, rev)) => (Some(value), rev),
            None => (None, 0),
        };
        let next = f(current)?;
        match cas_json(store, key, expected, &next, None) {
            Ok(rev) => return Ok((next, rev)),
            Err(MetaError::Conflict { .. }) => {
                let step_us = u64::try_from(UPDATE_BACKOFF_STEP_MAX.as_micros()).unwrap_or(0);
                let pause_us = rand::rng().random_range(0..=step_us * u64::from(attempt));
                std::thread::sleep(Duration::from_micros(pause_us));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(MetaError::Contended {
        key: key.into(),
        attempts: UPDATE_ATTEMPTS_MAX,
    }
    .into())
}
