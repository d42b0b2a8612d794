//! Migrators: one thread per lower-tier node, like the pghot kernel's kmigrated.
//!
//! Each takes the candidates of its node from a bounded queue (full: the candidate is counted
//! as `pgpromote_queue_full` and stays eligible), wakes every `migrate_interval_ms` or when
//! `migrate_batch` wait, groups them by (pid, destination), and for each group:
//!
//! 1. holds back what would take the destination under its free-memory watermark;
//! 2. holds back what exceeds the destination's token bucket (`promote_rate_limit_MBps`);
//! 3. asks the kernel where the pages are (move_pages query: cheap, no fault-in), so pages
//!    already on a top tier and pages that vanished never reach a move;
//! 4. moves the rest with move_pages(MPOL_MF_MOVE), then accounts every page exactly once,
//!    re-querying the entries the kernel left unwritten (positive return, ENOMEM).
//!
//! Pages held back for a reason that may pass (rate limit, watermark, EBUSY, ENOMEM, not
//! migrated) are made eligible again in the table, so their next sample re-offers them; pages
//! that cannot move (gone, shared, not allowed) stay queued until their window expires.
//!
//! With `dry_run` steps 3-4 are skipped and allowed pages count as promoted: a batch replay of
//! a trace needs no live processes.

pub mod audit;
pub mod capacity;
pub mod demote;
pub mod ratelimit;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, select};

use crate::hotness::candidate::{Candidate, CandidateReceiver};
use crate::hotness::{HotTable, PageKey};
use crate::movepages::{Mover, STATUS_UNWRITTEN, call_failure, page_failure};
use crate::pidstats::{PidCounts, PidStats};
use crate::stats::{Counter, Stats};
use crate::topology::{NodeId, Topology};
use capacity::{FreeMemory, HeatAdmission, admit_hottest};
use demote::Demoter;
use ratelimit::{Clock, RateLimits};

/// Tunables of the migrators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigratorConfig {
    pub migrate_interval_ms: u32,
    pub migrate_batch: usize,
    pub promote_rate_limit_mbps: u64,
    /// Keep at least this percentage of the destination's memory free.
    pub promote_min_free_pct: u8,
    pub dry_run: bool,
    /// Move the coldest pages pghotd promoted back when a fast node runs low (`demote`).
    pub demote: bool,
    /// The low watermark demotion keeps free on a fast node, in percent of its memory.
    pub demote_free_pct: u8,
}

impl Default for MigratorConfig {
    fn default() -> Self {
        MigratorConfig {
            migrate_interval_ms: 100,
            migrate_batch: 512,
            promote_rate_limit_mbps: 65536,
            promote_min_free_pct: 2,
            dry_run: false,
            demote: false,
            demote_free_pct: 5,
        }
    }
}

/// Migration admission between a batch of candidates and its move (see `crate::admission`):
/// may defer candidates (each counted and made eligible again), and may replace a candidate by
/// the folios to move for it, each charged at its size in `Candidate::bytes`.
pub trait Admit: Send {
    fn admit(&mut self, batch: &mut Vec<Candidate>, table: &HotTable, stats: &Stats);
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
    /// Outcomes of the group being processed, folded into `pids` once per group.
    group: PidCounts,
    admission: Option<Box<dyn Admit>>,
    /// Where the watermark reads free memory (the topology's sysfs, or a simulator).
    free: Arc<dyn FreeMemory>,
    /// Heat of recent candidates, for the capacity-aware cut.
    heat_admission: HeatAdmission,
    demoter: Demoter,
    /// The fast nodes this migrator demotes back to its own node.
    demotes_from: Vec<NodeId>,
    /// Whole-call move_pages failures so far (other than an exited process), for the log.
    call_failures: u64,
    /// When the next audit of the pages believed fast is due (clock time).
    next_audit: Duration,
    /// Most pages one audit asks about.
    audit_pages: usize,
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
            demotes_from: demote::fast_nodes_of(&topology, node),
            topology,
            stats,
            watermark_warned: false,
            paused: Arc::new(AtomicBool::new(false)),
            pids: Arc::new(PidStats::default()),
            group: PidCounts::default(),
            admission: None,
            heat_admission: HeatAdmission::default(),
            demoter,
            call_failures: 0,
            next_audit: Duration::ZERO,
            audit_pages: audit::AUDIT_PAGES,
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

    /// Promotes a batch; every candidate ends in exactly one counter.
    pub fn process(&mut self, batch: &mut Vec<Candidate>) {
        if self.paused.load(Ordering::Relaxed) {
            // Paused: candidates are still counted and stay eligible; nothing moves.
            self.held_back(batch, Counter::PgpromotePaused);
            batch.clear();
            return;
        }
        if let Some(admission) = &mut self.admission {
            admission.admit(batch, &self.table, &self.stats);
        }
        // Groups are also by size: admission charges folios at their size, and a group's
        // watermark and rate limit count in units of one size.
        batch.sort_unstable_by_key(|c| (c.key.pid(), c.to_node, c.bytes, c.key.vaddr()));
        let mut start = 0;
        while start < batch.len() {
            let (pid, to, bytes) = (
                batch[start].key.pid(),
                batch[start].to_node,
                batch[start].bytes,
            );
            let end = start
                + batch[start..]
                    .iter()
                    .take_while(|c| c.key.pid() == pid && c.to_node == to && c.bytes == bytes)
                    .count();
            self.process_group(pid, to, &batch[start..end]);
            let group = std::mem::take(&mut self.group);
            if group != PidCounts::default() {
                self.pids.add(pid, &group);
            }
            start = end;
        }
        batch.clear();
    }

    /// Pages the destination can take before reaching its watermark; unlimited when its free
    /// memory cannot be read (e.g. a replayed trace names a node this machine lacks).
    fn watermark_room(&mut self, to: NodeId, page_bytes: u64) -> usize {
        let Some(node) = self.topology.node(to) else {
            return usize::MAX;
        };
        let reserve_kb = node.mem_total_kb * u64::from(self.config.promote_min_free_pct) / 100;
        match self.free.free_kb(to) {
            Ok(free_kb) => {
                let room_kb = free_kb.saturating_sub(reserve_kb);
                usize::try_from(room_kb * 1024 / page_bytes.max(1)).unwrap_or(usize::MAX)
            }
            Err(e) => {
                if !self.watermark_warned {
                    tracing::warn!(node = to, "cannot read free memory, no watermark: {e}");
                    self.watermark_warned = true;
                }
                usize::MAX
            }
        }
    }

    fn process_group(&mut self, pid: u32, to: NodeId, group: &[Candidate]) {
        let page_bytes = group[0].bytes;
        let room = self.watermark_room(to, page_bytes);
        let admitted = self.admit(to, group, room);
        let group = admitted.as_slice();

        let now = self.clock.now();
        let rate = self.config.promote_rate_limit_mbps.saturating_mul(1 << 20);
        let allowed = self.limits.take(to, now, rate, page_bytes, group.len());
        let (group, limited) = group.split_at(allowed);
        self.held_back(limited, Counter::PgpromoteRatelimited);
        if group.is_empty() {
            return;
        }
        if self.config.dry_run {
            for c in group {
                self.promoted(c);
            }
            return;
        }
        let moved = self.move_group(pid, to, group);
        let unmoved = (group.len() - moved) as u64;
        self.limits.refund(to, unmoved * page_bytes);
    }

    /// The capacity-aware cut: every candidate's heat feeds the histogram; when the group does
    /// not fit in `room`, the hottest go first and none colder than the histogram's cut (so
    /// lukewarm pages offered early do not take the room hotter ones will need). Held-back
    /// pages are counted (watermark: no room; cold: room kept for hotter) and stay eligible.
    fn admit(&mut self, to: NodeId, group: &[Candidate], room: usize) -> Vec<Candidate> {
        let mut heats: Vec<(Candidate, f64)> = group
            .iter()
            .map(|c| (*c, self.table.heat_of(c.key).unwrap_or(0.0)))
            .collect();
        for (_, heat) in &heats {
            self.heat_admission.observe(*heat);
        }
        // With demotion, our pages that went cold are room too: demotion frees it for whoever
        // the watermark holds back now. Counted as taken, they kept the cut high after a
        // shift of the hot set, and the new set's single-sample candidates (heat just under
        // 1, the bin below a twice-sampled page's) were refused as cold while room was left.
        // The count admitted stays what fits now; the watermark is never crossed.
        let reclaimable = if self.config.demote && !self.config.dry_run {
            self.demoter.reclaimable(to)
        } else {
            0
        };
        let cut_room = (room as u64).saturating_add(reclaimable);
        if group.len() <= room && self.heat_admission.demand() <= cut_room {
            return group.to_vec();
        }
        let cut = self.heat_admission.cut(cut_room);
        let n = admit_hottest(&mut heats, room, cut);
        for (c, heat) in &heats[n..] {
            self.demoter.note_pressure(to, *heat);
            let counter = if n < room {
                Counter::PgpromoteFailCold
            } else {
                Counter::PgpromoteFailWatermark
            };
            self.held_back(std::slice::from_ref(c), counter);
        }
        // Keep the kernel-facing order (by address) for the move.
        let mut admitted: Vec<Candidate> = heats[..n].iter().map(|(c, _)| *c).collect();
        admitted.sort_unstable_by_key(|c| c.key.vaddr());
        admitted
    }

    /// Once per migrate interval: ages the heat histogram and, with `demote`, moves the
    /// coldest pages pghotd promoted off any fast node under its low watermark.
    pub fn maintain(&mut self) {
        self.heat_admission.decay();
        // A dry run moves nothing, so the kernel disagrees with every "promoted" page.
        if !self.config.dry_run && self.clock.now() >= self.next_audit {
            self.audit();
            self.next_audit = self.clock.now() + audit::AUDIT_EVERY;
        }
        if !self.config.demote || self.config.dry_run {
            return;
        }
        for fast in self.demotes_from.clone() {
            let (Some(node), Ok(free_kb)) = (self.topology.node(fast), self.free.free_kb(fast))
            else {
                continue;
            };
            let wanted = demote::pages_wanted(
                free_kb,
                node.mem_total_kb,
                self.config.demote_free_pct,
                crate::hotness::PAGE_SIZE,
            );
            let now = self.clock.now();
            let victims =
                self.demoter
                    .victims(&self.table, fast, wanted, now, crate::hotness::PAGE_SIZE);
            self.demote_pages(victims);
        }
    }

    /// Asks the kernel where the hottest pages believed on this migrator's fast nodes are, and
    /// tracks those found on a lower tier as lower-tier again (see [`audit`]).
    fn audit(&mut self) {
        let keys = audit::pick(&self.table, &self.demotes_from, self.audit_pages);
        let mut checked = 0;
        let mut moved_back = 0;
        for group in keys.chunk_by(|a, b| a.pid() == b.pid()) {
            let pid = group[0].pid();
            let pages: Vec<u64> = group.iter().map(|k| k.vaddr()).collect();
            let mut status = vec![STATUS_UNWRITTEN; pages.len()];
            // A process that exited or left the scope is the table's eviction's business.
            if self.query(pid, &pages, &mut status).is_err() {
                continue;
            }
            checked += pages.len() as u64;
            for (&key, &s) in group.iter().zip(&status) {
                if let Ok(node) = NodeId::try_from(s)
                    && self.topology.is_lower_tier(node)
                {
                    self.table.mark_demoted(key, node);
                    moved_back += 1;
                }
            }
        }
        self.stats.add(Counter::PghotAuditPages, checked);
        self.stats.add(Counter::PghotAuditMovedBack, moved_back);
        if moved_back > 0 {
            tracing::debug!(
                node = self.node,
                "audit: {moved_back} of {checked} pages believed fast are back on a lower tier"
            );
        }
    }

    /// Moves `victims` (pages on a fast node) back to this migrator's node.
    fn demote_pages(&mut self, mut victims: Vec<PageKey>) {
        victims.sort_unstable();
        let mut start = 0;
        while start < victims.len() {
            let pid = victims[start].pid();
            let end = start
                + victims[start..]
                    .iter()
                    .take_while(|k| k.pid() == pid)
                    .count();
            let keys = &victims[start..end];
            let pages: Vec<u64> = keys.iter().map(|k| k.vaddr()).collect();
            let nodes = vec![i32::from(self.node); pages.len()];
            let mut status = vec![STATUS_UNWRITTEN; pages.len()];
            self.stats.add(Counter::MigratorSyscalls, 1);
            // Whole-call errors leave statuses unwritten: those pages count as failed.
            let _ = self
                .mover
                .move_pages(pid, &pages, Some(&nodes), &mut status);
            let mut failed = 0u64;
            for (k, &s) in keys.iter().zip(&status) {
                if s == i32::from(self.node) {
                    self.table.mark_demoted(*k, self.node);
                } else {
                    failed += 1;
                }
            }
            let moved = keys.len() as u64 - failed;
            self.stats.add(Counter::PgdemoteSuccess, moved);
            self.stats.add(Counter::PgdemoteFail, failed);
            self.demoter.refund(failed * crate::hotness::PAGE_SIZE);
            start = end;
        }
    }

    /// Counts pages that failed for a reason that may pass (rate limit, watermark, a busy or
    /// unallocatable page) and makes them eligible again, so their next sample offers them
    /// anew instead of waiting for their window to expire.
    fn held_back(&self, pages: &[Candidate], counter: Counter) {
        self.stats.add(counter, pages.len() as u64);
        for c in pages {
            self.table.unqueue(c.key);
        }
    }

    /// Accounts one page's failure by its counter; transient ones are retried.
    fn failed(&mut self, c: &Candidate, counter: Counter) {
        self.group.fail += 1;
        if is_transient(counter) {
            self.held_back(std::slice::from_ref(c), counter);
        } else {
            // Permanent for now (gone, shared, not allowed): stays queued until its window
            // expires, so a page that cannot move is not retried on every sample.
            self.stats.add(counter, 1);
        }
    }

    fn promoted(&mut self, c: &Candidate) {
        self.group.promoted_pages += 1;
        self.group.promoted_bytes += c.bytes;
        self.stats.add_promoted(c.to_node, 1, c.bytes);
        self.table.mark_promoted_by_us(c.key, c.to_node);
    }

    fn query(&mut self, pid: u32, pages: &[u64], status: &mut [i32]) -> Result<(), nix::Error> {
        self.stats.add(Counter::MigratorSyscalls, 1);
        status.fill(STATUS_UNWRITTEN);
        self.mover.move_pages(pid, pages, None, status).map(|_| ())
    }

    /// Queries, moves and accounts one group. Returns how many pages reached `to`.
    fn move_group(&mut self, pid: u32, to: NodeId, group: &[Candidate]) -> usize {
        let pages: Vec<u64> = group.iter().map(|c| c.key.vaddr()).collect();
        let mut status = vec![STATUS_UNWRITTEN; pages.len()];
        if let Err(errno) = self.query(pid, &pages, &mut status) {
            self.fail_all(pid, group.len(), errno);
            return 0;
        }
        // Only pages still on a lower tier go into the move.
        let mut to_move = Vec::with_capacity(group.len());
        for (c, &s) in group.iter().zip(&status) {
            match NodeId::try_from(s) {
                Ok(node) if self.topology.is_lower_tier(node) => to_move.push(*c),
                Ok(node) => {
                    self.stats.add(Counter::PgpromoteAlreadyToptier, 1);
                    self.table.mark_promoted(c.key, node);
                }
                Err(_) => self.failed(c, page_failure(s)),
            }
        }
        if to_move.is_empty() {
            return 0;
        }
        let pages: Vec<u64> = to_move.iter().map(|c| c.key.vaddr()).collect();
        let nodes = vec![i32::from(to); pages.len()];
        let mut status = vec![STATUS_UNWRITTEN; pages.len()];
        self.stats.add(Counter::MigratorSyscalls, 1);
        let result = self
            .mover
            .move_pages(pid, &pages, Some(&nodes), &mut status);
        // What an entry the kernel did not write turned out to be, if a re-query finds it
        // elsewhere than `to`.
        let unwritten_reason = match result {
            Ok(_) => Counter::PgpromoteFailNotMigrated,
            Err(nix::errno::Errno::ESRCH) => {
                self.fail_all(pid, to_move.len(), nix::errno::Errno::ESRCH);
                return 0;
            }
            Err(errno) => {
                self.log_call_failure(pid, to_move.len(), errno);
                call_failure(errno)
            }
        };
        if status.contains(&STATUS_UNWRITTEN) {
            self.requery_unwritten(pid, &pages, &mut status);
        }
        let mut moved = 0;
        for (c, &s) in to_move.iter().zip(&status) {
            if s == i32::from(to) {
                self.promoted(c);
                moved += 1;
            } else if s == STATUS_UNWRITTEN || s >= 0 {
                self.failed(c, unwritten_reason);
            } else {
                self.failed(c, page_failure(s));
            }
        }
        moved
    }

    /// Fills unwritten statuses with where the pages are now; entries the query cannot
    /// resolve stay unwritten.
    fn requery_unwritten(&mut self, pid: u32, pages: &[u64], status: &mut [i32]) {
        let idx: Vec<usize> = (0..status.len())
            .filter(|&i| status[i] == STATUS_UNWRITTEN)
            .collect();
        let subset: Vec<u64> = idx.iter().map(|&i| pages[i]).collect();
        let mut found = vec![STATUS_UNWRITTEN; subset.len()];
        if self.query(pid, &subset, &mut found).is_ok() {
            for (&i, &s) in idx.iter().zip(&found) {
                // A negative status means it is gone: leave it unwritten (counted by reason).
                if s >= 0 {
                    status[i] = s;
                }
            }
        }
    }

    fn fail_all(&mut self, pid: u32, n: usize, errno: nix::errno::Errno) {
        self.group.fail += n as u64;
        self.log_call_failure(pid, n, errno);
        self.stats.add(call_failure(errno), n as u64);
    }

    /// Logs a move_pages call that failed as a whole. An exited process is logged per group
    /// (a process exits once); other causes the first time and then every 100th, since a
    /// persistent one (a cpuset without the destination: EACCES) fails every group.
    fn log_call_failure(&mut self, pid: u32, pages: usize, errno: nix::errno::Errno) {
        let counter = call_failure(errno).name();
        if errno == nix::errno::Errno::ESRCH {
            tracing::info!(
                pid,
                "process exited; {pages} queued pages counted as {counter}"
            );
            return;
        }
        self.call_failures += 1;
        if self.call_failures % 100 == 1 {
            tracing::warn!(
                pid,
                node = self.node,
                "move_pages of {pages} pages: {errno}, counted as {counter} ({} such \
                 failures so far)",
                self.call_failures
            );
        }
    }

    pub fn node(&self) -> NodeId {
        self.node
    }
}

/// Failures that may pass by the next sample of the page.
fn is_transient(counter: Counter) -> bool {
    matches!(
        counter,
        Counter::PgpromoteRatelimited
            | Counter::PgpromoteFailWatermark
            | Counter::PgpromoteFailBusy
            | Counter::PgpromoteFailNomem
            | Counter::PgpromoteFailNotMigrated
            | Counter::PgpromoteFailCold
    )
}

/// A running migrator thread.
pub struct MigratorHandle {
    node: NodeId,
    events: Sender<MigratorEvent>,
    done: Receiver<()>,
    thread: Option<JoinHandle<()>>,
}

impl MigratorHandle {
    /// Spawns `pghot-mig/nodeN`.
    pub fn spawn<M: Mover + 'static, C: Clock + 'static>(
        mut migrator: Migrator<M, C>,
        candidates: CandidateReceiver,
    ) -> std::io::Result<MigratorHandle> {
        let node = migrator.node();
        let (events_tx, events_rx) = crossbeam_channel::bounded(16);
        // Never sent on: the thread drops it when it exits, which disconnects `done`.
        let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(0);
        let thread = std::thread::Builder::new()
            .name(format!("pghot-mig/node{node}"))
            .spawn(move || {
                let _done = done_tx;
                run(&mut migrator, &candidates, &events_rx);
            })?;
        Ok(MigratorHandle {
            node,
            events: events_tx,
            done: done_rx,
            thread: Some(thread),
        })
    }

    pub fn node(&self) -> NodeId {
        self.node
    }

    /// Disconnects (a `recv` returns an error) once the thread has exited: wait on it in a
    /// `select!` with other channels.
    pub fn done(&self) -> &Receiver<()> {
        &self.done
    }

    /// A sender of events to this migrator (the control plane's `Reconfigure`).
    pub fn events(&self) -> Sender<MigratorEvent> {
        self.events.clone()
    }

    pub fn send(&self, event: MigratorEvent) {
        // A migrator that already exited has nothing left to do with it.
        let _ = self.events.send(event);
    }

    /// Closes the migrator (after a `Stop`, no more candidates will come; a running or
    /// finishing one abandons or drains as it would anyway) and waits for the thread to exit,
    /// up to `timeout`. Returns false if it is still running.
    pub fn join(mut self, timeout: Duration) -> bool {
        let Some(thread) = self.thread.take() else {
            return true;
        };
        let _ = self.events.try_send(MigratorEvent::Close);
        if self.done.recv_timeout(timeout) == Err(RecvTimeoutError::Timeout) {
            tracing::warn!(node = self.node, "migrator did not stop within {timeout:?}");
            return false;
        }
        if thread.join().is_err() {
            tracing::error!(node = self.node, "migrator thread panicked");
            return false;
        }
        true
    }
}

fn run<M: Mover, C: Clock>(
    migrator: &mut Migrator<M, C>,
    queue: &CandidateReceiver,
    events: &Receiver<MigratorEvent>,
) {
    let mut batch: Vec<Candidate> = Vec::with_capacity(migrator.config.migrate_batch);
    let mut next_wake = Instant::now() + interval(&migrator.config);
    loop {
        let timeout = next_wake.saturating_duration_since(Instant::now());
        select! {
            recv(queue.wake_channel()) -> _ => drain(migrator, queue, &mut batch),
            recv(events) -> e => match e {
                Ok(MigratorEvent::Finish) => {
                    drain(migrator, queue, &mut batch);
                    return;
                }
                Ok(MigratorEvent::Stop) => {
                    abandon(migrator, queue, &mut batch);
                    // Sources may still be offering (they stop within their poll slice):
                    // keep the queue open and count those too, once Close says none is left.
                    wait_for_close(events);
                    abandon(migrator, queue, &mut batch);
                    return;
                }
                Ok(MigratorEvent::Close) | Err(_) => {
                    abandon(migrator, queue, &mut batch);
                    return;
                }
                Ok(MigratorEvent::Reconfigure(config)) => migrator.reconfigure(config),
            },
            default(timeout) => {
                drain(migrator, queue, &mut batch);
                migrator.maintain();
                next_wake = Instant::now() + interval(&migrator.config);
            }
        }
    }
}

/// Counts the unfinished batch and everything queued as abandoned.
fn abandon<M: Mover, C: Clock>(
    migrator: &mut Migrator<M, C>,
    queue: &CandidateReceiver,
    batch: &mut Vec<Candidate>,
) {
    let abandoned = batch.len() + queue.discard_all();
    migrator
        .stats
        .add(Counter::PgpromoteAbandoned, abandoned as u64);
    batch.clear();
}

/// After `Stop`: waits for `Close` (or `Finish`, or the daemon gone), ignoring the rest.
fn wait_for_close(events: &Receiver<MigratorEvent>) {
    loop {
        match events.recv() {
            Ok(MigratorEvent::Close | MigratorEvent::Finish) | Err(_) => return,
            Ok(MigratorEvent::Stop | MigratorEvent::Reconfigure(_)) => {}
        }
    }
}

/// Promotes everything queued, `migrate_batch` at a time.
fn drain<M: Mover, C: Clock>(
    migrator: &mut Migrator<M, C>,
    queue: &CandidateReceiver,
    batch: &mut Vec<Candidate>,
) {
    while let Some(c) = queue.try_recv() {
        batch.push(c);
        if batch.len() >= migrator.config.migrate_batch {
            migrator.process(batch);
        }
    }
    if !batch.is_empty() {
        migrator.process(batch);
    }
}

fn interval(config: &MigratorConfig) -> Duration {
    Duration::from_millis(u64::from(config.migrate_interval_ms.max(1)))
}

#[cfg(test)]
mod tests {
    mod faults;

    use super::ratelimit::tests::FakeClock;
    use super::*;
    use crate::hotness::candidate::candidate_queue;
    use crate::hotness::{Access, HotPolicy, PAGE_SIZE, PageKey, Recorded};
    use crate::movepages::fake::{FakeMover, Script};
    use crate::sample::{AccessOp, SourceKind};
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
        let table = Arc::new(HotTable::new(4096, HotPolicy::default()));
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

    #[test]
    fn the_audit_finds_pages_the_kernel_moved_back_and_tracks_them_as_lower_tier() {
        let mut rig = rig(MigratorConfig::default());
        map(&rig, 10, 0..3);
        let mut batch = vec![cand(10, 0, 0), cand(10, 1, 0), cand(10, 2, 1)];
        for c in &batch {
            rig.table.record(&Access {
                key: c.key,
                time_ns: 1_000_000,
                node: 2,
                op: AccessOp::Load,
            });
        }
        rig.migrator.process(&mut batch);
        assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 3);
        // The kernel demotes one page behind pghotd's back; the table still says node 0.
        let key = PageKey::new(10, PAGE_SIZE).unwrap();
        rig.mover.0.lock().pages.insert((10, PAGE_SIZE), SLOW);
        assert_eq!(rig.table.get(key).unwrap().node(), 0);
        rig.migrator.maintain();
        assert_eq!(counter(&rig, Counter::PghotAuditPages), 3);
        assert_eq!(counter(&rig, Counter::PghotAuditMovedBack), 1);
        let e = rig.table.get(key).unwrap();
        assert_eq!(e.node(), 2, "tracked as lower-tier again");
        assert!(!e.is_promoted());
        // Once a second, not per interval.
        rig.migrator.maintain();
        assert_eq!(counter(&rig, Counter::PghotAuditPages), 3);
        rig.clock.advance(audit::AUDIT_EVERY);
        rig.migrator.maintain();
        assert_eq!(counter(&rig, Counter::PghotAuditPages), 5);
    }

    #[test]
    fn a_dry_run_never_audits() {
        let mut rig = rig(MigratorConfig {
            dry_run: true,
            ..MigratorConfig::default()
        });
        let key = PageKey::new(10, 0).unwrap();
        rig.table.record(&Access {
            key,
            time_ns: 1_000_000,
            node: 2,
            op: AccessOp::Load,
        });
        rig.table.mark_promoted(key, 0);
        assert_eq!(audit::pick(&rig.table, &[0, 1], 10), vec![key]);
        rig.migrator.maintain();
        assert_eq!(counter(&rig, Counter::PghotAuditPages), 0);
        assert_eq!(rig.table.get(key).unwrap().node(), 0);
    }

    #[test]
    fn moves_and_groups_by_pid_and_destination() {
        let mut rig = rig(MigratorConfig::default());
        map(&rig, 10, 0..4);
        map(&rig, 11, 0..2);
        let mut batch = vec![
            cand(10, 0, 0),
            cand(11, 0, 1),
            cand(10, 1, 0),
            cand(10, 2, 1),
            cand(11, 1, 1),
            cand(10, 3, 0),
        ];
        rig.migrator.process(&mut batch);
        assert!(batch.is_empty());
        assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 6);
        assert_eq!(rig.stats.promoted_bytes(0), 3 * PAGE_SIZE);
        assert_eq!(rig.stats.promoted_bytes(1), 3 * PAGE_SIZE);
        let mem = rig.mover.0.lock();
        // Three groups: (10 -> 0), (10 -> 1), (11 -> 1); each one query and one move.
        let moves: Vec<_> = mem
            .calls
            .iter()
            .filter(|c| c.2)
            .map(|c| (c.0, c.1))
            .collect();
        assert_eq!(moves, vec![(10, 3), (10, 1), (11, 2)]);
        assert_eq!(mem.pages[&(10, 2 * PAGE_SIZE)], 1);
        assert_eq!(counter(&rig, Counter::MigratorSyscalls), 6);
    }

    #[test]
    fn per_page_statuses_land_in_their_counters() {
        let mut rig = rig(MigratorConfig::default());
        map(&rig, 10, 0..2);
        {
            let mut mem = rig.mover.0.lock();
            mem.pages.insert((10, 2 * PAGE_SIZE), -libc::EFAULT);
            mem.pages.insert((10, 3 * PAGE_SIZE), 0); // already promoted by someone else
            // page 4: never mapped -> -ENOENT
        }
        let mut batch: Vec<_> = (0..5).map(|p| cand(10, p, 0)).collect();
        rig.migrator.process(&mut batch);
        assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 2);
        assert_eq!(counter(&rig, Counter::PgpromoteFailFault), 1);
        assert_eq!(counter(&rig, Counter::PgpromoteAlreadyToptier), 1);
        assert_eq!(counter(&rig, Counter::PgpromoteFailNotPresent), 1);
        assert_eq!(outcomes(&rig), 5);
    }

    #[test]
    fn a_positive_return_is_resolved_by_requery() {
        let mut rig = rig(MigratorConfig::default());
        map(&rig, 10, 0..5);
        rig.mover
            .0
            .lock()
            .script
            .push_back(Script::Partial { moved: 2 });
        let mut batch: Vec<_> = (0..5).map(|p| cand(10, p, 0)).collect();
        rig.migrator.process(&mut batch);
        assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 2);
        assert_eq!(counter(&rig, Counter::PgpromoteFailNotMigrated), 3);
        assert_eq!(outcomes(&rig), 5);
        // The three that stayed behind are refunded to the bucket.
        assert_eq!(
            rig.migrator.limits.tokens(0),
            Some((65536u64 << 20) - 2 * PAGE_SIZE)
        );
    }

    #[test]
    fn enomem_mid_call_counts_what_moved_before_it() {
        let mut rig = rig(MigratorConfig::default());
        map(&rig, 10, 0..4);
        rig.mover.0.lock().script.push_back(Script::Fail {
            moved: 1,
            errno: Errno::ENOMEM,
        });
        let mut batch: Vec<_> = (0..4).map(|p| cand(10, p, 0)).collect();
        rig.migrator.process(&mut batch);
        assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 1);
        assert_eq!(counter(&rig, Counter::PgpromoteFailNomem), 3);
        assert_eq!(outcomes(&rig), 4);
    }

    #[test]
    fn whole_call_errors_count_every_page() {
        for (errno, want) in [
            (Errno::EACCES, Counter::PgpromoteFailNotAllowed),
            (Errno::ENODEV, Counter::PgpromoteFailNoNode),
            (Errno::EPERM, Counter::PgpromoteFailPermission),
            (Errno::EINVAL, Counter::PgpromoteFailOther),
        ] {
            let mut rig = rig(MigratorConfig::default());
            map(&rig, 10, 0..3);
            rig.mover
                .0
                .lock()
                .script
                .push_back(Script::Fail { moved: 0, errno });
            let mut batch: Vec<_> = (0..3).map(|p| cand(10, p, 0)).collect();
            rig.migrator.process(&mut batch);
            assert_eq!(counter(&rig, want), 3, "{errno}");
            assert_eq!(outcomes(&rig), 3, "{errno}");
        }
    }

    #[test]
    fn a_process_that_exited_fails_its_pages_not_the_batch() {
        let mut rig = rig(MigratorConfig::default());
        map(&rig, 10, 0..2);
        map(&rig, 11, 0..2);
        rig.mover.0.lock().gone.push(11);
        let mut batch = vec![
            cand(10, 0, 0),
            cand(11, 0, 0),
            cand(11, 1, 0),
            cand(10, 1, 0),
        ];
        rig.migrator.process(&mut batch);
        assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 2);
        assert_eq!(counter(&rig, Counter::PgpromoteFailNoProcess), 2);
    }

    #[test]
    fn rate_limit_holds_back_and_refills_with_the_clock() {
        let config = MigratorConfig {
            promote_rate_limit_mbps: 1, // 256 pages per second
            ..MigratorConfig::default()
        };
        let mut rig = rig(config);
        map(&rig, 10, 0..600);
        let mut batch: Vec<_> = (0..300).map(|p| cand(10, p, 0)).collect();
        rig.migrator.process(&mut batch);
        assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 256);
        assert_eq!(counter(&rig, Counter::PgpromoteRatelimited), 44);
        rig.clock.advance(Duration::from_millis(250));
        let mut batch: Vec<_> = (300..400).map(|p| cand(10, p, 0)).collect();
        rig.migrator.process(&mut batch);
        assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 256 + 64);
        assert_eq!(counter(&rig, Counter::PgpromoteRatelimited), 44 + 36);
    }

    fn copy_tree(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy_tree(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), target).unwrap();
            }
        }
    }

    #[test]
    fn reconfigure_applies_a_lower_rate_to_existing_buckets() {
        let mut rig = rig(MigratorConfig::default());
        map(&rig, 10, 0..400);
        rig.migrator.process(&mut vec![cand(10, 0, 0)]);
        rig.migrator.reconfigure(MigratorConfig {
            promote_rate_limit_mbps: 1,
            ..MigratorConfig::default()
        });
        rig.migrator
            .process(&mut (1..400).map(|p| cand(10, p, 0)).collect());
        // The bucket was capped to the new one-second burst: 256 pages.
        assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 1 + 256);
        assert_eq!(counter(&rig, Counter::PgpromoteRatelimited), 399 - 256);
    }

    #[test]
    fn migrators_share_the_budget_of_a_destination() {
        let config = MigratorConfig {
            promote_rate_limit_mbps: 1, // 256 pages per second to each destination
            ..MigratorConfig::default()
        };
        let mut a = rig(config);
        let mut b = rig(config);
        b.migrator.limits = a.migrator.limits.clone();
        b.migrator.clock = a.clock.clone();
        map(&a, 10, 0..200);
        map(&b, 11, 0..300);
        a.migrator
            .process(&mut (0..200).map(|p| cand(10, p, 0)).collect());
        b.migrator
            .process(&mut (0..200).map(|p| cand(11, p, 0)).collect());
        let promoted =
            counter(&a, Counter::PgpromoteSuccess) + counter(&b, Counter::PgpromoteSuccess);
        assert_eq!(promoted, 256);
        // Another destination has its own budget.
        b.migrator
            .process(&mut (200..300).map(|p| cand(11, p, 1)).collect());
        assert_eq!(counter(&b, Counter::PgpromoteSuccess), 56 + 100);
    }

    #[test]
    fn the_watermark_admits_only_what_keeps_the_reserve_free() {
        // node0 of the fixture has 1030716 kB; a 2% reserve is 20614 kB. Leave room for
        // exactly two pages above it.
        let dir = tempfile::tempdir().unwrap();
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/qemu-3node");
        copy_tree(&fixture, dir.path());
        let meminfo = dir.path().join("devices/system/node/node0/meminfo");
        std::fs::write(
            &meminfo,
            "Node 0 MemTotal: 1030716 kB\nNode 0 MemFree: 20622 kB\n",
        )
        .unwrap();
        let topology = Arc::new(Topology::read(SysfsRoot::new(dir.path())).unwrap());
        let mut rig = rig(MigratorConfig::default());
        rig.migrator.free = Arc::clone(&topology) as Arc<dyn FreeMemory>;
        rig.migrator.topology = topology;
        map(&rig, 10, 0..5);
        let mut batch: Vec<_> = (0..5).map(|p| cand(10, p, 0)).collect();
        rig.migrator.process(&mut batch);
        assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 2);
        assert_eq!(counter(&rig, Counter::PgpromoteFailWatermark), 3);
        // node1 is not under pressure.
        map(&rig, 11, 0..5);
        let mut batch: Vec<_> = (0..5).map(|p| cand(11, p, 1)).collect();
        rig.migrator.process(&mut batch);
        assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 7);
    }

    #[test]
    fn pages_held_back_by_the_rate_limit_are_offered_again_permanent_failures_are_not() {
        let config = MigratorConfig {
            promote_rate_limit_mbps: 1,
            ..MigratorConfig::default()
        };
        let mut rig = rig(config);
        map(&rig, 10, 0..300);
        let access = |page: u64| Access {
            key: PageKey::new(10, page * PAGE_SIZE).unwrap(),
            time_ns: 0,
            node: 2,
            op: AccessOp::Load,
        };
        let mut batch = Vec::new();
        for page in 0..300 {
            rig.table.record(&access(page));
            assert_eq!(rig.table.record(&access(page)), Recorded::Candidate);
            batch.push(cand(10, page, 0));
        }
        // Page 10 cannot be moved at all (no VMA): permanent.
        rig.mover
            .0
            .lock()
            .pages
            .insert((10, 10 * PAGE_SIZE), -libc::EFAULT);
        rig.migrator.process(&mut batch);
        // 1 MiB/s is 256 pages of budget: pages 0..256 are tried, the rest held back.
        assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 255);
        assert_eq!(counter(&rig, Counter::PgpromoteFailFault), 1);
        assert_eq!(counter(&rig, Counter::PgpromoteRatelimited), 44);
        // A held-back page is a candidate again on its next sample ...
        assert_eq!(rig.table.record(&access(280)), Recorded::Candidate);
        // ... a page that cannot move waits for its window, and a promoted one is done.
        assert!(rig.table.get(access(10).key).unwrap().is_queued());
        assert_eq!(rig.table.record(&access(10)), Recorded::Tracked);
        assert_eq!(rig.table.record(&access(0)), Recorded::Tracked);
    }

    /// Free memory set by the test.
    #[derive(Default)]
    struct FakeFree(parking_lot::Mutex<std::collections::HashMap<NodeId, u64>>);

    impl FreeMemory for FakeFree {
        fn free_kb(&self, node: NodeId) -> Result<u64, crate::topology::TopologyError> {
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

    #[test]
    fn a_tight_fast_node_takes_the_hottest_candidates_first() {
        let (mut rig, free) = rig_with_free(MigratorConfig::default());
        // Room for exactly two pages above the reserve.
        free.0.lock().insert(0, NODE0_RESERVE_KB + 8);
        map(&rig, 10, 0..5);
        // Low addresses are lukewarm, high ones hot: first-come would pick 0 and 1.
        for (page, heat) in [(0, 2), (1, 2), (2, 3), (3, 9), (4, 6)] {
            sample(&rig, 10, page, heat, 0);
        }
        let mut batch: Vec<_> = (0..5).map(|p| cand(10, p, 0)).collect();
        rig.migrator.process(&mut batch);
        assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 2);
        let mem = rig.mover.0.lock();
        assert_eq!(mem.pages[&(10, 3 * PAGE_SIZE)], 0);
        assert_eq!(mem.pages[&(10, 4 * PAGE_SIZE)], 0);
        assert_eq!(mem.pages[&(10, 0)], SLOW);
        drop(mem);
        assert_eq!(outcomes(&rig), 5);
    }

    #[test]
    fn the_heat_cut_keeps_room_for_hotter_pages_across_batches() {
        let (mut rig, free) = rig_with_free(MigratorConfig::default());
        // Room for four pages, which the fake keeps (its free memory does not move).
        free.0.lock().insert(0, NODE0_RESERVE_KB + 4 * 4);
        map(&rig, 10, 0..100);
        for page in 0..40 {
            sample(&rig, 10, page, 1, 0);
        }
        for page in 60..70 {
            sample(&rig, 10, page, 8, 0);
        }
        // Interval 1: 30 lukewarm and 4 hot candidates in one batch: the hot four get the room.
        let mut mixed: Vec<_> = (0..30).chain(60..64).map(|p| cand(10, p, 0)).collect();
        rig.migrator.process(&mut mixed);
        assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 4);
        assert_eq!(counter(&rig, Counter::PgpromoteFailWatermark), 30);
        rig.migrator.maintain();
        // Interval 2: lukewarm pages come first. There is room, but recent demand says hotter
        // pages arrive too, so the room is kept for them ...
        let mut lukewarm: Vec<_> = (30..40).map(|p| cand(10, p, 0)).collect();
        rig.migrator.process(&mut lukewarm);
        assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 4);
        assert_eq!(counter(&rig, Counter::PgpromoteFailCold), 10);
        // ... and the hot ones that follow take it.
        let mut hot: Vec<_> = (64..66).map(|p| cand(10, p, 0)).collect();
        rig.migrator.process(&mut hot);
        assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 6);
        assert_eq!(outcomes(&rig), 46);
    }

    /// A rig with pages 0..`mapped` of pid 10 on the slow node, of which 0..`promoted` were
    /// sampled twice at 0 ms and promoted to node 0.
    fn rig_with_promoted(demote: bool, mapped: u64, promoted: u64) -> (Rig, Arc<FakeFree>) {
        let config = MigratorConfig {
            demote,
            ..MigratorConfig::default()
        };
        let (mut rig, free) = rig_with_free(config);
        map(&rig, 10, 0..mapped);
        for page in 0..promoted {
            sample(&rig, 10, page, 2, 0);
        }
        rig.migrator
            .process(&mut (0..promoted).map(|p| cand(10, p, 0)).collect());
        assert_eq!(counter(&rig, Counter::PgpromoteSuccess), promoted);
        (rig, free)
    }

    /// After a shift: eight of our pages went cold, six single-sample candidates of the new
    /// set and two hotter ones arrive, with room for four. Returns (promoted of the new set,
    /// held back as cold, held back at the watermark).
    fn shifted_set_with_room_for_four(demote: bool) -> (u64, u64, u64) {
        let (mut rig, free) = rig_with_promoted(demote, 40, 8);
        // The old demand ages out; plenty free, nothing demoted.
        for _ in 0..3 {
            rig.migrator.maintain();
        }
        // 10 s later the new set is sampled: once (heat 1) or four times (heat 4).
        for page in 10..16 {
            sample(&rig, 10, page, 1, 10_000);
        }
        for page in 20..22 {
            sample(&rig, 10, page, 4, 10_000);
        }
        // Two pages under the low watermark: a pass demotes two of the cold eight.
        free.0.lock().insert(0, 51_535 - 8);
        rig.migrator.maintain();
        let demoted = counter(&rig, Counter::PgdemoteSuccess);
        assert_eq!(demoted, if demote { 2 } else { 0 });
        free.0.lock().insert(0, NODE0_RESERVE_KB + 4 * 4);
        let mut batch: Vec<_> = (10..16).chain(20..22).map(|p| cand(10, p, 0)).collect();
        rig.migrator.process(&mut batch);
        (
            counter(&rig, Counter::PgpromoteSuccess) - 8,
            counter(&rig, Counter::PgpromoteFailCold),
            counter(&rig, Counter::PgpromoteFailWatermark),
        )
    }

    #[test]
    fn with_demotion_our_cold_pages_count_as_room_for_the_heat_cut() {
        // Without demotion the old set's pages are there for good: the cut keeps the room for
        // the hotter pages and refuses the single-sample ones as cold, room left over.
        assert_eq!(shifted_set_with_room_for_four(false), (2, 6, 0));
        // With it, the six cold pages left are room demotion can make: the room is filled,
        // and what it cannot take waits at the watermark (which makes the next pass demote).
        assert_eq!(shifted_set_with_room_for_four(true), (4, 0, 4));
    }

    #[test]
    fn demotion_moves_back_our_coldest_pages_under_the_low_watermark() {
        // Promote six pages; pages 0-2 then go cold, 3-5 stay hot.
        let (mut rig, free) = rig_with_promoted(true, 6, 6);
        for page in 3..6 {
            rig.table.touch(&Access {
                key: PageKey::new(10, page * PAGE_SIZE).unwrap(),
                time_ns: 10_000_000_000,
                node: 0,
                op: AccessOp::Load,
            });
        }
        // Plenty free: nothing moves.
        rig.migrator.maintain();
        assert_eq!(counter(&rig, Counter::PgdemoteSuccess), 0);
        // Two pages short of the 5 % low watermark (51535 kB): the two coldest of ours go.
        free.0.lock().insert(0, 51_535 - 8);
        rig.migrator.maintain();
        assert_eq!(counter(&rig, Counter::PgdemoteSuccess), 2);
        let mem = rig.mover.0.lock();
        let on_slow: Vec<u64> = (0..6)
            .filter(|p| mem.pages[&(10, p * PAGE_SIZE)] == SLOW)
            .collect();
        drop(mem);
        assert_eq!(on_slow.len(), 2);
        assert!(on_slow.iter().all(|p| *p < 3), "{on_slow:?}");
        let e = rig
            .table
            .get(PageKey::new(10, on_slow[0] * PAGE_SIZE).unwrap());
        assert_eq!(
            e.map(|e| (e.node(), e.is_promoted())),
            Some((SLOW as u16, false))
        );
        // Hot pages stay even when far short, with nothing waiting and no cold page left.
        free.0.lock().insert(0, 0);
        rig.migrator.maintain();
        assert_eq!(counter(&rig, Counter::PgdemoteSuccess), 3);
    }

    #[test]
    fn demotion_is_off_by_default() {
        let (mut rig, free) = rig_with_free(MigratorConfig::default());
        map(&rig, 10, 0..2);
        sample(&rig, 10, 0, 1, 0);
        rig.migrator.process(&mut vec![cand(10, 0, 0)]);
        sample(&rig, 10, 1, 1, 60_000); // moves the table clock on: page 0 is cold
        free.0.lock().insert(0, 0);
        rig.migrator.maintain();
        assert_eq!(counter(&rig, Counter::PgdemoteSuccess), 0);
    }

    #[test]
    fn dry_run_counts_without_calling_the_kernel() {
        let config = MigratorConfig {
            dry_run: true,
            ..MigratorConfig::default()
        };
        let mut rig = rig(config);
        let mut batch: Vec<_> = (0..3).map(|p| cand(999, p, 1)).collect();
        rig.migrator.process(&mut batch);
        assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 3);
        assert!(rig.mover.0.lock().calls.is_empty());
    }

    #[test]
    fn promotion_updates_the_table() {
        let mut rig = rig(MigratorConfig::default());
        map(&rig, 10, 0..1);
        let c = cand(10, 0, 1);
        let access = Access {
            key: c.key,
            time_ns: 0,
            node: 2,
            op: AccessOp::Load,
        };
        rig.table.record(&access);
        assert_eq!(rig.table.record(&access), Recorded::Candidate);
        rig.migrator.process(&mut vec![c]);
        let e = rig.table.get(c.key).unwrap();
        assert_eq!((e.node(), e.is_queued()), (1, false));
    }

    #[test]
    fn the_queue_wakes_its_migrator_once_per_batch() {
        let (tx, rx) = candidate_queue(16, 4);
        for p in 0..3 {
            tx.offer(cand(10, p, 0)).unwrap();
        }
        assert!(
            !rx.wait_wake(Duration::ZERO),
            "no wake-up below the batch size"
        );
        tx.offer(cand(10, 3, 0)).unwrap();
        tx.offer(cand(10, 4, 0)).unwrap();
        assert!(rx.wait_wake(Duration::ZERO));
        assert!(!rx.wait_wake(Duration::ZERO), "one pending wake-up at most");
        for p in 5..16 {
            tx.offer(cand(10, p, 0)).unwrap();
        }
        let refused = tx.offer(cand(10, 16, 0)).unwrap_err();
        assert_eq!(
            (refused.candidate.key, refused.counter),
            (cand(10, 16, 0).key, Counter::PgpromoteQueueFull)
        );
        assert_eq!(rx.len(), 16);
        // Shutdown: the migrator has stopped and dropped its end.
        drop(rx);
        assert_eq!(
            tx.offer(cand(10, 17, 0)).unwrap_err().counter,
            Counter::PgpromoteAbandoned
        );
    }

    #[test]
    fn the_thread_drains_on_finish_and_counts_abandoned_on_stop() {
        let rig1 = rig(MigratorConfig::default());
        map(&rig1, 10, 0..10);
        let stats = Arc::clone(&rig1.stats);
        let (tx, rx) = candidate_queue(64, 512);
        let handle = MigratorHandle::spawn(rig1.migrator, rx).unwrap();
        for p in 0..10 {
            tx.offer(cand(10, p, 0)).unwrap();
        }
        handle.send(MigratorEvent::Finish);
        assert!(handle.join(Duration::from_secs(5)));
        assert_eq!(stats.get(Counter::PgpromoteSuccess), 10);

        let config = MigratorConfig {
            migrate_interval_ms: 60_000,
            ..MigratorConfig::default()
        };
        let rig2 = rig(config);
        let stats = Arc::clone(&rig2.stats);
        let (tx, rx) = candidate_queue(64, 512);
        for p in 0..7 {
            tx.offer(cand(10, p, 0)).unwrap();
        }
        let handle = MigratorHandle::spawn(rig2.migrator, rx).unwrap();
        handle.send(MigratorEvent::Stop);
        assert!(handle.join(Duration::from_secs(5)));
        assert_eq!(
            stats.get(Counter::PgpromoteAbandoned) + stats.get(Counter::PgpromoteSuccess),
            7
        );
    }
}
