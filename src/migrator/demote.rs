//! Demotion (`demote = true`, off by default): when a fast node falls under its low watermark
//! (`demote_free_pct` free), move back the coldest pages that pghotd itself promoted, so the
//! current hot set keeps fitting.
//!
//! Only pages pghotd promoted are touched (the table remembers them); everything else on the
//! node is the kernel's business (kswapd demotes under real pressure). A page is a victim only
//! when it is colder than the hottest candidate the watermark held back since the last pass, or
//! cold outright ([`COLD_HEAT`]) when nothing waits, so pages of equal heat do not ping-pong.
//! Demotion shares the promotion rate (`promote_rate_limit_MBps`) through its own bucket.
//!
//! Each pass also counts our pages on the node that are cold outright and stay there
//! ([`Demoter::reclaimable`]): room demotion can still make. The capacity-aware cut counts it
//! as room, so after a shift of the hot set the old set's pages do not make the fast tier look
//! full for good and keep out the new set's first, single-sample candidates.
//!
//! Each fast node is demoted by one migrator: the one of its nearest lower-tier node, which is
//! also where its pages go back to.

use std::collections::HashMap;
use std::time::Duration;

use super::ratelimit::TokenBucket;
use crate::hotness::{HotTable, PageKey};
use crate::topology::{NodeId, Topology};

/// Heat under which a promoted page counts as cold even when no candidate waits: no sample for
/// three half-lives.
pub const COLD_HEAT: f64 = 0.125;

/// The fast nodes the migrator of `lower` demotes to it: top-tier nodes with memory whose
/// nearest lower-tier node (lowest id on ties) is `lower`.
pub fn fast_nodes_of(topology: &Topology, lower: NodeId) -> Vec<NodeId> {
    let lowers = topology.lower_tier_nodes();
    topology
        .nodes()
        .iter()
        .filter(|n| n.top_tier && n.has_memory())
        .filter(|n| {
            lowers
                .iter()
                .filter_map(|&l| Some((topology.distance(n.id, l)?, l)))
                .min()
                .map(|(_, l)| l)
                == Some(lower)
        })
        .map(|n| n.id)
        .collect()
}

/// Pages to move off a node so its free memory gets back to `free_pct` of `total_kb`.
pub fn pages_wanted(free_kb: u64, total_kb: u64, free_pct: u8, page_bytes: u64) -> usize {
    let low_kb = total_kb * u64::from(free_pct) / 100;
    let short_kb = low_kb.saturating_sub(free_kb);
    usize::try_from((short_kb * 1024).div_ceil(page_bytes.max(1))).unwrap_or(usize::MAX)
}

/// The demotion state of one migrator: what waited at each fast node's watermark, and the
/// demotion budget.
#[derive(Debug)]
pub struct Demoter {
    /// Hottest candidate held back at each fast node's watermark since the last pass.
    pressure: HashMap<NodeId, f64>,
    /// Our pages on each fast node that were cold outright at the last pass and stayed.
    reclaimable: HashMap<NodeId, u64>,
    bucket: TokenBucket,
}

impl Demoter {
    pub fn new(rate_bytes_per_s: u64, now: Duration) -> Demoter {
        Demoter {
            pressure: HashMap::new(),
            reclaimable: HashMap::new(),
            bucket: TokenBucket::new(rate_bytes_per_s, now),
        }
    }

    pub fn set_rate(&mut self, rate_bytes_per_s: u64) {
        self.bucket.set_rate(rate_bytes_per_s);
    }

    /// A candidate of this heat could not go to `node` for lack of room.
    pub fn note_pressure(&mut self, node: NodeId, heat: f64) {
        let max = self.pressure.entry(node).or_insert(0.0);
        *max = max.max(heat);
    }

    /// Our pages on `node` that were cold outright ([`COLD_HEAT`]) at the last pass that looked
    /// (one under the low watermark) and were not demoted then: room demotion can still make.
    /// It may be stale while the node stays above its low watermark, when no room is missing.
    pub fn reclaimable(&self, node: NodeId) -> u64 {
        self.reclaimable.get(&node).copied().unwrap_or(0)
    }

    /// The coldest pages pghotd promoted to `node`, at most `wanted` and within the budget,
    /// each colder than what waits (or cold outright); forgets the node's pressure.
    pub fn victims(
        &mut self,
        table: &HotTable,
        node: NodeId,
        wanted: usize,
        now: Duration,
        page_bytes: u64,
    ) -> Vec<PageKey> {
        let below = self.pressure.remove(&node).unwrap_or(0.0).max(COLD_HEAT);
        if wanted == 0 {
            return Vec::new();
        }
        let mut cold: Vec<(PageKey, f64)> = Vec::new();
        let mut cold_outright = 0u64;
        table.for_each_page(|e, heat| {
            if e.is_promoted() && e.node() == node && heat < below {
                cold.push((e.key(), heat));
                cold_outright += u64::from(heat < COLD_HEAT);
            }
        });
        let n = wanted.min(cold.len());
        if n < cold.len() {
            cold.select_nth_unstable_by(n, |a, b| a.1.total_cmp(&b.1));
            cold.truncate(n);
        }
        let allowed = self.bucket.take_units(now, page_bytes, cold.len());
        cold.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        cold.truncate(allowed);
        let chosen_cold = cold.iter().filter(|(_, heat)| *heat < COLD_HEAT).count() as u64;
        self.reclaimable
            .insert(node, cold_outright.saturating_sub(chosen_cold));
        cold.into_iter().map(|(k, _)| k).collect()
    }

    /// Takes budget for up to `pages` pages of `page_bytes` moved back for another reason
    /// than the watermark (`demote_below_floor_pct`); returns how many it covers.
    pub fn take_budget(&mut self, now: Duration, page_bytes: u64, pages: usize) -> usize {
        self.bucket.take_units(now, page_bytes, pages)
    }

    /// Returns budget for pages that did not move.
    pub fn refund(&mut self, bytes: u64) {
        self.bucket.refund(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hotness::{Access, HotnessConfig, PAGE_SIZE};
    use crate::sample::AccessOp;
    use crate::topology::{Node, SysfsRoot};
    use std::path::Path;

    fn key(page: u64) -> PageKey {
        PageKey::new(7, page * PAGE_SIZE).unwrap()
    }

    /// Page `page` sampled `samples` times at `ms`, then promoted by pghotd to node 0.
    fn promoted(t: &HotTable, page: u64, samples: u32, ms: u64) {
        for _ in 0..samples {
            t.record(&Access {
                key: key(page),
                time_ns: ms * 1_000_000,
                node: 2,
                op: AccessOp::Load,
            });
        }
        t.mark_promoted_by_us(key(page), 0);
    }

    #[test]
    fn each_fast_node_is_demoted_by_its_nearest_lower_node() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/qemu-3node");
        let topo = Topology::read(SysfsRoot::new(root)).unwrap();
        assert_eq!(fast_nodes_of(&topo, 2), vec![0, 1]);
        assert!(fast_nodes_of(&topo, 1).is_empty());
        let node = |id, cpus: Vec<u32>, top| Node {
            id,
            cpus,
            mem_total_kb: 1024,
            tier: Some(if top { 1 } else { 2 }),
            top_tier: top,
        };
        let two_lowers = Topology::synthetic(
            vec![
                node(0, vec![0], true),
                node(1, vec![], false),
                node(2, vec![], false),
            ],
            vec![vec![10, 20, 30], vec![20, 10, 30], vec![30, 30, 10]],
        );
        assert_eq!(fast_nodes_of(&two_lowers, 1), vec![0]);
        assert!(fast_nodes_of(&two_lowers, 2).is_empty());
    }

    #[test]
    fn pages_wanted_refills_to_the_low_watermark() {
        // 1 GiB node, 5 % low watermark = 52428 kB; 40000 kB free: 12428 kB short = 3107 pages.
        assert_eq!(pages_wanted(40_000, 1 << 20, 5, 4096), 3107);
        assert_eq!(pages_wanted(60_000, 1 << 20, 5, 4096), 0);
    }

    #[test]
    fn victims_are_the_coldest_of_ours_below_the_waiting_heat() {
        let t = HotTable::new(4096, HotnessConfig::default());
        promoted(&t, 1, 1, 0); // 1 sample long ago: decayed to ~0 by 10 s
        promoted(&t, 2, 4, 9_000); // warm
        promoted(&t, 3, 1, 9_900); // lukewarm, recent
        promoted(&t, 4, 30, 10_000); // hot
        // Not ours: on node 0, never promoted by pghotd.
        t.record(&Access {
            key: key(5),
            time_ns: 0,
            node: 2,
            op: AccessOp::Load,
        });
        t.mark_promoted(key(5), 0);
        let mut d = Demoter::new(1 << 30, Duration::ZERO);
        // Nothing waits: only the cold page goes.
        assert_eq!(
            d.victims(&t, 0, 10, Duration::ZERO, PAGE_SIZE),
            vec![key(1)]
        );
        // A candidate of heat 3 waits: everything colder than 3, coldest first, at most 2.
        d.note_pressure(0, 3.0);
        assert_eq!(
            d.victims(&t, 0, 2, Duration::ZERO, PAGE_SIZE),
            vec![key(1), key(3)]
        );
        // Pressure is forgotten after a pass; another node has none.
        assert_eq!(d.victims(&t, 1, 10, Duration::ZERO, PAGE_SIZE), vec![]);
    }

    #[test]
    fn victims_are_rate_limited() {
        let t = HotTable::new(4096, HotnessConfig::default());
        for page in 0..10 {
            promoted(&t, page, 1, 0);
        }
        t.record(&Access {
            key: key(100),
            time_ns: 60_000_000_000,
            node: 2,
            op: AccessOp::Load,
        });
        let mut d = Demoter::new(3 * PAGE_SIZE, Duration::ZERO);
        assert_eq!(d.reclaimable(0), 0, "nothing known before a pass");
        assert_eq!(d.victims(&t, 0, 10, Duration::ZERO, PAGE_SIZE).len(), 3);
        // The seven cold pages the budget left are room demotion can still make.
        assert_eq!(d.reclaimable(0), 7);
        assert_eq!(d.victims(&t, 0, 10, Duration::ZERO, PAGE_SIZE).len(), 0);
        d.refund(PAGE_SIZE);
        assert_eq!(d.victims(&t, 0, 10, Duration::ZERO, PAGE_SIZE).len(), 1);
    }
}
