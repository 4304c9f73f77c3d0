//! Every request through the client to a d.node with two disks and back.

use std::time::Duration;

use weft_chunk::{ChunkError, ChunkKey, ChunkStore};

use crate::support::{bounded, client, flip_byte, meta, pattern, start, Dirs};

/// Offset of the data area in a chunk file of fewer than ~1000 pages (the header fits in the
/// first 4 KiB page; see weft-chunk's format).
const DATA_OFFSET_BYTES: u64 = 4096;

#[test]
fn every_operation_round_trips_with_typed_errors() {
    bounded(Duration::from_secs(60), || {
        let dirs = Dirs::new(2);
        let dnode = start(&dirs);
        let store = client(&dnode);
        assert!(store.ping().expect("ping") < Duration::from_secs(1));

        // Put chunks of two families, a few sizes (empty, sub-page, multi-page).
        let sizes = [0usize, 100, 4096, 10_000, 300_000];
        for (segment, len) in sizes.iter().enumerate() {
            let m = meta(1, segment as u64, 0, 1, *len);
            store.put(&m, &pattern(segment as u64, *len)).expect("put");
        }
        store
            .put(&meta(2, 9, 3, 1, 5000), &pattern(99, 5000))
            .expect("put");

        // Reads of ranges: whole, inside one page, across pages, at the end.
        let key = ChunkKey::new(1, 4, 0);
        let whole = pattern(4, 300_000);
        for (offset, len) in [
            (0usize, 300_000usize),
            (10, 100),
            (4000, 9000),
            (299_990, 10),
            (5, 0),
        ] {
            let mut buf = vec![0u8; len];
            store.read(&key, offset as u64, &mut buf).expect("read");
            assert_eq!(buf, whole[offset..offset + len], "range {offset}+{len}");
        }
        let mut buf = vec![0u8; 20];
        match store.read(&key, 299_990, &mut buf) {
            Err(ChunkError::OutOfRange {
                len_bytes: 300_000,
                offset_bytes: 299_990,
                length_bytes: 20,
                ..
            }) => {}
            other => panic!("read past the end: {other:?}"),
        }
        assert!(store
            .read(&ChunkKey::new(1, 77, 0), 0, &mut buf)
            .unwrap_err()
            .is_missing());

        // Info, listings.
        let info = store.info(&key).expect("info");
        assert_eq!(info.meta, meta(1, 4, 0, 1, 300_000));
        assert_eq!(info.len_bytes, 300_000);
        assert_eq!(
            store.info(&ChunkKey::new(2, 9, 3)).expect("info").len_bytes,
            5000
        );
        assert!(store
            .info(&ChunkKey::new(2, 9, 2))
            .unwrap_err()
            .is_missing());
        assert!(store
            .info(&ChunkKey::new(2, 8, 3))
            .unwrap_err()
            .is_missing());
        let listed: Vec<u64> = store
            .list(1)
            .expect("list")
            .iter()
            .map(|c| c.meta.key.segment)
            .collect();
        assert_eq!(listed, vec![0, 1, 2, 3, 4]);
        assert_eq!(store.families().expect("families"), vec![1, 2]);

        // A put under an existing key replaces it (retries after a lost answer succeed).
        store
            .put(&meta(1, 1, 0, 1, 100), &pattern(1, 100))
            .expect("same again");
        store
            .put(&meta(1, 1, 0, 1, 100), &pattern(7, 100))
            .expect("replace");
        let mut small = vec![0u8; 100];
        store
            .read(&ChunkKey::new(1, 1, 0), 0, &mut small)
            .expect("read");
        assert_eq!(small, pattern(7, 100));

        // Delete, and delete again (absent is fine).
        store.delete(&ChunkKey::new(1, 0, 0), 1).expect("delete");
        store
            .delete(&ChunkKey::new(1, 0, 0), 1)
            .expect("delete absent");
        assert!(store
            .info(&ChunkKey::new(1, 0, 0))
            .unwrap_err()
            .is_missing());

        // Fence: older writers are refused, with the fence's epoch.
        store.fence(1, 5).expect("fence");
        store.fence(1, 5).expect("fence again");
        match store.put(&meta(1, 50, 0, 4, 10), &[1u8; 10]) {
            Err(ChunkError::Fenced {
                family: 1,
                epoch: 4,
                current: 5,
            }) => {}
            other => panic!("fenced put: {other:?}"),
        }
        assert!(matches!(
            store.delete(&ChunkKey::new(1, 1, 0), 4),
            Err(ChunkError::Fenced { current: 5, .. })
        ));
        assert!(matches!(
            store.fence(1, 3),
            Err(ChunkError::Fenced { current: 5, .. })
        ));
        store
            .put(&meta(1, 50, 0, 5, 10), &[1u8; 10])
            .expect("current epoch");
        store
            .put(&meta(2, 10, 0, 0, 10), &[1u8; 10])
            .expect("other family unfenced");

        // Stat.
        let stat = store.stat().expect("stat");
        assert_eq!(stat.chunks, 7);
        assert!(stat.used_bytes > 300_000);
        assert!(stat.capacity_bytes.is_some_and(|c| c > 0), "{stat:?}");
        let (node_id, disks) = store.node_stat().expect("node stat");
        assert_eq!(node_id, dnode.node_id());
        assert_eq!(disks.len(), 2);

        // Scrub: clean, then a flipped byte in a data page is found and never served.
        let report = store.scrub(None).expect("scrub");
        assert_eq!((report.checked, report.corrupt.len()), (7, 0));
        let file = dirs.chunk_file(&key);
        flip_byte(&file, DATA_OFFSET_BYTES + 5000);
        let report = store.scrub(None).expect("scrub");
        assert_eq!(report.corrupt, vec![key]);
        assert_eq!(store.scrub(Some(2)).expect("scrub family").corrupt, vec![]);
        // The corrupt chunk is quarantined: it reads as missing (a c.node rebuilds it from
        // its stripe), never as its bytes.
        let mut page = vec![0u8; 100];
        match store.read(&key, 4096 + 10, &mut page) {
            Err(ChunkError::Missing { key: k }) => assert_eq!(k, key),
            other => panic!("read of the quarantined chunk: {other:?}"),
        }
        assert!(
            file.with_extension("chunk.corrupt").exists(),
            "kept for inspection"
        );
        let stats = dnode.stats();
        assert_eq!((stats.scrubs, stats.corrupt_found), (3, 1), "{stats:?}");
        assert_eq!(
            stats.connections_accepted, 1,
            "one connection for everything"
        );
        dnode.shutdown();
    });
}

#[test]
fn the_background_scrub_finds_rot_by_itself() {
    bounded(Duration::from_secs(30), || {
        let dirs = Dirs::new(1);
        let mut config = crate::support::config(&dirs, crate::support::loopback());
        config.scrub_interval = Some(Duration::from_millis(100));
        let dnode =
            weft_dnode::Dnode::start(config, crate::support::embedded_meta()).expect("start");
        let store = client(&dnode);
        let key = ChunkKey::new(3, 1, 0);
        store
            .put(&meta(3, 1, 0, 0, 8192), &pattern(3, 8192))
            .expect("put");
        flip_byte(&dirs.chunk_file(&key), DATA_OFFSET_BYTES + 1);
        crate::support::eventually(Duration::from_secs(10), "background scrub", || {
            dnode.stats().corrupt_found >= 1
        });
        dnode.shutdown();
    });
}

#[test]
fn a_chunk_of_the_largest_size_round_trips_and_a_larger_one_is_refused_locally() {
    bounded(Duration::from_secs(60), || {
        let dirs = Dirs::new(1);
        let dnode = start(&dirs);
        let store = client(&dnode);
        let len = weft_proto::CHUNK_MAX_BYTES;
        let data = pattern(11, len);
        store
            .put(&meta(9, 1, 0, 0, len), &data)
            .expect("put 32 MiB");
        let mut back = vec![0u8; len];
        store
            .read(&ChunkKey::new(9, 1, 0), 0, &mut back)
            .expect("read 32 MiB");
        assert!(back == data, "32 MiB read back differs");
        let too_big = vec![0u8; len + 1];
        assert!(matches!(
            store.put(&meta(9, 2, 0, 0, len + 1), &too_big),
            Err(ChunkError::OutOfRange { .. })
        ));
        assert_eq!(
            dnode.stats().requests,
            2,
            "the oversize put never left the client"
        );
        dnode.shutdown();
    });
}
