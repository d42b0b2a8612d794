//! One batch, steps 1-4 of the module's description: grouping by process, then by
//! (destination, size) for admission, the watermark and the capacity-aware cut and the rate
//! limit; one move_pages query and one move per process; accounting every candidate in
//! exactly one counter.

use std::sync::atomic::Ordering;

use super::capacity::keep_hottest;
use super::ratelimit::Clock;
use super::{Headroom, Migrator};
use crate::hotness::candidate::Candidate;
use crate::movepages::{Mover, STATUS_UNWRITTEN, call_failure, page_failure};
use crate::pidstats::PidCounts;
use crate::stats::Counter;
use crate::topology::NodeId;

impl<M: Mover, C: Clock> Migrator<M, C> {
    /// Promotes a batch; every candidate ends in exactly one counter.
    ///
    /// A process's candidates share one query and one move whatever their destinations and
    /// sizes. Each move call drains the LRU caches of every CPU before it isolates a page
    /// (mm/migrate.c `do_pages_move` calls `lru_cache_disable`, which in mm/swap.c waits for
    /// an expedited RCU grace period and forces `__lru_add_drain_all`: work queued on every
    /// CPU and waited for), however few pages it moves; within the call the kernel migrates
    /// each run of pages bound for one node as one list (`move_pages_and_store_status` at each
    /// change of node). The watermark and the rate limit still count per destination and size.
    pub fn process(&mut self, batch: &mut Vec<Candidate>) {
        self.free_in_batch.clear();
        if self.paused.load(Ordering::Relaxed) {
            // Paused: candidates are still counted and stay eligible; nothing moves.
            self.held_back(batch, Counter::PgpromotePaused);
            batch.clear();
            return;
        }
        if self.admission.is_some() {
            let headroom = self.headroom(batch);
            let of = |to: NodeId| {
                headroom
                    .iter()
                    .find(|(n, _)| *n == to)
                    .map_or(Headroom::UNLIMITED, |(_, h)| *h)
            };
            if let Some(admission) = &mut self.admission {
                admission.admit(batch, &self.table, &self.stats, &of);
            }
        }
        if self.sizes_folios() {
            self.size_folios(batch);
        }
        // Groups within a process are by size too: admission charges folios at their size,
        // and a group's watermark and rate limit count in units of one size.
        batch.sort_unstable_by_key(|c| (c.key.pid(), c.to_node, c.bytes, c.key.vaddr()));
        for process in batch.chunk_by(|a, b| a.key.pid() == b.key.pid()) {
            let pid = process[0].key.pid();
            let mut ready = Vec::with_capacity(process.len());
            for group in process.chunk_by(|a, b| a.to_node == b.to_node && a.bytes == b.bytes) {
                ready.extend(self.admit_group(group[0].to_node, group));
            }
            self.move_process(pid, &ready);
            let counts = std::mem::take(&mut self.group);
            if counts != PidCounts::default() {
                self.pids.add(pid, &counts);
            }
        }
        batch.clear();
        self.note_room_after_batch();
    }

    /// With `hot_share_room_mb`, tells the table each fast node's room as this batch left it
    /// (the free memory it read for the watermark, less what it admitted there), so that a
    /// node its promotions made short is short at once, not at the next upkeep, which may be
    /// seconds away while upkeeps find nothing (`thread::UpkeepPace`).
    fn note_room_after_batch(&self) {
        if self.table.policy().hot_share_room_mb == 0 {
            return;
        }
        for &(node, free_kb) in &self.free_in_batch {
            if let (true, Some(room_kb)) = (
                self.demotes_from.contains(&node),
                self.room_above_reserve(node, free_kb),
            ) {
                self.table.observe_room(node, Some(room_kb));
            }
        }
    }

    /// The headroom of each destination the batch names (a batch names one or a few).
    fn headroom(&mut self, batch: &[Candidate]) -> Vec<(NodeId, Headroom)> {
        let rate = self.config.promote_rate_limit_mbps.saturating_mul(1 << 20);
        let mut out: Vec<(NodeId, Headroom)> = Vec::new();
        for c in batch {
            if out.iter().any(|(n, _)| *n == c.to_node) {
                continue;
            }
            let room = self.watermark_room(c.to_node, 1);
            out.push((
                c.to_node,
                Headroom {
                    // No bucket yet: it starts full, one second at the rate.
                    budget_bytes: self.limits.tokens(c.to_node).unwrap_or(rate),
                    room_bytes: u64::try_from(room).unwrap_or(u64::MAX),
                },
            ));
        }
        out
    }

    /// Pages the destination can take before reaching its watermark; unlimited when its free
    /// memory cannot be read (e.g. a replayed trace names a node this machine lacks).
    fn watermark_room(&mut self, to: NodeId, page_bytes: u64) -> usize {
        if self.reserve_kb(to).is_none() {
            return usize::MAX;
        }
        match self.free_kb_in_batch(to) {
            Ok(free_kb) => match self.room_above_reserve(to, free_kb) {
                Some(room_kb) => {
                    usize::try_from(room_kb * 1024 / page_bytes.max(1)).unwrap_or(usize::MAX)
                }
                None => usize::MAX,
            },
            Err(e) => {
                if !self.watermark_warned {
                    tracing::warn!(node = to, "cannot read free memory, no watermark: {e}");
                    self.watermark_warned = true;
                }
                usize::MAX
            }
        }
    }

    /// What promotion leaves free on `node`: `promote_min_free_pct` of its memory; `None` for
    /// a node this machine lacks.
    fn reserve_kb(&self, node: NodeId) -> Option<u64> {
        let node = self.topology.node(node)?;
        Some(node.mem_total_kb * u64::from(self.config.promote_min_free_pct) / 100)
    }

    /// `node`'s room now, read afresh: free memory above the reserve; `None` when either
    /// cannot be read.
    pub(super) fn room_kb(&self, node: NodeId) -> Option<u64> {
        self.reserve_kb(node)?;
        let free_kb = self.free.free_kb(node).ok()?;
        self.room_above_reserve(node, free_kb)
    }

    /// `node`'s room with `free_kb` free: what is above its reserve; `None` for a node this
    /// machine lacks.
    fn room_above_reserve(&self, node: NodeId, free_kb: u64) -> Option<u64> {
        Some(free_kb.saturating_sub(self.reserve_kb(node)?))
    }

    /// The destination's free memory: read at its first use in a batch, then that reading
    /// less what the batch promoted there (see `free_in_batch`).
    fn free_kb_in_batch(&mut self, to: NodeId) -> Result<u64, crate::topology::TopologyError> {
        if let Some(&(_, kb)) = self.free_in_batch.iter().find(|(n, _)| *n == to) {
            return Ok(kb);
        }
        let kb = self.free.free_kb(to)?;
        self.free_in_batch.push((to, kb));
        Ok(kb)
    }

    /// Steps 1-2 for one (destination, size) group of a process: the watermark and the
    /// capacity-aware cut, then the rate limit. Returns what may move, charged to the
    /// destination's bucket and taken off its free memory for the rest of the batch.
    fn admit_group(&mut self, to: NodeId, group: &[Candidate]) -> Vec<Candidate> {
        let page_bytes = group[0].bytes;
        let room = self.watermark_room(to, page_bytes);
        let mut kept = self.cut_to_room(to, group, room);
        let now = self.clock.now();
        let rate = self.config.promote_rate_limit_mbps.saturating_mul(1 << 20);
        let allowed = self.limits.take(to, now, rate, page_bytes, kept.len());
        self.held_back(&kept[allowed..], Counter::PgpromoteRatelimited);
        kept.truncate(allowed);
        // Later groups bound there (another size, another process) see the room these take,
        // before they move: one move per process comes after all its groups' cuts.
        if let Some((_, kb)) = self.free_in_batch.iter_mut().find(|(n, _)| *n == to) {
            *kb = kb.saturating_sub(page_bytes.saturating_mul(kept.len() as u64) / 1024);
        }
        kept
    }

    /// Steps 3-4 for one process: moves `ready` (or, in a dry run, counts it promoted) and
    /// refunds each destination's bucket for what did not move.
    fn move_process(&mut self, pid: u32, ready: &[Candidate]) {
        if ready.is_empty() {
            return;
        }
        let moved = if self.config.dry_run {
            ready.to_vec()
        } else {
            self.query_and_move(pid, ready)
        };
        let mut unmoved: Vec<(NodeId, u64)> = Vec::new();
        for c in ready {
            match unmoved.iter_mut().find(|(n, _)| *n == c.to_node) {
                Some((_, bytes)) => *bytes += c.bytes,
                None => unmoved.push((c.to_node, c.bytes)),
            }
        }
        for c in &moved {
            self.promoted(c);
            if let Some((_, bytes)) = unmoved.iter_mut().find(|(n, _)| *n == c.to_node) {
                *bytes -= c.bytes;
            }
        }
        for (to, bytes) in unmoved {
            if bytes > 0 {
                self.limits.refund(to, bytes);
            }
        }
    }

    /// The capacity-aware cut: every candidate's heat feeds the histogram; when the group does
    /// not fit in `room`, the hottest go first and none colder than the histogram's cut (so
    /// lukewarm pages offered early do not take the room hotter ones will need). Held-back
    /// pages are counted (watermark: no room; cold: room kept for hotter) and stay eligible.
    fn cut_to_room(&mut self, to: NodeId, group: &[Candidate], room: usize) -> Vec<Candidate> {
        let mut heats: Vec<(Candidate, f64)> = group
            .iter()
            .map(|c| (*c, self.table.heat_of(c.key).unwrap_or(0.0)))
            .collect();
        for (_, heat) in &heats {
            self.heat_cut.observe(*heat);
        }
        // With demotion, our pages that went cold are room too: demotion frees it for whoever
        // the watermark holds back now. Counted as taken, they kept the cut high after a
        // shift of the hot set, and the new set's single-sample candidates (heat just under
        // 1, the bin below a twice-sampled page's) were refused as cold while room was left.
        // The count kept stays what fits now; the watermark is never crossed.
        let reclaimable = if self.config.demote && !self.config.dry_run {
            self.demoter.reclaimable(to)
        } else {
            0
        };
        let cut_room = (room as u64).saturating_add(reclaimable);
        if group.len() <= room && self.heat_cut.demand() <= cut_room {
            return group.to_vec();
        }
        let cut = self.heat_cut.cut(cut_room);
        let n = keep_hottest(&mut heats, room, cut);
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
        let mut kept: Vec<Candidate> = heats[..n].iter().map(|(c, _)| *c).collect();
        kept.sort_unstable_by_key(|c| c.key.vaddr());
        kept
    }

    /// Counts pages that failed for a reason that may pass (rate limit, watermark, a busy or
    /// unallocatable page) and makes them eligible again, so their next sample offers them
    /// anew instead of waiting for their window to expire.
    pub(super) fn held_back(&self, pages: &[Candidate], counter: Counter) {
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

    pub(super) fn query(
        &mut self,
        pid: u32,
        pages: &[u64],
        status: &mut [i32],
    ) -> Result<(), nix::Error> {
        self.stats.add(Counter::MigratorSyscalls, 1);
        status.fill(STATUS_UNWRITTEN);
        self.mover.move_pages(pid, pages, None, status).map(|_| ())
    }

    /// Queries and moves one process's candidates in one call each, and accounts every
    /// failure. Returns the candidates that reached their destination, for the caller to
    /// count.
    fn query_and_move(&mut self, pid: u32, group: &[Candidate]) -> Vec<Candidate> {
        let pages: Vec<u64> = group.iter().map(|c| c.key.vaddr()).collect();
        let mut status = vec![STATUS_UNWRITTEN; pages.len()];
        if let Err(errno) = self.query(pid, &pages, &mut status) {
            self.fail_all(pid, group.len(), errno);
            return Vec::new();
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
        // Admission's last word, on what is about to move (a THP collapsed since admission),
        // in address order as it reads the ranges.
        if let Some(admission) = &mut self.admission {
            to_move.sort_unstable_by_key(|c| c.key.vaddr());
            admission.recheck(&mut to_move, &self.table, &self.stats);
        }
        if to_move.is_empty() {
            return Vec::new();
        }
        // One run per destination: the kernel migrates a run as one list.
        to_move.sort_unstable_by_key(|c| (c.to_node, c.key.vaddr()));
        let pages: Vec<u64> = to_move.iter().map(|c| c.key.vaddr()).collect();
        let nodes: Vec<i32> = to_move.iter().map(|c| i32::from(c.to_node)).collect();
        let mut status = vec![STATUS_UNWRITTEN; pages.len()];
        self.stats.add(Counter::MigratorSyscalls, 1);
        let result = self
            .mover
            .move_pages(pid, &pages, Some(&nodes), &mut status);
        // What an entry the kernel did not write turned out to be, if a re-query finds it
        // elsewhere than its destination.
        let unwritten_reason = match result {
            Ok(_) => Counter::PgpromoteFailNotMigrated,
            Err(nix::errno::Errno::ESRCH) => {
                self.fail_all(pid, to_move.len(), nix::errno::Errno::ESRCH);
                return Vec::new();
            }
            Err(errno) => {
                self.log_call_failure(pid, to_move.len(), errno);
                call_failure(errno)
            }
        };
        if status.contains(&STATUS_UNWRITTEN) {
            self.requery_unwritten(pid, &pages, &mut status);
        }
        let mut moved = Vec::with_capacity(to_move.len());
        for (c, &s) in to_move.iter().zip(&status) {
            if s == i32::from(c.to_node) {
                moved.push(*c);
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
