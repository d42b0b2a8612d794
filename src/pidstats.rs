//! Per-process counters for `pghotctl stats`/`top` and the metrics endpoint.
//!
//! Bounded: at most [`MAX_PIDS`] processes are kept; when full, the one updated least recently
//! goes (an exited or idle process). Writers never touch this per sample: each sampler thread
//! tallies its pids in a [`LocalPids`] and folds it in with its other counts (every 1024
//! samples), and a migrator folds once per process and batch, so the one mutex here is
//! taken a few hundred times a second at most. Counters only grow (rates are computed by the
//! reader from two snapshots); an evicted pid that comes back starts again from zero.

use std::collections::HashMap;
use std::time::Instant;

use parking_lot::Mutex;

/// Most processes with counters at once.
pub const MAX_PIDS: usize = 4096;

pub use pghot_protocol::views::PidCounts;

struct Slot {
    counts: PidCounts,
    last_ms: u64,
}

/// The shared per-process registry.
pub struct PidStats {
    pids: Mutex<HashMap<u32, Slot>>,
    epoch: Instant,
    capacity: usize,
}

impl Default for PidStats {
    fn default() -> Self {
        Self::with_capacity(MAX_PIDS)
    }
}

impl PidStats {
    pub fn with_capacity(capacity: usize) -> PidStats {
        PidStats {
            pids: Mutex::new(HashMap::with_capacity(capacity.min(MAX_PIDS))),
            epoch: Instant::now(),
            capacity: capacity.max(1),
        }
    }

    /// Adds `counts` to each pid's counters under one lock.
    pub fn add_all<'a>(&self, items: impl IntoIterator<Item = (u32, &'a PidCounts)>) {
        let now = self.epoch.elapsed().as_millis() as u64;
        let mut pids = self.pids.lock();
        for (pid, counts) in items {
            if !pids.contains_key(&pid) && pids.len() >= self.capacity {
                // Full: the least recently updated process goes. O(n), but only when a new
                // process appears in a full map.
                if let Some(old) = pids.iter().min_by_key(|(_, s)| s.last_ms).map(|(&p, _)| p) {
                    pids.remove(&old);
                }
            }
            let slot = pids.entry(pid).or_insert(Slot {
                counts: PidCounts::default(),
                last_ms: now,
            });
            slot.counts.add(counts);
            slot.last_ms = now;
        }
    }

    pub fn add(&self, pid: u32, counts: &PidCounts) {
        self.add_all([(pid, counts)]);
    }

    /// Every process's counters, by pid.
    pub fn snapshot(&self) -> Vec<(u32, PidCounts)> {
        let mut all: Vec<_> = self
            .pids
            .lock()
            .iter()
            .map(|(&pid, s)| (pid, s.counts))
            .collect();
        all.sort_unstable_by_key(|&(pid, _)| pid);
        all
    }

    pub fn get(&self, pid: u32) -> Option<PidCounts> {
        self.pids.lock().get(&pid).map(|s| s.counts)
    }

    pub fn len(&self) -> usize {
        self.pids.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One thread's per-pid tallies between folds: a short list, since a sampler sees few
/// processes between two folds, with the last hit first in line (samples come in runs).
#[derive(Debug, Default)]
pub struct LocalPids {
    entries: Vec<(u32, PidCounts)>,
    last: usize,
}

/// Distinct pids a [`LocalPids`] holds before it asks to be folded.
pub const LOCAL_PIDS: usize = 64;

impl LocalPids {
    /// The tally of `pid`, folding everything into `stats` first when the list is full.
    #[inline]
    pub fn entry(&mut self, pid: u32, stats: &PidStats) -> &mut PidCounts {
        let i = if self.entries.get(self.last).is_some_and(|e| e.0 == pid) {
            self.last
        } else if let Some(i) = self.entries.iter().position(|e| e.0 == pid) {
            i
        } else {
            if self.entries.len() >= LOCAL_PIDS {
                self.fold_into(stats);
            }
            self.entries.push((pid, PidCounts::default()));
            self.entries.len() - 1
        };
        self.last = i;
        &mut self.entries[i].1
    }

    /// Moves the tallies into `stats`.
    pub fn fold_into(&mut self, stats: &PidStats) {
        if !self.entries.is_empty() {
            stats.add_all(self.entries.iter().map(|(p, c)| (*p, c)));
            self.entries.clear();
            self.last = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_the_least_recently_updated_goes() {
        let stats = PidStats::with_capacity(2);
        let one = PidCounts {
            samples: 1,
            ..PidCounts::default()
        };
        stats.add(1, &one);
        std::thread::sleep(std::time::Duration::from_millis(2));
        stats.add(2, &one);
        std::thread::sleep(std::time::Duration::from_millis(2));
        stats.add(1, &one);
        stats.add(3, &one);
        let pids: Vec<u32> = stats.snapshot().iter().map(|p| p.0).collect();
        assert_eq!(pids, vec![1, 3]);
        assert_eq!(stats.get(1).unwrap().samples, 2);
    }

    #[test]
    fn local_tallies_fold_when_full() {
        let stats = PidStats::default();
        let mut local = LocalPids::default();
        for pid in 0..LOCAL_PIDS as u32 {
            local.entry(pid, &stats).samples += 1;
        }
        assert!(stats.is_empty());
        local.entry(5, &stats).samples += 1;
        local.entry(9999, &stats).recorded += 1;
        assert_eq!(stats.len(), LOCAL_PIDS, "folded when the 65th pid came");
        assert_eq!(stats.get(5).unwrap().samples, 2);
        local.fold_into(&stats);
        assert_eq!(stats.get(9999).unwrap().recorded, 1);
    }
}
