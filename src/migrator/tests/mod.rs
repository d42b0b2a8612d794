//! Tests of the migrator, driven through the fake mover and a hand-moved clock; the rig and
//! the helpers shared by the files below.

mod batch;
mod capacity;
mod faults;
mod folios;
mod maintain;
mod thread;

use super::maintain::Upkeep;
use super::ratelimit::fake::FakeClock;
use super::*;
use crate::hotness::candidate::candidate_queue;
use crate::hotness::{Access, HotnessConfig, PAGE_SIZE, PageKey, Recorded};
use crate::movepages::fake::{FakeMover, Script};
use crate::sample::{AccessOp, SourceKind};
use crate::stats::Counter;
use crate::topology::SysfsRoot;
use nix::errno::Errno;
use std::path::Path;

const SLOW: i32 = 2;

struct Rig {
    migrator: Migrator<FakeMover, FakeClock>,
    mover: FakeMover,
    clock: FakeClock,
    stats: Arc<Stats>,
    table: Arc<HotTable>,
}

fn rig(config: MigratorConfig) -> Rig {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/qemu-3node");
    let topology = Arc::new(Topology::read(SysfsRoot::new(root)).unwrap());
    let stats = Arc::new(Stats::new());
    let table = Arc::new(HotTable::new(4096, HotnessConfig::default()));
    let mover = FakeMover::default();
    let clock = FakeClock::default();
    let migrator = Migrator::new(
        2,
        config,
        mover.clone(),
        clock.clone(),
        Arc::clone(&table),
        topology,
        Arc::clone(&stats),
        RateLimits::default(),
    );
    Rig {
        migrator,
        mover,
        clock,
        stats,
        table,
    }
}

fn cand(pid: u32, page: u64, to: NodeId) -> Candidate {
    Candidate {
        key: PageKey::new(pid, page * PAGE_SIZE).unwrap(),
        from_node: 2,
        to_node: to,
        bytes: PAGE_SIZE,
        source: SourceKind::Trace,
    }
}

/// Puts pages of `pid` on the slow node in the fake address space.
fn map(rig: &Rig, pid: u32, pages: impl IntoIterator<Item = u64>) {
    let mut mem = rig.mover.0.lock();
    for p in pages {
        mem.pages.insert((pid, p * PAGE_SIZE), SLOW);
    }
}

fn counter(rig: &Rig, c: Counter) -> u64 {
    rig.stats.get(c)
}

/// Sum of every per-candidate outcome the migrator can produce.
fn outcomes(rig: &Rig) -> u64 {
    use Counter::*;
    [
        PgpromoteSuccess,
        PgpromoteRatelimited,
        PgpromoteAlreadyToptier,
        PgpromoteFailWatermark,
        PgpromoteFailCold,
        PgpromoteFailNoProcess,
        PgpromoteFailNotPresent,
        PgpromoteFailFault,
        PgpromoteFailShared,
        PgpromoteFailBusy,
        PgpromoteFailNomem,
        PgpromoteFailNotAllowed,
        PgpromoteFailNoNode,
        PgpromoteFailPermission,
        PgpromoteFailNotMigrated,
        PgpromoteFailOther,
    ]
    .iter()
    .map(|&c| counter(rig, c))
    .sum()
}

/// Free memory set by the test; counts its reads.
#[derive(Default)]
struct FakeFree(
    parking_lot::Mutex<std::collections::HashMap<NodeId, u64>>,
    std::sync::atomic::AtomicU64,
);

impl FreeMemory for FakeFree {
    fn free_kb(&self, node: NodeId) -> Result<u64, crate::topology::TopologyError> {
        self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(*self.0.lock().get(&node).unwrap_or(&(1 << 30)))
    }
}

/// node0 of the fixture has 1030716 kB; a 2 % reserve is 20614 kB (5 % is 51535 kB).
const NODE0_RESERVE_KB: u64 = 20_614;

fn rig_with_free(config: MigratorConfig) -> (Rig, Arc<FakeFree>) {
    let mut rig = rig(config);
    let free = Arc::new(FakeFree::default());
    rig.migrator.free = Arc::clone(&free) as Arc<dyn FreeMemory>;
    (rig, free)
}

fn sample(rig: &Rig, pid: u32, page: u64, times: u32, ms: u64) -> Recorded {
    let mut last = Recorded::Tracked;
    for _ in 0..times {
        last = rig.table.record(&Access {
            key: PageKey::new(pid, page * PAGE_SIZE).unwrap(),
            time_ns: ms * 1_000_000,
            node: 2,
            op: AccessOp::Load,
        });
    }
    last
}
