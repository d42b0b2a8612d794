//! khugepaged re-merging a range THP admission split, between admission and the move (issue
//! 24's runs-128k miss): the migrator's re-check must not let a 4 KiB candidate move the new
//! 2 MiB THP.
//!
//! Why it happens: with THP enabled for the VMA, khugepaged's `hpage_collapse_scan_pmd()`
//! (mm/khugepaged.c, Linux 6.12) finds the split range's 512 PTEs present and calls
//! `collapse_huge_page()`, which allocates a PMD THP on `hpage_collapse_find_target_node()`
//! (the node most of the scanned pages were on: the slow node, which keeps the cold pages),
//! copies the range in and maps it with one PMD. move_pages(2) on any 4 KiB address of it then
//! migrates the whole folio.

use std::path::Path;
use std::sync::Arc;

use nix::errno::Errno;

use super::config::SplitHistogram;
use super::gate::AdmissionGate;
use super::gate::tests::{PID, cand};
use super::thp::fake::FakeThp;
use super::thp::{PAGE_SIZE, REGION_BYTES, Region, ThpError, ThpKernel};
use super::{Admission, AdmissionConfig};
use crate::hotness::{Access, HotTable, HotnessConfig, PageKey};
use crate::migrator::ratelimit::RateLimits;
use crate::migrator::ratelimit::fake::FakeClock;
use crate::migrator::{Migrator, MigratorConfig};
use crate::movepages::Mover;
use crate::movepages::fake::FakeMover;
use crate::sample::AccessOp;
use crate::stats::{Counter, Stats};
use crate::topology::{SysfsRoot, Topology};

const SLOW: i32 = 2;

/// The THP's first page number (2 MiB aligned).
const A: u64 = 0x7f00_0000_0000 / PAGE_SIZE;
/// Sparse hot pages of the THP: admission splits it to order 0 and moves them alone.
const HOT: [u64; 3] = [10, 200, 411];

/// The fake kernel's THP state, shared by the gate (pagemap, debugfs) and the mover.
#[derive(Clone, Default)]
struct Kernel(Arc<parking_lot::Mutex<FakeThp>>);

impl ThpKernel for Kernel {
    fn region(&mut self, pid: u32, start: u64) -> Result<Region, ThpError> {
        self.0.lock().region(pid, start)
    }
    fn in_large_folio(&mut self, pid: u32, vaddrs: &[u64]) -> Result<Vec<bool>, ThpError> {
        self.0.lock().in_large_folio(pid, vaddrs)
    }
    fn split(&mut self, pid: u32, start: u64, end: u64, order: u8) -> Result<(), ThpError> {
        self.0.lock().split(pid, start, end, order)
    }
}

/// move_pages over the fake kernel's folios: a move of one address moves its whole folio (as
/// `migrate_pages()` does); the first query after `collapse` is set re-collapses that region
/// first, as khugepaged may between admission's region read and the move.
#[derive(Clone)]
struct KhugepagedMover {
    mem: FakeMover,
    kernel: Kernel,
    collapse: Arc<parking_lot::Mutex<Option<u64>>>,
    /// With the collapse, later split writes change nothing (`FakeThp::refuse`).
    refuse_after_collapse: Arc<parking_lot::Mutex<bool>>,
    /// First page of each 2 MiB folio moved.
    whole: Arc<parking_lot::Mutex<Vec<u64>>>,
}

impl Mover for KhugepagedMover {
    fn move_pages(
        &mut self,
        pid: u32,
        pages: &[u64],
        nodes: Option<&[i32]>,
        status: &mut [i32],
    ) -> Result<usize, Errno> {
        let Some(nodes) = nodes else {
            if let Some(start) = self.collapse.lock().take() {
                let mut k = self.kernel.0.lock();
                k.thp(pid, start);
                k.refuse = *self.refuse_after_collapse.lock();
            }
            return self.mem.move_pages(pid, pages, None, status);
        };
        let thp = self.kernel.0.lock();
        let mut mem = self.mem.0.lock();
        for (i, (&p, &n)) in pages.iter().zip(nodes).enumerate() {
            let region = p & !(REGION_BYTES - 1);
            let idx = (p - region) / PAGE_SIZE;
            let size = thp
                .regions
                .get(&(pid, region))
                .map_or(1, |s| u64::from(s[idx as usize].max(1)));
            let first = region + (idx - idx % size) * PAGE_SIZE;
            if size == 512 {
                self.whole.lock().push(first / PAGE_SIZE);
            }
            for q in 0..size {
                mem.pages.insert((pid, first + q * PAGE_SIZE), n);
            }
            status[i] = n;
        }
        Ok(0)
    }
}

struct ThpRig {
    migrator: Migrator<KhugepagedMover, FakeClock>,
    mover: KhugepagedMover,
    stats: Arc<Stats>,
    table: Arc<HotTable>,
}

/// A THP at page `A` of `PID` on the slow node, its pages `HOT` sampled 20 times each (60
/// samples, 3 seen: its own map is trusted, and sparse), per-THP admission with splitting.
fn thp_rig() -> ThpRig {
    thp_rig_with(&HOT, 20)
}

/// [`thp_rig`] with `pages` of the THP sampled `rounds` times each.
fn thp_rig_with(pages: &[u64], rounds: u64) -> ThpRig {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/qemu-3node");
    let topology = Arc::new(Topology::read(SysfsRoot::new(root)).unwrap());
    let stats = Arc::new(Stats::new());
    let table = Arc::new(HotTable::new(4096, HotnessConfig::default()));
    let kernel = Kernel::default();
    kernel.0.lock().thp(PID, A * PAGE_SIZE);
    let mover = KhugepagedMover {
        mem: FakeMover::default(),
        kernel: kernel.clone(),
        collapse: Arc::default(),
        refuse_after_collapse: Arc::default(),
        whole: Arc::default(),
    };
    {
        let mut mem = mover.mem.0.lock();
        for p in A..A + 512 {
            mem.pages.insert((PID, p * PAGE_SIZE), SLOW);
        }
    }
    for round in 0..rounds {
        for &p in pages {
            table.record(&Access {
                key: PageKey::new(PID, (A + p) * PAGE_SIZE).unwrap(),
                time_ns: round * 1_000_000,
                node: 2,
                op: AccessOp::Load,
            });
        }
    }
    let admission = Arc::new(Admission::new(
        AdmissionConfig {
            split: true,
            split_histogram: SplitHistogram::PerFolio,
            ..AdmissionConfig::default()
        },
        2,
    ));
    let migrator = Migrator::new(
        2,
        MigratorConfig::default(),
        mover.clone(),
        FakeClock::default(),
        Arc::clone(&table),
        topology,
        Arc::clone(&stats),
        RateLimits::default(),
    )
    .with_admission(Box::new(AdmissionGate::new(admission, kernel, false)));
    ThpRig {
        migrator,
        mover,
        stats,
        table,
    }
}

impl ThpRig {
    fn node_of(&self, page: u64) -> i32 {
        self.mover.mem.0.lock().pages[&(PID, (A + page) * PAGE_SIZE)]
    }
    fn splits(&self) -> Vec<(u64, u64, u8)> {
        let k = self.mover.kernel.0.lock();
        k.splits
            .iter()
            .map(|&(_, s, e, o)| (s / PAGE_SIZE - A, e / PAGE_SIZE - A, o))
            .collect()
    }
    fn get(&self, c: Counter) -> u64 {
        self.stats.get(c)
    }
}

#[test]
fn the_fake_moves_a_whole_thp_for_one_4k_address() {
    // The hazard itself: one 4 KiB address of a THP moves all 2 MiB.
    let mut r = thp_rig();
    let mut status = [0];
    r.mover
        .move_pages(PID, &[(A + 200) * PAGE_SIZE], Some(&[0]), &mut status)
        .unwrap();
    assert_eq!(*r.mover.whole.lock(), vec![A]);
    assert_eq!((r.node_of(0), r.node_of(511)), (0, 0));
}

#[test]
fn a_range_collapsed_again_before_the_move_is_split_again_not_moved_as_2m() {
    let mut r = thp_rig();
    // khugepaged collapses the range after admission split it, before the move.
    *r.mover.collapse.lock() = Some(A * PAGE_SIZE);
    let mut batch = vec![cand((A + 200) * PAGE_SIZE)];
    r.migrator.process(&mut batch);
    assert!(r.mover.whole.lock().is_empty(), "no 2 MiB move");
    // Admission: the sparse THP to order 0 in one write. Re-check: the three pages found in
    // the new THP, its folio split again (one write, first to last such page).
    assert_eq!(r.splits(), vec![(0, 512, 0), (10, 412, 0)]);
    assert_eq!(r.get(Counter::ThpRecollapsed), 1, "one range");
    assert_eq!(r.get(Counter::PgpromoteDeferredRecollapsed), 0);
    assert_eq!(r.get(Counter::PgpromoteSuccess), 3);
    for p in HOT {
        assert_eq!(r.node_of(p), 0, "hot page {p} moved");
    }
    for p in [0, 11, 199, 300, 511] {
        assert_eq!(r.node_of(p), SLOW, "cold page {p} stayed");
    }
    assert_eq!(r.get(Counter::ThpWholePromotions), 0);
}

#[test]
fn a_collapsed_range_that_does_not_split_again_waits() {
    let mut r = thp_rig();
    // After the collapse the kernel skips split writes on it (a pinned or locked folio: the
    // write succeeds, and only the pages' flags tell).
    *r.mover.collapse.lock() = Some(A * PAGE_SIZE);
    *r.mover.refuse_after_collapse.lock() = true;
    let mut batch = vec![cand((A + 200) * PAGE_SIZE)];
    r.migrator.process(&mut batch);
    assert_eq!(r.get(Counter::ThpRecollapsed), 1);
    assert_eq!(r.get(Counter::PgpromoteDeferredRecollapsed), 3);
    assert!(r.mover.whole.lock().is_empty(), "no 2 MiB move");
    assert_eq!(r.get(Counter::PgpromoteSuccess), 0);
    assert_eq!(r.node_of(200), SLOW);
}

#[test]
fn pages_of_regions_never_split_are_not_looked_up_again() {
    let mut r = thp_rig();
    // A base page elsewhere: admission looks its page up once and reads no region; the
    // re-check never looks.
    let other = A + 4 * 512;
    r.mover
        .mem
        .0
        .lock()
        .pages
        .insert((PID, other * PAGE_SIZE), SLOW);
    let mut batch = vec![cand(other * PAGE_SIZE)];
    r.migrator.process(&mut batch);
    assert_eq!(r.get(Counter::PgpromoteSuccess), 1);
    assert_eq!(r.mover.kernel.0.lock().page_lookups, 1);
    assert_eq!(r.mover.kernel.0.lock().reads, 0);
    assert_eq!(r.get(Counter::ThpRecollapsed), 0);
}

#[test]
fn a_range_collapsed_after_its_pages_moved_is_found_and_its_pages_offered_again() {
    let mut r = thp_rig();
    // The table-wide audit is off: the once-a-second look at the split ranges finds it.
    r.migrator = r.migrator.with_audit_pages(0);
    let mut batch = vec![cand((A + 200) * PAGE_SIZE)];
    r.migrator.process(&mut batch);
    assert_eq!(r.get(Counter::PgpromoteSuccess), 3);
    // khugepaged: the range, hot pages included, is one THP on the slow node again.
    r.mover.kernel.0.lock().thp(PID, A * PAGE_SIZE);
    {
        let mut mem = r.mover.mem.0.lock();
        for p in A..A + 512 {
            mem.pages.insert((PID, p * PAGE_SIZE), SLOW);
        }
    }
    r.migrator.maintain();
    assert_eq!(r.get(Counter::ThpRecollapsed), 1);
    assert_eq!(r.get(Counter::PghotAuditMovedBack), 3);
    let table = Arc::clone(&r.table);
    for p in HOT {
        let e = table.get(PageKey::new(PID, (A + p) * PAGE_SIZE).unwrap());
        assert_eq!(
            e.map(|e| e.node()),
            Some(2),
            "page {p} tracked on the slow node"
        );
    }
    // Within the second: not looked at again.
    r.migrator.maintain();
    assert_eq!(r.get(Counter::ThpRecollapsed), 1);
    // The next candidate: admission splits the THP again, the pages move at 4 KiB.
    let mut batch = vec![cand((A + 200) * PAGE_SIZE)];
    r.migrator.process(&mut batch);
    assert_eq!(r.splits(), vec![(0, 512, 0), (0, 512, 0)]);
    assert!(r.mover.whole.lock().is_empty(), "no 2 MiB move");
    assert_eq!(r.get(Counter::PgpromoteSuccess), 6);
    for p in HOT {
        assert_eq!(r.node_of(p), 0);
    }
    assert_eq!(r.node_of(300), SLOW);
}

/// A hot 64 KiB run (pages 96..112, 4 samples each): admission splits the THP to 64 KiB and
/// charges the candidate its subfolio; collapsed before the move, the region is split to
/// 64 KiB again and only that subfolio moves.
#[test]
fn a_subfolio_candidate_of_a_collapsed_range_moves_at_its_size() {
    let mut r = thp_rig_with(&(96..112).collect::<Vec<_>>(), 4);
    *r.mover.collapse.lock() = Some(A * PAGE_SIZE);
    let mut batch = vec![cand((A + 100) * PAGE_SIZE)];
    r.migrator.process(&mut batch);
    assert!(r.mover.whole.lock().is_empty(), "no 2 MiB move");
    assert_eq!(r.splits(), vec![(0, 512, 4), (100, 101, 4)]);
    assert_eq!(r.get(Counter::ThpRecollapsed), 1);
    assert_eq!(r.get(Counter::PgpromoteSuccess), 1);
    for p in 96..112 {
        assert_eq!(r.node_of(p), 0, "page {p} of the hot subfolio");
    }
    assert_eq!((r.node_of(95), r.node_of(112)), (SLOW, SLOW));
}
