//! The per-process global subpage histogram (TierBPF §5.1.1): 512 counters per process, one per
//! 4 KiB offset within a 2 MiB region, fed by every lower-tier sample of the process whatever
//! THP it hit. Constant memory per process (2 KiB of counters) whatever its working set.
//!
//! Recorders do not touch the shared counters per sample: each keeps a [`LocalHistogram`] for the
//! process it saw last and folds it in when the process changes and when it flushes (every 1024
//! samples), so the per-sample cost is one local increment.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use parking_lot::Mutex;

use super::split::SUBPAGES;

/// One process's histogram.
pub struct SubpageHistogram {
    counts: [AtomicU32; SUBPAGES],
}

impl SubpageHistogram {
    fn new() -> Self {
        SubpageHistogram {
            counts: std::array::from_fn(|_| AtomicU32::new(0)),
        }
    }

    /// A copy of the counters.
    pub fn counts(&self) -> [u32; SUBPAGES] {
        std::array::from_fn(|i| self.counts[i].load(Ordering::Relaxed))
    }

    /// Halves every counter, so the histogram follows phase changes (one half-life per
    /// decision the analyzer makes). A concurrent fold may lose part of its increments to the
    /// store; the histogram is a distribution, not an exact count.
    pub fn halve(&self) {
        for c in &self.counts {
            c.store(c.load(Ordering::Relaxed) / 2, Ordering::Relaxed);
        }
    }

    fn add(&self, local: &mut [u32; SUBPAGES]) {
        for (shared, n) in self.counts.iter().zip(local.iter_mut()) {
            if *n != 0 {
                shared.fetch_add(*n, Ordering::Relaxed);
                *n = 0;
            }
        }
    }
}

/// The subpage slot of a virtual address: its 4 KiB page's offset within its 2 MiB region.
#[inline]
pub fn subpage_of(vaddr: u64) -> usize {
    ((vaddr >> 12) as usize) & (SUBPAGES - 1)
}

/// Every process's histogram; at most `max_processes` of them (later ones are not tracked and
/// their THPs are promoted whole).
pub struct HistogramSet {
    map: Mutex<HashMap<u32, Arc<SubpageHistogram>>>,
    max_processes: usize,
}

impl HistogramSet {
    pub fn new(max_processes: usize) -> Self {
        HistogramSet {
            map: Mutex::new(HashMap::new()),
            max_processes,
        }
    }

    /// The process's histogram, created on first use; `None` when the set is full.
    pub fn get_or_insert(&self, pid: u32) -> Option<Arc<SubpageHistogram>> {
        let mut map = self.map.lock();
        if let Some(h) = map.get(&pid) {
            return Some(Arc::clone(h));
        }
        if map.len() >= self.max_processes {
            return None;
        }
        let h = Arc::new(SubpageHistogram::new());
        map.insert(pid, Arc::clone(&h));
        Some(h)
    }

    pub fn get(&self, pid: u32) -> Option<Arc<SubpageHistogram>> {
        self.map.lock().get(&pid).cloned()
    }

    pub fn len(&self) -> usize {
        self.map.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops a process that exited, making room for another.
    pub fn remove(&self, pid: u32) {
        self.map.lock().remove(&pid);
    }
}

/// A recorder's pending increments for the process it saw last.
pub struct LocalHistogram {
    pid: u32,
    shared: Option<Arc<SubpageHistogram>>,
    pending: Box<[u32; SUBPAGES]>,
    dirty: bool,
}

impl Default for LocalHistogram {
    fn default() -> Self {
        LocalHistogram {
            pid: 0,
            shared: None,
            pending: Box::new([0; SUBPAGES]),
            dirty: false,
        }
    }
}

impl LocalHistogram {
    /// Counts one sample of `pid` at `vaddr`. Returns false when the process has no histogram
    /// (the set is full).
    #[inline]
    pub fn observe(&mut self, set: &HistogramSet, pid: u32, vaddr: u64) -> bool {
        // A process the full set refused is not looked up again until another one comes by.
        if pid != self.pid {
            self.fold();
            self.pid = pid;
            self.shared = set.get_or_insert(pid);
        }
        if self.shared.is_none() {
            return false;
        }
        self.pending[subpage_of(vaddr)] += 1;
        self.dirty = true;
        true
    }

    /// Adds the pending increments to the shared histogram.
    pub fn fold(&mut self) {
        if self.dirty
            && let Some(h) = &self.shared
        {
            h.add(&mut self.pending);
            self.dirty = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_land_in_their_offset_within_the_2m_region_whatever_the_thp() {
        let set = HistogramSet::new(4);
        let mut local = LocalHistogram::default();
        for thp in 0..3u64 {
            let base = 0x7f00_0000_0000 + thp * (2 << 20);
            assert!(local.observe(&set, 10, base + 5 * 4096 + 123));
        }
        local.observe(&set, 10, 0x7f00_0000_0000 + 511 * 4096);
        // Nothing is visible before the fold.
        assert_eq!(set.get(10).unwrap().counts()[5], 0);
        local.fold();
        let c = set.get(10).unwrap().counts();
        assert_eq!((c[5], c[511], c.iter().sum::<u32>()), (3, 1, 4));
    }

    #[test]
    fn a_process_switch_folds_the_previous_one() {
        let set = HistogramSet::new(4);
        let mut local = LocalHistogram::default();
        local.observe(&set, 10, 0x1000);
        local.observe(&set, 11, 0x2000);
        assert_eq!(set.get(10).unwrap().counts()[1], 1);
        local.fold();
        assert_eq!(set.get(11).unwrap().counts()[2], 1);
    }

    #[test]
    fn the_set_is_bounded_and_halving_decays() {
        let set = HistogramSet::new(1);
        let mut local = LocalHistogram::default();
        assert!(local.observe(&set, 10, 0x1000));
        assert!(!local.observe(&set, 11, 0x1000));
        assert_eq!(set.len(), 1);
        local.observe(&set, 10, 0x1000);
        local.observe(&set, 10, 0x1000);
        local.fold();
        let h = set.get(10).unwrap();
        assert_eq!(h.counts()[1], 3);
        h.halve();
        assert_eq!(h.counts()[1], 1);
        set.remove(10);
        assert!(local.observe(&set, 11, 0x1000));
    }
}
