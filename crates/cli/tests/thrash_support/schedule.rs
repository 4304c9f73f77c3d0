//! Which fault comes next: a deck holding every kind of fault (some more than once) is
//! shuffled with the run's rng and played in order, then shuffled again; so every kind comes
//! up early in a run (a five-minute run plays most of one deck) and a seed replays the same
//! order. `WEFT_THRASH_FAULTS=KillCnode,CnodeRestartBeyondM` keeps only those kinds (the names
//! of [`Fault`]).

use std::time::Instant;

use rand::seq::SliceRandom;

use crate::thrash_support::thrasher::Thrasher;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    KillDnodes,
    KillBeyondM,
    CnodeRestartBeyondM,
    KillCnode,
    KillDuringRepair,
    StopDnode,
    EtcdRestart,
    CorruptChunks,
    OutIn,
    Maintenance,
    DiskFull,
    Network,
    Snapshot,
    Fio,
}

/// Each kind and how many times it is in a deck.
const DECK: &[(Fault, usize)] = &[
    (Fault::KillDnodes, 3),
    (Fault::KillBeyondM, 1),
    (Fault::CnodeRestartBeyondM, 1),
    (Fault::KillCnode, 2),
    (Fault::KillDuringRepair, 1),
    (Fault::StopDnode, 1),
    (Fault::EtcdRestart, 1),
    (Fault::CorruptChunks, 1),
    (Fault::OutIn, 1),
    (Fault::Maintenance, 2),
    (Fault::DiskFull, 1),
    (Fault::Network, 2),
    (Fault::Snapshot, 2),
    (Fault::Fio, 1),
];

impl Thrasher {
    /// Plays faults until the time (`WEFT_THRASH_SECS`) or the count (`WEFT_THRASH_EVENTS`)
    /// is reached; each fault ends healed.
    pub fn run(&mut self) {
        let start = Instant::now();
        let mut deck: Vec<Fault> = Vec::new();
        loop {
            if start.elapsed().as_secs() >= self.cfg.secs
                || self.cfg.events_max.is_some_and(|n| self.faults >= n)
            {
                break;
            }
            if deck.is_empty() {
                deck = DECK
                    .iter()
                    .filter(|(f, _)| {
                        self.cfg
                            .only
                            .as_ref()
                            .is_none_or(|o| o.contains(&format!("{f:?}")))
                    })
                    .flat_map(|&(f, n)| std::iter::repeat_n(f, n))
                    .collect();
                assert!(
                    !deck.is_empty(),
                    "WEFT_THRASH_FAULTS names no fault of {DECK:?}"
                );
                deck.shuffle(&mut self.rng);
                deck.reverse();
            }
            let f = deck.pop().expect("refilled");
            self.faults += 1;
            self.log
                .record("FAULT", &format!("#{}", self.faults), &format!("{f:?}"));
            self.play(f);
            self.heal();
            self.assert_no_problems(&format!("fault #{} {f:?}", self.faults));
        }
    }

    fn play(&mut self, f: Fault) {
        match f {
            Fault::KillDnodes => self.fault_kill_dnodes(),
            Fault::KillBeyondM => self.fault_kill_beyond_m(),
            Fault::CnodeRestartBeyondM => self.fault_cnode_restart_beyond_m(),
            Fault::KillCnode => self.fault_kill_cnode(),
            Fault::KillDuringRepair => self.fault_kill_during_repair(),
            Fault::StopDnode => self.fault_stop_dnode(),
            Fault::EtcdRestart => self.fault_etcd_restart(),
            Fault::CorruptChunks => self.fault_corrupt_chunks(),
            Fault::OutIn => self.fault_out_in(),
            Fault::Maintenance => self.fault_maintenance(),
            Fault::DiskFull => self.fault_disk_full(),
            Fault::Network => self.fault_network(),
            Fault::Snapshot => self.fault_snapshot(),
            Fault::Fio => self.fault_fio(),
        }
    }
}
