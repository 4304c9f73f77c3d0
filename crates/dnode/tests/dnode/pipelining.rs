//! Many callers on one client: requests pipeline on one connection and every caller gets its
//! own answer.

use std::sync::Arc;
use std::time::Duration;

use weft_chunk::{ChunkKey, ChunkStore};

use crate::support::{bounded, client, meta, pattern, start, Dirs};

const CHUNKS: u64 = 8;
const CHUNK_BYTES: usize = 256 * 1024;
const THREADS: u64 = 8;
const READS_PER_THREAD: u64 = 8;

#[test]
fn concurrent_reads_from_many_threads_share_one_connection() {
    bounded(Duration::from_secs(60), || {
        let dirs = Dirs::new(2);
        let dnode = start(&dirs);
        let store = Arc::new(client(&dnode));
        for s in 0..CHUNKS {
            store
                .put(&meta(7, s, 0, 0, CHUNK_BYTES), &pattern(s, CHUNK_BYTES))
                .expect("put");
        }
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let store = store.clone();
                std::thread::spawn(move || {
                    for r in 0..READS_PER_THREAD {
                        // Each read a different chunk, offset and length.
                        let segment = (t + r) % CHUNKS;
                        let offset = ((t * 7919 + r * 104_729) % (CHUNK_BYTES as u64 / 2)) as usize;
                        let len = 1000 + ((t * 31 + r * 17) as usize % 60_000);
                        let mut buf = vec![0u8; len];
                        store
                            .read(&ChunkKey::new(7, segment, 0), offset as u64, &mut buf)
                            .expect("read");
                        assert_eq!(buf, pattern(segment, CHUNK_BYTES)[offset..offset + len]);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("reader thread");
        }
        let stats = dnode.stats();
        assert_eq!(stats.connections_accepted, 1, "{stats:?}");
        assert_eq!(stats.requests, CHUNKS + THREADS * READS_PER_THREAD);
        dnode.shutdown();
    });
}
