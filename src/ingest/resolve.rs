//! Finding the node of samples that do not carry one (no physical address, no `node`), such as
//! the workload's emulated IBS samples or a trace recorded without placement data.
//!
//! The kernel is asked with move_pages(2) in query mode (no fault-in, no LRU drain), in batches
//! per pid; answers are cached per recorder for a short time of sample clock, since hot pages are
//! sampled again and again. Pages the table already tracks are not asked about at all: their
//! entry holds the last known node, which the migrator updates when it moves them.

use std::collections::BTreeMap;

use super::PageKey;
use crate::movepages::{Mover, STATUS_UNWRITTEN};
use crate::sample::Sample;
use crate::topology::NodeId;

/// Samples held back before one round of queries.
pub const RESOLVE_BATCH: usize = 256;

/// Longest a deferred sample waits, in sample time, before its batch is resolved anyway.
const MAX_WAIT_NS: u64 = 20_000_000;

/// How long a cached answer stays valid, in sample time.
const CACHE_TTL_MS: u32 = 1000;

const CACHE_SLOTS: usize = 4096;

#[derive(Clone, Copy, Default)]
struct CacheSlot {
    key: u64,
    node: NodeId,
    at_ms: u32,
}

/// One recorder's resolver.
pub struct NodeResolver {
    lookup: Box<dyn Mover>,
    cache: Box<[CacheSlot]>,
    deferred: Vec<(Sample, PageKey)>,
    queries: u64,
}

/// What a resolution round found for one deferred sample.
pub struct Resolved {
    pub sample: Sample,
    pub key: PageKey,
    /// `None`: the kernel does not know the page (gone, never touched, process exited).
    pub node: Option<NodeId>,
}

impl NodeResolver {
    pub fn new(lookup: Box<dyn Mover>) -> NodeResolver {
        NodeResolver {
            lookup,
            cache: vec![CacheSlot::default(); CACHE_SLOTS].into_boxed_slice(),
            deferred: Vec::with_capacity(RESOLVE_BATCH),
            queries: 0,
        }
    }

    fn slot(key: PageKey) -> usize {
        (key.mixed() as usize) % CACHE_SLOTS
    }

    /// A recent answer for this page, if any.
    #[inline]
    pub fn cached(&self, key: PageKey, time_ns: u64) -> Option<NodeId> {
        let slot = self.cache[Self::slot(key)];
        let now_ms = (time_ns / 1_000_000) as u32;
        (slot.key == key.raw() && now_ms.wrapping_sub(slot.at_ms) < CACHE_TTL_MS)
            .then_some(slot.node)
    }

    /// Forgets a page's answer (it was just moved).
    pub fn forget(&mut self, key: PageKey) {
        let slot = &mut self.cache[Self::slot(key)];
        if slot.key == key.raw() {
            *slot = CacheSlot::default();
        }
    }

    /// Holds a sample back; true when the batch should be resolved now.
    pub fn defer(&mut self, sample: &Sample, key: PageKey) -> bool {
        self.deferred.push((*sample, key));
        let oldest = self.deferred[0].0.time_ns;
        self.deferred.len() >= RESOLVE_BATCH || sample.time_ns.saturating_sub(oldest) >= MAX_WAIT_NS
    }

    pub fn has_deferred(&self) -> bool {
        !self.deferred.is_empty()
    }

    /// move_pages query calls made so far.
    pub fn queries(&self) -> u64 {
        self.queries
    }

    /// Asks the kernel about every deferred sample, in one query per pid.
    pub fn resolve(&mut self, out: &mut Vec<Resolved>) {
        let mut by_pid: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        for (_, key) in &self.deferred {
            by_pid.entry(key.pid()).or_default().push(key.vaddr());
        }
        let mut answers: BTreeMap<(u32, u64), i32> = BTreeMap::new();
        for (pid, mut pages) in by_pid {
            pages.sort_unstable();
            pages.dedup();
            let mut status = vec![STATUS_UNWRITTEN; pages.len()];
            self.queries += 1;
            // A whole-call failure (ESRCH: the process exited) leaves every page unknown.
            if self
                .lookup
                .move_pages(pid, &pages, None, &mut status)
                .is_ok()
            {
                for (page, s) in pages.into_iter().zip(status) {
                    answers.insert((pid, page), s);
                }
            }
        }
        let last_ms = self
            .deferred
            .last()
            .map_or(0, |(s, _)| (s.time_ns / 1_000_000) as u32);
        for (sample, key) in self.deferred.drain(..) {
            let node = answers
                .get(&(key.pid(), key.vaddr()))
                .and_then(|&s| NodeId::try_from(s).ok());
            if let Some(node) = node {
                self.cache[Self::slot(key)] = CacheSlot {
                    key: key.raw(),
                    node,
                    at_ms: last_ms,
                };
            }
            out.push(Resolved { sample, key, node });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::movepages::fake::FakeMover;
    use crate::sample::{AccessOp, SourceKind};

    fn sample(pid: u32, vaddr: u64, time_ns: u64) -> Sample {
        Sample::at_address(
            (time_ns, 0),
            (pid, pid),
            vaddr,
            AccessOp::Load,
            SourceKind::Trace,
        )
    }

    #[test]
    fn batches_one_query_per_pid_and_caches_answers() {
        let mover = FakeMover::default();
        {
            let mut mem = mover.0.lock();
            mem.pages.insert((10, 0x1000), 2);
            mem.pages.insert((10, 0x2000), 0);
            mem.pages.insert((11, 0x1000), 1);
            mem.gone.push(12);
        }
        let mut r = NodeResolver::new(Box::new(mover.clone()));
        let samples = [
            sample(10, 0x1008, 0),
            sample(11, 0x1000, 1),
            sample(10, 0x2000, 2),
            sample(10, 0x1010, 3),
            sample(10, 0x9000, 4), // not present
            sample(12, 0x1000, 5), // exited
        ];
        for s in &samples {
            r.defer(s, PageKey::new(s.pid, s.vaddr).unwrap());
        }
        let mut out = Vec::new();
        r.resolve(&mut out);
        let nodes: Vec<_> = out.iter().map(|r| r.node).collect();
        assert_eq!(nodes, vec![Some(2), Some(1), Some(0), Some(2), None, None]);
        // pid 10 asked once about its 3 distinct pages; 11 and 12 once each.
        let calls = mover.0.lock().calls.clone();
        assert_eq!(calls, vec![(10, 3, false), (11, 1, false), (12, 1, false)]);
        assert_eq!(r.queries(), 3);
        let key = PageKey::new(10, 0x1000).unwrap();
        assert_eq!(r.cached(key, 900_000_000), Some(2));
        assert_eq!(r.cached(key, 2_000_000_000), None, "expired");
        r.forget(key);
        assert_eq!(r.cached(key, 900_000_000), None);
    }

    #[test]
    fn a_batch_is_due_when_full_or_old() {
        let mut r = NodeResolver::new(Box::new(FakeMover::default()));
        let key = PageKey::new(1, 0x1000).unwrap();
        assert!(!r.defer(&sample(1, 0x1000, 0), key));
        assert!(r.defer(&sample(1, 0x1000, MAX_WAIT_NS), key));
        let mut out = Vec::new();
        r.resolve(&mut out);
        for i in 0..RESOLVE_BATCH - 1 {
            assert!(!r.defer(&sample(1, 0x1000, i as u64), key));
        }
        assert!(r.defer(&sample(1, 0x1000, 0), key));
    }
}
