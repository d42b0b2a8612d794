//! Migrators: one thread per lower-tier node, like the pghot kernel's kmigrated.
//!
//! Each takes the candidates of its node from a bounded queue (full: the candidate is counted
//! as `pgpromote_queue_full` and stays eligible), moves them once the first has waited
//! `migrate_hold_ms` (at least `migrate_interval_ms`) or at once when `migrate_batch` wait
//! (`thread.rs`), charges each candidate at the size of the folio move_pages will move
//! (`folios.rs`; admission does it when it splits THPs), groups them by (pid, destination,
//! size), and
//!
//! 1. holds back what would take each group's destination under its free-memory watermark;
//! 2. holds back what exceeds the destination's token bucket (`promote_rate_limit_MBps`);
//!
//! then, for each process, in one call each whatever its groups:
//!
//! 3. asks the kernel where the pages are (move_pages query: cheap, no fault-in), so pages
//!    already on a top tier and pages that vanished never reach a move;
//! 4. moves the rest with move_pages(MPOL_MF_MOVE, or MPOL_MF_MOVE_ALL with `move_shared`),
//!    then accounts every page exactly once, re-querying the entries the kernel left
//!    unwritten (positive return, ENOMEM).
//!
//! Pages held back for a reason that may pass (rate limit, watermark, EBUSY, ENOMEM, not
//! migrated) are made eligible again in the table, so their next sample re-offers them; pages
//! that cannot move (gone, shared, not allowed) stay queued until their window expires.
//!
//! With `dry_run` steps 3-4 are skipped and allowed pages count as promoted: a batch replay of
//! a trace needs no live processes.
//!
//! Files: this one holds the types and the [`Migrator`]'s construction; `batch.rs` is what
//! happens to one batch (steps 1-4 above), `folios.rs` the folio sizes before them, `maintain.rs` the once-per-interval work (heat
//! decay, audit, demotion), `thread.rs` the `pghot-mig/nodeN` thread and its
//! [`MigratorHandle`].

pub mod audit;
mod batch;
pub mod capacity;
pub mod demote;
pub mod folios;
mod maintain;
pub mod ratelimit;
mod thread;

pub use thread::MigratorHandle;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::hotness::HotTable;
use crate::hotness::candidate::Candidate;
use crate::movepages::Mover;
use crate::pidstats::{PidCounts, PidStats};
use crate::stats::Stats;
use crate::topology::{NodeId, Topology};
use capacity::{FreeMemory, HeatCut};
use demote::Demoter;
use ratelimit::{Clock, RateLimits};

/// Tunables of the migrators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigratorConfig {
    pub migrate_interval_ms: u32,
    /// How long fewer than `migrate_batch` candidates may wait for more (see `thread.rs`).
    pub migrate_hold_ms: u32,
    pub migrate_batch: usize,
    pub promote_rate_limit_mbps: u64,
    /// Keep at least this percentage of the destination's memory free.
    pub promote_min_free_pct: u8,
    pub dry_run: bool,
    /// Move the coldest pages pghotd promoted back when a fast node runs low (`demote`).
    pub demote: bool,
    /// The low watermark demotion keeps free on a fast node, in percent of its memory.
    pub demote_free_pct: u8,
    /// Move pages other processes map too (MPOL_MF_MOVE_ALL, needs CAP_SYS_NICE): read when
    /// the daemon builds its movers (`SysMover::moving_shared`), so it takes a restart.
    pub move_shared: bool,
    /// A large folio (THP, mTHP) moves whole only once this share of its 4 KiB pages have
    /// samples; 0 moves it at its first candidate (see `folios`).
    pub promote_thp_min_samples_pct: u8,
}

impl Default for MigratorConfig {
    fn default() -> Self {
        MigratorConfig {
            migrate_interval_ms: 100,
            migrate_hold_ms: 1000,
            migrate_batch: 512,
            promote_rate_limit_mbps: 65536,
            promote_min_free_pct: 2,
            dry_run: false,
            demote: false,
            demote_free_pct: 5,
            move_shared: false,
            promote_thp_min_samples_pct: 25,
        }
    }
}

/// Migration admission between a batch of candidates and its move (see `crate::admission`):
/// may defer candidates (each counted and made eligible again), and may replace a candidate by
/// the folios to move for it, each charged at its size in `Candidate::bytes`.
pub trait Admit: Send {
    /// `headroom` says what each destination can take now (see [`Headroom`]).
    fn admit(
        &mut self,
        batch: &mut Vec<Candidate>,
        table: &HotTable,
        stats: &Stats,
        headroom: &dyn Fn(NodeId) -> Headroom,
    );

    /// Just before the move of `group` (one pid, any destinations and charged sizes, sorted
    /// by address, every page found on a lower tier by the query): takes out the candidates whose
    /// folio changed since [`Admit::admit`] so that moving them would move more than they were
    /// charged, each counted and made eligible again. The gate's: a range it split that
    /// khugepaged collapsed again (`thp_recollapsed`). By default nothing is re-checked.
    /// Whether [`Admit::admit`] charges every candidate at its folio's size (THP splitting
    /// on); otherwise the migrator sizes the batch itself (`folios`).
    fn sizes_folios(&self) -> bool {
        false
    }

    fn recheck(&mut self, _group: &mut Vec<Candidate>, _table: &HotTable, _stats: &Stats) {}

    /// (pid, 2 MiB start) of ranges this admission split that are one THP again (khugepaged)
    /// since the last call; with `scan` (every [`Admit::collapse_scan_every`], from
    /// `maintain`) it looks at every range it split first. The migrator re-queries their
    /// pages believed fast. By default none.
    fn collapsed_ranges(&mut self, _scan: bool, _stats: &Stats) -> Vec<(u32, u64)> {
        Vec::new()
    }

    /// How often `maintain` asks [`Admit::collapsed_ranges`] to scan. By default once per
    /// audit period.
    fn collapse_scan_every(&self) -> Duration {
        audit::AUDIT_EVERY
    }
}

/// What a destination node can take now, as the migrator knows it before a batch: the bytes
/// its rate-limit bucket holds (`promote_rate_limit_MBps`, one second of burst) and the bytes
/// it has free above its watermark (`promote_min_free_pct`). Admission weighs a whole THP
/// against its hot pages with it (issue 24).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Headroom {
    pub budget_bytes: u64,
    pub room_bytes: u64,
}

impl Headroom {
    /// No limit known: a destination whose free memory cannot be read, and tests.
    pub const UNLIMITED: Headroom = Headroom {
        budget_bytes: u64::MAX,
        room_bytes: u64::MAX,
    };
}

/// Messages from the daemon to a migrator thread.
#[derive(Debug)]
pub enum MigratorEvent {
    /// Sources have ended: migrate everything queued, then exit.
    Finish,
    /// Stop moving now: what is queued is abandoned (counted). The thread stays until
    /// `Close`, counting what the still-stopping sources queue meanwhile, so no candidate is
    /// left without an outcome.
    Stop,
    /// After `Stop`, once no source can offer any more: count the last arrivals, exit.
    Close,
    Reconfigure(MigratorConfig),
}

/// The decision logic of one migrator, free of threads and channels so tests can drive it.
pub struct Migrator<M: Mover, C: Clock> {
    node: NodeId,
    config: MigratorConfig,
    mover: M,
    clock: C,
    limits: RateLimits,
    table: Arc<HotTable>,
    topology: Arc<Topology>,
    stats: Arc<Stats>,
    watermark_warned: bool,
    /// Set by `pghotctl pause`: batches are held back, not moved.
    paused: Arc<AtomicBool>,
    pids: Arc<PidStats>,
    /// Outcomes of the process being moved, folded into `pids` once per process and batch.
    group: PidCounts,
    admission: Option<Box<dyn Admit>>,
    /// Folio sizes of candidates (see `folios`); `None` charges every candidate at 4 KiB.
    folios: Option<Box<dyn folios::FolioMap>>,
    /// Folios (pid, first address) found too sparse to move whole, and when (clock time):
    /// not looked at again for [`folios::RECOUNT_AFTER`].
    sparse_folios: std::collections::HashMap<(u32, u64), Duration>,
    /// Where the watermark reads free memory (the topology's sysfs, or a simulator).
    free: Arc<dyn FreeMemory>,
    /// Free kB of each destination read during the batch being processed, less what the
    /// batch has admitted there since: one read per destination and batch. A node's
    /// meminfo sums per-CPU counters in the kernel (drivers/base/node.c `node_read_meminfo`)
    /// and costs more than moving the page or two a trickle of candidates brings.
    free_in_batch: Vec<(NodeId, u64)>,
    /// Heat of recent candidates, for the capacity-aware cut.
    heat_cut: HeatCut,
    demoter: Demoter,
    /// The fast nodes this migrator demotes back to its own node.
    demotes_from: Vec<NodeId>,
    /// Whole-call move_pages failures so far (other than an exited process), for the log.
    call_failures: u64,
    /// When the next audit of the pages believed fast is due (clock time).
    next_audit: Duration,
    /// `pghot_believed_node_samples` when the last audit was due: no new ones since, and
    /// every sample since showed its page's node, so nothing the table holds is stale.
    believed_at_audit: u64,
    /// The first shard the next audit reads (see [`audit::next_slice`]).
    audit_cursor: usize,
    /// Most pages one audit asks about.
    audit_pages: usize,
    /// When admission next looks at the ranges it split for collapses (clock time).
    next_collapse_scan: Duration,
}

impl<M: Mover, C: Clock> Migrator<M, C> {
    #[allow(clippy::too_many_arguments)] // the migrator's collaborators, each a distinct role
    pub fn new(
        node: NodeId,
        config: MigratorConfig,
        mover: M,
        clock: C,
        table: Arc<HotTable>,
        topology: Arc<Topology>,
        stats: Arc<Stats>,
        limits: RateLimits,
    ) -> Self {
        let demoter = Demoter::new(
            config.promote_rate_limit_mbps.saturating_mul(1 << 20),
            clock.now(),
        );
        Migrator {
            node,
            config,
            mover,
            clock,
            limits,
            table,
            free: Arc::clone(&topology) as Arc<dyn FreeMemory>,
            free_in_batch: Vec::new(),
            demotes_from: demote::fast_nodes_of(&topology, node),
            topology,
            stats,
            watermark_warned: false,
            paused: Arc::new(AtomicBool::new(false)),
            pids: Arc::new(PidStats::default()),
            group: PidCounts::default(),
            admission: None,
            folios: None,
            sparse_folios: std::collections::HashMap::new(),
            heat_cut: HeatCut::default(),
            demoter,
            call_failures: 0,
            next_audit: Duration::ZERO,
            believed_at_audit: 0,
            audit_cursor: 0,
            audit_pages: audit::AUDIT_PAGES,
            next_collapse_scan: Duration::ZERO,
        }
    }

    /// Audits at most `pages` pages a pass (the simulator scales it down with its memory).
    pub fn with_audit_pages(mut self, pages: usize) -> Self {
        self.audit_pages = pages;
        self
    }

    /// Runs `admission` on each batch before it is grouped and moved.
    pub fn with_admission(mut self, admission: Box<dyn Admit>) -> Self {
        self.admission = Some(admission);
        self
    }

    /// Sizes each batch's candidates by their folios (see `folios`).
    pub fn with_folios(mut self, folios: Box<dyn folios::FolioMap>) -> Self {
        self.folios = Some(folios);
        self
    }

    /// Shares the pause switch of the control plane.
    pub fn with_pause(mut self, paused: Arc<AtomicBool>) -> Self {
        self.paused = paused;
        self
    }

    /// Shares the per-process counters.
    pub fn with_pid_stats(mut self, pids: Arc<PidStats>) -> Self {
        self.pids = pids;
        self
    }

    /// Reads free memory from `free` instead of the topology's sysfs (the simulator).
    pub fn with_free_memory(mut self, free: Arc<dyn FreeMemory>) -> Self {
        self.free = free;
        self
    }

    pub fn reconfigure(&mut self, config: MigratorConfig) {
        self.config = config;
        let rate = config.promote_rate_limit_mbps.saturating_mul(1 << 20);
        self.limits.set_rate(rate);
        self.demoter.set_rate(rate);
    }

    pub fn node(&self) -> NodeId {
        self.node
    }
}

#[cfg(test)]
mod tests;
