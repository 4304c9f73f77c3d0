//! The load: one thread per writable image writes versioned blocks over its own NBD connection
//! (1-4 blocks a write, FUA now and then, a flush every few writes), records every issue,
//! acknowledgement and flush in the model, and reconnects when the c.node goes away.
//!
//! The main thread pauses the writers (each stops between two requests) to verify a stable
//! model, and says when errors are expected: while more than m d.nodes are down
//! ([`Shared::errors_ok`]) or while the c.node is being killed ([`Shared::disconnects_ok`]).
//! A writer also expects its connection to break once the c.node it connected to was replaced
//! (its incarnation is older than the target's). Any other error is a problem, recorded with
//! its time; the main thread fails the test on it after the event.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::{NbdClient, NbdError};
use crate::thrash_support::block::{content, BLOCK_BYTES};
use crate::thrash_support::model::Models;

/// Pause between two requests of one writer: about 150 writes a second each at most, so three
/// writers leave CPU to the ten processes of the cluster on two cores.
const OP_GAP: Duration = Duration::from_millis(6);
/// Most blocks in one write.
const WRITE_BLOCKS_MAX: u64 = 4;
/// A flush after 1..FLUSH_EVERY_MAX writes.
const FLUSH_EVERY_MAX: u32 = 24;
/// One write in this many has FUA.
const FUA_ONE_IN: u32 = 8;
/// Between two connection attempts.
const RECONNECT_GAP: Duration = Duration::from_millis(100);
/// A c.node that is up but refuses connections this long is a problem.
const CONNECT_FAILING_MAX: Duration = Duration::from_secs(30);

/// Where the writers connect: the c.node's NBD address (None while it is down) and its
/// incarnation (1 for the first run, +1 for every restart).
#[derive(Clone, Copy, Debug)]
pub struct Target {
    pub nbd: Option<SocketAddr>,
    pub inc: u64,
}

/// Counters of the load.
#[derive(Clone, Debug, Default)]
pub struct LoadTally {
    pub writes_acked: u64,
    pub blocks_acked: u64,
    pub flushes_acked: u64,
    pub errors_expected: u64,
    pub reconnects: u64,
}

/// What the writers and the main thread share.
pub struct Shared {
    pub t0: Instant,
    pub salt: u64,
    pub models: Mutex<Models>,
    pub target: Mutex<Target>,
    pub stop: AtomicBool,
    pub pause: AtomicBool,
    pub paused: AtomicUsize,
    /// More than m d.nodes may be down: I/O errors and stalls (timeouts) are allowed.
    pub errors_ok: AtomicBool,
    /// The c.node is being killed: broken connections are allowed.
    pub disconnects_ok: AtomicBool,
    pub problems: Mutex<Vec<String>>,
    pub tally: Mutex<LoadTally>,
}

impl Shared {
    pub fn new(salt: u64, models: Models) -> Arc<Shared> {
        Arc::new(Shared {
            t0: Instant::now(),
            salt,
            models: Mutex::new(models),
            target: Mutex::new(Target { nbd: None, inc: 0 }),
            stop: AtomicBool::new(false),
            pause: AtomicBool::new(false),
            paused: AtomicUsize::new(0),
            errors_ok: AtomicBool::new(false),
            disconnects_ok: AtomicBool::new(false),
            problems: Mutex::new(Vec::new()),
            tally: Mutex::new(LoadTally::default()),
        })
    }

    pub fn target(&self) -> Target {
        *self.target.lock().unwrap()
    }

    pub fn problem(&self, who: &str, what: String) {
        let line = format!("+{:.1}s {who}: {what}", self.t0.elapsed().as_secs_f64());
        eprintln!("PROBLEM {line}");
        self.problems.lock().unwrap().push(line);
    }

    fn expected(&self, conn_inc: u64) -> bool {
        self.errors_ok.load(Ordering::SeqCst)
            || self.disconnects_ok.load(Ordering::SeqCst)
            || self.target().inc != conn_inc
    }
}

/// The running writer threads.
pub struct Writers {
    shared: Arc<Shared>,
    handles: Vec<JoinHandle<()>>,
}

impl Writers {
    pub fn new(shared: Arc<Shared>) -> Writers {
        Writers {
            shared,
            handles: Vec::new(),
        }
    }

    /// Starts a writer on image `image` (index into the models) with its own rng seed.
    pub fn spawn(&mut self, image: usize, seed: u64) {
        let shared = self.shared.clone();
        self.handles.push(
            std::thread::Builder::new()
                .name(format!("writer-{image}"))
                .spawn(move || Writer::new(shared, image, seed).run())
                .expect("spawn writer"),
        );
    }

    /// Pauses every writer between two requests; waits at most `timeout`.
    pub fn pause(&self, timeout: Duration) {
        self.shared.pause.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + timeout;
        while self.shared.paused.load(Ordering::SeqCst) < self.handles.len() {
            assert!(
                Instant::now() < deadline,
                "writers did not pause within {timeout:?} (a request hangs?)"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn resume(&self) {
        self.shared.pause.store(false, Ordering::SeqCst);
    }

    /// Stops and joins every writer (each ends within its NBD timeout).
    pub fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.pause.store(false, Ordering::SeqCst);
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

impl Drop for Writers {
    fn drop(&mut self) {
        // On a panic, don't join (a writer may sit in a 60 s read): the threads die with us.
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.pause.store(false, Ordering::SeqCst);
    }
}

struct Writer {
    shared: Arc<Shared>,
    image: usize,
    name: String,
    export: String,
    tag: u64,
    blocks: u64,
    rng: StdRng,
    conn: Option<(NbdClient, u64)>,
    until_flush: u32,
    failing_since: Option<Instant>,
}

impl Writer {
    fn new(shared: Arc<Shared>, image: usize, seed: u64) -> Writer {
        let (export, tag, blocks) = {
            let m = shared.models.lock().unwrap();
            let img = &m.images[image];
            (img.export.clone(), img.tag, img.blocks.len() as u64)
        };
        Writer {
            shared,
            image,
            name: format!("writer {export}"),
            export,
            tag,
            blocks,
            rng: StdRng::seed_from_u64(seed),
            conn: None,
            until_flush: 1,
            failing_since: None,
        }
    }

    fn run(mut self) {
        while !self.shared.stop.load(Ordering::SeqCst) {
            if self.shared.pause.load(Ordering::SeqCst) {
                self.shared.paused.fetch_add(1, Ordering::SeqCst);
                while self.shared.pause.load(Ordering::SeqCst)
                    && !self.shared.stop.load(Ordering::SeqCst)
                {
                    std::thread::sleep(Duration::from_millis(2));
                }
                self.shared.paused.fetch_sub(1, Ordering::SeqCst);
                continue;
            }
            // A connection to a c.node that was replaced is dead: drop it.
            let target = self.shared.target();
            if self
                .conn
                .as_ref()
                .is_some_and(|(_, inc)| *inc != target.inc)
            {
                self.conn = None;
            }
            if self.conn.is_none() && !self.connect(target) {
                std::thread::sleep(RECONNECT_GAP);
                continue;
            }
            self.until_flush -= 1;
            if self.until_flush == 0 {
                self.until_flush = self.rng.random_range(1..=FLUSH_EVERY_MAX);
                self.flush();
            } else {
                self.write();
            }
            std::thread::sleep(OP_GAP);
        }
    }

    fn connect(&mut self, target: Target) -> bool {
        let Some(addr) = target.nbd else {
            self.failing_since = None;
            return false;
        };
        match NbdClient::connect(addr, &self.export) {
            Ok(c) => {
                self.conn = Some((c, target.inc));
                self.failing_since = None;
                self.shared.tally.lock().unwrap().reconnects += 1;
                true
            }
            Err(e) => {
                let since = *self.failing_since.get_or_insert_with(Instant::now);
                if since.elapsed() > CONNECT_FAILING_MAX && !self.shared.expected(target.inc) {
                    self.shared.problem(
                        &self.name,
                        format!("cannot connect to {addr} for {CONNECT_FAILING_MAX:?}: {e}"),
                    );
                    self.failing_since = None;
                }
                false
            }
        }
    }

    fn write(&mut self) {
        let n = self.rng.random_range(1..=WRITE_BLOCKS_MAX);
        let start = self.rng.random_range(0..=self.blocks - n);
        let fua = self.rng.random_range(0..FUA_ONE_IN) == 0;
        let mut buf = Vec::with_capacity(n as usize * BLOCK_BYTES);
        let mut versions = Vec::with_capacity(n as usize);
        {
            let mut m = self.shared.models.lock().unwrap();
            let img = &mut m.images[self.image];
            for lba in start..start + n {
                let b = &mut img.blocks[lba as usize];
                b.issued += 1;
                versions.push(b.issued);
                buf.extend_from_slice(&content(self.shared.salt, self.tag, lba, b.issued));
            }
        }
        let (c, inc) = self.conn.as_mut().expect("connected");
        let inc = *inc;
        let res = if fua {
            c.write_fua(start * BLOCK_BYTES as u64, &buf)
        } else {
            c.write(start * BLOCK_BYTES as u64, &buf)
        };
        match res {
            Ok(()) => {
                let mut m = self.shared.models.lock().unwrap();
                let img = &mut m.images[self.image];
                for (i, lba) in (start..start + n).enumerate() {
                    let b = &mut img.blocks[lba as usize];
                    // Versions of a block only grow: a later write may have been acked already
                    // only if this one was issued before it, which one thread never does.
                    b.acked = versions[i];
                    b.acked_inc = inc;
                    if fua {
                        b.flushed = versions[i];
                    }
                }
                drop(m);
                let mut t = self.shared.tally.lock().unwrap();
                t.writes_acked += 1;
                t.blocks_acked += n;
            }
            Err(e) => self.failed(&format!("write of {n} blocks at block {start}"), e, inc),
        }
    }

    fn flush(&mut self) {
        let (c, inc) = self.conn.as_mut().expect("connected");
        let inc = *inc;
        match c.flush() {
            Ok(()) => {
                let mut m = self.shared.models.lock().unwrap();
                for b in &mut m.images[self.image].blocks {
                    if b.acked_inc == inc {
                        b.flushed = b.acked;
                    }
                }
                drop(m);
                self.shared.tally.lock().unwrap().flushes_acked += 1;
            }
            Err(e) => self.failed("flush", e, inc),
        }
    }

    fn failed(&mut self, what: &str, e: NbdError, inc: u64) {
        let broken = !matches!(e, NbdError::Server(_));
        if self.shared.expected(inc) {
            self.shared.tally.lock().unwrap().errors_expected += 1;
        } else {
            self.shared.problem(
                &self.name,
                format!("{what}: {e} (c.node incarnation {inc} up, at most m d.nodes down)"),
            );
        }
        if broken {
            self.conn = None;
        }
    }
}
