//! Start-up and recovery: cluster state, then the latest checkpoint, then the segments sealed
//! after it (in id order), then the journal records no sealed segment reflects. What comes out
//! is the state the engine had when it stopped, minus nothing that was acknowledged.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use crate::checkpoint::{self, SealedSegment};
use crate::chunk_store::{ChunkId, ChunkStore, LocalChunkStore};
use crate::engine::{Counters, EngineConfig, Shared, State, Volume};
use crate::error::{EngineError, IoFailure};
use crate::family::Family;
use crate::journal::{Journal, RecordKind};
use crate::metastore::MetaStore;
use crate::units::BLOCK_SIZE_BYTES;

pub(crate) fn recover(config: EngineConfig) -> Result<Shared, EngineError> {
    let started = Instant::now();
    let dir = &config.data_dir;
    let lock = lock_data_dir(dir)?;
    let meta_dir = dir.join("meta");
    let meta = MetaStore::open(&meta_dir)?;
    let store = Arc::new(LocalChunkStore::open(
        &dir.join("dnode0").join("chunks"),
        config.direct_io,
        config.capacity_bytes,
    )?);

    let image = checkpoint::load(&meta_dir)?.unwrap_or_default();
    let counters = Counters::restore(image.counters);
    let mut families: HashMap<_, _> = image.families.into_iter().map(|f| (f.id, f)).collect();
    let mut st = State {
        next_segment_id: image.next_segment_id,
        checkpoint_below: image.next_segment_id,
        ..State::default()
    };
    for record in &meta.state.volumes {
        let family = families
            .remove(&record.family)
            .unwrap_or_else(|| Family::new(record.family));
        st.families.insert(record.family, family);
        st.volumes.insert(
            record.id,
            Volume {
                record: record.clone(),
                gone: Arc::new(AtomicBool::new(false)),
            },
        );
    }
    st.sealed = image
        .sealed
        .into_iter()
        .filter(|(_, s)| st.families.contains_key(&s.family))
        .collect();

    // Replay segments sealed after the checkpoint; drop torn, orphaned and deleted ones.
    // Segments GC deleted after the checkpoint are gone: their blocks were relocated by
    // segments replayed below.
    let chunks = store.list()?;
    let present: std::collections::HashSet<_> = chunks.iter().map(|c| c.segment).collect();
    st.sealed.retain(|id, _| present.contains(id));
    let mut replayed = 0u64;
    for chunk in chunks {
        let id = chunk.segment;
        if id.0 < image.next_segment_id {
            if !st.sealed.contains_key(&id) {
                discard(
                    &*store,
                    chunk,
                    "not in the checkpoint (deleted volume or finished GC)",
                );
            }
            continue;
        }
        let Some((header, entries)) = crate::destage::read_summary(&*store, id)? else {
            discard(
                &*store,
                chunk,
                "torn: its writes are replayed from the journal",
            );
            continue;
        };
        let Some(family) = st.families.get_mut(&header.family) else {
            discard(&*store, chunk, "belongs to a deleted volume");
            continue;
        };
        family.replay(id, &entries);
        family.journal_hwm = family.journal_hwm.max(header.journal_hwm);
        let stored_bytes = std::fs::metadata(
            dir.join("dnode0")
                .join("chunks")
                .join(format!("{:016x}.0.chunk", id.0)),
        )
        .map_or(0, |m| m.len());
        let data_bytes =
            u64::from(header.data_end_bytes) - crate::segment::SEGMENT_HEADER_BYTES as u64;
        st.sealed.insert(
            id,
            SealedSegment {
                family: header.family,
                data_bytes,
                stored_bytes,
            },
        );
        st.next_segment_id = st.next_segment_id.max(id.0 + 1);
        replayed += 1;
    }
    let mut missing = 0;
    for f in st.families.values_mut() {
        f.table.rebuild_free_ids();
        missing += f
            .table
            .live_entries()
            .filter(|(_, e)| !st.sealed.contains_key(&e.location.segment))
            .count();
    }
    if missing > 0 {
        tracing::error!(
            blocks = missing,
            "blocks point at missing segments: reads of them fail with EIO"
        );
    }

    // Replay the journal after each family's high-water mark.
    let min_next_seq = st
        .families
        .values()
        .map(|f| f.journal_hwm + 1)
        .max()
        .unwrap_or(1);
    let (journal, records) = Journal::open(&dir.join("journal"), min_next_seq, config.journal)?;
    let mut replayed_records = 0u64;
    let mut first_pending = None;
    for r in records {
        let Some(v) = st.volumes.get(&r.volume) else {
            continue;
        };
        let Some(f) = st.families.get(&v.record.family) else {
            continue;
        };
        if r.seq <= f.journal_hwm {
            continue;
        }
        first_pending.get_or_insert(r.seq);
        replayed_records += 1;
        match r.kind {
            RecordKind::Write => {
                if r.payload.len() as u64 != r.count * BLOCK_SIZE_BYTES as u64 {
                    tracing::error!(
                        seq = r.seq,
                        "journal record length does not match its block count; skipped"
                    );
                    continue;
                }
                st.buffer
                    .push_write(r.seq, r.volume, r.lba, r.payload.into());
            }
            kind => crate::destage::buffer_range(&mut st, r.seq, r.volume, r.lba, r.count, kind),
        }
    }
    st.processed_seq = match first_pending {
        Some(first) => first - 1,
        None => journal.written_seq(),
    };
    tracing::info!(
        volumes = st.volumes.len(),
        segments_replayed = replayed,
        journal_records_replayed = replayed_records,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "recovered"
    );
    Ok(Shared {
        config,
        meta: Mutex::new(meta),
        range_gate: Mutex::new(()),
        journal,
        store,
        state: Mutex::new(st),
        work: Condvar::new(),
        space: Condvar::new(),
        seal_work: Condvar::new(),
        sealed: Condvar::new(),
        stop_sealer: AtomicBool::new(false),
        checkpoint_writer: Mutex::new(None),
        commands: Mutex::new(Vec::new()),
        shutdown: AtomicBool::new(false),
        abandon: AtomicBool::new(false),
        counters,
        _data_dir_lock: lock,
    })
}

/// Only one engine may use a data dir: a second process would write the same segment ids and
/// journal files. The lock is released when the process exits, however it exits.
fn lock_data_dir(dir: &std::path::Path) -> Result<std::fs::File, EngineError> {
    let path = dir.join("lock");
    std::fs::create_dir_all(dir).map_err(|e| IoFailure::disk(dir.display().to_string(), e))?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| IoFailure::disk(path.display().to_string(), e))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(EngineError::DataDirInUse {
            path: dir.display().to_string(),
        }),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(IoFailure::disk(path.display().to_string(), e).into())
        }
    }
}

fn discard(store: &dyn ChunkStore, chunk: ChunkId, why: &str) {
    tracing::warn!(segment = chunk.segment.0, why, "discarding segment");
    if let Err(e) = store.delete(chunk) {
        tracing::warn!(segment = chunk.segment.0, error = %e, "could not delete segment");
    }
}
