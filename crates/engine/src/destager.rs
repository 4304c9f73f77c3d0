//! The destager thread's loop: destage batches, seal idle segments, run checkpoints and GC
//! when due, and execute maintenance commands (sync, gc, checkpoint) from API calls. It is the
//! one thread that changes maps and refcounts, so that replay can repeat the same order.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::checkpointer::{
    forget_covered_layer_ops, reap_checkpoint_writer, take_checkpoint, take_checkpoint_with,
};
use crate::destage::{destage_batch, drain};
use crate::gc::{
    collect_garbage, GC_MOVE_PER_RUN_BYTES_MAX, GC_MOVE_UNDER_LOAD_BYTES_MAX,
    GC_PRESSED_INTERVAL_MS, GC_PRESSED_LIVE_FRACTION_MAX, GC_PRESSED_MOVE_BYTES_MAX,
    GC_SPACE_PRESSURE_MIN, GC_UNDER_LOAD_SPACE_AMPLIFICATION_MIN,
};
use crate::seal::{seal_all, seal_open, IDLE_WAIT, SEAL_RETRY_INTERVAL};
use crate::state::{Command, Shared};

/// The destager thread's loop.
pub(crate) fn run(shared: &Shared) {
    let mut last_activity = Instant::now();
    let mut last_gc = Instant::now();
    let mut last_seal_failure: Option<Instant> = None;
    loop {
        if shared.abandon.load(Ordering::Acquire) {
            return;
        }
        let commands: Vec<Command> = std::mem::take(&mut *shared.commands.lock());
        for command in commands {
            execute(shared, command);
        }
        if let Some(at) = last_seal_failure {
            // The sealer retries the failed stripe; destage resumes once it succeeds.
            if at.elapsed() < SEAL_RETRY_INTERVAL && !shared.shutdown.load(Ordering::Acquire) {
                std::thread::sleep(IDLE_WAIT);
                continue;
            }
            last_seal_failure = None;
        }
        let did = match destage_batch(shared) {
            Ok(n) => n,
            Err(e) => {
                if shared.shutdown.load(Ordering::Acquire) {
                    // Stopping while stripes cannot be written: what is not in stripes is in
                    // the journal (write-through writes waiting for a stripe were refused).
                    tracing::error!(error = %e, "stopping with stripe writes failing; the next start replays the journal");
                    return;
                }
                tracing::error!(error = %e, "stripe write failed; retrying (journaled writes are still acknowledged; writes that must wait for a stripe, write-through or a full write buffer, get ENOSPC/EIO until it succeeds)");
                last_seal_failure = Some(Instant::now());
                continue;
            }
        };
        if did > 0 {
            last_activity = Instant::now();
            shared.space.notify_all();
        } else if shared.write_through_waiting.load(Ordering::Acquire) > 0 {
            // Writers wait for their blocks to be in a written stripe: seal what is open now
            // rather than when the segment fills.
            if let Err(e) = seal_open(shared) {
                tracing::error!(error = %e, "seal for write-through failed");
                last_seal_failure = Some(Instant::now());
                continue;
            }
        } else if last_activity.elapsed() >= Duration::from_millis(shared.config.idle_seal_ms) {
            // Idle: seal open segments so their data is in stripes and the journal can go.
            if let Err(e) = seal_all(shared) {
                tracing::error!(error = %e, "idle seal failed");
                last_seal_failure = Some(Instant::now());
                continue;
            }
        }
        // Checkpoints and GC run under load too, not only when idle: a busy datastore must
        // not fill with garbage or grow its replay without bound.
        if let Err(e) = reap_checkpoint_writer(shared, false) {
            tracing::error!(error = %e, "checkpoint failed");
        }
        forget_covered_layer_ops(shared);
        let (capacity, used) = shared.stripes.space();
        let (due, busy, amplification) = {
            let st = shared.state.lock();
            let live: u64 = st.families.values().map(|f| f.table.stored_bytes()).sum();
            let amplification = used as f64 / live.max(1) as f64;
            (
                st.segments.bytes_since_checkpoint() >= shared.config.checkpoint_every_bytes,
                did > 0 || !st.buffer.is_empty(),
                amplification,
            )
        };
        let pressed = shared.space_wanted.load(Ordering::Acquire)
            || capacity.is_some_and(|c| used as f64 >= GC_SPACE_PRESSURE_MIN * c as f64);
        if due {
            // Under load the file is written in the background; destage goes on.
            if let Err(e) = take_checkpoint_with(shared, !busy) {
                tracing::error!(error = %e, "checkpoint failed");
            }
        }
        let gc_interval_ms = if pressed {
            GC_PRESSED_INTERVAL_MS.min(shared.config.gc_interval_ms)
        } else {
            shared.config.gc_interval_ms
        };
        if last_gc.elapsed() >= Duration::from_millis(gc_interval_ms) {
            last_gc = Instant::now();
            let live_fraction_max = shared.config.gc_live_fraction_max;
            let plan = if pressed {
                Some((
                    live_fraction_max.max(GC_PRESSED_LIVE_FRACTION_MAX),
                    GC_PRESSED_MOVE_BYTES_MAX,
                ))
            } else if !busy {
                Some((live_fraction_max, GC_MOVE_PER_RUN_BYTES_MAX))
            } else if amplification >= GC_UNDER_LOAD_SPACE_AMPLIFICATION_MIN {
                Some((live_fraction_max, GC_MOVE_UNDER_LOAD_BYTES_MAX))
            } else {
                None
            };
            if let Some((fraction_max, budget)) = plan {
                match collect_garbage(shared, fraction_max, budget, pressed) {
                    Ok(report) if report.bytes_reclaimed > 0 => {
                        shared.space.notify_all();
                    }
                    Ok(_) => {}
                    Err(e) => tracing::error!(error = %e, "gc failed"),
                }
            }
        }
        if shared.shutdown.load(Ordering::Acquire) {
            let drained = shared.state.lock().buffer.is_empty();
            if drained {
                if let Err(e) = seal_all(shared).and_then(|()| take_checkpoint(shared)) {
                    tracing::error!(error = %e, "final checkpoint failed; the next start replays the journal");
                }
                return;
            }
            continue;
        }
        if did > 0 {
            continue;
        }
        let mut st = shared.state.lock();
        if st.buffer.is_empty() && shared.commands.lock().is_empty() {
            st.wait_for(&shared.work, IDLE_WAIT);
        }
    }
}

fn execute(shared: &Shared, command: Command) {
    match command {
        Command::Sync(reply) => {
            let result = drain(shared).and_then(|()| seal_all(shared));
            let _ = reply.send(result.map_err(|e| e.to_string()));
        }
        Command::Gc(reply) => {
            let result = take_checkpoint(shared)
                .and_then(|()| collect_garbage(shared, 1.0, GC_MOVE_PER_RUN_BYTES_MAX, false));
            let _ = reply.send(result.map_err(|e| e.to_string()));
        }
        Command::Checkpoint(reply) => {
            let result = drain(shared).and_then(|()| take_checkpoint(shared));
            let _ = reply.send(result.map_err(|e| e.to_string()));
        }
    }
}
