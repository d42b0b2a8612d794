//! One shard of the hotness table: a fixed-size open-addressing map (linear probing,
//! bulk eviction) that never allocates after creation.
//!
//! Not synchronized: `HotTable` keeps each shard in its own `parking_lot::Mutex`, and every
//! method here runs with that lock held (`HotTable::prefetch` only computes a slot address).
//!
//! Written here rather than taken from a crate because the table must hold a hard memory bound
//! of 32 bytes per tracked page (24-byte entries at a 3/4 load limit). `hashbrown`, and
//! `dashmap` (hashbrown tables behind a reader-writer lock per shard), round the bucket count up
//! to a power of two at a 7/8 load limit and keep a control byte per bucket: with 24-byte
//! buckets that is 29 to 57 bytes per tracked page depending on where the bound falls between
//! powers of two, and 50 at the default 1 Mi pages (4096 per shard in 8192 buckets; measured by
//! the `dashmap` rows of `benches/ingest.rs`; their time per sample was not measurably better).
//!
//! Beside the slots, a bit per slot says which hold an entry, so that the scans (the
//! `hot_share_pct` heat-floor pass, the migrators' audit, `stats`) read the bits and the occupied
//! slots rather than every slot. A table is sized for its bound and usually holds far fewer
//! pages: Redis in the rig's Debian guest touches about 57,000 pages, a twentieth of the
//! default 1 Mi, so a scan of every slot read mostly empty ones, and in that guest,
//! where each cache miss costs microseconds, the heat-floor pass took most of the source
//! thread's CPU (BENCHMARKS.md, issue 18, "the heat-floor pass reads only occupied slots"). The bits cost
//! 1/6 of a byte per tracked page; `fixedbitset` keeps them and walks the set ones a word at a
//! time.

use fixedbitset::FixedBitSet;

use super::entry::{Entry, PageKey, decayed, mix};

pub(crate) struct Shard {
    slots: Box<[Entry]>,
    /// Bit `i` set: `slots[i]` holds an entry (its key is not 0). Kept by `insert_at`,
    /// `evict_coldest` and `reseat`, the only writers of a key.
    occupied: FixedBitSet,
    len: usize,
    capacity: usize,
    /// Latest sample time seen by this shard (truncated ms).
    pub(crate) now_ms: u32,
    pub(crate) evicted: u64,
    /// Samples that added heat to this shard's pages, ever (a running count): how much a
    /// slice's heat grew since the heat-floor pass last read it (`HotTable::retune_heat_floor`).
    pub(crate) heat_added: u64,
    /// Entries with a count above 0 (sampled on a lower tier, not promoted or demoted since):
    /// kept by `HotTable`, which changes counts, and by eviction here.
    pub(crate) counting: usize,
}

/// Where a lookup ended.
pub(crate) enum Slot {
    Found(usize),
    Vacant(usize),
}

impl Shard {
    pub(crate) fn new(capacity: usize) -> Shard {
        let capacity = capacity.max(1);
        let slots = (capacity * 4).div_ceil(3).max(capacity + 1);
        Shard {
            slots: bytemuck::allocation::zeroed_slice_box(slots),
            occupied: FixedBitSet::with_capacity(slots),
            len: 0,
            capacity,
            now_ms: 0,
            evicted: 0,
            heat_added: 0,
            counting: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Bytes the shard holds: its slots and its occupancy bits.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.slots.len() * std::mem::size_of::<Entry>() + self.occupied.len().div_ceil(8)
    }

    /// The slot array's address and length; neither changes after creation.
    pub(crate) fn slot_array(&self) -> (usize, usize) {
        (self.slots.as_ptr() as usize, self.slots.len())
    }

    /// A key's first probe. `HotTable::prefetch` repeats this computation without the lock.
    #[inline]
    fn home(&self, hash: u64) -> usize {
        // Multiply-shift range reduction: no power-of-two size needed.
        ((u128::from(hash) * self.slots.len() as u128) >> 64) as usize
    }

    #[inline]
    pub(crate) fn find(&self, key: PageKey, hash: u64) -> Slot {
        let n = self.slots.len();
        let mut i = self.home(hash);
        loop {
            let k = self.slots[i].key;
            if k == key.raw() {
                return Slot::Found(i);
            }
            if k == 0 {
                return Slot::Vacant(i);
            }
            i += 1;
            if i == n {
                i = 0;
            }
        }
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, i: usize) -> &mut Entry {
        &mut self.slots[i]
    }

    pub(crate) fn get(&self, key: PageKey, hash: u64) -> Option<&Entry> {
        match self.find(key, hash) {
            Slot::Found(i) => Some(&self.slots[i]),
            Slot::Vacant(_) => None,
        }
    }

    pub(crate) fn is_full(&self) -> bool {
        self.len >= self.capacity
    }

    /// Inserts at a slot returned by `find` as vacant. The caller has made room.
    pub(crate) fn insert_at(&mut self, i: usize, entry: Entry) -> usize {
        debug_assert!(self.slots[i].key == 0 && self.len < self.capacity);
        self.slots[i] = entry;
        self.occupied.insert(i);
        self.len += 1;
        i
    }

    /// The occupied slots, in slot order, found from the occupancy bits: a scan reads the bits
    /// and the entries, not the empty slots. An empty shard is not read at all.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Entry> {
        let bits = if self.len == 0 {
            None
        } else {
            Some(self.occupied.ones())
        };
        bits.into_iter().flatten().map(|i| &self.slots[i])
    }

    /// Removes the coldest entries (decayed heat at the shard's clock): 1/8 of the shard, at
    /// least one. A log2 histogram of heat finds the cut without sorting or allocating. Each
    /// eviction costs a few passes over the shard, so evicting 1/8 at a time keeps that cost
    /// near 30 slot visits per inserted page (measured in benches/ingest.rs).
    pub(crate) fn evict_coldest(&mut self, halflife_ms: u32) -> usize {
        let target = (self.capacity / 8).max(1).min(self.len);
        if target == 0 {
            return 0;
        }
        let now = self.now_ms;
        let bucket = |e: &Entry| 32 - decayed(e.heat, e.last_ms, now, halflife_ms).leading_zeros();
        let mut histogram = [0usize; 33];
        for e in self.slots.iter().filter(|e| e.key != 0) {
            histogram[bucket(e) as usize] += 1;
        }
        // Everything below `cut` goes; from the `cut` bucket, only as many as still needed.
        let mut cut = 0u32;
        let mut below = 0usize;
        while below + histogram[cut as usize] < target {
            below += histogram[cut as usize];
            cut += 1;
        }
        let mut from_cut = target - below;
        // Taken before anything is removed: see `reseat`. The 3/4 load limit leaves one.
        let empty_before = self.slots.iter().position(|e| e.key == 0);
        let mut removed = 0;
        for (i, e) in self
            .slots
            .iter_mut()
            .enumerate()
            .filter(|(_, e)| e.key != 0)
        {
            let b = bucket(e);
            if b < cut || (b == cut && from_cut > 0) {
                if b == cut {
                    from_cut -= 1;
                }
                if e.count > 0 {
                    self.counting -= 1;
                }
                *e = Entry::default();
                self.occupied.set(i, false);
                removed += 1;
            }
        }
        self.len -= removed;
        self.evicted += removed as u64;
        if let Some(start) = empty_before {
            self.reseat(start);
        }
        removed
    }

    /// After bulk removal, moves every entry back to the first free slot of its probe sequence
    /// so lookups never stop at a hole left in front of them. Entries are taken in slot order
    /// from `start`, a slot that was empty *before* the removal, so no entry's probe sequence
    /// runs through it: each entry's home lies between `start` and the entry, every slot
    /// before it there is already settled, and reinserting it cannot land it past a slot that
    /// is yet to be compacted. Starting from a slot the removal emptied breaks that: an entry
    /// whose probe ran through it wraps back to its home, finds that slot refilled, lands
    /// beyond it among settled entries, and is then cut off from its home when the entries
    /// between move up; lookups missed it and its page's next sample made a second entry
    /// (`every_tracked_page_stays_reachable_through_evictions`).
    fn reseat(&mut self, start: usize) {
        let n = self.slots.len();
        debug_assert_eq!(self.slots[start].key, 0);
        for step in 1..=n {
            let i = (start + step) % n;
            let entry = self.slots[i];
            if entry.key == 0 {
                continue;
            }
            self.slots[i] = Entry::default();
            self.occupied.set(i, false);
            let mut j = self.home(mix(entry.key));
            while self.slots[j].key != 0 {
                j = (j + 1) % n;
            }
            self.slots[j] = entry;
            self.occupied.insert(j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zeroed_slot_is_the_empty_default_entry() {
        let slots: Box<[Entry]> = bytemuck::allocation::zeroed_slice_box(3);
        assert!(slots.iter().all(|e| *e == Entry::default() && e.key == 0));
        assert_eq!(Shard::new(6).slots.len(), 8);
    }

    fn key(i: u64) -> PageKey {
        PageKey::new(1 + (i % 7) as u32, i << 12).unwrap()
    }

    fn insert(shard: &mut Shard, k: PageKey, heat: u32) {
        match shard.find(k, mix(k.raw())) {
            Slot::Vacant(i) => {
                let mut e = Entry::new(k, 0, 0);
                e.heat = heat;
                shard.insert_at(i, e);
            }
            Slot::Found(_) => panic!("duplicate"),
        }
    }

    #[test]
    fn memory_is_32_bytes_per_tracked_page_and_a_bit_per_slot() {
        let shard = Shard::new(3000);
        let bytes = shard.slots.len() * std::mem::size_of::<Entry>();
        assert_eq!(bytes as u64 / 3000, super::super::BYTES_PER_TRACKED_PAGE);
        // By hand: 3000 pages at the 3/4 load limit are 4000 slots of 24 bytes (96,000) and
        // 4000 bits (500 bytes).
        assert_eq!(shard.memory_bytes(), 96_500);
    }

    /// The slots a scan must find: every slot whose key is set, read without the bits.
    fn keyed_slots(shard: &Shard) -> Vec<u64> {
        shard
            .slots
            .iter()
            .map(|e| e.key)
            .filter(|&k| k != 0)
            .collect()
    }

    #[test]
    fn a_scan_finds_exactly_the_keyed_slots_through_inserts_evictions_and_reseats() {
        let mut shard = Shard::new(200);
        assert_eq!(shard.iter().count(), 0);
        // Rounds of filling the shard and evicting its coldest eighth, which empties slots
        // and moves the survivors back along their probe sequences (`reseat`).
        let mut next = 0u64;
        for round in 0..6 {
            while !shard.is_full() {
                insert(&mut shard, key(next), ((next * 7919) % 1000) as u32 + 1);
                next += 1;
            }
            let scanned: Vec<u64> = shard.iter().map(|e| e.key).collect();
            assert_eq!(scanned, keyed_slots(&shard), "round {round}, full");
            assert!(shard.evict_coldest(1000) > 0);
            let scanned: Vec<u64> = shard.iter().map(|e| e.key).collect();
            assert_eq!(
                scanned,
                keyed_slots(&shard),
                "round {round}, after eviction"
            );
            assert_eq!(scanned.len(), shard.len());
        }
    }

    #[test]
    fn eviction_removes_the_coldest_and_keeps_every_survivor_reachable() {
        let mut shard = Shard::new(160);
        for i in 0..160 {
            insert(&mut shard, key(i), (i as u32 + 1) * 256);
        }
        assert!(shard.is_full());
        let removed = shard.evict_coldest(1000);
        assert_eq!(removed, 20);
        assert_eq!(shard.len(), 140);
        // Heat i+1 samples: log2 buckets put i < 15 strictly below the cut bucket (15..31), so
        // those all go, 5 more come from the cut bucket, and everything hotter stays.
        let present = |i: u64| shard.get(key(i), mix(key(i).raw())).is_some();
        assert!((0..15).all(|i| !present(i)));
        assert_eq!((15..31).filter(|&i| !present(i)).count(), 5);
        assert!((31..160).all(present));
    }
}
