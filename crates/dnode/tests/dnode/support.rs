//! Shared test helpers: a d.node on temporary data dirs, a client with short timeouts, chunk
//! metadata and data patterns, and a watchdog that fails a test instead of letting it hang.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_chunk::{ChunkKey, ChunkMeta};
use weft_dnode::{Dnode, DnodeConfig};
use weft_dnode_client::{ClientOptions, RemoteChunkStore};
use weft_meta::{EmbeddedMetaStore, MetaStore};

pub const CLUSTER: &str = "test-cluster";

/// Data dirs that outlive the d.nodes started on them (restarts keep the node id and chunks).
pub struct Dirs {
    _tmp: tempfile::TempDir,
    pub paths: Vec<PathBuf>,
}

impl Dirs {
    pub fn new(disks: usize) -> Dirs {
        let tmp = tempfile::tempdir().expect("tempdir");
        let paths = (0..disks)
            .map(|i| tmp.path().join(format!("disk{i}")))
            .collect();
        Dirs { _tmp: tmp, paths }
    }

    /// The chunk file of `key`, on whichever disk holds it.
    pub fn chunk_file(&self, key: &ChunkKey) -> PathBuf {
        let rel = format!(
            "{:016x}/{:016x}.{}.chunk",
            key.family, key.segment, key.index
        );
        self.paths
            .iter()
            .map(|d| d.join(&rel))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("no file for chunk {key}"))
    }
}

pub fn config(dirs: &Dirs, listen: SocketAddr) -> DnodeConfig {
    let mut c = DnodeConfig::new(CLUSTER, listen, dirs.paths.clone());
    c.workers = 4;
    c.zone = "zone-a".into();
    c
}

pub fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().expect("addr")
}

pub fn embedded_meta() -> Arc<dyn MetaStore> {
    Arc::new(EmbeddedMetaStore::in_memory())
}

pub fn start(dirs: &Dirs) -> Dnode {
    Dnode::start(config(dirs, loopback()), embedded_meta()).expect("start d.node")
}

/// Short timeouts and backoff, so failure tests run in seconds.
pub fn client_options() -> ClientOptions {
    ClientOptions {
        connect_timeout: Duration::from_millis(1_000),
        request_timeout: Duration::from_millis(2_000),
        backoff_initial: Duration::from_millis(50),
        backoff_max: Duration::from_millis(400),
        client_name: "test".into(),
        ..ClientOptions::default()
    }
}

pub fn client(dnode: &Dnode) -> RemoteChunkStore {
    RemoteChunkStore::new(
        dnode.node_id().to_owned(),
        dnode.local_addr(),
        CLUSTER.into(),
        client_options(),
    )
}

pub fn meta(family: u64, segment: u64, index: u8, epoch: u64, len: usize) -> ChunkMeta {
    ChunkMeta {
        key: ChunkKey::new(family, segment, index),
        epoch,
        codec_id: 2,
        data_chunks: 4,
        parity_chunks: 2,
        stripe_len_bytes: len as u64 * 4,
    }
}

/// Bytes that differ per seed and per position.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_mul(31).wrapping_add(seed.wrapping_mul(97)) % 251) as u8)
        .collect()
}

/// Flip one byte of a file.
pub fn flip_byte(path: &Path, offset: u64) {
    use std::os::unix::fs::FileExt as _;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open chunk file");
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, offset).expect("read byte");
    b[0] ^= 0x5a;
    f.write_all_at(&b, offset).expect("write byte");
    f.sync_all().expect("sync");
}

/// Run `body` on its own thread and fail if it takes longer than `limit` (a hang becomes a
/// failure; whatever the caller owns, like an etcd process, is still dropped and killed).
pub fn bounded<T: Send + 'static>(limit: Duration, body: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = std::thread::spawn(move || {
        let _ = tx.send(body());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => {
            let _ = handle.join();
            v
        }
        // The body panicked (its message is printed already): fail with it.
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => match handle.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("the body sends before it returns"),
        },
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("test did not finish within {} ms", limit.as_millis())
        }
    }
}

/// Poll `check` every 50 ms until it returns true or `limit` passes; returns the time taken.
pub fn eventually(limit: Duration, what: &str, mut check: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    loop {
        if check() {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < limit,
            "{what}: not within {} ms",
            limit.as_millis()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
