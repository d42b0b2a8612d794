//! The simulated two-tier memory: where each page of the workload is, the ground truth of which
//! pages are hot, and a [`Mover`] and [`FreeMemory`] over it so the real migrator drives it.

use std::sync::Arc;

use nix::errno::Errno;
use parking_lot::Mutex;

use pghotd::hotness::PAGE_SIZE;
use pghotd::migrator::capacity::FreeMemory;
use pghotd::movepages::Mover;
use pghotd::topology::{NodeId, TopologyError};

/// The fast (DRAM, with CPUs) and slow (CPU-less CXL) nodes of the simulated machine.
pub const FAST: NodeId = 0;
pub const SLOW: NodeId = 1;
/// The workload's pid and the start of its buffer.
pub const PID: u32 = 4242;
pub const BASE: u64 = 0x7f00_0000_0000;

pub fn vaddr_of(page: usize) -> u64 {
    BASE + page as u64 * PAGE_SIZE
}

fn page_of(vaddr: u64) -> Option<usize> {
    usize::try_from(vaddr.checked_sub(BASE)? / PAGE_SIZE).ok()
}

/// Placement and ground truth, page by page (pages are the workload's, in address order).
#[derive(Debug)]
pub struct Memory {
    node: Vec<NodeId>,
    hot: Vec<bool>,
    /// Share of the workload's accesses each page gets (sums to 1).
    weight: Vec<f64>,
    pub fast_capacity_pages: u64,
    fast_used: u64,
    hot_count: u64,
    hot_on_fast: u64,
    /// Access share served by the fast tier.
    fast_mass: f64,
    /// Cumulative page operations, for the CPU model.
    pub moved_to_fast: u64,
    pub moved_to_slow: u64,
    pub queried: u64,
    /// Most fast-tier pages in use at any time.
    pub peak_fast_used: u64,
}

impl Memory {
    /// Every page starts on the slow tier (the pghot series' runs migrate the buffer there first).
    pub fn new(pages: usize, fast_capacity_pages: u64) -> Memory {
        Memory {
            node: vec![SLOW; pages],
            hot: vec![false; pages],
            weight: vec![0.0; pages],
            fast_capacity_pages,
            fast_used: 0,
            hot_count: 0,
            hot_on_fast: 0,
            fast_mass: 0.0,
            moved_to_fast: 0,
            moved_to_slow: 0,
            queried: 0,
            peak_fast_used: 0,
        }
    }

    pub fn pages(&self) -> usize {
        self.node.len()
    }

    /// Sets the ground truth (at start and when the hot set shifts).
    pub fn set_truth(&mut self, hot: Vec<bool>, weight: Vec<f64>) {
        self.hot = hot;
        self.weight = weight;
        self.hot_count = self.hot.iter().filter(|&&h| h).count() as u64;
        self.hot_on_fast = 0;
        self.fast_mass = 0.0;
        for (p, &n) in self.node.iter().enumerate() {
            if n == FAST {
                self.hot_on_fast += u64::from(self.hot[p]);
                self.fast_mass += self.weight[p];
            }
        }
    }

    pub fn node_of(&self, page: usize) -> NodeId {
        self.node[page]
    }

    pub fn weight(&self, page: usize) -> f64 {
        self.weight[page]
    }

    pub fn is_hot(&self, page: usize) -> bool {
        self.hot[page]
    }

    pub fn fast_free_pages(&self) -> u64 {
        self.fast_capacity_pages.saturating_sub(self.fast_used)
    }

    pub fn fast_used(&self) -> u64 {
        self.fast_used
    }

    /// Moves a page; false when the fast tier is full.
    pub fn place(&mut self, page: usize, to: NodeId) -> bool {
        let from = self.node[page];
        if from == to {
            return true;
        }
        if to == FAST {
            if self.fast_used >= self.fast_capacity_pages {
                return false;
            }
            self.fast_used += 1;
            self.peak_fast_used = self.peak_fast_used.max(self.fast_used);
            self.hot_on_fast += u64::from(self.hot[page]);
            self.fast_mass += self.weight[page];
            self.moved_to_fast += 1;
        } else {
            self.fast_used -= 1;
            self.hot_on_fast -= u64::from(self.hot[page]);
            self.fast_mass -= self.weight[page];
            self.moved_to_slow += 1;
        }
        self.node[page] = to;
        true
    }

    /// Hot pages on the fast tier, in percent of the hot set.
    pub fn coverage_pct(&self) -> f64 {
        if self.hot_count == 0 {
            return 100.0;
        }
        self.hot_on_fast as f64 * 100.0 / self.hot_count as f64
    }

    /// Pages on the fast tier that are not hot, in percent of the hot set (the pghot series'
    /// "over", counting only what should not be there).
    pub fn over_promotion_pct(&self) -> f64 {
        let cold_on_fast = self.fast_used - self.hot_on_fast;
        cold_on_fast as f64 * 100.0 / self.hot_count.max(1) as f64
    }

    /// Share of accesses the fast tier serves, 0..=1.
    pub fn fast_access_share(&self) -> f64 {
        self.fast_mass.clamp(0.0, 1.0)
    }
}

/// The memory, shared by the simulator and the migrator's mover.
pub type SharedMemory = Arc<Mutex<Memory>>;

/// move_pages(2) over the simulated memory: queries report the node, moves to the fast tier
/// fail with -ENOMEM when it is full (as the kernel's would under its own watermark).
#[derive(Clone)]
pub struct SimMover(pub SharedMemory);

impl Mover for SimMover {
    fn move_pages(
        &mut self,
        pid: u32,
        pages: &[u64],
        nodes: Option<&[i32]>,
        status: &mut [i32],
    ) -> Result<usize, Errno> {
        if pid != PID {
            return Err(Errno::ESRCH);
        }
        let mut mem = self.0.lock();
        for (i, &vaddr) in pages.iter().enumerate() {
            let Some(page) = page_of(vaddr).filter(|&p| p < mem.pages()) else {
                status[i] = -libc::EFAULT;
                continue;
            };
            status[i] = match nodes {
                None => {
                    mem.queried += 1;
                    i32::from(mem.node_of(page))
                }
                Some(nodes) => {
                    let to = NodeId::try_from(nodes[i]).map_err(|_| Errno::ENODEV)?;
                    if mem.place(page, to) {
                        i32::from(to)
                    } else {
                        -libc::ENOMEM
                    }
                }
            };
        }
        Ok(0)
    }
}

/// Free memory of the simulated nodes, for the migrator's watermark.
pub struct SimFree(pub SharedMemory);

impl FreeMemory for SimFree {
    fn free_kb(&self, node: NodeId) -> Result<u64, TopologyError> {
        let mem = self.0.lock();
        Ok(if node == FAST {
            mem.fast_free_pages() * (PAGE_SIZE / 1024)
        } else {
            // The slow tier holds the whole buffer with room to spare.
            mem.pages() as u64 * (PAGE_SIZE / 1024)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_keeps_the_ground_truth_counts() {
        let mut m = Memory::new(4, 2);
        m.set_truth(vec![true, true, false, false], vec![0.4, 0.4, 0.1, 0.1]);
        assert!(m.place(0, FAST));
        assert!(m.place(2, FAST));
        assert!(!m.place(1, FAST), "fast tier full");
        assert_eq!(m.coverage_pct(), 50.0);
        assert_eq!(m.over_promotion_pct(), 50.0);
        assert!((m.fast_access_share() - 0.5).abs() < 1e-12);
        assert!(m.place(2, SLOW));
        assert!(m.place(1, FAST));
        assert_eq!((m.coverage_pct(), m.over_promotion_pct()), (100.0, 0.0));
        assert_eq!(
            (m.moved_to_fast, m.moved_to_slow, m.peak_fast_used),
            (3, 1, 2)
        );
    }

    #[test]
    fn the_mover_reports_and_moves_like_move_pages() {
        let mem: SharedMemory = Arc::new(Mutex::new(Memory::new(2, 1)));
        let mut mover = SimMover(Arc::clone(&mem));
        let pages = [vaddr_of(0), vaddr_of(1), vaddr_of(9)];
        let mut status = [0; 3];
        mover.move_pages(PID, &pages, None, &mut status).unwrap();
        assert_eq!(status, [1, 1, -libc::EFAULT]);
        let to = [0, 0, 0];
        mover
            .move_pages(PID, &pages, Some(&to), &mut status)
            .unwrap();
        assert_eq!(status, [0, -libc::ENOMEM, -libc::EFAULT]);
        assert_eq!(
            mover.move_pages(7, &pages, None, &mut status),
            Err(Errno::ESRCH)
        );
        assert_eq!(SimFree(mem).free_kb(FAST).unwrap(), 0);
    }
}
