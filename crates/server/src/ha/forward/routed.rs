//! The export backend of a c.node in a cluster: its own engine once it owns the cluster, and
//! until then the owner's, reached through the forward listener. Front ends start on it before
//! the c.node owns anything, so a standby serves every volume from its start.
//!
//! A forwarded request whose owner dies (its connection fails, or etcd names another owner)
//! is sent again: to the next owner, or to this c.node's own engine once this c.node took the
//! cluster over. Clients see a pause of about the failover time, not an error, unless no owner
//! answers within the retry window. Sending a request again is safe: the old owner lost its
//! lease, so it acknowledges nothing more, and a write carries its whole data. One exception:
//! a COMPARE AND WRITE the old owner applied but did not answer reports a miscompare when sent
//! again (the medium holds its new data), as after a path failure on any multipath array.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::client::{ForwardConn, Lost, OpenFailed};
pub use super::local::LocalSlot;
use super::view::ClusterView;
use super::wire::{self, Answer, Op};
use crate::backend::{
    AccessTable, ExportBackend, ExportHandle, ExportInfo, ExportIoError, ExtentStatus, OpenError,
};

/// Added to the engine's hosts generation once the engine serves, so front ends rebuild their
/// LUN maps once at the switch (the forwarder's generations count from 1).
const LOCAL_GENERATION_BASE: u64 = 1 << 40;
/// How often a waiting request looks for an owner again.
const RETRY_INTERVAL: Duration = Duration::from_millis(100);

/// Where requests go, shared by every forwarded export.
#[derive(Debug)]
struct Route {
    local: Arc<LocalSlot>,
    view: Arc<ClusterView>,
    hello: wire::Hello,
    /// How long a request may wait for an owner to answer it.
    retry_for: Duration,
    /// A c.node that has not read etcd for this long stops forwarding: its access rules and
    /// cached reservations may be stale, and other c.nodes stop waiting for it to apply a
    /// reservation change once its registration lapses (half a lease time after that at the
    /// earliest).
    stale_after: Duration,
    /// The slot may be cleared (a shard this process owns besides its own, given up while
    /// it runs): exports are opened as routed handles even while it is set, so they switch
    /// back to forwarding when it is.
    releasable: bool,
}

/// See the module doc.
#[derive(Debug, Clone)]
pub struct RoutedBackend {
    route: Arc<Route>,
}

impl RoutedBackend {
    /// `me`: this c.node's id; `secret`: the cluster's forwarding secret.
    pub fn new(
        local: Arc<LocalSlot>,
        view: Arc<ClusterView>,
        me: String,
        secret: String,
        retry_for: Duration,
        stale_after: Duration,
    ) -> RoutedBackend {
        RoutedBackend {
            route: Arc::new(Route {
                local,
                view,
                hello: wire::Hello { secret, cnode: me },
                retry_for,
                stale_after,
                releasable: false,
            }),
        }
    }

    /// The same, for a shard whose slot may be cleared (see `Route::releasable`).
    pub fn releasable(
        local: Arc<LocalSlot>,
        view: Arc<ClusterView>,
        me: String,
        secret: String,
        retry_for: Duration,
        stale_after: Duration,
    ) -> RoutedBackend {
        let mut b = RoutedBackend::new(local, view, me, secret, retry_for, stale_after);
        Arc::get_mut(&mut b.route)
            .expect("a new route is not shared")
            .releasable = true;
        b
    }
}

impl ExportBackend for RoutedBackend {
    fn list_exports(&self) -> Vec<ExportInfo> {
        match self.route.local.get() {
            Some(local) => local.list_exports(),
            None => self.route.view.now().exports.clone(),
        }
    }

    fn open(&self, name: &str) -> Result<Arc<dyn ExportHandle>, OpenError> {
        let info = match self.route.local.get() {
            Some(local) if !self.route.releasable => return local.open(name),
            // Served here for now: its info from the engine, its requests routed each time.
            Some(local) => local.open(name)?.info(),
            None => self
                .route
                .view
                .now()
                .exports
                .iter()
                .find(|e| e.name == name)
                .cloned()
                .ok_or_else(|| OpenError::UnknownExport {
                    name: name.to_string(),
                })?,
        };
        Ok(Arc::new(ForwardedExport {
            route: Arc::clone(&self.route),
            info: Mutex::new(info),
            conn: Mutex::new(None),
            local: Mutex::new(None),
            gone: AtomicBool::new(false),
            said: AtomicBool::new(false),
        }))
    }

    fn access(&self) -> Arc<AccessTable> {
        match self.route.local.get() {
            Some(local) => local.access(),
            None => Arc::clone(&self.route.view.now().access),
        }
    }

    fn access_generation(&self) -> u64 {
        match self.route.local.get() {
            Some(local) => LOCAL_GENERATION_BASE + local.access_generation(),
            None => self.route.view.now().access.generation,
        }
    }
}

/// An export opened while another c.node owned the cluster.
struct ForwardedExport {
    route: Arc<Route>,
    /// As listed when opened, then as the owner described it.
    info: Mutex<ExportInfo>,
    conn: Mutex<Option<Arc<ForwardConn>>>,
    /// The same export on this c.node's engine, once this c.node took the shard over, with
    /// the slot generation it was opened at (stale once the slot changed).
    local: Mutex<Option<(u64, Arc<dyn ExportHandle>)>>,
    gone: AtomicBool,
    /// A lost owner was logged for this export (once per outage).
    said: AtomicBool,
}

enum Target {
    Local(Arc<dyn ExportHandle>),
    Owner(Arc<ForwardConn>),
    /// No owner to send to yet: why.
    Nobody(String),
}

impl ForwardedExport {
    fn name(&self) -> String {
        self.info.lock().name.clone()
    }

    /// The local handle, if it is of the slot's current generation.
    fn local_handle(&self) -> Option<Arc<dyn ExportHandle>> {
        let generation = self.route.local.generation();
        match &*self.local.lock() {
            Some((g, h)) if *g == generation => Some(Arc::clone(h)),
            _ => None,
        }
    }

    /// Where a request goes now. Called inside [`LocalSlot::enter`].
    fn target(&self) -> Result<Target, ExportIoError> {
        if let Some(h) = self.local_handle() {
            return Ok(Target::Local(h));
        }
        let generation = self.route.local.generation();
        if let Some(local) = self.route.local.get() {
            let handle = local.open(&self.name()).map_err(|_| {
                self.gone.store(true, Ordering::Release);
                ExportIoError::Gone
            })?;
            self.kill_connection();
            *self.local.lock() = Some((generation, Arc::clone(&handle)));
            return Ok(Target::Local(handle));
        }
        // The slot was cleared (this c.node gave the shard up): forward again.
        self.local.lock().take();
        let stale = self.route.view.unread_for();
        if stale > self.route.stale_after {
            self.kill_connection();
            return Ok(Target::Nobody(format!(
                "this c.node has not reached etcd for {stale:?}: its access rules and reservations may be stale"
            )));
        }
        let mut conn = self.conn.lock();
        if let Some(c) = conn.as_ref().filter(|c| !c.is_dead()) {
            return Ok(Target::Owner(Arc::clone(c)));
        }
        let Some(owner) = self.route.view.now().owner.clone() else {
            return Ok(Target::Nobody("no c.node owns the cluster".into()));
        };
        if owner.id == self.route.hello.cnode {
            return Ok(Target::Nobody(
                "this c.node is taking the cluster over".into(),
            ));
        }
        if owner.forward.is_empty() {
            return Ok(Target::Nobody(format!(
                "the owner c.node {} has no forward listener",
                owner.id
            )));
        }
        let open = wire::Open {
            export: self.name(),
        };
        match ForwardConn::open(&owner.forward, &self.route.hello, &open) {
            Ok(c) => {
                *self.info.lock() = c.info.clone();
                let c = Arc::new(c);
                *conn = Some(Arc::clone(&c));
                Ok(Target::Owner(c))
            }
            Err(OpenFailed::Refused(why)) if why.contains("no export named") => {
                self.gone.store(true, Ordering::Release);
                Err(ExportIoError::Gone)
            }
            Err(OpenFailed::Refused(why) | OpenFailed::Unreachable(why)) => Ok(Target::Nobody(
                format!("the owner c.node {} at {}: {why}", owner.id, owner.forward),
            )),
        }
    }

    fn kill_connection(&self) {
        if let Some(c) = self.conn.lock().take() {
            c.kill();
        }
    }

    /// Run a request where it belongs, again elsewhere when its owner goes.
    fn run(
        &self,
        op: Op,
        flags: u8,
        offset_bytes: u64,
        length_bytes: u64,
        data: &[u8],
        local: &dyn Fn(&dyn ExportHandle) -> Result<Answer, ExportIoError>,
    ) -> Result<Answer, ExportIoError> {
        let deadline = Instant::now() + self.route.retry_for;
        loop {
            // Counted while it may run on this c.node's engine, never while it waits for an
            // owner: giving the shard up waits for these, and the next owner for that.
            let entered = self.route.local.enter();
            let target = self.target()?;
            if let Target::Local(h) = &target {
                return local(&**h);
            }
            drop(entered);
            let why = match target {
                Target::Local(_) => unreachable!("answered above"),
                Target::Owner(conn) => {
                    let owner = conn.owner.clone();
                    let give_up = || {
                        self.route.local.is_set()
                            || self.route.view.now().owner.as_ref().map(|o| &o.id) != Some(&owner)
                    };
                    match conn.call(op, flags, offset_bytes, length_bytes, data, &give_up) {
                        Ok(Err(ExportIoError::Gone)) => {
                            self.gone.store(true, Ordering::Release);
                            return Err(ExportIoError::Gone);
                        }
                        Ok(answer) => {
                            if self.said.swap(false, Ordering::Relaxed) {
                                tracing::info!(export = %self.name(), %owner, "forwarding to the owner c.node again");
                            }
                            return answer;
                        }
                        Err(Lost::GaveUp) => {
                            conn.kill();
                            format!("the owner c.node {owner} lost the cluster")
                        }
                        Err(Lost::Connection(why)) => {
                            conn.kill();
                            format!("the owner c.node {owner}: {why}")
                        }
                    }
                }
                Target::Nobody(why) => why,
            };
            if !self.said.swap(true, Ordering::Relaxed) {
                tracing::warn!(export = %self.name(), %why, "a forwarded request waits for an owner c.node");
            }
            if Instant::now() >= deadline {
                return Err(ExportIoError::Io {
                    detail: format!(
                        "no owner c.node answered within {:?}: {why}",
                        self.route.retry_for
                    ),
                });
            }
            self.route.view.refresh();
            std::thread::sleep(RETRY_INTERVAL);
        }
    }
}

fn done(r: Result<(), ExportIoError>) -> Result<Answer, ExportIoError> {
    r.map(|()| Answer::Done)
}

fn fua_flag(fua: bool) -> u8 {
    if fua {
        wire::FLAG_FUA
    } else {
        0
    }
}

impl ExportHandle for ForwardedExport {
    fn info(&self) -> ExportInfo {
        if let Some(h) = self.local_handle() {
            return h.info();
        }
        let mut info = self.info.lock().clone();
        // A resize on the owner shows in the cluster state first.
        if let Some(now) = self
            .route
            .view
            .now()
            .exports
            .iter()
            .find(|e| e.name == info.name)
        {
            info.size_bytes = now.size_bytes;
        }
        info
    }

    fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), ExportIoError> {
        let length = buf.len() as u64;
        let answer = {
            let local_buf = Mutex::new(&mut *buf);
            self.run(Op::Read, 0, offset_bytes, length, &[], &|h| {
                h.read(offset_bytes, &mut local_buf.lock())?;
                Ok(Answer::Done)
            })?
        };
        match answer {
            Answer::Done => Ok(()),
            Answer::Data(data) if data.len() == buf.len() => {
                buf.copy_from_slice(&data);
                Ok(())
            }
            _ => Err(ExportIoError::Io {
                detail: "the owner c.node answered a read with the wrong length".into(),
            }),
        }
    }

    fn write(&self, offset_bytes: u64, data: &[u8], fua: bool) -> Result<(), ExportIoError> {
        let len = data.len() as u64;
        self.run(Op::Write, fua_flag(fua), offset_bytes, len, data, &|h| {
            done(h.write(offset_bytes, data, fua))
        })
        .map(drop)
    }

    fn flush(&self) -> Result<(), ExportIoError> {
        self.run(Op::Flush, 0, 0, 0, &[], &|h| done(h.flush()))
            .map(drop)
    }

    fn trim(&self, offset_bytes: u64, length_bytes: u64, fua: bool) -> Result<(), ExportIoError> {
        self.run(
            Op::Trim,
            fua_flag(fua),
            offset_bytes,
            length_bytes,
            &[],
            &|h| done(h.trim(offset_bytes, length_bytes, fua)),
        )
        .map(drop)
    }

    fn write_zeroes(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        may_trim: bool,
        fua: bool,
    ) -> Result<(), ExportIoError> {
        let flags = fua_flag(fua) | if may_trim { wire::FLAG_MAY_TRIM } else { 0 };
        self.run(
            Op::WriteZeroes,
            flags,
            offset_bytes,
            length_bytes,
            &[],
            &|h| done(h.write_zeroes(offset_bytes, length_bytes, may_trim, fua)),
        )
        .map(drop)
    }

    fn block_status(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> Result<Vec<ExtentStatus>, ExportIoError> {
        let extents = Mutex::new(Vec::new());
        let answer = self.run(Op::BlockStatus, 0, offset_bytes, length_bytes, &[], &|h| {
            *extents.lock() = h.block_status(offset_bytes, length_bytes)?;
            Ok(Answer::Done)
        })?;
        match answer {
            Answer::Extents(e) => Ok(e),
            _ => Ok(extents.into_inner()),
        }
    }

    fn compare_and_write(
        &self,
        offset_bytes: u64,
        compare: &[u8],
        new: &[u8],
        fua: bool,
    ) -> Result<Option<u64>, ExportIoError> {
        crate::backend::check_halves(compare, new)?;
        let data = [compare, new].concat();
        let len = new.len() as u64;
        let answer = self.run(
            Op::CompareAndWrite,
            fua_flag(fua),
            offset_bytes,
            len,
            &data,
            &|h| {
                Ok(
                    match h.compare_and_write(offset_bytes, compare, new, fua)? {
                        Some(at) => Answer::Miscompare(at),
                        None => Answer::Done,
                    },
                )
            },
        )?;
        Ok(match answer {
            Answer::Miscompare(at) => Some(at),
            _ => None,
        })
    }

    fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Acquire) || self.local_handle().is_some_and(|h| h.is_gone())
    }

    /// Once this c.node owns the volume, its own throttle; before, the owner's throttles.
    fn qos(&self) -> Option<Arc<crate::qos::VolumeQos>> {
        self.local_handle().and_then(|h| h.qos())
    }
}

impl Drop for ForwardedExport {
    fn drop(&mut self) {
        self.kill_connection();
    }
}
