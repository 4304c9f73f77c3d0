//! Capacity as an operator plans with it (`GET /api/v1/capacity`, `weft status`, `/metrics`,
//! the UI): the real free space of the file systems under the data dir and every d.node
//! disk, each file system counted once however many disks share it; what weft's chunks use;
//! what that leaves for host data after redundancy; how far the volumes are overcommitted;
//! and, from the recent growth of the used bytes, how many days are left. Warnings at 80 %
//! and 90 % of weft's space, and of any file system it writes to.
//!
//! [`report`] is pure (figures in, report out); [`gather`] asks the engine, the cluster view
//! and statvfs for the figures; [`CapacityHistory`] keeps the used bytes over the last day
//! (sampled every minute by the server and on every report) for the growth rate.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use weft_chunk::{fs_space, FsSpace};
use weft_ec::Redundancy;
use weft_engine::Engine;

use crate::cluster::ClusterPlacement;

/// Used share of a space at which a warning is raised.
pub const WARNING_PERCENT: f64 = 80.0;
/// Used share at which the warning becomes critical: writes are near ENOSPC.
pub const CRITICAL_PERCENT: f64 = 90.0;
const _: () = assert!(WARNING_PERCENT < CRITICAL_PERCENT);

/// How long the history reaches back: "recent" growth is the last day's.
const HISTORY_WINDOW_MS: u64 = 24 * 3600 * 1000;
/// Samples closer together than this are not kept (the UI polls every few seconds).
const HISTORY_SPACING_MS: u64 = 1000;
/// Samples kept: a day of one-minute samples, with room for the denser ones of reports.
const HISTORY_SAMPLES_MAX: usize = 2048;
/// How often the server samples on its own, without reports.
pub const SAMPLE_INTERVAL_MS: u64 = 60_000;
const DAY_MS: f64 = 86_400_000.0;

/// How full the space is.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Ok,
    /// At or above 80 %.
    Warning,
    /// At or above 90 %.
    Critical,
}

/// `GET /api/v1/capacity`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CapacityReport {
    /// Each file system under the data dir or a d.node disk, once.
    pub filesystems: Vec<FileSystemSpace>,
    /// Bytes of chunks stored, raw (copies and parity included).
    pub used_bytes: u64,
    /// Raw bytes host writes can still fill: the free space of the chunk stores' file
    /// systems (each counted once), capped by configured limits (`--capacity`), less
    /// `reserved_bytes`.
    pub free_bytes: u64,
    /// Raw bytes kept for sealing and GC: writes are refused (ENOSPC) before they reach it.
    pub reserved_bytes: u64,
    /// `used_bytes + free_bytes`: all the raw space weft can fill.
    pub raw_bytes: u64,
    /// `used_bytes` as a share of `raw_bytes`, in percent.
    pub used_percent: f64,
    /// The redundancy the usable figure assumes: the pool with the most overhead (`none` in
    /// single-process mode).
    pub redundancy: String,
    /// Host data that fits in `raw_bytes` after redundancy (`raw × k / (k + m)`).
    pub usable_bytes: u64,
    /// Host data that still fits: `free_bytes` after redundancy.
    pub usable_free_bytes: u64,
    /// The sum of the volumes' sizes (snapshots excluded).
    pub provisioned_bytes: u64,
    /// `provisioned / usable`: above 1, the volumes cannot all be filled. Absent with no
    /// usable space.
    pub overcommit: Option<f64>,
    /// How fast `used_bytes` grew over `growth_window_s`, per day; absent until two samples
    /// a second apart exist.
    pub growth_bytes_per_day: Option<f64>,
    /// The span of the samples the growth is measured over.
    pub growth_window_s: u64,
    /// `free_bytes` at that growth; absent when not growing.
    pub days_to_full: Option<f64>,
    /// The worst of weft's space and of each file system.
    pub level: Level,
    /// One sentence per space at or above 80 %.
    pub warnings: Vec<String>,
}

/// One file system, with the data dirs and disks on it.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FileSystemSpace {
    /// `<machine id>:<device>`.
    pub fs_id: String,
    /// What is on it: `data dir /var/lib/weft`, `local /var/lib/weft/dnode0/chunks`,
    /// `d.node dn-1 /data/0`.
    pub paths: Vec<String>,
    pub size_bytes: u64,
    /// Free for a writer without root.
    pub free_bytes: u64,
    /// `(size − free) / size`, in percent: everything on it, not only weft.
    pub used_percent: f64,
    /// Of the used bytes, weft's chunks.
    pub weft_used_bytes: u64,
}

/// A place weft writes to: a chunk store (single-process's local one, a d.node disk) or the
/// data dir (journal, metadata).
#[derive(Debug, Clone)]
pub struct Place {
    pub name: String,
    /// The file system under it now; `None`: unknown (a d.node that does not report it).
    pub fs: Option<FsSpace>,
    /// Bytes of chunks on it (0 for the data dir).
    pub used_bytes: u64,
    /// Its configured limit (`None`: until the file system is full).
    pub limit_bytes: Option<u64>,
    /// Holds chunks: its room counts in `free_bytes`.
    pub holds_chunks: bool,
}

/// Everything [`report`] needs.
#[derive(Debug, Clone)]
pub struct Figures {
    pub places: Vec<Place>,
    pub redundancy: Redundancy,
    pub provisioned_bytes: u64,
    /// See [`weft_engine::space::write_reserve_bytes`].
    pub reserve_bytes: u64,
}

/// The used bytes over the last day.
#[derive(Debug, Default)]
pub struct CapacityHistory {
    samples: Mutex<VecDeque<(u64, u64)>>,
}

impl CapacityHistory {
    /// Keep `used_bytes` at `now_ms` (unless the last sample is under a second old).
    pub fn record(&self, now_ms: u64, used_bytes: u64) {
        let mut samples = self.samples.lock();
        if samples
            .back()
            .is_some_and(|&(t, _)| now_ms.saturating_sub(t) < HISTORY_SPACING_MS)
        {
            return;
        }
        samples.push_back((now_ms, used_bytes));
        while samples.len() > HISTORY_SAMPLES_MAX
            || samples
                .front()
                .is_some_and(|&(t, _)| now_ms.saturating_sub(t) > HISTORY_WINDOW_MS)
        {
            samples.pop_front();
        }
    }

    /// Growth per day from the oldest kept sample to the newest, and the span in seconds.
    pub fn growth(&self) -> Option<(f64, u64)> {
        let samples = self.samples.lock();
        let (&(t0, u0), &(t1, u1)) = (samples.front()?, samples.back()?);
        let span_ms = t1.saturating_sub(t0);
        if span_ms < HISTORY_SPACING_MS {
            return None;
        }
        #[allow(clippy::cast_precision_loss)]
        let per_day = (u1 as f64 - u0 as f64) * DAY_MS / span_ms as f64;
        Some((per_day, span_ms / 1000))
    }
}

/// Ask the engine, the cluster view and the file systems for the figures now.
pub fn gather(engine: &Engine, cluster: Option<&ClusterPlacement>) -> Figures {
    let data_dir = engine.config().data_dir.clone();
    let stats = engine.stats();
    let mut places = vec![Place {
        name: format!("data dir {}", data_dir.display()),
        fs: fs_space(&data_dir),
        used_bytes: 0,
        limit_bytes: None,
        holds_chunks: false,
    }];
    let redundancy = match cluster {
        None => {
            // Single-process mode: one local store under the data dir (see
            // `Engine::open_local`).
            let chunks = local_chunks_dir(&data_dir);
            places.push(Place {
                name: format!("local {}", chunks.display()),
                fs: local_fs(&data_dir),
                used_bytes: stats.used_bytes,
                limit_bytes: stats.capacity_bytes,
                holds_chunks: true,
            });
            Redundancy::None
        }
        Some(cluster) => {
            for (node, disks) in cluster.up_disks() {
                for d in disks {
                    places.push(Place {
                        name: format!("d.node {node} {}", d.path),
                        fs: (!d.fs_id.is_empty()).then(|| FsSpace {
                            fs_id: d.fs_id.clone(),
                            size_bytes: d.fs_size_bytes,
                            free_bytes: d.fs_free_bytes,
                        }),
                        used_bytes: d.used_bytes,
                        // A d.node from before `limit_bytes` reports only its capacity.
                        limit_bytes: d
                            .limit_bytes
                            .or(d.fs_id.is_empty().then_some(d.capacity_bytes)),
                        holds_chunks: true,
                    });
                }
            }
            cluster
                .pools()
                .iter()
                .filter_map(|p| Redundancy::parse(&p.redundancy).ok())
                .max_by(|a, b| overhead(*a).total_cmp(&overhead(*b)))
                .unwrap_or(Redundancy::None)
        }
    };
    let provisioned_bytes = engine
        .list_images()
        .iter()
        .filter(|i| !i.read_only)
        .map(|i| i.size_bytes)
        .sum();
    Figures {
        places,
        redundancy,
        provisioned_bytes,
        reserve_bytes: weft_engine::space::write_reserve_bytes(engine.config()),
    }
}

/// What a single-process datastore reports as its local d.node's capacity: the `--capacity`
/// limit, else the size of the file system under its chunks, as a cluster d.node reports a
/// disk (`None` when neither is known). Before, it said "0 B" or "unlimited" beside a file
/// system that had a size.
pub fn local_store_capacity_bytes(engine: &Engine, limit_bytes: Option<u64>) -> Option<u64> {
    limit_bytes.or_else(|| local_fs(&engine.config().data_dir).map(|f| f.size_bytes))
}

/// The local store of a single-process datastore (see `Engine::open_local`).
fn local_chunks_dir(data_dir: &Path) -> std::path::PathBuf {
    data_dir.join("dnode0").join("chunks")
}

/// The file system under the local store, or under the data dir before the store exists.
fn local_fs(data_dir: &Path) -> Option<FsSpace> {
    fs_space(&local_chunks_dir(data_dir)).or_else(|| fs_space(data_dir))
}

/// The report of now, recorded in `history`.
pub fn report_now(
    engine: &Engine,
    cluster: Option<&ClusterPlacement>,
    history: &CapacityHistory,
) -> CapacityReport {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    report(&gather(engine, cluster), history, now_ms)
}

/// Raw bytes stored per byte of host data.
fn overhead(r: Redundancy) -> f64 {
    f64::from(r.total_chunks()) / f64::from(r.data_chunks())
}

/// The report of `figures`, with the growth `history` measured (after recording the used
/// bytes of now in it).
pub fn report(figures: &Figures, history: &CapacityHistory, now_ms: u64) -> CapacityReport {
    // Group the places by file system; a place whose file system is unknown is its own.
    let mut by_fs: BTreeMap<String, Vec<&Place>> = BTreeMap::new();
    for p in &figures.places {
        let key =
            p.fs.as_ref()
                .map_or_else(|| format!("unknown:{}", p.name), |f| f.fs_id.clone());
        by_fs.entry(key).or_default().push(p);
    }
    let mut filesystems = Vec::new();
    let (mut used, mut free) = (0u64, 0u64);
    for (fs_id, places) in &by_fs {
        let stores: Vec<&&Place> = places.iter().filter(|p| p.holds_chunks).collect();
        let weft_used: u64 = stores.iter().map(|p| p.used_bytes).sum();
        used += weft_used;
        // What the stores on it can still take: its free space once, or less when every one
        // of them has a limit.
        let limited: Option<u64> = stores
            .iter()
            .map(|p| p.limit_bytes.map(|l| l.saturating_sub(p.used_bytes)))
            .sum();
        match places.iter().find_map(|p| p.fs.as_ref()) {
            Some(fs) => {
                if !stores.is_empty() {
                    free += limited.map_or(fs.free_bytes, |l| l.min(fs.free_bytes));
                }
                filesystems.push(FileSystemSpace {
                    fs_id: fs_id.clone(),
                    paths: places.iter().map(|p| p.name.clone()).collect(),
                    size_bytes: fs.size_bytes,
                    free_bytes: fs.free_bytes,
                    used_percent: percent(
                        fs.size_bytes.saturating_sub(fs.free_bytes),
                        fs.size_bytes,
                    ),
                    weft_used_bytes: weft_used,
                });
            }
            // Unknown file system: only a limit says how much room there is.
            None => free += limited.unwrap_or(0),
        }
    }
    let reserved = figures.reserve_bytes.min(free);
    let free = free - reserved;
    let raw = used + free;
    let used_percent = percent(used, raw);
    let overhead = overhead(figures.redundancy);
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let after_redundancy = |raw: u64| (raw as f64 / overhead) as u64;
    let usable = after_redundancy(raw);
    history.record(now_ms, used);
    let growth = history.growth();
    let growth_bytes_per_day = growth.map(|(g, _)| g);
    #[allow(clippy::cast_precision_loss)]
    let days_to_full = growth_bytes_per_day
        .filter(|g| *g > 0.0)
        .map(|g| free as f64 / g);
    let mut warnings = Vec::new();
    let mut level = level_of(used_percent);
    if level > Level::Ok {
        warnings.push(format!(
            "weft's space is {used_percent:.0} % used ({} free of {}{})",
            binary(free),
            binary(raw),
            days_to_full.map_or(String::new(), |d| format!(
                ", full in {d:.1} days at the recent growth"
            ))
        ));
    }
    for fs in &filesystems {
        let l = level_of(fs.used_percent);
        if l > Level::Ok {
            warnings.push(format!(
                "file system of {} is {:.0} % full ({} free of {})",
                fs.paths.join(", "),
                fs.used_percent,
                binary(fs.free_bytes),
                binary(fs.size_bytes)
            ));
            level = level.max(l);
        }
    }
    #[allow(clippy::cast_precision_loss)]
    let overcommit = (usable > 0).then(|| figures.provisioned_bytes as f64 / usable as f64);
    CapacityReport {
        filesystems,
        used_bytes: used,
        free_bytes: free,
        reserved_bytes: reserved,
        raw_bytes: raw,
        used_percent,
        redundancy: figures.redundancy.to_string(),
        usable_bytes: usable,
        usable_free_bytes: after_redundancy(free),
        provisioned_bytes: figures.provisioned_bytes,
        overcommit,
        growth_bytes_per_day,
        growth_window_s: growth.map_or(0, |(_, s)| s),
        days_to_full,
        level,
        warnings,
    }
}

fn level_of(used_percent: f64) -> Level {
    if used_percent >= CRITICAL_PERCENT {
        Level::Critical
    } else if used_percent >= WARNING_PERCENT {
        Level::Warning
    } else {
        Level::Ok
    }
}

#[allow(clippy::cast_precision_loss)]
fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// `1.5 GiB`: sizes in messages are binary, never raw bytes.
pub fn binary(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut unit = 0;
    #[allow(clippy::cast_precision_loss)]
    let mut value = bytes as f64;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn fs(id: &str, size: u64, free: u64) -> Option<FsSpace> {
        Some(FsSpace {
            fs_id: id.into(),
            size_bytes: size,
            free_bytes: free,
        })
    }

    fn store(name: &str, fs: Option<FsSpace>, used: u64, limit: Option<u64>) -> Place {
        Place {
            name: name.into(),
            fs,
            used_bytes: used,
            limit_bytes: limit,
            holds_chunks: true,
        }
    }

    #[test]
    fn six_dnodes_on_one_file_system_count_its_free_space_once() {
        let mut places: Vec<Place> = (0..6)
            .map(|i| {
                store(
                    &format!("d.node dn{i} /d{i}"),
                    fs("m:1", 100 * GIB, 45 * GIB),
                    GIB,
                    None,
                )
            })
            .collect();
        places.push(Place {
            name: "data dir /w".into(),
            fs: fs("m:1", 100 * GIB, 45 * GIB),
            used_bytes: 0,
            limit_bytes: None,
            holds_chunks: false,
        });
        let figures = Figures {
            places,
            redundancy: Redundancy::parse("4+2").unwrap(),
            provisioned_bytes: 60 * GIB,
            reserve_bytes: 0,
        };
        let r = report(&figures, &CapacityHistory::default(), 0);
        assert_eq!(r.filesystems.len(), 1);
        assert_eq!(r.filesystems[0].paths.len(), 7);
        assert_eq!(r.free_bytes, 45 * GIB);
        assert_eq!(r.used_bytes, 6 * GIB);
        assert_eq!(r.raw_bytes, 51 * GIB);
        assert_eq!(r.usable_bytes, 34 * GIB);
        assert!((r.overcommit.unwrap() - 60.0 / 34.0).abs() < 1e-9);
        assert_eq!(r.filesystems[0].used_percent, 55.0);
        assert_eq!(r.level, Level::Ok);
        assert!(r.warnings.is_empty());
        assert_eq!(r.days_to_full, None);
    }

    #[test]
    fn a_limit_caps_the_room_and_warnings_start_at_80_and_90_percent() {
        let history = CapacityHistory::default();
        let figures = |used| Figures {
            places: vec![store(
                "local /c",
                fs("m:1", 1000 * GIB, 900 * GIB),
                used,
                Some(10 * GIB),
            )],
            redundancy: Redundancy::None,
            provisioned_bytes: 20 * GIB,
            reserve_bytes: 0,
        };
        let r = report(&figures(5 * GIB), &history, 1_000);
        assert_eq!((r.free_bytes, r.raw_bytes), (5 * GIB, 10 * GIB));
        assert_eq!(r.overcommit, Some(2.0));
        assert_eq!(r.level, Level::Ok);
        let r = report(&figures(8 * GIB), &history, 1_000 + DAY_MS as u64 / 2);
        assert_eq!(r.level, Level::Warning);
        // 3 GiB in half a day: 6 GiB a day, 2 GiB left: a third of a day.
        assert_eq!(r.growth_bytes_per_day, Some(6.0 * GIB as f64));
        assert!((r.days_to_full.unwrap() - 1.0 / 3.0).abs() < 1e-9);
        assert!(
            r.warnings[0].starts_with(
                "weft's space is 80 % used (2.0 GiB free of 10.0 GiB, full in 0.3 days"
            ),
            "{:?}",
            r.warnings
        );
        let r = report(
            &figures(9 * GIB + GIB / 2),
            &history,
            2_000 + DAY_MS as u64 / 2,
        );
        assert_eq!(r.level, Level::Critical);
    }

    #[test]
    fn a_full_file_system_warns_even_when_weft_uses_little_of_it() {
        let figures = Figures {
            places: vec![store("local /c", fs("m:1", 100 * GIB, 5 * GIB), GIB, None)],
            redundancy: Redundancy::None,
            provisioned_bytes: 0,
            reserve_bytes: 0,
        };
        let r = report(&figures, &CapacityHistory::default(), 0);
        assert_eq!(r.level, Level::Critical);
        assert_eq!(
            r.warnings,
            vec!["file system of local /c is 95 % full (5.0 GiB free of 100.0 GiB)".to_string()]
        );
    }

    #[test]
    fn history_keeps_a_day_spaced_a_second_apart() {
        let h = CapacityHistory::default();
        h.record(0, 0);
        h.record(500, 10);
        assert_eq!(h.growth(), None);
        h.record(2_000, 100);
        assert_eq!(h.growth(), Some((100.0 * DAY_MS / 2000.0, 2)));
        h.record(HISTORY_WINDOW_MS + 1_000, 100);
        // The first sample is now older than a day.
        assert_eq!(h.samples.lock().front().copied(), Some((2_000, 100)));
    }

    #[test]
    fn the_write_reserve_is_not_free() {
        let figures = Figures {
            places: vec![store(
                "local /c",
                fs("m:1", 100 * GIB, 50 * GIB),
                0,
                Some(GIB),
            )],
            redundancy: Redundancy::None,
            provisioned_bytes: GIB,
            reserve_bytes: 48 << 20,
        };
        let r = report(&figures, &CapacityHistory::default(), 0);
        assert_eq!(r.reserved_bytes, 48 << 20);
        assert_eq!(r.free_bytes, GIB - (48 << 20));
        assert_eq!(r.raw_bytes, r.free_bytes);
        // A store with less room than the reserve has none free, and reserves what there is.
        let tiny = Figures {
            places: vec![store(
                "local /c",
                fs("m:1", 100 * GIB, 50 * GIB),
                0,
                Some(16 << 20),
            )],
            ..figures
        };
        let r = report(&tiny, &CapacityHistory::default(), 0);
        assert_eq!((r.free_bytes, r.reserved_bytes), (0, 16 << 20));
    }

    #[test]
    fn sizes_in_messages_are_binary() {
        assert_eq!(binary(512), "512 B");
        assert_eq!(binary(10 * GIB), "10.0 GiB");
        assert_eq!(binary(1 << 52), "4.0 PiB");
        assert_eq!(binary(u64::MAX), "16.0 EiB");
    }
}
