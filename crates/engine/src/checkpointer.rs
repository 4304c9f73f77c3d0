//! Taking checkpoints: drain trims, seal everything, copy the state copy-on-write under the
//! lock, encode and write it on a background thread; collect the writer, after which GC may
//! delete the segments it covers and the cluster state forgets the layer operations it covers.

use std::time::Instant;

use crate::checkpoint::{self};
use crate::destage::destage_batch;
use crate::error::IoFailure;
use crate::seal::seal_all;
use crate::state::Shared;

/// Checkpoint and wait until it is durable.
pub(crate) fn take_checkpoint(shared: &Shared) -> Result<(), IoFailure> {
    take_checkpoint_with(shared, true)
}

/// Collect a background checkpoint write: wait for it (`block`) or only if it has finished.
/// Once it is durable, GC may delete the segments it covers.
pub(crate) fn reap_checkpoint_writer(shared: &Shared, block: bool) -> Result<(), IoFailure> {
    let mut slot = shared.checkpoint_writer.lock();
    if !slot.as_ref().is_some_and(|h| block || h.is_finished()) {
        return Ok(());
    }
    let handle = slot.take().expect("checked above");
    drop(slot);
    let (below, covered) = handle
        .join()
        .map_err(|_| IoFailure::disk("checkpoint", std::io::Error::other("writer panicked")))??;
    let mut st = shared.state.lock();
    st.checkpoint_below = st.checkpoint_below.max(below);
    st.covered_layer_ops.extend(covered);
    Ok(())
}

/// Remove layer operations a checkpoint covers from the cluster state's pending list (they
/// need no replay any more). Called with no lock held.
pub(crate) fn forget_covered_layer_ops(shared: &Shared) {
    let covered = std::mem::take(&mut shared.state.lock().covered_layer_ops);
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
    let (images, sealed, next_segment_id, covered) = {
        let mut st = shared.state.lock();
        if !st.sealing.is_empty() {
            return Err(IoFailure::CorruptMetadata {
                what: "checkpoint".into(),
                detail: "stripes still being written".into(),
            });
        }
        let images: Vec<checkpoint::FamilyImage> = st
            .families
            .values()
            .map(checkpoint::FamilyImage::of)
            .collect();
        st.sealed_bytes_since_checkpoint = 0;
        let covered = std::mem::take(&mut st.applied_layer_ops);
        (images, st.sealed.clone(), st.next_segment_id, covered)
    };
    let counters = shared.counters.lifetime();
    let pause_us = started.elapsed().as_micros() as u64;
    let dir = shared.config.data_dir.join("meta");
    let write = move || -> Result<crate::state::CheckpointCovers, IoFailure> {
        let body = checkpoint::encode(next_segment_id, &images, &sealed, counters);
        let encode_ms = started.elapsed().as_millis() as u64;
        drop(images);
        checkpoint::store(&dir, &body)?;
        tracing::info!(
            bytes = body.len(),
            segments_below = next_segment_id,
            pause_us,
            encode_ms,
            total_ms = started.elapsed().as_millis() as u64,
            "checkpoint written"
        );
        Ok((next_segment_id, covered))
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
