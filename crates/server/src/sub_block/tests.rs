use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

use parking_lot::Mutex;
use proptest::prelude::*;

use super::*;

const SECTOR: u64 = 512;

/// A sparse in-memory export that, like the engine, takes whole 4 KiB blocks only. With
/// `slow`, a read sleeps after copying out, which widens the window between the read and
/// the write-back of a read-modify-write: without the locks, concurrent writers of one block
/// then lose updates within a few iterations.
#[derive(Debug)]
struct BlockDisk {
    size_bytes: u64,
    logical_block_size_bytes: u32,
    read_only: bool,
    slow: AtomicBool,
    blocks: Mutex<HashMap<u64, Vec<u8>>>,
    reads: AtomicU64,
    writes: AtomicU64,
    /// Writes that came down as owned buffers (`write_owned`), also counted in `writes`.
    owned_writes: AtomicU64,
    trims: AtomicU64,
    zeroings: AtomicU64,
}

impl BlockDisk {
    fn new(size_bytes: u64, logical_block_size_bytes: u32) -> Arc<BlockDisk> {
        Arc::new(BlockDisk {
            size_bytes,
            logical_block_size_bytes,
            read_only: false,
            slow: AtomicBool::new(false),
            blocks: Mutex::new(HashMap::new()),
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            owned_writes: AtomicU64::new(0),
            trims: AtomicU64::new(0),
            zeroings: AtomicU64::new(0),
        })
    }

    fn check(&self, offset_bytes: u64, length_bytes: u64) -> Result<(), ExportIoError> {
        assert_eq!(
            (offset_bytes | length_bytes) % BLOCK_BYTES,
            0,
            "the inner handle got an unaligned request: {offset_bytes}+{length_bytes}"
        );
        if offset_bytes + length_bytes > self.size_bytes {
            return Err(ExportIoError::Invalid { reason: "outside" });
        }
        Ok(())
    }

    fn zero(&self, offset_bytes: u64, length_bytes: u64) {
        let mut blocks = self.blocks.lock();
        for b in offset_bytes / BLOCK_BYTES..(offset_bytes + length_bytes) / BLOCK_BYTES {
            blocks.remove(&b);
        }
    }
}

impl ExportHandle for BlockDisk {
    fn info(&self) -> ExportInfo {
        ExportInfo {
            name: "disk".into(),
            description: String::new(),
            size_bytes: self.size_bytes,
            read_only: self.read_only,
            logical_block_size_bytes: self.logical_block_size_bytes,
        }
    }

    fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), ExportIoError> {
        self.check(offset_bytes, buf.len() as u64)?;
        self.reads.fetch_add(1, Ordering::Relaxed);
        {
            let blocks = self.blocks.lock();
            for (i, out) in buf.chunks_mut(BLOCK_BYTES as usize).enumerate() {
                match blocks.get(&(offset_bytes / BLOCK_BYTES + i as u64)) {
                    Some(b) => out.copy_from_slice(b),
                    None => out.fill(0),
                }
            }
        }
        if self.slow.load(Ordering::Relaxed) {
            thread::sleep(Duration::from_micros(200));
        }
        Ok(())
    }

    fn write(&self, offset_bytes: u64, data: &[u8], _fua: bool) -> Result<(), ExportIoError> {
        self.check(offset_bytes, data.len() as u64)?;
        assert!(!self.read_only, "a write reached a read-only inner handle");
        self.writes.fetch_add(1, Ordering::Relaxed);
        let mut blocks = self.blocks.lock();
        for (i, b) in data.chunks(BLOCK_BYTES as usize).enumerate() {
            blocks.insert(offset_bytes / BLOCK_BYTES + i as u64, b.to_vec());
        }
        Ok(())
    }

    fn write_owned(&self, offset_bytes: u64, data: Bytes, fua: bool) -> Result<(), ExportIoError> {
        self.owned_writes.fetch_add(1, Ordering::Relaxed);
        self.write(offset_bytes, &data, fua)
    }

    fn flush(&self) -> Result<(), ExportIoError> {
        Ok(())
    }

    fn trim(&self, offset_bytes: u64, length_bytes: u64, _fua: bool) -> Result<(), ExportIoError> {
        self.check(offset_bytes, length_bytes)?;
        self.trims.fetch_add(1, Ordering::Relaxed);
        self.zero(offset_bytes, length_bytes);
        Ok(())
    }

    fn write_zeroes(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        _may_trim: bool,
        _fua: bool,
    ) -> Result<(), ExportIoError> {
        self.check(offset_bytes, length_bytes)?;
        self.zeroings.fetch_add(1, Ordering::Relaxed);
        self.zero(offset_bytes, length_bytes);
        Ok(())
    }

    fn block_status(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> Result<Vec<ExtentStatus>, ExportIoError> {
        self.check(offset_bytes, length_bytes)?;
        let blocks = self.blocks.lock();
        Ok(
            (offset_bytes / BLOCK_BYTES..(offset_bytes + length_bytes) / BLOCK_BYTES)
                .map(|b| {
                    let hole = !blocks.contains_key(&b);
                    ExtentStatus {
                        length_bytes: BLOCK_BYTES,
                        hole,
                        zero: hole,
                    }
                })
                .collect(),
        )
    }

    fn is_gone(&self) -> bool {
        false
    }
    fn compare_and_write(
        &self,
        offset_bytes: u64,
        compare: &[u8],
        new: &[u8],
        fua: bool,
    ) -> Result<Option<u64>, ExportIoError> {
        crate::backend::read_compare_write(self, offset_bytes, compare, new, fua)
    }
}

fn export(disk: &Arc<BlockDisk>) -> SubBlockExport<BlockDisk> {
    SubBlockExport::new(Arc::clone(disk), Arc::new(BlockLocks::new()), 7)
}

fn invalid(r: Result<(), ExportIoError>) -> bool {
    matches!(r, Err(ExportIoError::Invalid { .. }))
}

#[test]
fn aligned_io_goes_straight_through_without_reads() {
    let disk = BlockDisk::new(1 << 20, 512);
    let e = export(&disk);
    e.write(8192, &[5u8; 8192], false).unwrap();
    e.trim(16384, 4096, false).unwrap();
    e.write_zeroes(32768, 4096, false, false).unwrap();
    assert_eq!(disk.reads.load(Ordering::Relaxed), 0);
    assert_eq!(disk.writes.load(Ordering::Relaxed), 1);
    assert_eq!(disk.trims.load(Ordering::Relaxed), 1);
    assert_eq!(disk.zeroings.load(Ordering::Relaxed), 1);
    let mut buf = vec![0u8; 8192];
    e.read(8192, &mut buf).unwrap();
    assert_eq!(buf, vec![5u8; 8192]);
    assert_eq!(disk.reads.load(Ordering::Relaxed), 1);
}

#[test]
fn owned_writes_pass_down_as_owned_when_aligned_and_merge_when_not() {
    let disk = BlockDisk::new(1 << 20, 512);
    let e = export(&disk);
    e.write_owned(8192, Bytes::from(vec![5u8; 8192]), false)
        .unwrap();
    assert_eq!(disk.owned_writes.load(Ordering::Relaxed), 1);
    assert_eq!(disk.reads.load(Ordering::Relaxed), 0);
    // A sector: read-modify-write of its block, written as a new (borrowed) buffer.
    e.write_owned(8192 + 512, Bytes::from(vec![6u8; 512]), false)
        .unwrap();
    assert_eq!(disk.owned_writes.load(Ordering::Relaxed), 1);
    assert_eq!(disk.writes.load(Ordering::Relaxed), 2);
    let mut buf = vec![0u8; 8192];
    e.read(8192, &mut buf).unwrap();
    let mut want = vec![5u8; 8192];
    want[512..1024].fill(6);
    assert_eq!(buf, want);
    assert!(invalid(e.write_owned(
        100,
        Bytes::from(vec![1u8; 512]),
        false
    )));
}

#[test]
fn a_sector_write_merges_into_its_block() {
    let disk = BlockDisk::new(1 << 20, 512);
    let e = export(&disk);
    e.write(4096, &[1u8; 4096], false).unwrap();
    e.write(4096 + 3 * 512, &[2u8; 512], true).unwrap();
    let mut block = vec![0u8; 4096];
    e.read(4096, &mut block).unwrap();
    let mut want = vec![1u8; 4096];
    want[1536..2048].fill(2);
    assert_eq!(block, want);
    // One sector read back alone, and a read across the block boundary.
    let mut sector = vec![0u8; 512];
    e.read(4096 + 3 * 512, &mut sector).unwrap();
    assert_eq!(sector, vec![2u8; 512]);
    let mut across = vec![9u8; 1024];
    e.read(4096 - 512, &mut across).unwrap();
    assert_eq!(&across[..512], &[0u8; 512][..]);
    assert_eq!(&across[512..], &[1u8; 512][..]);
}

#[test]
fn partial_trims_and_zeroings_write_zeroes_into_their_part() {
    let disk = BlockDisk::new(1 << 20, 512);
    let e = export(&disk);
    e.write(0, &[7u8; 16384], false).unwrap();
    // From the middle of block 0 to the middle of block 3: blocks 1 and 2 whole.
    e.trim(2048, 10240, false).unwrap();
    assert_eq!(
        disk.trims.load(Ordering::Relaxed),
        1,
        "one trim of the whole blocks"
    );
    let mut all = vec![0u8; 16384];
    e.read(0, &mut all).unwrap();
    assert!(all[..2048].iter().all(|&b| b == 7));
    assert!(all[2048..12288].iter().all(|&b| b == 0));
    assert!(all[12288..].iter().all(|&b| b == 7));
    // Inside one block: nothing whole, so no inner zeroing at all.
    e.write_zeroes(12288 + 512, 1024, true, false).unwrap();
    assert_eq!(disk.zeroings.load(Ordering::Relaxed), 0);
    e.read(0, &mut all).unwrap();
    assert!(all[12288..12800].iter().all(|&b| b == 7));
    assert!(all[12800..13824].iter().all(|&b| b == 0));
    assert!(all[13824..].iter().all(|&b| b == 7));
}

#[test]
fn misaligned_requests_are_invalid_and_4kn_takes_4k_only() {
    let disk = BlockDisk::new(1 << 20, 512);
    let e = export(&disk);
    let mut buf = vec![0u8; 512];
    assert!(invalid(e.read(100, &mut buf)));
    assert!(invalid(e.write(512, &[0u8; 100], false)));
    assert!(invalid(e.trim(256, 512, false)));
    assert!(invalid(e.write_zeroes(0, 511, false, false)));
    assert!(matches!(
        e.block_status(1, 512),
        Err(ExportIoError::Invalid { .. })
    ));
    // Past the end and overflowing ranges.
    assert!(invalid(e.write((1 << 20) - 512, &[0u8; 1024], false)));
    assert!(invalid(e.trim(u64::MAX - 511, 512, false)));
    assert!(invalid(e.read(u64::MAX - 1023, &mut buf)));

    let disk = BlockDisk::new(1 << 20, 4096);
    let e = export(&disk);
    assert!(invalid(e.write(512, &[0u8; 512], false)));
    assert!(invalid(e.read(0, &mut buf)));
    e.write(4096, &[1u8; 4096], false).unwrap();
}

#[test]
fn a_read_only_export_refuses_writes_before_reading() {
    let disk = Arc::new(BlockDisk {
        read_only: true,
        ..Arc::try_unwrap(BlockDisk::new(1 << 20, 512)).unwrap()
    });
    let e = export(&disk);
    assert_eq!(
        e.write(512, &[1u8; 512], false),
        Err(ExportIoError::ReadOnly)
    );
    assert_eq!(e.trim(512, 512, false), Err(ExportIoError::ReadOnly));
    assert_eq!(
        e.write_zeroes(0, 4096, false, false),
        Err(ExportIoError::ReadOnly)
    );
    assert_eq!(disk.reads.load(Ordering::Relaxed), 0);
}

#[test]
fn block_status_of_a_sector_range_starts_at_the_sector() {
    let disk = BlockDisk::new(1 << 20, 512);
    let e = export(&disk);
    e.write(8192, &[1u8; 4096], false).unwrap();
    // From sector 14 (inside block 1, a hole) for 3 KiB: 1 KiB of hole, then 2 KiB of data.
    let got = e.block_status(14 * 512, 3072).unwrap();
    assert_eq!(
        got,
        vec![
            ExtentStatus {
                length_bytes: 1024,
                hole: true,
                zero: true
            },
            ExtentStatus {
                length_bytes: 2048,
                hole: false,
                zero: false
            },
        ]
    );
}

#[test]
fn lock_stripes_of_a_range_are_distinct_and_a_huge_range_takes_them_all() {
    let locks = BlockLocks::new();
    let stripes: Vec<usize> = (0..LOCK_STRIPES as u64)
        .map(|r| locks.stripe_of(3, 1000 + r))
        .collect();
    let mut sorted = stripes.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), LOCK_STRIPES);
    // A trim of more regions than stripes (and one with an RMW edge) locks without deadlock.
    let disk = BlockDisk::new(2 * LOCK_STRIPES as u64 * REGION_BLOCKS * BLOCK_BYTES, 512);
    let e = export(&disk);
    e.trim(512, disk.size_bytes - 1024, false).unwrap();
    e.write(0, &vec![3u8; 1 << 20], false).unwrap();
}

/// Sectors of the same blocks written concurrently by threads that each own some of them,
/// through separate handles (as separate connections would be): every sector ends with its
/// owner's last write, though every write is a read-modify-write of a block others change.
#[test]
fn concurrent_sector_writers_of_one_block_lose_no_update() {
    const THREADS: u64 = 4;
    const BLOCKS: u64 = 2;
    const ROUNDS: u64 = 60;
    let disk = BlockDisk::new(1 << 20, 512);
    disk.slow.store(true, Ordering::Relaxed);
    let locks = Arc::new(BlockLocks::new());
    thread::scope(|s| {
        for t in 0..THREADS {
            let e = SubBlockExport::new(Arc::clone(&disk), Arc::clone(&locks), 7);
            s.spawn(move || {
                for round in 0..ROUNDS {
                    // Thread t owns sectors t and t + 4 of each block.
                    for block in 0..BLOCKS {
                        for sector in [t, t + THREADS] {
                            let at = block * BLOCK_BYTES + sector * SECTOR;
                            let v = u8::try_from(round + 1).unwrap();
                            e.write(at, &[v; SECTOR as usize], round % 7 == 0).unwrap();
                        }
                    }
                }
            });
        }
    });
    let e = export(&disk);
    let mut all = vec![0u8; (BLOCKS * BLOCK_BYTES) as usize];
    e.read(0, &mut all).unwrap();
    for (i, sector) in all.chunks(SECTOR as usize).enumerate() {
        assert!(
            sector.iter().all(|&b| u64::from(b) == ROUNDS),
            "sector {i} lost its last update: holds {}",
            sector[0]
        );
    }
}

/// An aligned writer of whole blocks and a sector writer of the same blocks: the RMW never
/// writes back a block from before an aligned write it overlapped, so each aligned write's
/// other sectors stay as written until the next one.
#[test]
fn read_modify_write_never_reverts_an_aligned_write() {
    const ROUNDS: u8 = 120;
    let disk = BlockDisk::new(1 << 20, 512);
    disk.slow.store(true, Ordering::Relaxed);
    let locks = Arc::new(BlockLocks::new());
    let done = AtomicBool::new(false);
    thread::scope(|s| {
        let sector_writer = SubBlockExport::new(Arc::clone(&disk), Arc::clone(&locks), 7);
        let done = &done;
        s.spawn(move || {
            let mut v = 0u8;
            while !done.load(Ordering::Relaxed) {
                v = v.wrapping_add(1);
                sector_writer.write(0, &[v; 512], false).unwrap();
            }
        });
        // Stops the sector writer also when an assertion below fails, so the scope ends.
        struct StopOnDrop<'a>(&'a AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _stop = StopOnDrop(done);
        let aligned = SubBlockExport::new(Arc::clone(&disk), Arc::clone(&locks), 7);
        for round in 1..=ROUNDS {
            aligned.write(0, &[round; 4096], false).unwrap();
            // Longer than a read-modify-write that read before this write takes to write
            // back, so a revert would be visible now.
            thread::sleep(Duration::from_micros(500));
            let mut block = vec![0u8; 4096];
            aligned.read(0, &mut block).unwrap();
            assert!(
                block[512..].iter().all(|&b| b == round),
                "round {round}: sectors 1..8 reverted to {}",
                block[512]
            );
        }
    });
}

#[derive(Debug, Clone)]
enum Op {
    Write {
        sector: u64,
        sectors: u64,
        byte: u8,
    },
    Trim {
        sector: u64,
        sectors: u64,
    },
    Zero {
        sector: u64,
        sectors: u64,
        may_trim: bool,
    },
    Read {
        sector: u64,
        sectors: u64,
    },
}

/// 64 blocks of 8 sectors.
const MODEL_SECTORS: u64 = 512;

fn op() -> impl Strategy<Value = Op> {
    let range = (0..MODEL_SECTORS).prop_flat_map(|s| (Just(s), 1..=(MODEL_SECTORS - s).min(40)));
    prop_oneof![
        4 => (range.clone(), any::<u8>()).prop_map(|((sector, sectors), byte)| Op::Write {
            sector,
            sectors,
            byte
        }),
        1 => range.clone().prop_map(|(sector, sectors)| Op::Trim { sector, sectors }),
        1 => (range.clone(), any::<bool>()).prop_map(|((sector, sectors), may_trim)| Op::Zero {
            sector,
            sectors,
            may_trim
        }),
        2 => range.prop_map(|(sector, sectors)| Op::Read { sector, sectors }),
    ]
}

proptest! {
    /// Any sequence of sector-granular requests reads back exactly as a flat byte array
    /// would, and the inner handle only ever sees whole blocks (it asserts that).
    #[test]
    fn sector_io_matches_a_flat_model(ops in proptest::collection::vec(op(), 1..60)) {
        let disk = BlockDisk::new(MODEL_SECTORS * SECTOR, 512);
        let e = export(&disk);
        let mut model = vec![0u8; (MODEL_SECTORS * SECTOR) as usize];
        let bytes = |sector: u64, sectors: u64| {
            (sector * SECTOR) as usize..((sector + sectors) * SECTOR) as usize
        };
        for op in ops {
            match op {
                Op::Write { sector, sectors, byte } => {
                    let data: Vec<u8> = (0..sectors * SECTOR)
                        .map(|i| byte.wrapping_add((i / SECTOR) as u8))
                        .collect();
                    e.write(sector * SECTOR, &data, false).unwrap();
                    model[bytes(sector, sectors)].copy_from_slice(&data);
                }
                Op::Trim { sector, sectors } => {
                    e.trim(sector * SECTOR, sectors * SECTOR, false).unwrap();
                    model[bytes(sector, sectors)].fill(0);
                }
                Op::Zero { sector, sectors, may_trim } => {
                    e.write_zeroes(sector * SECTOR, sectors * SECTOR, may_trim, true).unwrap();
                    model[bytes(sector, sectors)].fill(0);
                }
                Op::Read { sector, sectors } => {
                    let mut buf = vec![0u8; (sectors * SECTOR) as usize];
                    e.read(sector * SECTOR, &mut buf).unwrap();
                    prop_assert_eq!(&buf[..], &model[bytes(sector, sectors)]);
                }
            }
        }
        let mut all = vec![0u8; model.len()];
        e.read(0, &mut all).unwrap();
        prop_assert_eq!(all, model);
    }
}
