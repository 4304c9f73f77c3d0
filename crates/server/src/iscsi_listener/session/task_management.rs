//! Task management: ABORT TASK, ABORT TASK SET, CLEAR TASK SET, LUN RESET and TARGET WARM
//! RESET, and the waits they share with logout (for executing commands to be answered, and
//! forgetting the writes still gathering data).

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tracing::warn;
use weft_iscsi::request::TaskManagement;
use weft_iscsi::wire::*;

use super::dispatch::{lun_number, Lun};
use super::Reader;

impl Reader<'_> {
    /// A task still waiting for its data is dropped ("function complete"); one already
    /// executing cannot be stopped half way through a write, so the answer waits until it
    /// is done and its response is out, then says the task does not exist (what libiscsi's
    /// tests expect of a task that completed before the abort).
    pub(super) async fn task_management(&mut self, tm: &TaskManagement) -> u8 {
        match tm.function {
            TMF_ABORT_TASK => {
                if self.pending.remove(&tm.referenced_itt).is_some() {
                    self.shared.sequence.lock().task_finished();
                    return TMF_RESPONSE_COMPLETE;
                }
                // Executing, or already answered: its response is (or will be) out before
                // ours, and the task is gone by the time the initiator reads this.
                self.wait_answered(|executing| executing.contains(&tm.referenced_itt))
                    .await;
                TMF_RESPONSE_NO_TASK
            }
            TMF_ABORT_TASK_SET | TMF_CLEAR_TASK_SET | TMF_LUN_RESET | TMF_TARGET_WARM_RESET => {
                self.refresh_luns();
                let lun = self.luns.get(&lun_number(tm.lun)).cloned();
                if tm.function != TMF_TARGET_WARM_RESET && lun.is_none() {
                    return TMF_RESPONSE_NO_LUN;
                }
                self.drop_pending();
                self.wait_answered(|executing| !executing.is_empty()).await;
                let reset: Vec<Arc<Lun>> = match tm.function {
                    TMF_LUN_RESET => lun.into_iter().collect(),
                    TMF_TARGET_WARM_RESET => self.luns.values().cloned().collect(),
                    _ => Vec::new(),
                };
                for lun in &reset {
                    lun.shared.resets.fetch_add(1, Ordering::AcqRel);
                }
                // A reset releases RESERVE(6) reservations, not persistent ones (SPC-4
                // 5.13.1), and is stored as news for the other c.nodes' sessions, answered
                // once they heard it. Releasing waits for other sessions' commands on the
                // LU and for the other c.nodes, so it runs off the async threads.
                if !reset.is_empty() {
                    let _ = tokio::task::spawn_blocking(move || {
                        for lun in reset {
                            if let Err(sense) = lun.shared.state.logical_unit_reset() {
                                warn!(export = %lun.export, ?sense, "a LU reset reached neither the reservation record nor the other c.nodes");
                            }
                        }
                    })
                    .await;
                }
                TMF_RESPONSE_COMPLETE
            }
            other => {
                warn!(function = other, "task management function not supported");
                TMF_RESPONSE_NOT_SUPPORTED
            }
        }
    }

    /// Wait while `busy` holds for the set of executing tasks.
    pub(super) async fn wait_answered(&self, busy: impl Fn(&HashSet<u32>) -> bool) {
        loop {
            let answered = self.shared.answered.notified();
            tokio::pin!(answered);
            answered.as_mut().enable();
            if !busy(&self.shared.executing.lock()) {
                return;
            }
            answered.await;
        }
    }

    /// Forget the writes still waiting for data (aborted: no response is owed).
    pub(super) fn drop_pending(&mut self) {
        let dropped = self.pending.len();
        self.pending.clear();
        let mut sequence = self.shared.sequence.lock();
        for _ in 0..dropped {
            sequence.task_finished();
        }
    }
}
