//! An iSCSI LUN as a benchmark target, driven by our own small initiator over the sans-IO
//! `weft-iscsi` (PDUs, login) and `weft-scsi` (CDBs, sense) crates:
//! `iscsi://[USER[%SECRET]@]HOST[:PORT]/TARGET-IQN/LUN[?initiator=IQN]`.
//!
//! Opening logs in once to ask the LUN what it is (INQUIRY, READ CAPACITY, Block Limits,
//! MODE SENSE), then logs out. Each queue is a session of its own (one connection) carrying
//! the queue's whole depth: READ(16) and WRITE(16) pipelined inside the target's command
//! window, writes with immediate data and R2T-solicited Data-Out. Queues log out when dropped.
//!
//! Modules: [`uri`] (the URI and its secret), [`connection`] (TCP and login), [`pipeline`]
//! (the sans-IO command pipeline), [`queue`] (the [`IoQueue`] over a socket), [`probe`]
//! (what the LUN is) and [`allocation`] (which blocks are mapped: GET LBA STATUS).
//!
//! Supported: CHAP (one-way, MD5), ImmediateData, InitialR2T=No, any MaxRecvDataSegmentLength,
//! burst lengths and window the target answers. Not supported: header and data digests,
//! mutual CHAP, several connections per session, error recovery levels above 0 (a lost
//! connection ends the run), redirection, discovery (name the target).

mod allocation;
mod connection;
mod pipeline;
mod probe;
mod queue;
mod uri;

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};

use allocation::IscsiAllocation;
use connection::open_session;
use queue::IscsiQueue;
use uri::{redact_uri, IscsiUri};

use crate::datagen::{DataGen, DataPattern};
use crate::target::{Allocation, IoQueue, Target, TargetError, TargetInfo, ISCSI_TARGET};

/// Largest single I/O when the target's Block Limits page gives no limit: 32 MiB, as for
/// NBD (each slot of a queue holds a buffer this large).
const IO_BYTES_MAX_DEFAULT: u32 = 32 << 20;
/// Seed of the probe session's (unused) write data.
const PROBE_SEED: u64 = 0;
/// The probe session's one slot: setup commands read at most a few hundred bytes.
const PROBE_IO_BYTES_MAX: u32 = 4096;

/// A LUN of an iSCSI target.
#[derive(Debug)]
pub(crate) struct IscsiTarget {
    addr: SocketAddr,
    addr_text: String,
    uri: IscsiUri,
    /// The 8-byte LUN field of every command.
    lun_field: u64,
    block_bytes: u32,
    /// The command window the target gave the probe session.
    window: u32,
    info: TargetInfo,
}

impl IscsiTarget {
    /// Resolves the URI, logs in once and asks the LUN what it is.
    pub(crate) fn open(uri_text: &str) -> Result<Self, TargetError> {
        let uri = IscsiUri::parse(uri_text)?;
        let addr_text = uri.addr_text();
        let addr = (uri.host.as_str(), uri.port)
            .to_socket_addrs()
            .map_err(|source| TargetError::Connect {
                peer: ISCSI_TARGET,
                addr: addr_text.clone(),
                source,
            })?
            .next()
            .ok_or_else(|| TargetError::Connect {
                peer: ISCSI_TARGET,
                addr: addr_text.clone(),
                source: io::Error::new(io::ErrorKind::NotFound, "host has no address"),
            })?;
        let lun_field = weft_scsi::encode_lun(uri.lun)
            .map(u64::from_be_bytes)
            .expect("the URI parser bounds the LUN");
        let session = open_session(&addr, &addr_text, &uri)?;
        let mut probe_queue = IscsiQueue::new(
            session,
            addr_text.clone(),
            lun_field,
            0,
            1,
            PROBE_IO_BYTES_MAX,
            DataGen::new(PROBE_SEED, DataPattern::default(), PROBE_SEED),
        );
        let window = probe_queue.window().max(1);
        let facts = probe::probe(&mut probe_queue)?.map_err(|reason| TargetError::UnusableLun {
            addr: addr_text.clone(),
            target: uri.target.clone(),
            lun: uri.lun,
            reason,
        })?;
        drop(probe_queue);
        let block_max = facts
            .transfer_max_bytes
            .unwrap_or(IO_BYTES_MAX_DEFAULT)
            .min(IO_BYTES_MAX_DEFAULT);
        Ok(IscsiTarget {
            addr,
            addr_text,
            lun_field,
            block_bytes: facts.block_bytes,
            window,
            info: TargetInfo {
                uri: redact_uri(uri_text),
                kind: "iscsi".to_string(),
                size_bytes: facts.size_bytes,
                block_size_min_bytes: facts.block_bytes,
                block_size_preferred_bytes: facts.physical_block_bytes,
                block_size_max_bytes: block_max.max(facts.block_bytes),
                read_only: facts.read_only,
                direct_io: None,
            },
            uri,
        })
    }
}

impl Target for IscsiTarget {
    fn info(&self) -> &TargetInfo {
        &self.info
    }

    /// The target's command window: deeper queues would only wait for it, so the runner
    /// opens more sessions instead.
    fn queue_depth_max(&self) -> u32 {
        self.window
    }

    fn open_queue(
        &self,
        depth: u32,
        io_bytes_max: u32,
        data: DataGen,
    ) -> Result<Box<dyn IoQueue>, TargetError> {
        let session = open_session(&self.addr, &self.addr_text, &self.uri)?;
        Ok(Box::new(IscsiQueue::new(
            session,
            self.addr_text.clone(),
            self.lun_field,
            self.block_bytes,
            depth,
            io_bytes_max,
            data,
        )))
    }

    /// A session of its own asking GET LBA STATUS; a LUN that refuses it cannot tell.
    fn allocation(&self) -> Result<Allocation, TargetError> {
        let session = open_session(&self.addr, &self.addr_text, &self.uri)?;
        let queue = IscsiQueue::new(
            session,
            self.addr_text.clone(),
            self.lun_field,
            self.block_bytes,
            1,
            allocation::LBA_STATUS_LEN_BYTES,
            DataGen::new(PROBE_SEED, DataPattern::default(), PROBE_SEED),
        );
        let mut probe = IscsiAllocation {
            queue,
            block_bytes: self.block_bytes,
            addr: self.addr_text.clone(),
        };
        Ok(match probe.ask(0)? {
            Ok(_) => Allocation::Known(Box::new(probe)),
            Err(why) => Allocation::Unknown(format!("the LUN cannot tell: {why}")),
        })
    }
}
