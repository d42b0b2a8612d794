//! Re-checking where the kernel keeps the pages the table believes are on a fast node.
//!
//! Samples without a physical address or node (trace, page faults, DAMON, soft-dirty) take the
//! node the table last saw, and the table only learns of moves pghotd makes. The kernel moves
//! pages too: reclaim demotes them to a lower tier, and khugepaged collapses a range pghotd
//! split back into one huge page on the node most of it sat on. Such a page would look fast
//! forever and never be promoted again. So once per [`AUDIT_EVERY`] each migrator asks the
//! kernel (move_pages query mode, no move) about the hottest [`AUDIT_PAGES`] pages believed on
//! the fast nodes it serves, and those found on a lower tier are tracked as lower-tier again.
//! Samples that carry a physical address or a node correct the table themselves (a page the
//! kernel moved shows its new node in its next sample), so an audit is due only when samples
//! took a believed node since the last one (`pghot_believed_node_samples`, see
//! `ingest::Recorder::known_node`). With emulated IBS in the Debian rig, whose samples all
//! carry their physical address, audits of Redis's pages took their share of a vCPU (up to
//! [`AUDIT_CPU_PCT`]) and moved none back (`pghot_audit_moved_back` 0 of 392 pages checked in
//! a phase; BENCHMARKS.md, "One move per process, and no audit where samples show the node").
//!
//! Finding those pages means reading the table's slots, and a full table is 32 bytes a slot
//! (32 MiB at the default `max_tracked_pages`). Each audit reads at most [`AUDIT_SLOTS`] slots,
//! a slice of whole shards, and the next audit goes on from there: one pass over the default
//! table takes 16 audits. Reading all of it every second cost 3-5 ms of a core natively, and in
//! the Debian rig's TCG guest, where a cache miss takes microseconds, most of a vCPU.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use crate::hotness::{HotTable, PageKey};
use crate::topology::NodeId;

/// How often a migrator audits, at most.
pub const AUDIT_EVERY: Duration = Duration::from_secs(1);

/// The share of one core the audit may take, in percent: after an audit that took `t`, the next
/// waits at least `t * 100 / AUDIT_CPU_PCT`. Natively an audit of one slice takes well under a
/// millisecond and [`AUDIT_EVERY`] decides; where memory is slow (the Debian rig's TCG guest
/// with its modelled memory latency, where one slice took a quarter of a second) the audit
/// backs off instead of taking a quarter of a vCPU.
pub const AUDIT_CPU_PCT: u32 = 1;

/// How long to wait after an audit that took `took` before the next.
pub fn pause_after(took: Duration) -> Duration {
    AUDIT_EVERY.max(took * (100 / AUDIT_CPU_PCT))
}

/// Most pages one audit asks about: the hottest, since those are the ones worth promoting
/// again; a cold page the kernel demoted is where it belongs.
pub const AUDIT_PAGES: usize = 4096;

/// Most slots one audit reads (2 MiB of table).
pub const AUDIT_SLOTS: usize = 1 << 16;

/// The shards the audit after the one that started at `cursor` reads, and where the next
/// starts: as many whole shards as fit in [`AUDIT_SLOTS`] (at least one), wrapping at the end.
pub fn next_slice(table: &HotTable, cursor: usize) -> (std::ops::Range<usize>, usize) {
    let shards = table.shard_count();
    let per_audit = (AUDIT_SLOTS / table.slots_per_shard().max(1)).clamp(1, shards);
    let start = if cursor >= shards { 0 } else { cursor };
    let end = (start + per_audit).min(shards);
    (start..end, if end == shards { 0 } else { end })
}

/// The `n` hottest pages the table places on one of `fast_nodes`, by pid then address (the
/// order the queries go in). Kept in a bounded heap while the table is scanned, so an audit
/// of a full table allocates `n` entries, not one per tracked page.
pub fn pick(table: &HotTable, fast_nodes: &[NodeId], n: usize) -> Vec<PageKey> {
    pick_in(table, 0..table.shard_count(), fast_nodes, n)
}

/// [`pick`] over the shards in `shards` only.
pub fn pick_in(
    table: &HotTable,
    shards: std::ops::Range<usize>,
    fast_nodes: &[NodeId],
    n: usize,
) -> Vec<PageKey> {
    // Min-heap on heat: the root is the coldest of the hottest kept so far.
    let mut kept: BinaryHeap<Reverse<(HeatOrd, PageKey)>> = BinaryHeap::with_capacity(n + 1);
    table.for_each_page_in(shards, |e, heat| {
        if n == 0 || !fast_nodes.contains(&e.node()) {
            return;
        }
        let item = Reverse((HeatOrd(heat), e.key()));
        if kept.len() < n {
            kept.push(item);
        } else if kept.peek().is_some_and(|coldest| item < *coldest) {
            kept.pop();
            kept.push(item);
        }
    });
    let mut keys: Vec<PageKey> = kept.into_iter().map(|Reverse((_, k))| k).collect();
    keys.sort_unstable();
    keys
}

/// A heat with a total order (`f64::total_cmp`), for the heap.
#[derive(Debug, Clone, Copy, PartialEq)]
struct HeatOrd(f64);

impl Eq for HeatOrd {}

impl PartialOrd for HeatOrd {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for HeatOrd {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hotness::{Access, HotnessConfig};
    use crate::sample::AccessOp;

    #[test]
    fn a_slow_audit_waits_a_hundred_times_its_length() {
        // At 1 % of a core: 0.3 ms natively -> the 1 s floor; 250 ms (one slice in the TCG
        // guest) -> 25 s; exactly 10 ms -> exactly the floor.
        assert_eq!(
            pause_after(Duration::from_micros(300)),
            Duration::from_secs(1)
        );
        assert_eq!(
            pause_after(Duration::from_millis(10)),
            Duration::from_secs(1)
        );
        assert_eq!(
            pause_after(Duration::from_millis(250)),
            Duration::from_secs(25)
        );
    }

    /// A page sampled `times` times on lower-tier node 2, then believed on `node`.
    fn page(table: &HotTable, pid: u32, page: u64, node: NodeId, times: u32) {
        let key = PageKey::new(pid, page << 12).unwrap();
        for i in 0..times {
            table.record(&Access {
                key,
                time_ns: 1_000_000 + u64::from(i),
                node: 2,
                op: AccessOp::Load,
            });
        }
        table.mark_promoted(key, node);
    }

    /// By hand: the default table, 1 Mi pages, has 256 shards (1 Mi / 1024, at most 256) of
    /// 4096 slots; 65536 slots a audit is 16 shards, so 16 audits make a pass and the 17th
    /// starts over. A 4096-page table (4 shards of 1024 slots) fits in one audit.
    #[test]
    fn audits_read_the_table_in_slices_and_wrap() {
        let big = HotTable::new(1 << 20, HotnessConfig::default());
        let mut cursor = 0;
        let mut seen = Vec::new();
        for _ in 0..17 {
            let (shards, next) = next_slice(&big, cursor);
            seen.push(shards);
            cursor = next;
        }
        assert_eq!(seen[0], 0..16);
        assert_eq!(seen[1], 16..32);
        assert_eq!(seen[15], 240..256);
        assert_eq!(seen[16], 0..16);
        let small = HotTable::new(4096, HotnessConfig::default());
        assert_eq!(next_slice(&small, 0), (0..4, 0));
        // A cursor left over from a bigger table starts again at 0.
        assert_eq!(next_slice(&small, 9), (0..4, 0));
    }

    #[test]
    fn picks_the_hottest_pages_believed_fast_in_query_order() {
        let table = HotTable::new(1 << 12, HotnessConfig::default());
        page(&table, 20, 1, 0, 5);
        page(&table, 10, 2, 1, 3);
        page(&table, 10, 3, 0, 1);
        page(&table, 10, 4, 2, 9); // lower tier: never audited
        let key = |pid, page: u64| PageKey::new(pid, page << 12).unwrap();
        assert_eq!(
            pick(&table, &[0, 1], 10),
            vec![key(10, 2), key(10, 3), key(20, 1)]
        );
        // The two hottest only (5 and 3 samples).
        assert_eq!(pick(&table, &[0, 1], 2), vec![key(10, 2), key(20, 1)]);
        assert!(pick(&table, &[], 10).is_empty());
    }
}
