//! `HotTable::record` rebuilt on `dashmap::DashMap`, for the `dashmap` rows: the same key, the
//! same per-entry work (window count and threshold, decayed heat, node, load/store counts, the
//! queued flag), the same number of shards, the same hash, a bound on the number of tracked
//! pages with coldest-first eviction.
//!
//! What it does differently, and which way that leans:
//!
//! - The bound is global (one shared atomic count), not per shard. `HotTable` gives each shard
//!   `max_tracked_pages / shards` slots, so with exactly `max_tracked_pages` distinct pages its
//!   fuller shards still evict (about 0.016 evictions per sample in `table 1Mi`); this table
//!   evicts nothing there. That favours it in the `1Mi` rows: compare them with
//!   `diag table no-evict` as well.
//! - Eviction drops the coldest 1/8 of the whole table (a read pass for the heat histogram, then
//!   `retain`), one shard lock at a time, while other threads keep inserting; a thread that
//!   finds the table full while another is evicting inserts anyway, so the bound can overshoot
//!   by up to one page per thread. `HotTable` evicts within one shard under that shard's lock
//!   and never overshoots.
//! - Heat decays to the time of the access that triggered the eviction, not to a per-shard
//!   clock: the per-sample path keeps no clock at all (`HotTable` stores one per shard under
//!   the lock it already holds).
//! - It is not bounded in memory: hashbrown grows a shard that outgrows its capacity (here
//!   7168 pages per shard, never reached) and leaves tombstones after removals that later
//!   cost an in-place rehash. `HotTable` never allocates after creation.
//! - No lock-free `prefetch` of a key's slot (only the recorder's batch path uses it; the
//!   table rows do not).

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use dashmap::DashMap;
use dashmap::mapref::entry::Entry as MapEntry;
use parking_lot::Mutex;

use pghotd::hotness::entry::HEAT_ONE;
use pghotd::hotness::{Access, HotnessConfig, PageKey, Recorded};
use pghotd::sample::AccessOp;
use pghotd::topology::NodeId;

/// `Entry` without its key (the map stores the key beside it): 16 bytes, so a (key, value)
/// bucket is 24 bytes like `Entry`.
#[derive(Debug, Clone, Copy, Default)]
struct Value {
    last_ms: u32,
    heat: u32,
    count: u16,
    node: NodeId,
    loads: u8,
    stores: u8,
    flags: u8,
}

const _: () = assert!(std::mem::size_of::<Value>() == 16);

/// Bytes of one hashbrown bucket: the (key, value) pair.
pub const PAIR_BYTES: usize = std::mem::size_of::<(PageKey, Value)>();

const FLAG_QUEUED: u8 = 1;

/// The table's own hash (`PageKey::mixed`, splitmix64's finalizer of the packed key), so
/// both tables spread keys over shards and slots alike.
#[derive(Clone, Copy, Default)]
pub struct MixHasher(u64);

impl Hasher for MixHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }

    fn write_u64(&mut self, raw: u64) {
        self.0 = raw;
    }

    fn finish(&self) -> u64 {
        // `PageKey` hashes as its packed u64; `mixed` is the finalizer over it.
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

impl BuildHasher for MixHasher {
    type Hasher = MixHasher;

    fn build_hasher(&self) -> MixHasher {
        MixHasher(0)
    }
}

/// Milliseconds from `then` to `now`; 0 when out of order (as `entry::elapsed_ms`).
fn elapsed_ms(now: u32, then: u32) -> u32 {
    (now.wrapping_sub(then) as i32).max(0) as u32
}

/// As `entry::decayed`: halved per elapsed `halflife_ms` epoch of the sample clock.
fn decayed(heat: u32, last_ms: u32, now_ms: u32, halflife_ms: u32) -> u32 {
    let epochs = (last_ms % halflife_ms).saturating_add(elapsed_ms(now_ms, last_ms)) / halflife_ms;
    if epochs >= 32 { 0 } else { heat >> epochs }
}

pub struct DashTable {
    map: DashMap<PageKey, Value, MixHasher>,
    shards: usize,
    max_tracked_pages: usize,
    len: AtomicUsize,
    evicted: AtomicU64,
    /// Held by the one thread evicting.
    evicting: Mutex<()>,
    policy: HotnessConfig,
}

impl DashTable {
    pub fn new(max_tracked_pages: usize, policy: HotnessConfig) -> DashTable {
        // `HotTable`'s shard count (dashmap needs at least 2).
        let shards = (max_tracked_pages / 1024).clamp(2, 256).next_power_of_two();
        DashTable {
            map: DashMap::with_capacity_and_hasher_and_shard_amount(
                max_tracked_pages,
                MixHasher(0),
                shards,
            ),
            shards,
            max_tracked_pages,
            len: AtomicUsize::new(0),
            evicted: AtomicU64::new(0),
            evicting: Mutex::new(()),
            policy,
        }
    }

    /// The body of `HotTable::record`, on one `DashMap::entry` (the shard's write lock).
    pub fn record(&self, access: &Access) -> Recorded {
        let threshold = u32::from(self.policy.freq_threshold.max(1));
        let window = self.policy.promote_window_ms;
        let halflife = self.policy.heat_halflife_ms.max(1);
        let now = (access.time_ns / 1_000_000) as u32;
        let mut slot = self.map.entry(access.key);
        if matches!(slot, MapEntry::Vacant(_))
            && self.len.load(Ordering::Relaxed) >= self.max_tracked_pages
        {
            // Eviction takes every shard's lock in turn: let go of this one first.
            drop(slot);
            self.evict_coldest(now, halflife);
            slot = self.map.entry(access.key);
        }
        let mut e = match slot {
            MapEntry::Occupied(o) => o.into_ref(),
            MapEntry::Vacant(v) => {
                self.len.fetch_add(1, Ordering::Relaxed);
                v.insert(Value {
                    last_ms: now,
                    node: access.node,
                    ..Value::default()
                })
            }
        };
        let e = e.value_mut();
        let elapsed = elapsed_ms(now, e.last_ms);
        e.heat = decayed(e.heat, e.last_ms, now, halflife).saturating_add(HEAT_ONE);
        if e.count == 0 || elapsed > window {
            e.count = 1;
            e.flags &= !FLAG_QUEUED;
        } else {
            e.count = e.count.saturating_add(1);
        }
        if elapsed > 0 {
            e.last_ms = now;
        }
        e.node = access.node;
        match access.op {
            AccessOp::Load => e.loads = e.loads.saturating_add(1),
            AccessOp::Store => e.stores = e.stores.saturating_add(1),
        }
        if u32::from(e.count) >= threshold && e.flags & FLAG_QUEUED == 0 {
            e.flags |= FLAG_QUEUED;
            Recorded::Candidate
        } else {
            Recorded::Tracked
        }
    }

    /// Removes the coldest 1/8 of `max_tracked_pages` by heat decayed to `now`, found with
    /// `HotTable`'s log2 histogram. Returns at once if another thread is evicting.
    fn evict_coldest(&self, now: u32, halflife: u32) {
        let Some(_evicting) = self.evicting.try_lock() else {
            return;
        };
        if self.len.load(Ordering::Relaxed) < self.max_tracked_pages {
            // Someone else just made room.
            return;
        }
        let bucket = |v: &Value| 32 - decayed(v.heat, v.last_ms, now, halflife).leading_zeros();
        let mut histogram = [0usize; 33];
        for r in self.map.iter() {
            histogram[bucket(r.value()) as usize] += 1;
        }
        let present: usize = histogram.iter().sum();
        let target = (self.max_tracked_pages / 8).max(1).min(present);
        let (mut cut, mut below) = (0usize, 0usize);
        while below + histogram[cut] < target {
            below += histogram[cut];
            cut += 1;
        }
        let mut from_cut = target - below;
        let mut removed = 0usize;
        self.map.retain(|_, v| {
            let b = bucket(v) as usize;
            if b < cut || (b == cut && from_cut > 0) {
                if b == cut {
                    from_cut -= 1;
                }
                removed += 1;
                false
            } else {
                true
            }
        });
        self.len.fetch_sub(removed, Ordering::Relaxed);
        self.evicted.fetch_add(removed as u64, Ordering::Relaxed);
    }

    pub fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Bytes of the shards' hash tables: per shard, hashbrown's allocation (buckets of a
    /// 24-byte (key, value) pair, one control byte per bucket plus one 16-byte group) and the
    /// cache-padded lock around it. Buckets are a power of two, 8/7 of the capacity; computed
    /// from `capacity()`, so call it before any removal leaves tombstones.
    pub fn memory_bytes(&self) -> usize {
        let per_shard_capacity = self.map.capacity() / self.shards;
        let buckets = (per_shard_capacity * 8 / 7).next_power_of_two();
        let allocation = (buckets * PAIR_BYTES).next_multiple_of(16) + buckets + 16;
        // `CachePadded<RwLock<RawTable>>`: the lock word and the table header, padded to 128.
        self.shards * (allocation + 128)
    }
}
