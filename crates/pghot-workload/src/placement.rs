//! Where the buffer's pages are: the initial placement on one node, and the census of which
//! tier holds them, taken with move_pages(2) in query mode.
//!
//! Placement follows `man 2 mbind` and `man 2 move_pages`: mmap, THP
//! advice, mbind(MPOL_BIND) to the node before the first touch, write every page (a read would
//! map the shared zero page, which has no node), verify, then mbind(MPOL_DEFAULT) so the pages
//! are free to move.

use std::io;

use super::WorkloadError;
use super::pattern::{PAGE_SIZE, WORDS_PER_PAGE};
use super::sys::Mapping;
use pghotd::movepages::{Mover, SysMover};
use pghotd::topology::{NodeId, Topology};

/// The mapping is aligned to a PMD so `--thp` can get 2 MiB pages.
const HUGE_ALIGN: usize = 2 << 20;

/// Pages per move_pages call: big enough to amortize the call, small enough to keep the
/// arrays in cache (`kernel_move_pages()` in `mm/migrate.c` has a fixed cost per call; query
/// mode walks the array in chunks of DO_PAGES_STAT_CHUNK_NR).
pub const QUERY_BATCH: usize = 1024;

/// Maps `size` bytes and faults every page in on `node`, leaving the default policy on the
/// range afterwards. The caller writes any pattern data and verifies with a [`Census`].
pub fn allocate_on(size: usize, node: NodeId, thp: bool) -> Result<Mapping, WorkloadError> {
    let map = Mapping::anonymous(size, HUGE_ALIGN).map_err(|source| WorkloadError::Mmap {
        size_mb: (size >> 20) as u64,
        bytes: size,
        source,
    })?;
    let advice = if thp {
        libc::MADV_HUGEPAGE
    } else {
        libc::MADV_NOHUGEPAGE
    };
    match map.madvise(advice) {
        Ok(()) => {}
        // A kernel without THP rejects both advices; its pages are 4 KiB anyway.
        Err(e) if !thp && e.raw_os_error() == Some(libc::EINVAL) => {}
        Err(source) => return Err(WorkloadError::Madvise { thp, source }),
    }
    map.mbind(libc::MPOL_BIND, &[node])
        .map_err(|source| WorkloadError::Bind { node, source })?;
    for page in map.words().chunks(WORDS_PER_PAGE) {
        page[0].store(1, std::sync::atomic::Ordering::Relaxed);
    }
    Ok(map)
}

/// Lifts the MPOL_BIND of [`allocate_on`], so pages may be migrated anywhere.
pub fn release_binding(map: &Mapping) -> Result<(), WorkloadError> {
    map.mbind(libc::MPOL_DEFAULT, &[])
        .map_err(|source| WorkloadError::Unbind { source })
}

/// Memory nodes of the top tier, indexed by node id.
#[derive(Debug, Clone, Default)]
pub struct FastNodes(Vec<bool>);

impl FastNodes {
    pub fn from_topology(topology: &Topology) -> FastNodes {
        let mut fast = Vec::new();
        for node in topology.nodes() {
            let id = usize::from(node.id);
            if fast.len() <= id {
                fast.resize(id + 1, false);
            }
            fast[id] = node.has_memory() && !topology.is_lower_tier(node.id);
        }
        FastNodes(fast)
    }

    /// `status` is a move_pages status: a node id, or a negative errno (never fast).
    pub fn contains(&self, status: i32) -> bool {
        usize::try_from(status).is_ok_and(|n| self.0.get(n).copied().unwrap_or(false))
    }

    pub fn ids(&self) -> Vec<usize> {
        (0..self.0.len()).filter(|&n| self.0[n]).collect()
    }
}

/// Per-page node statuses of one buffer, refreshed with move_pages query calls.
#[derive(Debug)]
pub struct Census {
    pid: u32,
    addrs: Vec<u64>,
    status: Vec<i32>,
}

impl Census {
    /// A census of `pages` pages from `base`, of process `pid` (the workload's own).
    pub fn new(pid: u32, base: u64, pages: usize) -> Census {
        Census {
            pid,
            addrs: (0..pages).map(|i| base + (i * PAGE_SIZE) as u64).collect(),
            status: vec![i32::MIN; pages],
        }
    }

    /// Queries every page's node, [`QUERY_BATCH`] pages per call.
    pub fn refresh(&mut self) -> Result<&[i32], WorkloadError> {
        for (addrs, status) in self
            .addrs
            .chunks(QUERY_BATCH)
            .zip(self.status.chunks_mut(QUERY_BATCH))
        {
            // The daemon's own move_pages wrapper, in query mode.
            SysMover::default()
                .move_pages(self.pid, addrs, None, status)
                .map_err(|errno| WorkloadError::Query {
                    source: io::Error::from(errno),
                })?;
        }
        Ok(&self.status)
    }

    pub fn status(&self) -> &[i32] {
        &self.status
    }
}

/// What a census says about tiers, against the hot set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TierShare {
    /// Share of hot pages on a fast node, percent.
    pub hot_fast_pct: f64,
    /// Non-hot pages on fast nodes, MiB.
    pub cold_fast_mb: f64,
}

impl TierShare {
    pub fn of(status: &[i32], is_hot: &[bool], fast: &FastNodes) -> TierShare {
        TierShare::of_moving(status, is_hot, is_hot, fast)
    }

    /// As [`of`](Self::of) for a hot set that moves: `is_hot` is where it is now, `was_hot`
    /// every page it has been on so far (`is_hot` included). Cold pages are those never hot: a
    /// page a promoter moved while it was hot is not over-promotion once the hot set has gone.
    pub fn of_moving(
        status: &[i32],
        is_hot: &[bool],
        was_hot: &[bool],
        fast: &FastNodes,
    ) -> TierShare {
        let (mut hot, mut hot_fast, mut cold_fast) = (0u64, 0u64, 0u64);
        for ((&s, &h), &w) in status.iter().zip(is_hot).zip(was_hot) {
            let on_fast = fast.contains(s);
            hot += u64::from(h);
            hot_fast += u64::from(h && on_fast);
            cold_fast += u64::from(!w && on_fast);
        }
        TierShare {
            hot_fast_pct: if hot == 0 {
                0.0
            } else {
                100.0 * hot_fast as f64 / hot as f64
            },
            cold_fast_mb: (cold_fast * PAGE_SIZE as u64) as f64 / f64::from(1 << 20),
        }
    }
}

/// Pages whose status is `node`.
pub fn count_on(status: &[i32], node: NodeId) -> usize {
    status.iter().filter(|&&s| s == i32::from(node)).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tier_share_counts_hot_and_cold_pages_by_node() {
        let fast = FastNodes(vec![true, true, false]);
        // pages: hot on 0, hot on 2, hot not present, cold on 1, cold on 2, cold on 0
        let status = [0, 2, -libc::ENOENT, 1, 2, 0];
        let is_hot = [true, true, true, false, false, false];
        let share = TierShare::of(&status, &is_hot, &fast);
        assert!((share.hot_fast_pct - 100.0 / 3.0).abs() < 1e-9);
        assert!((share.cold_fast_mb - 2.0 * 4096.0 / 1048576.0).abs() < 1e-12);
        assert!(!fast.contains(7) && !fast.contains(-14));
        assert_eq!(count_on(&status, 2), 2);
        // The hot set moved from pages 3-4 to 0-2: page 3 (fast, hot before) is not cold; page
        // 5 (fast, never hot) is.
        let was_hot = [true, true, true, true, true, false];
        let share = TierShare::of_moving(&status, &is_hot, &was_hot, &fast);
        assert!((share.hot_fast_pct - 100.0 / 3.0).abs() < 1e-9);
        assert!((share.cold_fast_mb - 4096.0 / 1048576.0).abs() < 1e-12);
    }

    #[test]
    fn census_of_own_pages_finds_them_on_this_machine() {
        let map = Mapping::anonymous(64 * PAGE_SIZE, HUGE_ALIGN).expect("mmap");
        // 4 KiB folios, so untouched pages stay absent even with mTHP enabled.
        let _ = map.madvise(libc::MADV_NOHUGEPAGE);
        let words = map.words();
        for p in 0..32 {
            words[p * WORDS_PER_PAGE].store(1, std::sync::atomic::Ordering::Relaxed);
        }
        let mut census = Census::new(std::process::id(), map.addr(), 64);
        let status = census.refresh().expect("move_pages query");
        assert!(status[..32].iter().all(|&s| s >= 0), "{status:?}");
        assert!(status[32..].iter().all(|&s| s < 0), "{status:?}");
    }
}
