//! Heat: how often each extent of each volume is read and written, over the last hour, day and
//! week. Pure state (no clock, no files): time is passed in as unix seconds.
//!
//! - The I/O path ([`VolumeHeat::record`]) adds to the extent's pending counters: relaxed
//!   atomic adds under the volume's shared (read) lock, which only a volume's growth takes
//!   exclusively. No global lock, no allocation.
//! - The folder ([`VolumeHeat::fold`], every minute and before every reading) moves the
//!   pending counts into three rings per extent: 12 five-minute slots (the hour), 24 hour
//!   slots (the day), 7 day slots (the week). A slot is cleared when its time comes round
//!   again, so each window is a sum of whole slots plus the current partial one: the hour
//!   window covers the last 55 to 60 minutes, the day 23 to 24 hours, the week 6 to 7 days,
//!   and [`Window::covered_s`] says exactly how many seconds (never more than the volume has
//!   been counted). Counts are attributed to the slot of the fold that moves them (at most a
//!   fold interval late).
//! - Memory per extent: pending reads/writes and cumulative read/write bytes (4 x 8 bytes)
//!   plus the rings (12 x 8 + 24 x 8 + 7 x 16 bytes): 432 bytes. At the default 64 MiB
//!   extent: 16,384 extents per TiB of volume, 6.75 MiB per TiB.
//!
//! An I/O counts once, in the extent of its first byte (64 MiB extents: an I/O crossing a
//! boundary is rare and its second extent is not credited).

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};

/// The default extent size (`--heat-extent-size`).
pub const DEFAULT_EXTENT_BYTES: u64 = 64 << 20;
/// Bytes of memory per extent (see the module comment).
pub const BYTES_PER_EXTENT: u64 = 4 * 8 + 12 * 8 + 24 * 8 + 7 * 16;

/// One of the three windows heat is read over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Window {
    Hour,
    Day,
    Week,
}

impl Window {
    pub const ALL: [Window; 3] = [Window::Hour, Window::Day, Window::Week];

    /// The slot width (seconds) and slot count of the window's ring.
    const fn ring(self) -> (u64, u64) {
        match self {
            Window::Hour => (300, 12),
            Window::Day => (3600, 24),
            Window::Week => (86_400, 7),
        }
    }

    pub const fn index(self) -> usize {
        match self {
            Window::Hour => 0,
            Window::Day => 1,
            Window::Week => 2,
        }
    }

    /// The seconds the window's slots cover at `now_s` for a volume counted since
    /// `started_s`: from the start of its oldest slot (or the start of counting, if later)
    /// to now, at least 1.
    pub fn covered_s(self, now_s: u64, started_s: u64) -> u64 {
        let (width, slots) = self.ring();
        let oldest_slot_start = (now_s / width).saturating_sub(slots - 1) * width;
        now_s
            .saturating_sub(oldest_slot_start.max(started_s))
            .max(1)
    }

    pub fn parse(text: &str) -> Option<Window> {
        match text {
            "hour" => Some(Window::Hour),
            "day" => Some(Window::Day),
            "week" => Some(Window::Week),
            _ => None,
        }
    }
}

/// What the I/O path touches: atomics only.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    pub reads: AtomicU64,
    pub writes: AtomicU64,
    pub read_bytes: AtomicU64,
    pub write_bytes: AtomicU64,
}

/// Reads and writes in one slot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Slot<T> {
    pub reads: T,
    pub writes: T,
}

/// One extent's rings (touched by the folder and readers only).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rings {
    pub hour: [Slot<u32>; 12],
    pub day: [Slot<u32>; 24],
    pub week: [Slot<u64>; 7],
}

impl Rings {
    fn is_zero(&self) -> bool {
        *self == Rings::default()
    }

    fn add(&mut self, slots: [usize; 3], reads: u64, writes: u64) {
        let small = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        let h = &mut self.hour[slots[0]];
        h.reads = h.reads.saturating_add(small(reads));
        h.writes = h.writes.saturating_add(small(writes));
        let d = &mut self.day[slots[1]];
        d.reads = d.reads.saturating_add(small(reads));
        d.writes = d.writes.saturating_add(small(writes));
        let w = &mut self.week[slots[2]];
        w.reads = w.reads.saturating_add(reads);
        w.writes = w.writes.saturating_add(writes);
    }

    fn clear(&mut self, window: Window, slot: usize) {
        match window {
            Window::Hour => self.hour[slot] = Slot::default(),
            Window::Day => self.day[slot] = Slot::default(),
            Window::Week => self.week[slot] = Slot::default(),
        }
    }

    /// Reads and writes over the window (every slot: the folder cleared stale ones).
    pub fn sum(&self, window: Window) -> Slot<u64> {
        fn total<T: Copy + Into<u64>>(slots: &[Slot<T>]) -> Slot<u64> {
            slots.iter().fold(Slot::default(), |a, s| Slot {
                reads: a.reads + s.reads.into(),
                writes: a.writes + s.writes.into(),
            })
        }
        match window {
            Window::Hour => total(&self.hour),
            Window::Day => total(&self.day),
            Window::Week => total(&self.week),
        }
    }
}

/// The folded state of a volume: what is persisted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Folded {
    /// When counting began (unix s).
    pub started_s: u64,
    /// The time of the last fold (unix s).
    pub folded_s: u64,
    /// Per extent.
    pub rings: Vec<Rings>,
    /// Cumulative bytes read and written per extent, since counting began.
    pub bytes: Vec<Slot<u64>>,
}

/// One extent's figures as read at a time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExtentReading {
    /// Reads and writes per window (hour, day, week).
    pub ops: [Slot<u64>; 3],
    /// Cumulative bytes since counting began.
    pub bytes: Slot<u64>,
}

/// The heat of one volume.
#[derive(Debug)]
pub struct VolumeHeat {
    extent_bytes: u64,
    pending: RwLock<Vec<Pending>>,
    folded: Mutex<Folded>,
}

impl VolumeHeat {
    /// A volume of `size_bytes`, counted from `now_s`.
    pub fn new(extent_bytes: u64, size_bytes: u64, now_s: u64) -> VolumeHeat {
        let folded = Folded {
            started_s: now_s,
            folded_s: now_s,
            ..Folded::default()
        };
        VolumeHeat::restore(extent_bytes, size_bytes, folded)
    }

    /// A volume as persisted (grown to `size_bytes` if it grew since).
    pub fn restore(extent_bytes: u64, size_bytes: u64, mut folded: Folded) -> VolumeHeat {
        let extents = usize::try_from(size_bytes.div_ceil(extent_bytes.max(1))).unwrap_or(0);
        let extents = extents.max(folded.rings.len());
        folded.rings.resize(extents, Rings::default());
        folded.bytes.resize(extents, Slot::default());
        VolumeHeat {
            extent_bytes: extent_bytes.max(1),
            pending: RwLock::new((0..extents).map(|_| Pending::default()).collect()),
            folded: Mutex::new(folded),
        }
    }

    pub fn extent_bytes(&self) -> u64 {
        self.extent_bytes
    }

    /// The time of the last fold (unix s): which of two copies of a volume's heat is newer.
    pub fn folded_s(&self) -> u64 {
        self.folded.lock().folded_s
    }

    pub fn extent_count(&self) -> usize {
        self.pending.read().len()
    }

    /// The I/O path: one read or write of `bytes` at `offset_bytes`.
    pub fn record(&self, write: bool, offset_bytes: u64, bytes: u64) {
        let index = usize::try_from(offset_bytes / self.extent_bytes).unwrap_or(usize::MAX);
        {
            let pending = self.pending.read();
            if let Some(p) = pending.get(index) {
                count(p, write, bytes);
                return;
            }
        }
        // The volume grew: the only time the I/O path takes the exclusive lock.
        let mut pending = self.pending.write();
        if pending.len() <= index {
            pending.resize_with(index + 1, Pending::default);
        }
        count(&pending[index], write, bytes);
    }

    /// Moves the pending counts into the rings at `now_s`, clearing the slots whose time came
    /// round again since the last fold.
    pub fn fold(&self, now_s: u64) {
        let mut folded = self.folded.lock();
        let pending = self.pending.read();
        let extents = pending.len();
        if folded.rings.len() < extents {
            folded.rings.resize(extents, Rings::default());
            folded.bytes.resize(extents, Slot::default());
        }
        let last_s = folded.folded_s;
        for window in Window::ALL {
            let (width, slots) = window.ring();
            let (last, now) = (last_s / width, now_s / width);
            // Slots of epochs last+1..=now (at most one round) start afresh.
            for epoch in (last + 1..=now).take(slots as usize) {
                let slot = (epoch % slots) as usize;
                for rings in &mut folded.rings {
                    rings.clear(window, slot);
                }
            }
        }
        let slots = Window::ALL.map(|w| {
            let (width, count) = w.ring();
            ((now_s / width) % count) as usize
        });
        for (i, p) in pending.iter().enumerate() {
            let reads = p.reads.swap(0, Ordering::Relaxed);
            let writes = p.writes.swap(0, Ordering::Relaxed);
            let read_bytes = p.read_bytes.swap(0, Ordering::Relaxed);
            let write_bytes = p.write_bytes.swap(0, Ordering::Relaxed);
            if reads | writes | read_bytes | write_bytes == 0 {
                continue;
            }
            folded.rings[i].add(slots, reads, writes);
            let b = &mut folded.bytes[i];
            b.reads = b.reads.saturating_add(read_bytes);
            b.writes = b.writes.saturating_add(write_bytes);
        }
        folded.folded_s = folded.folded_s.max(now_s);
    }

    /// Folds at `now_s`, then reads every extent.
    pub fn read(&self, now_s: u64) -> (u64, Vec<ExtentReading>) {
        self.fold(now_s);
        let folded = self.folded.lock();
        let readings = folded
            .rings
            .iter()
            .zip(&folded.bytes)
            .map(|(rings, bytes)| ExtentReading {
                ops: Window::ALL.map(|w| rings.sum(w)),
                bytes: *bytes,
            })
            .collect();
        (folded.started_s, readings)
    }

    /// Folds at `now_s` and returns a copy of the state to persist.
    pub fn snapshot(&self, now_s: u64) -> Folded {
        self.fold(now_s);
        self.folded.lock().clone()
    }

    /// Whether nothing was counted (nothing worth persisting).
    pub fn is_cold(&self) -> bool {
        let folded = self.folded.lock();
        folded.rings.iter().all(Rings::is_zero)
    }
}

fn count(p: &Pending, write: bool, bytes: u64) {
    if write {
        p.writes.fetch_add(1, Ordering::Relaxed);
        p.write_bytes.fetch_add(bytes, Ordering::Relaxed);
    } else {
        p.reads.fetch_add(1, Ordering::Relaxed);
        p.read_bytes.fetch_add(bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    /// A time on a day boundary (and so on every slot boundary).
    const T0: u64 = 20_000 * 86_400;

    fn ops(h: &VolumeHeat, now: u64, extent: usize, w: Window) -> (u64, u64) {
        let (_, r) = h.read(now);
        let s = r[extent].ops[w.index()];
        (s.reads, s.writes)
    }

    #[test]
    fn counts_land_in_the_extent_of_their_offset() {
        let h = VolumeHeat::new(64 * MIB, 256 * MIB, T0);
        for _ in 0..10 {
            h.record(false, 64 * MIB + 4096, 4096);
        }
        h.record(true, 0, 8192);
        h.record(true, 255 * MIB, 4096);
        let (started, r) = h.read(T0 + 10);
        assert_eq!(started, T0);
        assert_eq!(r.len(), 4);
        assert_eq!(
            r[1].ops[0],
            Slot {
                reads: 10,
                writes: 0
            }
        );
        assert_eq!(
            r[1].bytes,
            Slot {
                reads: 40_960,
                writes: 0
            }
        );
        assert_eq!(
            r[0].ops[2],
            Slot {
                reads: 0,
                writes: 1
            }
        );
        assert_eq!(r[0].bytes.writes, 8192);
        assert_eq!(r[3].ops[1].writes, 1);
        assert_eq!(r[2].ops[1], Slot::default());
    }

    #[test]
    fn windows_roll_over() {
        let h = VolumeHeat::new(64 * MIB, 64 * MIB, T0);
        for _ in 0..100 {
            h.record(false, 0, 4096);
        }
        h.fold(T0 + 30);
        // 55 minutes later the hour window still has them (the same 5-minute slot is 11
        // slots back)...
        assert_eq!(ops(&h, T0 + 3300, 0, Window::Hour), (100, 0));
        // ... an hour and 5 minutes later it no longer does; the day and week still do.
        assert_eq!(ops(&h, T0 + 3900, 0, Window::Hour), (0, 0));
        assert_eq!(ops(&h, T0 + 3900, 0, Window::Day), (100, 0));
        for _ in 0..7 {
            h.record(true, 0, 4096);
        }
        assert_eq!(ops(&h, T0 + 4000, 0, Window::Hour), (0, 7));
        assert_eq!(ops(&h, T0 + 4000, 0, Window::Day), (100, 7));
        // A day later: only the week.
        assert_eq!(ops(&h, T0 + 86_400 + 3600, 0, Window::Day), (0, 0));
        assert_eq!(ops(&h, T0 + 86_400 + 3600, 0, Window::Week), (100, 7));
        // Eight days later: nothing; a jump of more than a round clears every slot once.
        assert_eq!(ops(&h, T0 + 8 * 86_400, 0, Window::Week), (0, 0));
    }

    #[test]
    fn covered_seconds_start_at_the_oldest_slot_or_the_start_of_counting() {
        // Counted for 90 s: every window covers those 90 s.
        for w in Window::ALL {
            assert_eq!(w.covered_s(T0 + 90, T0), 90);
        }
        // Two days in, at 12 minutes past an hour: the hour window starts 11 five-minute
        // slots before the current one's start (10 min past): 55 min + 2 min.
        let now = T0 + 2 * 86_400 + 3600 * 5 + 12 * 60;
        assert_eq!(Window::Hour.covered_s(now, T0), 57 * 60);
        assert_eq!(Window::Day.covered_s(now, T0), 23 * 3600 + 12 * 60);
        assert_eq!(
            Window::Week.covered_s(now, T0),
            2 * 86_400 + 5 * 3600 + 12 * 60
        );
        assert_eq!(Window::Hour.covered_s(T0, T0), 1, "never zero");
    }

    #[test]
    fn a_grown_volume_counts_its_new_extents() {
        let h = VolumeHeat::new(64 * MIB, 64 * MIB, T0);
        h.record(true, 200 * MIB, 4096);
        let (_, r) = h.read(T0 + 1);
        assert_eq!(r.len(), 4);
        assert_eq!(r[3].ops[0].writes, 1);
    }

    #[test]
    fn a_restored_volume_keeps_its_counts() {
        let h = VolumeHeat::new(64 * MIB, 128 * MIB, T0);
        h.record(false, 64 * MIB, 4096);
        let saved = h.snapshot(T0 + 60);
        assert!(!h.is_cold());
        let back = VolumeHeat::restore(64 * MIB, 128 * MIB, saved.clone());
        assert_eq!(back.snapshot(T0 + 60), saved);
        assert_eq!(ops(&back, T0 + 120, 1, Window::Hour), (1, 0));
    }
}
