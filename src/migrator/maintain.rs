//! The upkeep of a migrator (once per `migrate_interval_ms`): the audit of pages believed fast,
//! admission's look at the ranges it split, and demotion of its coldest promoted pages off a
//! fast node running low; and the heat histogram's decay, by the time that passed.

use super::ratelimit::Clock;
use super::{Migrator, audit, demote};
use crate::hotness::PageKey;
use crate::hotness::room::MoveBack;
use crate::movepages::{Mover, STATUS_UNWRITTEN};
use crate::stats::Counter;
use crate::topology::NodeId;

/// The 4 KiB pages of a PMD THP (x86-64): a collapsed range's.
const PMD_PAGES: u64 = 512;

/// What an upkeep found, for when the next is due (the migrator thread's `UpkeepPace`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upkeep {
    /// Something to watch or work done: the audit found pages back on a lower tier, a split
    /// range was collapsed again, a fast node is short of `hot_share_room_mb` (the heat floor
    /// acts, and what falls under it goes back), or pages were moved back.
    Busy,
    /// Nothing to do. Promotions alone do not make an upkeep busy: each batch tells the table
    /// the room it left (`Migrator::process`), so a node they make short is short at once.
    Idle,
}

impl<M: Mover, C: Clock> Migrator<M, C> {
    /// Ages the heat histogram by `halvings` half-lives (see `HEAT_HALF_LIFE`): the thread
    /// calls it with the time that passed before each batch and each upkeep, so the cut sees
    /// the same recent demand however seldom the migrator wakes.
    pub fn age_heat(&mut self, halvings: u32) {
        if halvings > 0 {
            self.heat_cut.decay(halvings);
        }
    }

    /// Once per upkeep: the audit when due; with `hot_share_room_mb`, the fast nodes' room for
    /// the table; with `demote_below_floor_pct`, moves back the pages pghotd promoted that fell
    /// under that share of the heat floor (from a short node only, with the room setting); and,
    /// with
    /// `demote`, moves the coldest pages pghotd promoted off any fast node under its low
    /// watermark. Says whether it found anything to do ([`Upkeep`]).
    pub fn maintain(&mut self) -> Upkeep {
        let mut busy = false;
        // A dry run moves nothing, so the kernel disagrees with every "promoted" page.
        if !self.config.dry_run && self.clock.now() >= self.next_audit {
            let started = self.clock.now();
            let believed = self.stats.get(Counter::PghotBelievedNodeSamples);
            if believed != self.believed_at_audit {
                self.believed_at_audit = believed;
                busy |= self.audit() > 0;
            }
            let took = self.clock.now().saturating_sub(started);
            self.next_audit = self.clock.now() + audit::pause_after(took);
        }
        if !self.config.dry_run && self.admission.is_some() {
            let now = self.clock.now();
            let scan = now >= self.next_collapse_scan;
            let ranges = match &mut self.admission {
                Some(a) => {
                    if scan {
                        self.next_collapse_scan = now + a.collapse_scan_every();
                    }
                    a.collapsed_ranges(scan, &self.stats)
                }
                None => Vec::new(),
            };
            busy |= !ranges.is_empty();
            self.requery_ranges(&ranges);
        }
        let move_back = self.read_room();
        // A fast node short of room: the heat floor acts on candidates, and what it leaves
        // behind goes back; keep watching at the base pace.
        busy |= self.table.short_nodes() != 0;
        let outcome = |busy| if busy { Upkeep::Busy } else { Upkeep::Idle };
        if self.config.dry_run {
            return outcome(busy);
        }
        busy |= self.demote_fallen(&move_back) > 0;
        if !self.config.demote {
            return outcome(busy);
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
            busy |= self.demote_pages(victims) > 0;
        }
        outcome(busy)
    }

    /// Moves back, within the demotion budget, the pages pghotd promoted to this migrator's
    /// fast nodes whose heat fell under `demote_below_floor_pct` of the heat floor (see
    /// `hotness::fallen`); what the budget leaves is found again at a later upkeep. Paused
    /// (`pghotctl pause`), pghotd moves nothing of its own accord: this waits too. Returns
    /// how many moved.
    fn demote_fallen(&mut self, move_back: &[(NodeId, MoveBack)]) -> u64 {
        if self.paused.load(std::sync::atomic::Ordering::Relaxed) {
            return 0;
        }
        let mut fallen = Vec::new();
        for &(node, most) in move_back {
            if most == MoveBack::UpToKb(0) {
                continue;
            }
            let mut from_node = self.table.take_fallen(&[node]);
            self.hold_large_folios(&mut from_node);
            if let MoveBack::UpToKb(kb) = most {
                let pages = (kb * 1024).div_ceil(crate::hotness::PAGE_SIZE);
                from_node.truncate(usize::try_from(pages).unwrap_or(usize::MAX));
            }
            fallen.append(&mut from_node);
        }
        if fallen.is_empty() {
            return 0;
        }
        let now = self.clock.now();
        let allowed = self
            .demoter
            .take_budget(now, crate::hotness::PAGE_SIZE, fallen.len());
        fallen.truncate(allowed);
        let moved = self.demote_pages(fallen);
        self.stats.add(Counter::PgdemoteBelowFloor, moved);
        moved
    }

    /// With `hot_share_room_mb`, reads each of this migrator's fast nodes' room (free memory
    /// above the `promote_min_free_pct` reserve, as the watermark counts it) for the table,
    /// which applies the heat floor while one is short (see `hotness::room`); returns what to
    /// move back from each. Off, nothing is read and everything fallen may go back.
    fn read_room(&mut self) -> Vec<(NodeId, MoveBack)> {
        let on = self.table.policy().hot_share_room_mb > 0;
        self.demotes_from
            .clone()
            .into_iter()
            .map(|node| {
                let room_kb = if on { self.room_kb(node) } else { None };
                (node, self.table.observe_room(node, room_kb))
            })
            .collect()
    }

    /// Asks the kernel where the hottest pages believed on this migrator's fast nodes are, and
    /// tracks those found on a lower tier as lower-tier again (see [`audit`]); returns how
    /// many were.
    fn audit(&mut self) -> u64 {
        let (shards, next) = audit::next_slice(&self.table, self.audit_cursor);
        self.audit_cursor = next;
        let keys = audit::pick_in(&self.table, shards, &self.demotes_from, self.audit_pages);
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
        moved_back
    }

    /// For ranges khugepaged collapsed again after admission split them: the pages of each
    /// the table places on a fast node went into the new THP on the slow node. Asks the kernel
    /// where they are (one query per range) and tracks those on a lower tier as lower-tier
    /// again, counted as the audit counts (`pghot_audit_pages`, `pghot_audit_moved_back`).
    fn requery_ranges(&mut self, ranges: &[(u32, u64)]) {
        for &(pid, start) in ranges {
            let keys: Vec<PageKey> = (0..PMD_PAGES)
                .filter_map(|i| PageKey::new(pid, start + i * crate::hotness::PAGE_SIZE))
                .filter(|&k| {
                    self.table
                        .get(k)
                        .is_some_and(|e| !self.topology.is_lower_tier(e.node()))
                })
                .collect();
            if keys.is_empty() {
                continue;
            }
            let pages: Vec<u64> = keys.iter().map(|k| k.vaddr()).collect();
            let mut status = vec![STATUS_UNWRITTEN; pages.len()];
            if self.query(pid, &pages, &mut status).is_err() {
                continue;
            }
            let mut moved_back = 0;
            for (&key, &s) in keys.iter().zip(&status) {
                if let Ok(node) = NodeId::try_from(s)
                    && self.topology.is_lower_tier(node)
                {
                    self.table.mark_demoted(key, node);
                    moved_back += 1;
                }
            }
            self.stats.add(Counter::PghotAuditPages, pages.len() as u64);
            self.stats.add(Counter::PghotAuditMovedBack, moved_back);
            tracing::debug!(
                pid,
                node = self.node,
                "a range split for admission is one THP again (khugepaged): {moved_back} of \
                 its {} pages believed fast are on a lower tier",
                pages.len()
            );
        }
    }

    /// Moves `victims` (pages on a fast node) back to this migrator's node; returns how many
    /// moved.
    fn demote_pages(&mut self, mut victims: Vec<PageKey>) -> u64 {
        victims.sort_unstable();
        let mut moved_all = 0;
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
                    self.table.mark_moved_back(*k, self.node);
                } else {
                    failed += 1;
                }
            }
            let moved = keys.len() as u64 - failed;
            self.stats.add(Counter::PgdemoteSuccess, moved);
            self.stats.add(Counter::PgdemoteFail, failed);
            self.demoter.refund(failed * crate::hotness::PAGE_SIZE);
            moved_all += moved;
            start = end;
        }
        moved_all
    }
}
