//! Taking checkpoints: drain trims, seal everything, copy the state copy-on-write under the
//! lock, encode and write it on a background thread; collect the writer, after which GC may
//! delete the segments it covers and the cluster state forgets the layer operations it covers.

use std::time::Instant;

use crate::checkpoint::{self, CheckpointRef, RedundancyText};
use crate::destage::destage_batch;
use crate::error::IoFailure;
use crate::seal::seal_all;
use crate::state::{CheckpointWritten, Shared};

/// Checkpoint and wait until it is durable.
pub(crate) fn take_checkpoint(shared: &Shared) -> Result<(), IoFailure> {
    take_checkpoint_with(shared, true)
}

/// Collect a background checkpoint write: wait for it (`block`) or only if it has finished.
/// Its stripes are durable; committing the new references to the cluster state makes it the
/// checkpoint recovery uses, after which GC may delete the segments it covers and the previous
/// generation's stripes go.
pub(crate) fn reap_checkpoint_writer(shared: &Shared, block: bool) -> Result<(), IoFailure> {
    let mut slot = shared.checkpoint_writer.lock();
    if !slot.as_ref().is_some_and(|h| block || h.is_finished()) {
        return Ok(());
    }
    let handle = slot.take().expect("checked above");
    drop(slot);
    let written = handle
        .join()
        .map_err(|_| IoFailure::disk("checkpoint", std::io::Error::other("writer panicked")))??;
    let old = {
        let mut meta = shared.meta.lock();
        let mut next = meta.state.clone();
        let mut old = Vec::new();
        for (fid, r) in &written.refs {
            // A family deleted while its checkpoint was written keeps no reference.
            if !next.volumes.iter().any(|v| v.family == *fid)
                && !next.snapshots.iter().any(|s| s.family == *fid)
            {
                old.push((*fid, *r));
                continue;
            }
            if let Some(prev) = next.checkpoints.insert(fid.0, *r) {
                old.push((*fid, prev));
            }
        }
        next.counters = written.counters;
        meta.commit(next)?;
        old
    };
    shared.stripes.note_missed_at_write(written.missed_at_write);
    for (fid, r) in old {
        for (segment, _) in r.parts() {
            if let Err(e) = shared.stripes.delete(fid.0, segment.0, r.redundancy.0) {
                tracing::warn!(family = fid.0, error = %e, "could not delete an old checkpoint stripe");
            }
        }
    }
    let mut st = shared.state.lock();
    for (fid, r) in &written.refs {
        st.segments.checkpoint_covers(*fid, r.segments_below);
    }
    st.layer_work.covered(written.covered);
    Ok(())
}

/// Remove layer operations a checkpoint covers from the cluster state's pending list (they
/// need no replay any more). Called with no lock held.
pub(crate) fn forget_covered_layer_ops(shared: &Shared) {
    let covered = shared.state.lock().layer_work.take_covered();
    if covered.is_empty() {
        return;
    }
    let mut meta = shared.meta.lock();
    let mut next = meta.state.clone();
    next.pending_layer_ops.retain(|op| !covered.contains(op));
    if next != meta.state {
        if let Err(e) = meta.commit(next) {
            tracing::warn!(error = %e, "could not trim the pending layer operations; they replay as no-ops");
        }
    }
}

/// Checkpoint: drain trims (so refcounts match maps), seal everything, copy the state under the
/// lock (maps and tables share their pages and chunks copy-on-write: a pointer each, the only
/// I/O pause it costs), then encode and write it on a background thread. With `wait` the
/// caller waits for the file; without, destage goes on and the writer is collected later.
pub(crate) fn take_checkpoint_with(shared: &Shared, wait: bool) -> Result<(), IoFailure> {
    // One checkpoint file write at a time.
    reap_checkpoint_writer(shared, true)?;
    let _gate = shared.range_gate.lock();
    while shared.state.lock().buffer.pending_ranges() > 0 {
        destage_batch(shared)?;
    }
    seal_all(shared)?;
    let started = Instant::now();
    let (images, covered) = {
        let mut st = shared.state.lock();
        if st.segments.sealing_count() > 0 {
            return Err(IoFailure::CorruptMetadata {
                what: "checkpoint".into(),
                detail: "stripes still being written".into(),
            });
        }
        let mut images = Vec::new();
        for f in st.families.values() {
            let next_segment = st.segment_ids.peek(f.id).unwrap_or(1);
            let sealed = st.segments.sealed_of(f.id);
            images.push((checkpoint::FamilyImage::of(f), next_segment, sealed));
        }
        st.segments.checkpoint_started();
        let covered = st.layer_work.take_applied();
        (images, covered)
    };
    let generations: Vec<u64> = {
        let meta = shared.meta.lock();
        images
            .iter()
            .map(|(f, _, _)| {
                meta.state
                    .checkpoints
                    .get(&f.id.0)
                    .map_or(1, |r| r.generation + 1)
            })
            .collect()
    };
    let counters = shared.counters.lifetime();
    let pause_us = started.elapsed().as_micros() as u64;
    let stripes = shared.stripes.clone();
    let write = move || -> Result<CheckpointWritten, IoFailure> {
        let mut refs = Vec::new();
        let mut bytes_total = 0;
        let mut missed_at_write = 0;
        for ((image, next_segment, sealed), generation) in images.into_iter().zip(generations) {
            let fid = image.id;
            let body = checkpoint::encode(next_segment, &image, &sealed);
            drop(image);
            let redundancy = stripes.placement().redundancy(fid.0);
            let mut at = 0usize;
            for (segment, len) in checkpoint::checkpoint_parts(generation, body.len() as u64) {
                let len = usize::try_from(len).expect("bounded part");
                missed_at_write +=
                    stripes.put(fid.0, segment.0, redundancy, &body[at..at + len])?;
                at += len;
            }
            bytes_total += body.len();
            refs.push((
                fid,
                CheckpointRef {
                    generation,
                    len_bytes: body.len() as u64,
                    crc32c: crc32c::crc32c(&body),
                    redundancy: RedundancyText(redundancy),
                    segments_below: next_segment,
                },
            ));
        }
        tracing::info!(
            bytes = bytes_total,
            families = refs.len(),
            pause_us,
            total_ms = started.elapsed().as_millis() as u64,
            "checkpoint written"
        );
        Ok(CheckpointWritten {
            refs,
            missed_at_write,
            counters,
            covered,
        })
    };
    let handle = std::thread::Builder::new()
        .name("weft-checkpoint".into())
        .spawn(write)
        .map_err(|e| IoFailure::disk("checkpoint thread", e))?;
    *shared.checkpoint_writer.lock() = Some(handle);
    if wait {
        reap_checkpoint_writer(shared, true)?;
    }
    Ok(())
}
