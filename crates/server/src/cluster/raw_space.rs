//! How much raw space the up d.nodes offer, for the engine's admission of writes (its
//! ENOSPC before the disks are full). Each file system counts once however many d.node disks
//! share it: six d.nodes on one file system with 10 GB free offer 10 GB, not 60 (the capacity
//! report, `crate::capacity`, counts the same way).

use std::collections::BTreeMap;

use super::records::DiskRecord;

/// (capacity, used) in raw bytes over `disks`: used is the chunks' bytes; capacity is used
/// plus what the disks can still take.
pub fn raw_space<'a>(disks: impl IntoIterator<Item = &'a DiskRecord>) -> (u64, u64) {
    // File system -> its disks; a disk whose file system is unknown is its own.
    let mut by_fs: BTreeMap<String, Vec<&DiskRecord>> = BTreeMap::new();
    for (i, d) in disks.into_iter().enumerate() {
        let key = if d.fs_id.is_empty() {
            format!("unknown:{i}")
        } else {
            d.fs_id.clone()
        };
        by_fs.entry(key).or_default().push(d);
    }
    let (mut used, mut free) = (0u64, 0u64);
    for disks in by_fs.values() {
        used += disks.iter().map(|d| d.used_bytes).sum::<u64>();
        // What the disks may still take under their limits, when every one has a limit.
        let limited: Option<u64> = disks
            .iter()
            .map(|d| d.limit_bytes.map(|l| l.saturating_sub(d.used_bytes)))
            .sum();
        free += if disks[0].fs_id.is_empty() {
            disks
                .iter()
                .map(|d| d.capacity_bytes.saturating_sub(d.used_bytes))
                .sum()
        } else {
            let fs_free = disks[0].fs_free_bytes;
            limited.map_or(fs_free, |l| l.min(fs_free))
        };
    }
    (used + free, used)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GB: u64 = 1_000_000_000;

    fn disk(fs: &str, used: u64, limit: Option<u64>) -> DiskRecord {
        DiskRecord {
            path: "/d".into(),
            capacity_bytes: limit.unwrap_or(100 * GB),
            used_bytes: used,
            chunks: 0,
            limit_bytes: limit,
            fs_id: fs.into(),
            fs_size_bytes: 100 * GB,
            fs_free_bytes: 10 * GB,
        }
    }

    #[test]
    fn six_disks_on_one_file_system_offer_its_free_space_once() {
        let disks: Vec<DiskRecord> = (0..6).map(|_| disk("m:8:1", GB, None)).collect();
        assert_eq!(raw_space(&disks), (6 * GB + 10 * GB, 6 * GB));
    }

    #[test]
    fn limits_cap_a_file_system_and_file_systems_add_up() {
        let disks = vec![
            disk("m:8:1", GB, Some(2 * GB)),
            disk("m:8:1", GB, Some(3 * GB)),
            disk("m:8:2", 0, None),
        ];
        // fs 1: 1 + 2 GB left under the limits (less than its 10 GB free); fs 2: 10 GB free.
        assert_eq!(raw_space(&disks), (2 * GB + 3 * GB + 10 * GB, 2 * GB));
    }

    #[test]
    fn a_disk_on_an_unknown_file_system_offers_its_capacity() {
        let mut d = disk("", GB, Some(4 * GB));
        d.fs_free_bytes = 0;
        assert_eq!(raw_space([&d, &d.clone()]), (8 * GB, 2 * GB));
    }
}
