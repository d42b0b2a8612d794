//! The hotness table: turns samples into promotion candidates.
//!
//! Keyed by (pid, 4 KiB page), sharded by key hash: `max_tracked_pages / 1024` shards rounded to
//! a power of two (1..=256), each a `parking_lot::Mutex` around its own fixed open-addressing
//! table (`shard.rs`). Threads whose pages hash to different shards never meet; two that hit the
//! same shard at once take turns. Semantics follow pghot:
//!
//! - a sample of a lower-tier page resets the page's count to 1 when its previous sample is older
//!   than `promote_window_ms`, else increments it;
//! - when the count reaches `freq_threshold` the page becomes a candidate, once, until it is
//!   promoted or its window expires;
//! - the window widens when samples are sparse, in total or per page (`window.rs`), so a page's
//!   first sample is remembered as long as the sampling rate needs to see it again;
//! - a sample of a top-tier page is not recorded (it only refreshes the heat of a page already
//!   tracked, such as one we promoted);
//! - with `hot_share_pct`, a candidate must also have the heat of the hottest tracked pages
//!   holding that share of the heat (`share.rs`).
//!
//! The table's clock is the samples' own time, so a replay is deterministic and as fast as the
//! machine allows. A decayed heat (halved per `heat_halflife_ms` epoch, lazily) ranks pages.
//! Memory is bounded by `max_tracked_pages` at 32 bytes per page; when a shard is full its
//! coldest pages are evicted first.
//!
//! Locking: the table is not lock-free. Every operation on one page (`record`, `touch`, `get`,
//! `heat_of`, `unqueue`, the `mark_*`) takes its shard's mutex for that one operation (a probe,
//! at most one insert and, when the shard is full, one eviction pass over that shard) and takes
//! no other lock while holding it. The table-wide reads (`len`, `evicted`, `memory_bytes`,
//! `for_each_page`, `hottest`, `counting_pages`, the heat-floor pass) lock the shards one after
//! another, never two at once; they serve the control plane, the migrators' demotion and audit
//! passes, the exit summary and (`counting_pages` and the heat-floor pass, through
//! `set_recorded_rate`) a recorder's flush once per 5 s of sample time, never the per-sample
//! path. Without a lock: the policy knobs
//! (relaxed atomics) and `prefetch` (the slot arrays' addresses, fixed at creation). Taking and
//! releasing an uncontended `parking_lot` mutex is one compare-and-swap each; a contended one
//! spins briefly, then parks the thread. A shard stays locked through an eviction pass, so a
//! sampler that hits a shard being evicted waits for the pass (the `table 4Mi` rows of
//! `benches/ingest.rs`). A `dashmap::DashMap` (also sharded locks: one reader-writer lock per
//! shard) doing the same work takes 50 bytes per tracked page instead of 32, and was not
//! measurably faster; see BENCHMARKS.md.

pub mod candidate;
pub mod entry;
pub mod fallen;
pub mod room;
pub mod share;
pub mod window;

/// What one tracked page costs: a 24-byte [`Entry`] at the shards' 3/4 load limit. The shards'
/// occupancy bits (one per slot) add a sixth of a byte, which the table's bound leaves out.
pub const BYTES_PER_TRACKED_PAGE: u64 = 32;
mod prefetch;
mod shard;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;

use entry::mix;
pub use entry::{Entry, PAGE_SIZE, PageKey};
use entry::{FLAG_MOVED_BACK, FLAG_PROMOTED, FLAG_QUEUED, HEAT_ONE, decayed, elapsed_ms};
use shard::{Shard, Slot};

use crate::sample::AccessOp;
use crate::topology::NodeId;

/// The table's policy knobs; all can change at runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HotnessConfig {
    pub freq_threshold: u16,
    pub promote_window_ms: u32,
    /// The window also holds at least this many recorded samples (see [`window`]); 0: off.
    pub window_samples: u32,
    pub heat_halflife_ms: u32,
    /// A candidate must also be among the hottest pages that together hold this percentage of
    /// the tracked pages' heat (see [`share`]); 0 or 100: no such limit.
    pub hot_share_pct: u8,
    /// Pages pghotd promoted whose heat falls under this percentage of the `hot_share_pct`
    /// floor are handed to the migrators to move back (see [`fallen`]; a page moved back before
    /// and promoted again, under [`fallen::RETURNED_RANK_PCT`] of that); 0: off.
    pub demote_below_floor_pct: u8,
    /// For a fast node with this many MiB of room or more (free memory above
    /// `promote_min_free_pct`), `hot_share_pct` and `demote_below_floor_pct` stand aside (see
    /// [`room`]); 0: they always act.
    pub hot_share_room_mb: u32,
}

impl Default for HotnessConfig {
    fn default() -> Self {
        HotnessConfig {
            freq_threshold: 2,
            promote_window_ms: 5000,
            window_samples: 16384,
            heat_halflife_ms: 1000,
            hot_share_pct: 0,
            demote_below_floor_pct: 0,
            hot_share_room_mb: 0,
        }
    }
}

/// What recording a lower-tier access did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// Counted; not (or already) a candidate.
    Tracked,
    /// This access made the page a promotion candidate.
    Candidate,
}

/// One sampled access as the table sees it.
#[derive(Debug, Clone, Copy)]
pub struct Access {
    pub key: PageKey,
    pub time_ns: u64,
    pub node: NodeId,
    pub op: AccessOp,
}

pub struct HotTable {
    shards: Box<[CachePadded<Mutex<Shard>>]>,
    /// Each shard's slot array (address, slot count), fixed at creation: where `prefetch`
    /// finds a key's home slot without taking the shard's lock.
    slot_arrays: Box<[(usize, usize)]>,
    shard_mask: u64,
    max_tracked_pages: usize,
    freq_threshold: AtomicU32,
    promote_window_ms: AtomicU32,
    window_samples: AtomicU32,
    /// The window `record` applies: `promote_window_ms`, widened when samples are sparse.
    effective_window_ms: AtomicU32,
    /// The last measured rate of recorded samples per second (`f64` bits).
    recorded_per_s: AtomicU64,
    heat_halflife_ms: AtomicU32,
    hot_share_pct: AtomicU32,
    /// The heat a candidate needs under `hot_share_pct` ([`share::DrawnFloor`]'s bits).
    /// Recomputed with the window, once per [`window::SPAN_NS`] of sample time.
    heat_floor: AtomicU64,
    /// The floor `demote_below_floor_pct` is a share of: the lowest of the recent draws
    /// ([`share::RecentFloors`]), in the same form.
    demote_floor: AtomicU64,
    /// The heat histogram of each slice of the shards at its last pass.
    heat_slices: Mutex<HeatSlices>,
    demote_below_floor_pct: AtomicU32,
    /// With `demote_below_floor_pct`, the pages pghotd promoted, per fast node (see
    /// [`fallen`]).
    promoted_lists: Mutex<fallen::PromotedLists>,
    /// `hot_share_room_mb` and the fast nodes the migrators found short of it ([`room`]).
    room: room::FastRoom,
}

/// The heat-floor passes' state: which slice of the shards the next reads, and each slice's
/// histogram as it was last read.
#[derive(Debug, Default)]
struct HeatSlices {
    next: usize,
    latest: Vec<Option<share::SliceRead>>,
    /// The last floors drawn, for moving back.
    floors: share::RecentFloors,
}

/// The page now lives on `node`, a lower tier: no longer ours on a fast node, nor a candidate,
/// and its count starts again.
fn demoted(e: &mut Entry, node: NodeId) {
    e.node = node;
    e.flags &= !(FLAG_QUEUED | FLAG_PROMOTED);
    e.count = 0;
}

#[inline]
fn to_ms(time_ns: u64) -> u32 {
    // Truncation is intended: all comparisons are wrapping (see `entry::elapsed_ms`).
    (time_ns / 1_000_000) as u32
}

impl HotTable {
    pub fn new(max_tracked_pages: usize, policy: HotnessConfig) -> HotTable {
        // Enough shards that two sampler threads rarely meet, few enough that each still holds
        // a useful number of pages (eviction works per shard).
        let shard_count = (max_tracked_pages / 1024).clamp(1, 256).next_power_of_two();
        let per_shard = max_tracked_pages.div_ceil(shard_count);
        let shards: Box<[CachePadded<Mutex<Shard>>]> = (0..shard_count)
            .map(|_| CachePadded::new(Mutex::new(Shard::new(per_shard))))
            .collect();
        let slot_arrays = shards.iter().map(|s| s.lock().slot_array()).collect();
        let table = HotTable {
            shards,
            slot_arrays,
            shard_mask: shard_count as u64 - 1,
            max_tracked_pages,
            freq_threshold: AtomicU32::new(0),
            promote_window_ms: AtomicU32::new(0),
            window_samples: AtomicU32::new(0),
            effective_window_ms: AtomicU32::new(0),
            recorded_per_s: AtomicU64::new(0f64.to_bits()),
            heat_halflife_ms: AtomicU32::new(0),
            hot_share_pct: AtomicU32::new(0),
            heat_floor: AtomicU64::new(share::DrawnFloor::OFF.bits()),
            demote_floor: AtomicU64::new(share::DrawnFloor::OFF.bits()),
            heat_slices: Mutex::new(HeatSlices::default()),
            demote_below_floor_pct: AtomicU32::new(0),
            promoted_lists: Mutex::new(fallen::PromotedLists::default()),
            room: room::FastRoom::default(),
        };
        table.set_policy(policy);
        table
    }

    pub fn set_policy(&self, policy: HotnessConfig) {
        self.freq_threshold
            .store(u32::from(policy.freq_threshold.max(1)), Ordering::Relaxed);
        self.promote_window_ms
            .store(policy.promote_window_ms, Ordering::Relaxed);
        self.window_samples
            .store(policy.window_samples, Ordering::Relaxed);
        self.heat_halflife_ms
            .store(policy.heat_halflife_ms.max(1), Ordering::Relaxed);
        self.hot_share_pct
            .store(u32::from(policy.hot_share_pct), Ordering::Relaxed);
        self.demote_below_floor_pct
            .store(u32::from(policy.demote_below_floor_pct), Ordering::Relaxed);
        self.room.set_wanted_mb(policy.hot_share_room_mb);
        self.list_promoted(policy.demote_below_floor_pct > 0);
        self.retune_window();
        self.retune_heat_floor();
    }

    /// The recorders' latest measure of recorded lower-tier samples per second: widens the
    /// window when they are sparse (see [`window`]).
    /// Also recomputes the heat floor of `hot_share_pct` (a pass over the table, once per
    /// [`window::SPAN_NS`] of sample time, only with the share set).
    pub fn set_recorded_rate(&self, per_s: f64) {
        self.recorded_per_s
            .store(per_s.to_bits(), Ordering::Relaxed);
        self.retune_window();
        self.retune_heat_floor();
    }

    /// Sets the heat a candidate needs to the floor of the hottest pages holding
    /// `hot_share_pct` of the tracked heat (every tracked page: those still counting on a
    /// lower tier and those already promoted, whose top-tier samples keep their heat). Reads
    /// one slice of the shards and reuses the other slices' last histograms (`share.rs`).
    fn retune_heat_floor(&self) {
        let share = self.hot_share_pct.load(Ordering::Relaxed);
        if share == 0 || share >= 100 {
            self.store_floor(share::DrawnFloor::OFF);
            self.demote_floor
                .store(share::DrawnFloor::OFF.bits(), Ordering::Relaxed);
            self.heat_slices.lock().floors.clear();
            return;
        }
        // Another recorder's flush is at it: that one will set the floor.
        let Some(mut slices) = self.heat_slices.try_lock() else {
            return;
        };
        let halflife = self.heat_halflife_ms.load(Ordering::Relaxed);
        let now = self.now_ms();
        let count = share::SLICES.min(self.shards.len());
        if slices.latest.len() != count {
            slices.latest = vec![None; count];
            slices.next = 0;
        }
        let slice = slices.next;
        let added = self.heat_added_by_slice(count);
        slices.latest[slice] = Some(share::SliceRead {
            taken_ms: now,
            histogram: self.read_heat_slice(slice, count, now, halflife),
            heat_added: added[slice],
        });
        slices.next = (slice + 1) % count;
        // The slices are a hash partition of the pages, so each is a uniform sample of them:
        // the more a draw reads, the less it moves from one pass to the next (from a quarter
        // of the table, the floor moved by up to a quarter round to round while every heat
        // grew: BENCHMARKS.md, issue 18, "Moving back less"). An older slice misses the
        // samples its pages took since it was read, so each is grown by those (and decayed
        // by the heats' own steps: a continuous decay left the floor up to twice the heats
        // for the 20 s after each boundary, r24b).
        let mut all = share::HeatHistogram::default();
        for back in 0..count {
            let i = (slice + count - back) % count;
            let Some(read) = slices.latest[i].as_ref() else {
                continue;
            };
            let recent = back < share::RECENT_SLICES;
            if let Some(factor) = read.factor_now(added[i], now, halflife, recent) {
                all.add_scaled(&read.histogram, factor);
            }
        }
        let floor = all.floor_of_share(share);
        // No heat in the slices drawn from (a few tracked pages, all in other slices): the last
        // floor stands; with none yet, nothing is shown to be hot.
        if floor != u32::MAX || self.floor().drawn() == 0 {
            self.store_floor(share::DrawnFloor::new(floor, now));
        }
        let drawn = share::DrawnFloor::new(floor, now);
        if drawn.ranks() {
            slices.floors.push(drawn);
        }
        if let Some(lowest) = slices.floors.lowest(now, halflife) {
            self.demote_floor.store(lowest.bits(), Ordering::Relaxed);
        }
    }

    /// Slice `slice` of `count`'s heat histogram at `now_ms`.
    fn read_heat_slice(
        &self,
        slice: usize,
        count: usize,
        now_ms: u32,
        halflife_ms: u32,
    ) -> share::HeatHistogram {
        let shards = self.shards.len();
        let mut read = share::HeatHistogram::default();
        for shard in &self.shards[slice * shards / count..(slice + 1) * shards / count] {
            let shard = shard.lock();
            for e in shard.iter() {
                let heat = decayed(e.heat, e.last_ms, now_ms, halflife_ms);
                read.add(share::rank(heat, e.key().mixed()), heat);
            }
        }
        read
    }

    /// The samples that have added heat to each of `count` slices' shards, ever.
    fn heat_added_by_slice(&self, count: usize) -> Vec<u64> {
        let shards = self.shards.len();
        (0..count)
            .map(|slice| {
                self.shards[slice * shards / count..(slice + 1) * shards / count]
                    .iter()
                    .map(|s| s.lock().heat_added)
                    .sum()
            })
            .collect()
    }

    fn floor(&self) -> share::DrawnFloor {
        share::DrawnFloor::from_bits(self.heat_floor.load(Ordering::Relaxed))
    }

    fn store_floor(&self, floor: share::DrawnFloor) {
        self.heat_floor.store(floor.bits(), Ordering::Relaxed);
    }

    /// Re-checks up to [`fallen::CHECK_PER_UPKEEP`] of the pages pghotd promoted to each of
    /// `nodes` (see [`fallen`]) and returns those still ours, still there and under
    /// `demote_below_floor_pct` of the heat floor (the lowest of its recent draws,
    /// [`share::RecentFloors`]), for a migrator to move back; nothing while that is off or no
    /// floor exists.
    pub fn take_fallen(&self, nodes: &[NodeId]) -> Vec<PageKey> {
        let pct = self.demote_below_floor_pct.load(Ordering::Relaxed);
        let floor = share::DrawnFloor::from_bits(self.demote_floor.load(Ordering::Relaxed));
        if pct == 0 || !floor.ranks() {
            return Vec::new();
        }
        let halflife = self.heat_halflife_ms.load(Ordering::Relaxed);
        // Heat and floor both at the table's clock (a quiet shard's lags), fixed point.
        let now = self.now_ms();
        let bar = fallen::Bar {
            floor: floor.bits(),
            bar: u64::from(floor.at(now, halflife)) * u64::from(pct),
            now_ms: now,
            halflife_ms: halflife,
        };
        let mut lists = self.promoted_lists.lock();
        let mut fallen = Vec::new();
        for &node in nodes {
            fallen.extend(lists.recheck(node, fallen::CHECK_PER_UPKEEP, bar, |key| {
                let (lock, hash) = self.shard_of(key);
                let shard = lock.lock();
                let e = shard.get(key, hash)?;
                (e.is_promoted() && e.node == node).then(|| {
                    let rank = share::rank(decayed(e.heat, e.last_ms, now, halflife), hash);
                    if e.flags & FLAG_MOVED_BACK != 0 {
                        fallen::returned_rank(rank)
                    } else {
                        rank
                    }
                })
            }));
        }
        // A page moved back and promoted again before a re-check saw it leave is listed twice.
        fallen.sort_unstable();
        fallen.dedup();
        fallen
    }

    /// A migrator read the room of `node`, a fast node (kB free above the promotion reserve;
    /// `None`: could not read it): records whether it is short of `hot_share_room_mb` and
    /// says how much of what fell under the floor to move back from it (see [`room`]).
    pub fn observe_room(&self, node: NodeId, room_kb: Option<u64>) -> room::MoveBack {
        self.room.observe(node, room_kb)
    }

    /// The fast nodes short of `hot_share_room_mb` at their last reading (bit n: node n); 0
    /// while it is off.
    pub fn short_nodes(&self) -> u64 {
        self.room.short_nodes()
    }

    /// Whether `hot_share_pct`'s floor acts now on candidates bound for `to` (`None`: for any
    /// node; see [`room`]).
    pub fn share_applies(&self, to: Option<NodeId>) -> bool {
        self.room.share_applies(to)
    }

    /// Lists pages pghotd promotes while `demote_below_floor_pct` is set (starting with those
    /// promoted already, from a walk of the table), or stops and forgets.
    fn list_promoted(&self, on: bool) {
        let already = || {
            let mut ours = Vec::new();
            self.for_each_page(|e, _| {
                if e.is_promoted() {
                    ours.push((e.node(), e.key()));
                }
            });
            ours
        };
        self.promoted_lists.lock().set_on(on, already);
    }

    /// The heat a candidate needed when the floor was last drawn (in samples; it halves at
    /// each epoch boundary until the next pass): 0 without `hot_share_pct`, `None` until the
    /// table holds heat to rank.
    pub fn heat_floor(&self) -> Option<f64> {
        let floor = self.floor().drawn();
        (floor != u32::MAX).then(|| f64::from(floor) / f64::from(HEAT_ONE))
    }

    /// The heat (in samples) a candidate needs now under `hot_share_pct`: the floor as drawn,
    /// halved at each epoch boundary since, as promotion and the re-check read it; `None`
    /// while `hot_share_pct` is off or there is no heat to rank yet.
    pub fn heat_floor_standing(&self) -> Option<f64> {
        let floor = self.floor();
        if !floor.ranks() {
            return None;
        }
        let halflife = self.heat_halflife_ms.load(Ordering::Relaxed);
        let now = self.now_ms();
        Some(f64::from(floor.at(now, halflife)) / f64::from(HEAT_ONE))
    }

    fn retune_window(&self) {
        let per_s = f64::from_bits(self.recorded_per_s.load(Ordering::Relaxed));
        let floor_ms = self.promote_window_ms.load(Ordering::Relaxed);
        let window_samples = self.window_samples.load(Ordering::Relaxed);
        let by_samples = window::widened(floor_ms, window_samples, per_s);
        // `window_samples` 0 is pghot's fixed window: no widening of either kind.
        let by_page = if window_samples == 0 {
            0
        } else {
            window::per_page_horizon(self.counting_pages() as u64, per_s)
        };
        self.effective_window_ms
            .store(by_samples.max(by_page), Ordering::Relaxed);
    }

    /// Tracked pages with a count (sampled on a lower tier, not promoted or demoted since):
    /// the pages the recorded samples are shared among.
    pub fn counting_pages(&self) -> usize {
        self.shards.iter().map(|s| s.lock().counting).sum()
    }

    /// The window `record` applies now.
    pub fn effective_window_ms(&self) -> u32 {
        self.effective_window_ms.load(Ordering::Relaxed)
    }

    pub fn policy(&self) -> HotnessConfig {
        HotnessConfig {
            freq_threshold: self.freq_threshold.load(Ordering::Relaxed) as u16,
            promote_window_ms: self.promote_window_ms.load(Ordering::Relaxed),
            window_samples: self.window_samples.load(Ordering::Relaxed),
            heat_halflife_ms: self.heat_halflife_ms.load(Ordering::Relaxed),
            hot_share_pct: self.hot_share_pct.load(Ordering::Relaxed) as u8,
            demote_below_floor_pct: self.demote_below_floor_pct.load(Ordering::Relaxed) as u8,
            hot_share_room_mb: self.room.wanted_mb(),
        }
    }

    pub fn max_tracked_pages(&self) -> usize {
        self.max_tracked_pages
    }

    /// Places the shards' slots on `nodes` (preferred, not bound) and allocates them now: see
    /// [`placement`](crate::placement). The occupancy bits (a 200th of the slots) are left where
    /// they fall.
    pub fn place_on(&self, nodes: &[NodeId]) -> Result<(), nix::errno::Errno> {
        for &(base, slots) in self.slot_arrays.iter() {
            crate::placement::prefer_and_populate(
                base,
                slots * std::mem::size_of::<Entry>(),
                nodes,
            )?;
        }
        Ok(())
    }

    /// Bytes the table holds for its entries and their occupancy bits (fixed at creation).
    pub fn memory_bytes(&self) -> usize {
        self.shards.iter().map(|s| s.lock().memory_bytes()).sum()
    }

    #[inline]
    fn shard_of(&self, key: PageKey) -> (&Mutex<Shard>, u64) {
        let hash = mix(key.raw());
        (&self.shards[(hash & self.shard_mask) as usize], hash)
    }

    /// Starts loading the cache line of `key`'s home slot, for a `record` of it a few samples
    /// later (see `prefetch.rs`). Takes no lock: the slot arrays never move.
    #[inline]
    pub fn prefetch(&self, key: PageKey) {
        let hash = mix(key.raw());
        self.prefetch_home((hash & self.shard_mask) as usize, hash);
    }

    #[inline]
    fn prefetch_home(&self, shard: usize, hash: u64) {
        let (base, slots) = self.slot_arrays[shard];
        let home = ((u128::from(hash) * slots as u128) >> 64) as usize;
        prefetch::prefetch_line(base + home * std::mem::size_of::<Entry>());
    }

    /// Locks the key's shard and advances the shard's clock to `now_ms`.
    #[inline]
    fn lock_at(&self, key: PageKey, now_ms: u32) -> (parking_lot::MutexGuard<'_, Shard>, u64) {
        let (lock, hash) = self.shard_of(key);
        let mut shard = lock.lock();
        if elapsed_ms(now_ms, shard.now_ms) > 0 {
            shard.now_ms = now_ms;
        }
        (shard, hash)
    }

    /// Records an access to a lower-tier page, its promotion bound for no node in particular:
    /// with `hot_share_room_mb`, the floor acts while any fast node is short.
    #[inline]
    pub fn record(&self, access: &Access) -> Recorded {
        self.record_bound_for(access, None)
    }

    /// Records an access to a lower-tier page that would be promoted to `to`: with
    /// `hot_share_room_mb`, the floor acts while that node is short (see [`room`]).
    #[inline]
    pub fn record_bound_for(&self, access: &Access, to: Option<NodeId>) -> Recorded {
        let threshold = self.freq_threshold.load(Ordering::Relaxed);
        let floor = if self.room.share_applies(to) {
            self.floor()
        } else {
            share::DrawnFloor::OFF
        };
        let window = self.effective_window_ms.load(Ordering::Relaxed);
        let halflife = self.heat_halflife_ms.load(Ordering::Relaxed);
        let now = to_ms(access.time_ns);
        let (mut shard, hash) = self.lock_at(access.key, now);
        let i = match shard.find(access.key, hash) {
            Slot::Found(i) => i,
            Slot::Vacant(mut i) => {
                if shard.is_full() {
                    shard.evict_coldest(halflife);
                    i = match shard.find(access.key, hash) {
                        Slot::Vacant(i) => i,
                        // Eviction only removes entries, so the key is still absent.
                        Slot::Found(i) => i,
                    };
                }
                shard.insert_at(i, Entry::new(access.key, now, access.node))
            }
        };
        let e = shard.get_mut(i);
        let elapsed = elapsed_ms(now, e.last_ms);
        e.heat = decayed(e.heat, e.last_ms, now, halflife).saturating_add(HEAT_ONE);
        let newly_counting = e.count == 0;
        // count 0: new, or promoted since; either way a fresh window starts here.
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
        let candidate = u32::from(e.count) >= threshold
            && share::rank(e.heat, hash) >= floor.at(now, halflife)
            && e.flags & FLAG_QUEUED == 0;
        if candidate {
            e.flags |= FLAG_QUEUED;
        }
        if newly_counting {
            shard.counting += 1;
        }
        shard.heat_added += 1;
        if candidate {
            Recorded::Candidate
        } else {
            Recorded::Tracked
        }
    }

    /// Refreshes the heat and node of a tracked page seen on the top tier; untracked pages are
    /// not added (top-tier pages are never candidates).
    #[inline]
    pub fn touch(&self, access: &Access) {
        let halflife = self.heat_halflife_ms.load(Ordering::Relaxed);
        let now = to_ms(access.time_ns);
        let (mut shard, hash) = self.lock_at(access.key, now);
        if let Slot::Found(i) = shard.find(access.key, hash) {
            let e = shard.get_mut(i);
            e.heat = decayed(e.heat, e.last_ms, now, halflife).saturating_add(HEAT_ONE);
            if elapsed_ms(now, e.last_ms) > 0 {
                e.last_ms = now;
            }
            e.node = access.node;
            shard.heat_added += 1;
        }
    }

    /// Applies `f` to the page's entry, if the page is tracked.
    fn update(&self, key: PageKey, f: impl FnOnce(&mut Entry)) {
        let (lock, hash) = self.shard_of(key);
        let mut shard = lock.lock();
        if let Slot::Found(i) = shard.find(key, hash) {
            let e = shard.get_mut(i);
            let was_counting = e.count > 0;
            f(e);
            let counting = e.count > 0;
            if was_counting && !counting {
                shard.counting -= 1;
            } else if counting && !was_counting {
                shard.counting += 1;
            }
        }
    }

    /// The page now lives on `node`: it stops being a candidate.
    pub fn mark_promoted(&self, key: PageKey, node: NodeId) {
        self.update(key, |e| {
            e.node = node;
            e.flags &= !FLAG_QUEUED;
            e.count = 0;
        });
    }

    /// pghotd moved the page to `node` (a top tier): like `mark_promoted`, and remembered as
    /// ours, so demotion may move it back when it cools.
    pub fn mark_promoted_by_us(&self, key: PageKey, node: NodeId) {
        self.update(key, |e| {
            e.node = node;
            e.flags = (e.flags & !FLAG_QUEUED) | FLAG_PROMOTED;
            e.count = 0;
        });
        if self.demote_below_floor_pct.load(Ordering::Relaxed) > 0 {
            let mut lists = self.promoted_lists.lock();
            lists.note(key, node, self.max_tracked_pages);
        }
    }

    /// The page is back on `node` (a lower tier: pghotd demoted it, or the migrators' audit
    /// found the kernel did): it starts over as a fresh page.
    pub fn mark_demoted(&self, key: PageKey, node: NodeId) {
        self.update(key, |e| demoted(e, node));
    }

    /// pghotd moved the page back to `node` (a lower tier): as `mark_demoted`, and remembered,
    /// so that if it is promoted again it goes back only under a lower bar (see
    /// `fallen::RETURNED_RANK_PCT`).
    pub fn mark_moved_back(&self, key: PageKey, node: NodeId) {
        self.update(key, |e| {
            demoted(e, node);
            e.flags |= FLAG_MOVED_BACK;
        });
    }

    /// The candidate could not be queued: let the next access make it a candidate again.
    pub fn unqueue(&self, key: PageKey) {
        self.update(key, |e| e.flags &= !FLAG_QUEUED);
    }

    /// A tracked page's heat, decayed to the latest sample time its shard has seen.
    pub fn heat_of(&self, key: PageKey) -> Option<f64> {
        let halflife = self.heat_halflife_ms.load(Ordering::Relaxed);
        let (lock, hash) = self.shard_of(key);
        let shard = lock.lock();
        let now = shard.now_ms;
        shard.get(key, hash).map(|e| e.heat_at(now, halflife))
    }

    pub fn get(&self, key: PageKey) -> Option<Entry> {
        let (lock, hash) = self.shard_of(key);
        lock.lock().get(key, hash).copied()
    }

    /// Visits the tracked pages among the `pages` 4 KiB pages of `pid` from `start` (a folio,
    /// for the migrator's THP decisions), each with its index in the range, in address order.
    /// The same lookups as a `get` per page, but all the home slots are prefetched first, so
    /// the cache misses overlap instead of coming one after another: a `get` per page was the
    /// migrator thread's busiest function in the Debian guest (BENCHMARKS.md, "Folio reads").
    /// On hardware, that is: QEMU's TCG, where the rig's guest runs, translates a prefetch
    /// (0F 18) to nothing (target/i386/tcg/translate.c, `gen_nop_modrm`), so there the
    /// lookups cost what they did. `benches/split.rs` chose the shape: the keys and hashes
    /// kept from the prefetch pass (recomputing them was slower); the lookups not grouped by
    /// shard to lock each once (sorting cost more than the locks it saved: 512 pages fall in
    /// up to 256 shards).
    pub fn visit_range(&self, pid: u32, start: u64, pages: u32, mut f: impl FnMut(u32, &Entry)) {
        // 512 entries of 24 bytes for a THP, freed on return.
        let keys: Vec<(u32, PageKey, u64)> = (0..pages)
            .filter_map(|i| {
                let key = PageKey::new(pid, start + u64::from(i) * PAGE_SIZE)?;
                let hash = mix(key.raw());
                self.prefetch_home((hash & self.shard_mask) as usize, hash);
                Some((i, key, hash))
            })
            .collect();
        for (i, key, hash) in keys {
            let shard = self.shards[(hash & self.shard_mask) as usize].lock();
            if let Some(e) = shard.get(key, hash) {
                f(i, e);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn evicted(&self) -> u64 {
        self.shards.iter().map(|s| s.lock().evicted).sum()
    }

    /// The table's clock: the latest sample time any shard has seen.
    fn now_ms(&self) -> u32 {
        self.shards
            .iter()
            .map(|s| s.lock().now_ms)
            .fold(0u32, |a, b| if elapsed_ms(b, a) > 0 { b } else { a })
    }

    /// Visits every tracked page with its decayed heat at the table's clock, one shard locked
    /// at a time (for the control plane's per-process views; never called per sample).
    pub fn for_each_page(&self, f: impl FnMut(&Entry, f64)) {
        self.for_each_page_in(0..self.shards.len(), f);
    }

    /// Shards of the table: [`for_each_page_in`](Self::for_each_page_in) visits a range of
    /// them, so a periodic scan can cover the table in slices.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Slots per shard (occupied or not): what a scan of one shard reads.
    pub fn slots_per_shard(&self) -> usize {
        self.max_tracked_pages.div_ceil(self.shards.len())
    }

    /// Every tracked page of the shards in `shards` (clamped to the table), with its decayed
    /// heat.
    pub fn for_each_page_in(&self, shards: std::ops::Range<usize>, mut f: impl FnMut(&Entry, f64)) {
        let halflife = self.heat_halflife_ms.load(Ordering::Relaxed);
        let now = self.now_ms();
        let end = shards.end.min(self.shards.len());
        for shard in self.shards[shards.start.min(end)..end].iter() {
            let shard = shard.lock();
            for e in shard.iter() {
                f(e, e.heat_at(now, halflife));
            }
        }
    }

    /// The `n` hottest tracked pages with their decayed heat, hottest first.
    pub fn hottest(&self, n: usize) -> Vec<(Entry, f64)> {
        let halflife = self.heat_halflife_ms.load(Ordering::Relaxed);
        let now = self.now_ms();
        let mut all: Vec<(Entry, f64)> = Vec::new();
        for shard in self.shards.iter() {
            let shard = shard.lock();
            all.extend(shard.iter().map(|e| (*e, e.heat_at(now, halflife))));
            // Keep the working set small on big tables.
            if all.len() > n.saturating_mul(4).max(1024) {
                all.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.key().cmp(&b.0.key())));
                all.truncate(n);
            }
        }
        all.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.key().cmp(&b.0.key())));
        all.truncate(n);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn access(pid: u32, page: u64, time_ms: u64) -> Access {
        Access {
            key: PageKey::new(pid, page << 12).unwrap(),
            time_ns: time_ms * MS,
            node: 2,
            op: AccessOp::Load,
        }
    }

    fn policy(threshold: u16, window: u32) -> HotnessConfig {
        HotnessConfig {
            freq_threshold: threshold,
            promote_window_ms: window,
            // pghot's fixed window; widening has its own test below.
            window_samples: 0,
            heat_halflife_ms: 1000,
            hot_share_pct: 0,
            demote_below_floor_pct: 0,
            hot_share_room_mb: 0,
        }
    }

    #[test]
    fn a_hot_share_holds_back_pages_outside_it_and_follows_promoted_heat() {
        // Half-life an hour: heat is the plain sample count here. Threshold 2, a window as
        // wide as the test, an 80 % share.
        let t = HotTable::new(
            1024,
            HotnessConfig {
                heat_halflife_ms: 3_600_000,
                hot_share_pct: 80,
                ..policy(2, 3_600_000)
            },
        );
        // Nothing to rank yet: no candidates.
        assert_eq!(t.heat_floor(), None);
        assert_eq!(t.heat_floor_standing(), None);
        assert_eq!(t.record(&access(1, 500, 0)), Recorded::Tracked);
        assert_eq!(t.record(&access(1, 500, 1)), Recorded::Tracked);
        // By hand: pages 1..=10 take 20 samples each (200) and pages 100..=189 one each (90),
        // with page 500's 2: 80 % of 292 is 233.6, past the hot pages' 200 and page 500's 2,
        // so the floor falls among the one-sample pages' ranks (1 sample and under one more:
        // where among them is their keys' hashes), and a second sample meets it.
        let among_one_sample_pages = |floor: Option<f64>| {
            assert!(floor.is_some_and(|f| (1.0..2.0).contains(&f)), "{floor:?}");
        };
        for page in 1..=10 {
            (0..20).for_each(|k| _ = t.record(&access(1, page, k)));
        }
        for page in 100..190 {
            t.record(&access(1, page, 30));
        }
        t.set_recorded_rate(1.0);
        among_one_sample_pages(t.heat_floor());
        // 90 more pages of one sample (180 in all): 80 % of 382 is 305.6; the hot pages hold
        // 200 and page 500 2, the floor is again among the one-sample pages.
        for page in 200..290 {
            t.record(&access(1, page, 40));
        }
        t.set_recorded_rate(1.0);
        among_one_sample_pages(t.heat_floor());
        // Each hot page now takes 80 more (100 each, 1,000 in all, of 1,182): 80 % is 945.6, so
        // the floor is in the hot pages' bucket: 100 samples = 25,600 = 0b110_0100 << 8, top
        // 4 bits 1100 -> 12 << 11 = 24,576 = 96 samples, up to 104 (2,048 wide); 945.6 of its
        // 1,000 down from its top: 24,576 + 2,048 * 0.0544 = 24,687.4 = 96.43 samples.
        for page in 1..=10 {
            (0..80).for_each(|k| _ = t.record(&access(1, page, 50 + k)));
        }
        t.set_recorded_rate(1.0);
        assert_eq!(t.heat_floor(), Some(24_687.0 / 256.0));
        // A one-sample page's second sample meets the threshold but not the floor.
        assert_eq!(t.record(&access(1, 100, 200)), Recorded::Tracked);
        // The hot pages are promoted and keep their heat from top-tier samples (one each: 101,
        // 1,010 of 1,193 with page 100's second): the floor stays in their bucket, 954.4 of
        // 1,010 down from its top (24,576 + 2,048 * 0.05505 = 24,688.7), so the pages left on
        // the lower tier are not promoted for being what is left.
        for page in 1..=10 {
            t.mark_promoted_by_us(access(1, page, 0).key, 0);
            t.touch(&Access {
                node: 0,
                ..access(1, page, 300)
            });
        }
        t.set_recorded_rate(1.0);
        assert_eq!(t.heat_floor(), Some(24_688.0 / 256.0));
        assert_eq!(t.record(&access(1, 101, 400)), Recorded::Tracked);
        // Off: a one-sample page is a candidate at its next sample.
        t.set_policy(HotnessConfig {
            hot_share_pct: 0,
            ..t.policy()
        });
        assert_eq!(t.heat_floor(), Some(0.0));
        assert_eq!(t.heat_floor_standing(), None);
        assert_eq!(t.record(&access(1, 102, 410)), Recorded::Candidate);
    }

    #[test]
    fn the_floor_stands_aside_for_a_fast_node_with_room() {
        // As above: ten pages of 100 samples and 90 of one put the floor at about 96 samples,
        // so a one-sample page's second sample is held back while the floor acts.
        let t = HotTable::new(
            1024,
            HotnessConfig {
                heat_halflife_ms: 3_600_000,
                hot_share_pct: 80,
                hot_share_room_mb: 16,
                ..policy(2, 3_600_000)
            },
        );
        for page in 1..=10 {
            (0..100).for_each(|k| _ = t.record(&access(1, page, k)));
        }
        for page in 100..190 {
            t.record(&access(1, page, 200));
        }
        t.set_recorded_rate(1.0);
        assert!(
            t.heat_floor().is_some_and(|f| f > 90.0),
            "{:?}",
            t.heat_floor()
        );
        // No fast node read yet: the floor acts.
        assert!(t.share_applies(None));
        assert_eq!(t.record(&access(1, 100, 300)), Recorded::Tracked);
        // Nodes 0 and 1 have 16 MiB (16,384 kB) of room or more: it stands aside.
        assert_eq!(t.observe_room(0, Some(16_384)), room::MoveBack::UpToKb(0));
        assert_eq!(t.observe_room(1, Some(40_000)), room::MoveBack::UpToKb(0));
        assert_eq!(t.short_nodes(), 0);
        assert_eq!(t.record(&access(1, 101, 310)), Recorded::Candidate);
        // Node 1 falls 1 kB short: the floor acts for a candidate bound there (and for one
        // bound anywhere), not for one bound for node 0.
        assert_eq!(t.observe_room(1, Some(16_383)), room::MoveBack::UpToKb(1));
        assert_eq!(t.short_nodes(), 0b10);
        assert_eq!(t.record(&access(1, 102, 320)), Recorded::Tracked);
        let bound = |page, to| t.record_bound_for(&access(1, page, 330), Some(to));
        assert_eq!(
            (bound(103, 1), bound(103, 1)),
            (Recorded::Tracked, Recorded::Tracked)
        );
        assert_eq!(bound(300, 0), Recorded::Tracked, "a first sample");
        assert_eq!(bound(300, 0), Recorded::Candidate);
        // The setting follows the policy.
        assert_eq!(t.policy().hot_share_room_mb, 16);
    }

    #[test]
    fn pages_we_promoted_that_fall_under_a_share_of_the_floor_are_handed_to_their_node() {
        // 1024 pages: one shard, so each pass reads the whole table. Heat is the sample count
        // (an hour's half-life); an 80 % share; promoted pages under half the floor go back.
        let t = HotTable::new(
            1024,
            HotnessConfig {
                heat_halflife_ms: 3_600_000,
                hot_share_pct: 80,
                ..policy(2, 3_600_000)
            },
        );
        let sampled = |page, n, node| {
            (0..n).for_each(|k| {
                _ = t.record(&Access {
                    node,
                    ..access(1, page, k)
                })
            })
        };
        let key = |page| access(1, page, 0).key;
        // By hand: pages 1..=10 take 100 samples each (1,000); promoted by us, page 20 (3
        // samples) to node 0 before the setting was on (the table's walk finds it), page 21
        // (60) to node 0 and page 22 (3) to node 1 after; page 23 (3) was promoted to node 0
        // by someone else. 80 % of 1,069 is 855.2, inside the 100-sample pages' 1,000: 100 =
        // 0b110_0100, top 4 bits 1100 -> a bucket from 96 samples to 104, 855.2 of its 1,000
        // down from its top: 96 + 8 * 0.1448 = 97.16 (24,872 in fixed point); half is 48.58.
        (1..=10).for_each(|page| sampled(page, 100, 2));
        sampled(20, 3, 2);
        t.mark_promoted_by_us(key(20), 0);
        t.set_policy(HotnessConfig {
            demote_below_floor_pct: 50,
            ..t.policy()
        });
        for (page, n, node) in [(21, 60, 0), (22, 3, 1)] {
            sampled(page, n, 2);
            t.mark_promoted_by_us(key(page), node);
        }
        sampled(23, 3, 2);
        t.mark_promoted(key(23), 0);
        t.set_recorded_rate(1.0);
        assert_eq!(t.heat_floor(), Some(24_872.0 / 256.0));
        // Node 0's migrator gets page 20 (page 21 is above 48.58, page 23 is not ours), node
        // 1's page 22; until they move, each re-check finds them again.
        assert_eq!(t.take_fallen(&[0]), vec![key(20)]);
        assert_eq!(t.take_fallen(&[1]), vec![key(22)]);
        assert_eq!(t.take_fallen(&[0, 1]), vec![key(20), key(22)]);
        // Page 20 takes 50 samples on the fast node: no longer under. Page 22 is moved back.
        sampled(20, 50, 0);
        t.mark_demoted(key(22), 2);
        assert_eq!(t.take_fallen(&[0, 1]), vec![]);
        // Promoted again later and cold: listed again.
        t.mark_promoted_by_us(key(22), 1);
        assert_eq!(t.take_fallen(&[1]), vec![key(22)]);
        // Off: nothing.
        t.set_policy(HotnessConfig {
            demote_below_floor_pct: 0,
            ..t.policy()
        });
        assert_eq!(t.take_fallen(&[0, 1]), vec![]);
    }

    /// One shard, so each draw reads the whole table; heat is the sample count (an hour's
    /// half-life); an 80 % share; pages we promoted go back under half the floor.
    fn one_shard_share_table() -> HotTable {
        HotTable::new(
            1024,
            HotnessConfig {
                heat_halflife_ms: 3_600_000,
                hot_share_pct: 80,
                demote_below_floor_pct: 50,
                ..policy(2, 3_600_000)
            },
        )
    }

    #[test]
    fn a_page_goes_back_only_under_every_floor_drawn_in_the_last_draws() {
        let t = one_shard_share_table();
        let sampled = |page, n| (0..n).for_each(|k| _ = t.record(&access(1, page, k)));
        let page21 = access(1, 21, 0).key;
        // By hand: pages 1..=10 take 100 samples (1,000), page 21 60, ours on node 0. 80 % of
        // 1,060 is 848, inside the 100-sample pages' bucket (96 to 104, as above), 848 of its
        // 1,000 down from its top: 96 + 8 * 0.152 = 97.22 (24,887); half of it is 48.6.
        (1..=10).for_each(|page| sampled(page, 100));
        sampled(21, 60);
        t.mark_promoted_by_us(page21, 0);
        t.set_recorded_rate(1.0);
        assert_eq!(t.heat_floor(), Some(24_887.0 / 256.0));
        assert_eq!(t.take_fallen(&[0]), vec![]);
        // The hot pages take 60 more (160 each; 80 % of 1,660 is 1,328): 160 = 0b1010_0000,
        // a bucket from 160 to 176 samples, 1,328 of its 1,600 down from its top: 160 + 16 *
        // 0.17 = 162.72 (41,656); half of it is 81.4, over page 21's 60.
        // Promotion reads the new floor at once; moving back waits until every floor of the
        // last DEMOTE_FLOOR_DRAWS draws is that high.
        (1..=10).for_each(|page| sampled(page, 60));
        for _ in 1..share::DEMOTE_FLOOR_DRAWS {
            t.set_recorded_rate(1.0);
            assert_eq!(t.heat_floor(), Some(41_656.0 / 256.0));
            assert_eq!(t.take_fallen(&[0]), vec![], "the 96 floor is recent");
        }
        t.set_recorded_rate(1.0);
        assert_eq!(t.take_fallen(&[0]), vec![page21]);
    }

    #[test]
    fn a_page_that_came_back_goes_back_only_under_a_lower_bar() {
        // As above, with pages 21 and 22 at 70 samples each (ranks 70 to 71), both ours on
        // node 0; page 21 went back once and came back. By hand: with the hot pages at 160,
        // 80 % of 1,740 is 1,392, 1,392 of the 160-176 bucket's 1,600 down from its top: 160 +
        // 16 * 0.13 = 162.08; half of it is 81.04. Page 22 is under it and goes back; page 21
        // is re-checked at 100/80 of its rank, 87.5 to 88.75, over it: stays.
        let t = one_shard_share_table();
        let sampled = |page, n| (0..n).for_each(|k| _ = t.record(&access(1, page, k)));
        let (page21, page22) = (access(1, 21, 0).key, access(1, 22, 0).key);
        (1..=10).for_each(|page| sampled(page, 100));
        sampled(21, 70);
        sampled(22, 70);
        t.mark_promoted_by_us(page21, 0);
        t.mark_moved_back(page21, 2);
        assert!(!t.get(page21).unwrap().is_promoted());
        t.mark_promoted_by_us(page21, 0);
        t.mark_promoted_by_us(page22, 0);
        (1..=10).for_each(|page| sampled(page, 60));
        for _ in 0..share::DEMOTE_FLOOR_DRAWS {
            t.set_recorded_rate(1.0);
        }
        assert_eq!(t.take_fallen(&[0]), vec![page22]);
    }

    #[test]
    fn a_draw_reads_every_slice_grown_by_the_samples_its_pages_took_since() {
        // 16 shards, so 16 slices; heat is the sample count (an hour's half-life), an 80 %
        // share. By hand: 100 pages of 400 samples (40,000) and 900 of 40 (36,000). 80 % of
        // 76,000 is 60,800, so the floor lies among the 40-sample pages: 20,800 of their
        // 36,000 (0.5778) down from the top of their bucket (40 samples is 10,240 in fixed
        // point, the bucket 10,240 to 11,264): 10,240 + 0.4222 x 1,024 = 10,672, 41.69 samples.
        let t = HotTable::new(
            16 * 1024,
            HotnessConfig {
                heat_halflife_ms: 3_600_000,
                hot_share_pct: 80,
                ..policy(3, 3_600_000)
            },
        );
        let sampled = |page, from: u64, to: u64| {
            (from..to).for_each(|k| _ = t.record(&access(1, page, k)));
        };
        (0..100).for_each(|page| sampled(page, 0, 400));
        (100..1000).for_each(|page| sampled(page, 0, 40));
        (0..16).for_each(|_| t.set_recorded_rate(1.0));
        assert_eq!(t.heat_floor(), Some(10_672.0 / 256.0));
        // Every page takes two fifths more samples (560 and 56): every heat grows by 1.4, and
        // one more pass reads one slice and grows the other 15 by the samples their pages took
        // since. The floor is 1.4 times as high, 58.36 samples, less a little: the fresh
        // slice's 56-sample pages spread over their own bucket (14,336 to 15,360) where grown
        // ones spread over 1.4 times theirs; were it a sixteenth of the pages, 58.31. (Drawn
        // from the four latest slices alone, the rule before, the first floor was 41.46: a
        // quarter of the pages.)
        (0..100).for_each(|page| sampled(page, 400, 560));
        (100..1000).for_each(|page| sampled(page, 40, 56));
        t.set_recorded_rate(1.0);
        let floor = t.heat_floor().unwrap();
        assert!((58.2..58.4).contains(&floor), "{floor}");
    }

    #[test]
    fn pages_at_the_floor_s_sample_count_pass_in_the_share_s_proportion() {
        // 4 shards, 4 slices: 4 passes read every page. Heat is the sample count (an hour's
        // half-life), threshold 3, a 50 % share. By hand: 1,000 pages of 3 samples (3,000) and
        // 1,000 of 2 (2,000): half of 5,000 is 2,500, 5/6 of the 3-sample pages' heat. Their
        // ranks (3 samples and a part of one fixed by the key) spread evenly over 3 to 4, so
        // the floor is about 3 1/6 and the 2-sample pages, at their third sample, pass in
        // about 5 of 6 (833; the keys' parts are a hash: 4 standard deviations either side).
        // With the floor on its bucket's lower bound (3 samples) all 1,000 passed.
        let t = HotTable::new(
            1 << 12,
            HotnessConfig {
                heat_halflife_ms: 3_600_000,
                hot_share_pct: 50,
                ..policy(3, 3_600_000)
            },
        );
        let sampled = |page, n| (0..n).for_each(|k| _ = t.record(&access(1, page, k)));
        (0..1000).for_each(|page| sampled(page, 3));
        (1000..2000).for_each(|page| sampled(page, 2));
        (0..4).for_each(|_| t.set_recorded_rate(1.0));
        let floor = t.heat_floor().unwrap();
        assert!((3.0..3.25).contains(&floor), "{floor}");
        let passed = (1000..2000)
            .filter(|&page| t.record(&access(1, page, 10)) == Recorded::Candidate)
            .count();
        assert!((786..=880).contains(&passed), "{passed} of 1,000");
    }

    /// Pages 1..=200 take 50 samples each from `at_ms` on, `cold` pages one each at
    /// `at_ms + 100`; then one floor pass per slice of a [`sliced_share_table`].
    fn hot_and_cold_swept(t: &HotTable, cold: u64, at_ms: u64) {
        for page in 1..=200 {
            (0..50).for_each(|k| _ = t.record(&access(1, page, at_ms + k)));
        }
        for page in 1000..1000 + cold {
            t.record(&access(1, page, at_ms + 100));
        }
        (0..16).for_each(|_| t.set_recorded_rate(1.0));
    }

    /// 64 Ki pages: 64 shards, so 16 slices of 4; an 80 % share, a one-minute half-life,
    /// threshold 2 and a window as wide as the tests.
    fn sliced_share_table() -> HotTable {
        HotTable::new(
            1 << 16,
            HotnessConfig {
                heat_halflife_ms: 60_000,
                hot_share_pct: 80,
                ..policy(2, 3_600_000)
            },
        )
    }

    #[test]
    fn the_heat_floor_reads_a_slice_a_pass_and_decays_the_others_exactly() {
        let t = sliced_share_table();
        // By hand: 200 pages of 50 samples (10,000) and 2,000 of one (2,000), all at sample
        // times under 1 s: 80 % of 12,000 is 9,600, within the hot pages' 10,000 (the 16
        // passes read every slice, with no sample since), so the floor is in their bucket: 50
        // samples = 12,800 = 0b11001 << 9, top 4 bits 1100 -> 12 << 10 = 12,288 = 48 samples,
        // up to 52 (9,600 of 10,000 down from its top: 48.16).
        hot_and_cold_swept(&t, 2000, 0);
        let floor = t.heat_floor().unwrap();
        assert!((48.0..52.0).contains(&floor), "{floor}");
        // One half-life later (one sample moves the clock to 60.5 s), every hot page holds 25:
        // 0b11001 << 8, so the bucket 12 << 9 = 6,144 = 24 samples up to 26, where their
        // ranks (25 and under one more) are. The slice this pass reads holds the decayed heats;
        // the 3 other recent ones are shifted down an octave, which must agree (left where
        // they were, they would hold 3/4 of the heat in the 48-sample bucket), and the 12
        // older ones, read before the boundary, are left out until read again.
        t.record(&access(1, 5000, 60_500));
        t.set_recorded_rate(1.0);
        let floor = t.heat_floor().unwrap();
        assert!((24.0..26.0).contains(&floor), "{floor}");
    }

    #[test]
    fn the_floor_decays_in_the_same_steps_as_the_heat_it_ranks() {
        let t = sliced_share_table();
        // 200 pages of 50 samples and 500 of one at 50 s of sample time: 80 % of 10,500 is
        // within the hot pages, whose bucket is 48 to 52 samples (as above).
        hot_and_cold_swept(&t, 500, 50_000);
        let drawn = t.heat_floor().unwrap();
        assert!((48.0..52.0).contains(&drawn), "{drawn}");
        // Hot page 1 is ours on node 0; ours go back under 70 % of the floor (under 36.4).
        // Setting the policy draws the floor again, from the next slice.
        t.mark_promoted_by_us(access(1, 1, 0).key, 0);
        t.set_policy(HotnessConfig {
            demote_below_floor_pct: 70,
            ..t.policy()
        });
        let drawn = t.heat_floor().unwrap();
        assert!((48.0..52.0).contains(&drawn), "{drawn}");
        assert_eq!(t.heat_floor_standing(), Some(drawn));
        // 1 ms past the 60 s boundary, before the next pass, every heat has halved and the
        // floor with them (24 to 26 samples): page 1's 25 is not under 70 % of it, and a page
        // new since is a candidate at its 24th to 26th sample (threshold 2; its rank is its
        // samples and under one more), not its 48th.
        t.record(&access(1, 5000, 60_001));
        assert_eq!(t.heat_floor(), Some(drawn), "as drawn");
        let standing = t.heat_floor_standing().unwrap();
        assert_eq!(
            standing,
            (drawn * 128.0).floor() / 256.0,
            "halved as it stands"
        );
        assert_eq!(t.take_fallen(&[0]), vec![]);
        let new_page: Vec<Recorded> = (0..30)
            .map(|_| t.record(&access(1, 6000, 60_001)))
            .collect();
        let at = new_page.iter().position(|r| *r == Recorded::Candidate);
        assert!(at.is_some_and(|at| (23..=25).contains(&at)), "{new_page:?}");
        // The next pass agrees: the hot pages hold 25, the floor is in their bucket (24 to 26),
        // though only a sixth of a half-life passed since the other recent slices were read.
        // The 3 slices read before hold about 3/4 of the recent heat, more than the 80 % share
        // less the fresh slice's: decayed by the time that passed (a bucket down, x 0.89),
        // their hot pages would set the floor at 44 to 48 samples.
        t.set_recorded_rate(1.0);
        let floor = t.heat_floor().unwrap();
        assert!((24.0..26.0).contains(&floor), "{floor}");
    }

    #[test]
    fn a_floor_stands_while_the_recent_slices_hold_no_heat() {
        // 64 shards in 16 slices; 3 pages fall in at most 3 slices, so at least 4 of the 16
        // windows of 4 consecutive slices hold none of them.
        let t = sliced_share_table();
        for page in 1..=3 {
            (0..10).for_each(|k| _ = t.record(&access(1, page, k)));
        }
        let floors: Vec<Option<f64>> = (0..32)
            .map(|_| {
                t.set_recorded_rate(1.0);
                t.heat_floor()
            })
            .collect();
        let first = floors.iter().position(Option::is_some).expect("a floor");
        // 10 samples = 2,560 = 0b1010 << 8: the bucket from 10 samples to 11, holding every
        // page's rank (10 and under one more); the share is 80 % of whichever pages the recent
        // slices hold, 0.2 of the bucket up from its lower bound: 2,560 + 51.2.
        assert!(
            floors[first..].iter().all(|f| *f == Some(2611.0 / 256.0)),
            "{floors:?}"
        );
    }

    #[test]
    fn threshold_makes_a_candidate_once() {
        let t = HotTable::new(1024, policy(3, 5000));
        assert_eq!(t.record(&access(1, 1, 0)), Recorded::Tracked);
        assert_eq!(t.record(&access(1, 1, 10)), Recorded::Tracked);
        assert_eq!(t.record(&access(1, 1, 20)), Recorded::Candidate);
        assert_eq!(t.record(&access(1, 1, 30)), Recorded::Tracked, "only once");
        assert_eq!(t.get(access(1, 1, 0).key).unwrap().count(), 4);
        // Another pid's same address is another page.
        assert_eq!(t.record(&access(2, 1, 30)), Recorded::Tracked);
    }

    #[test]
    fn a_range_visit_sees_each_tracked_page_of_the_range_once() {
        // 64 Ki slots in 64 shards: a 512-page range spreads over many of them.
        let t = HotTable::new(1 << 16, policy(2, 5000));
        let base = 0x7f00_0000_0000u64 >> 12;
        // By hand: page 0 twice, page 37 once, page 511 three times; pid 2's page 37 and the
        // pages either side of the range (-1, 512) are not in pid 1's range.
        for (pid, page, n) in [(1, 0, 2), (1, 37, 1), (1, 511, 3), (2, 37, 5), (1, 512, 4)] {
            for k in 0..n {
                t.record(&access(pid, base + page, k));
            }
        }
        t.record(&access(1, base - 1, 0));
        let mut seen = Vec::new();
        t.visit_range(1, base << 12, 512, |i, e| seen.push((i, e.count())));
        seen.sort_unstable();
        assert_eq!(seen, [(0, 2), (37, 1), (511, 3)]);
        // A range of one page, and an empty one.
        let mut one = Vec::new();
        t.visit_range(2, (base + 37) << 12, 1, |i, e| one.push((i, e.count())));
        assert_eq!(one, [(0, 5)]);
        t.visit_range(1, base << 12, 0, |_, _| panic!("no pages"));
    }

    #[test]
    fn sparse_samples_count_across_a_widened_window() {
        let t = HotTable::new(
            1024,
            HotnessConfig {
                window_samples: 16,
                ..policy(2, 5000)
            },
        );
        assert_eq!(t.effective_window_ms(), 5000, "no rate measured yet");
        assert_eq!(t.record(&access(1, 1, 0)), Recorded::Tracked);
        // 10 s later: outside the 5 s window, the count restarts.
        assert_eq!(t.record(&access(1, 1, 10_000)), Recorded::Tracked);
        // One recorded sample a second: 16 samples take 16 s, and a 10 s gap now counts.
        t.set_recorded_rate(1.0);
        assert_eq!(t.effective_window_ms(), 16_000);
        assert_eq!(t.record(&access(1, 1, 20_000)), Recorded::Candidate);
        // Plentiful samples (100 a second: 160 ms) give back the configured floor.
        t.set_recorded_rate(100.0);
        assert_eq!(t.effective_window_ms(), 5000);
        // A runtime change of the floor re-applies the last rate.
        t.set_recorded_rate(1.0);
        t.set_policy(HotnessConfig {
            window_samples: 32,
            ..policy(2, 5000)
        });
        assert_eq!(t.effective_window_ms(), 32_000);
    }

    #[test]
    fn a_first_sample_is_remembered_for_pair_gaps_mean_gaps_of_one_page() {
        // window_samples 16 at 10 samples a second is 1.6 s: the sample count keeps the 5 s
        // floor, so only the per-page horizon can widen the window here.
        let t = HotTable::new(
            4096,
            HotnessConfig {
                window_samples: 16,
                ..policy(2, 5000)
            },
        );
        for page in 0..100 {
            assert_eq!(t.record(&access(1, page, page * 10)), Recorded::Tracked);
        }
        assert_eq!(t.counting_pages(), 100);
        // 100 pages share 10 samples a second: one page's mean gap is 10 s, and
        // window::PAIR_GAPS (16) of them are 160 s.
        t.set_recorded_rate(10.0);
        assert_eq!(t.effective_window_ms(), 160_000);
        // Page 0's second sample, 100 s after its first: a candidate (a 5 s window restarts
        // its count).
        assert_eq!(t.record(&access(1, 0, 100_000)), Recorded::Candidate);
        // 170 s after page 1's first: beyond the horizon, the count restarts.
        assert_eq!(t.record(&access(1, 1, 170_010)), Recorded::Tracked);
        assert_eq!(t.get(access(1, 1, 0).key).unwrap().count(), 1);
        // window_samples 0 (pghot's fixed window) widens by neither measure.
        t.set_policy(policy(2, 5000));
        assert_eq!(t.effective_window_ms(), 5000);
    }

    #[test]
    fn counting_pages_are_the_lower_tier_pages_holding_a_count() {
        let t = HotTable::new(1024, policy(2, 5000));
        let key = |page| access(1, page, 0).key;
        t.record(&access(1, 1, 0));
        t.record(&access(1, 1, 10)); // the same page: still one
        t.record(&access(1, 2, 20));
        // A top-tier sample of an untracked page adds nothing.
        t.touch(&access(1, 3, 30));
        assert_eq!(t.counting_pages(), 2);
        // Promoted: its count is gone; demoted, it starts over at its next sample.
        t.mark_promoted_by_us(key(1), 0);
        assert_eq!(t.counting_pages(), 1);
        t.mark_promoted(key(1), 0);
        t.mark_demoted(key(1), 2);
        assert_eq!(t.counting_pages(), 1);
        t.record(&access(1, 1, 40));
        assert_eq!(t.counting_pages(), 2);
        // Queued or un-queued, a page keeps its count.
        t.record(&access(1, 2, 50));
        t.unqueue(key(2));
        assert_eq!(t.counting_pages(), 2);
    }

    #[test]
    fn evicted_pages_stop_counting() {
        // One shard of 1024: a flood of 3000 pages evicts an eighth of it at a time.
        let t = HotTable::new(1024, policy(100, 5000));
        for page in 0..3000 {
            t.record(&access(1, page, page));
        }
        assert!(t.evicted() > 0);
        assert_eq!(t.counting_pages(), t.len());
        // And a promoted page that is evicted was not counting.
        let t = HotTable::new(1024, policy(100, 5000));
        t.record(&access(1, 0, 0));
        t.mark_promoted(access(1, 0, 0).key, 0);
        for page in 1..3000 {
            t.record(&access(1, page, 10 + page));
        }
        assert_eq!(
            t.counting_pages(),
            t.len() - usize::from(t.get(access(1, 0, 0).key).is_some())
        );
    }

    #[test]
    fn threshold_one_promotes_on_first_access() {
        let t = HotTable::new(1024, policy(1, 5000));
        assert_eq!(t.record(&access(1, 1, 7)), Recorded::Candidate);
    }

    #[test]
    fn window_expiry_resets_the_count_and_requeues() {
        let t = HotTable::new(1024, policy(2, 100));
        assert_eq!(t.record(&access(1, 1, 0)), Recorded::Tracked);
        // 101 ms later: outside the window, count restarts at 1.
        assert_eq!(t.record(&access(1, 1, 101)), Recorded::Tracked);
        assert_eq!(t.get(access(1, 1, 0).key).unwrap().count(), 1);
        assert_eq!(t.record(&access(1, 1, 150)), Recorded::Candidate);
        // Still queued inside the window ...
        assert_eq!(t.record(&access(1, 1, 200)), Recorded::Tracked);
        // ... and after the window expires, it can become a candidate again.
        assert_eq!(t.record(&access(1, 1, 400)), Recorded::Tracked);
        assert_eq!(t.record(&access(1, 1, 410)), Recorded::Candidate);
    }

    #[test]
    fn the_window_is_measured_from_the_previous_sample() {
        // pghot semantics: each access within the window of the previous one keeps counting.
        let t = HotTable::new(1024, policy(4, 100));
        for (i, ms) in [0, 90, 180, 270].into_iter().enumerate() {
            let r = t.record(&access(1, 1, ms));
            assert_eq!(r == Recorded::Candidate, i == 3, "access {i} at {ms} ms");
        }
    }

    #[test]
    fn out_of_order_samples_do_not_reset_the_window() {
        let t = HotTable::new(1024, policy(3, 100));
        t.record(&access(1, 1, 1000));
        t.record(&access(1, 1, 990)); // another CPU's older sample arrives late
        assert_eq!(t.record(&access(1, 1, 1050)), Recorded::Candidate);
    }

    #[test]
    fn promotion_clears_the_candidate_and_touch_never_adds() {
        let t = HotTable::new(1024, policy(1, 5000));
        let a = access(1, 1, 0);
        assert_eq!(t.record(&a), Recorded::Candidate);
        t.mark_promoted(a.key, 0);
        let e = t.get(a.key).unwrap();
        assert_eq!((e.node(), e.is_queued()), (0, false));
        t.touch(&access(1, 99, 10));
        assert!(t.get(access(1, 99, 0).key).is_none());
        t.touch(&access(1, 1, 10));
        assert!(t.get(a.key).unwrap().heat_at(10, 1000) > 1.9);
        // Unqueue lets the next access re-nominate it.
        t.record(&access(1, 2, 20));
        t.unqueue(access(1, 2, 0).key);
        assert_eq!(t.record(&access(1, 2, 21)), Recorded::Candidate);
    }

    #[test]
    fn promoted_by_us_is_remembered_until_demoted() {
        let t = HotTable::new(1024, policy(1, 5000));
        let a = access(1, 1, 0);
        assert_eq!(t.record(&a), Recorded::Candidate);
        t.mark_promoted(a.key, 0);
        assert!(
            !t.get(a.key).unwrap().is_promoted(),
            "already top tier is not ours"
        );
        t.mark_promoted_by_us(a.key, 0);
        let e = t.get(a.key).unwrap();
        assert!(e.is_promoted() && !e.is_queued());
        assert!((t.heat_of(a.key).unwrap() - 1.0).abs() < 1e-9);
        t.mark_demoted(a.key, 2);
        let e = t.get(a.key).unwrap();
        assert_eq!((e.node(), e.is_promoted()), (2, false));
        // Back on the lower tier it is a fresh page: its next sample nominates it again.
        assert_eq!(t.record(&access(1, 1, 10)), Recorded::Candidate);
    }

    #[test]
    fn stays_bounded_and_evicts_cold_pages_first() {
        let t = HotTable::new(2048, policy(100, 5000));
        // 256 hot pages, touched 10 times each.
        for round in 0..10 {
            for page in 0..256 {
                t.record(&access(1, page, round));
            }
        }
        // A flood of 20k cold pages, once each.
        for page in 1000..21_000 {
            t.record(&access(1, page, 20));
        }
        assert!(t.len() <= 2048, "len {}", t.len());
        assert_eq!(t.evicted() as usize, 256 + 20_000 - t.len());
        let hot_left = (0..256)
            .filter(|&p| t.get(access(1, p, 0).key).is_some())
            .count();
        assert_eq!(hot_left, 256, "hot pages survive the flood");
        assert!(t.memory_bytes() <= 2048 * 32 + 64 * 24);
    }

    #[test]
    fn hottest_ranks_by_decayed_heat() {
        let t = HotTable::new(1024, policy(100, 5000));
        for _ in 0..5 {
            t.record(&access(1, 7, 0));
        }
        t.record(&access(1, 8, 0));
        for _ in 0..3 {
            t.record(&access(1, 9, 2500)); // newer, heat not decayed
        }
        let top = t.hottest(2);
        // Page 7: 5 samples at 0 ms, two epochs old at 2500 ms -> 1.25; page 9: 3.
        assert_eq!(top[0].0.key(), access(1, 9, 0).key);
        assert!((top[0].1 - 3.0).abs() < 1e-9);
        assert_eq!(top[1].0.key(), access(1, 7, 0).key);
        assert!((top[1].1 - 1.25).abs() < 1e-9);
    }

    #[test]
    fn concurrent_recorders_lose_no_counts() {
        let t = HotTable::new(1 << 16, policy(u16::MAX, 60_000));
        let threads = 4;
        let per_thread = 20_000u64;
        std::thread::scope(|s| {
            for th in 0..threads {
                let t = &t;
                s.spawn(move || {
                    for i in 0..per_thread {
                        // Every thread hits the same 1000 pages.
                        t.record(&access(1, i % 1000, th + i / 1000));
                    }
                });
            }
        });
        let total: u64 = (0..1000)
            .map(|p| u64::from(t.get(access(1, p, 0).key).unwrap().count()))
            .sum();
        assert_eq!(total, threads * per_thread);
        assert_eq!(t.len(), 1000);
    }

    #[test]
    fn every_tracked_page_stays_reachable_through_evictions() {
        // One shard of 1024 pages and 1,366 slots; 3,072 pages sampled, so it evicts often.
        let t = HotTable::new(1024, policy(u16::MAX, 50));
        let regions = [0x7f00_0000_0000u64, 0x7f00_0020_0000, 0x5500_0000_0000];
        let mut x = 7u64;
        let mut next = || {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            x >> 33
        };
        for step in 0..20_000u64 {
            let r = regions[(next() % 3) as usize];
            let pid = 1 + (next() % 2) as u32;
            // Half the samples on 8 hot pages of each region, half anywhere in it.
            let page = if next() % 2 == 0 {
                next() % 8
            } else {
                next() % 512
            };
            t.record(&Access {
                key: PageKey::new(pid, r + page * PAGE_SIZE).unwrap(),
                time_ns: step * MS / 4,
                node: 2,
                op: AccessOp::Load,
            });
            if step % 100 == 0 {
                let mut tracked = Vec::new();
                t.for_each_page(|e, _| tracked.push(e.key()));
                let lost = tracked.iter().filter(|&&k| t.get(k).is_none()).count();
                assert_eq!(lost, 0, "step {step}: tracked pages a lookup cannot find");
            }
        }
        // Several times the table's 1024 pages: with a lost page sampled again, it was more.
        assert!(
            t.evicted() > 4 * 1024,
            "the test must evict: {}",
            t.evicted()
        );
    }
}
