//! The migrator side of admission: runs on each batch before the watermark and the rate limit.
//!
//! 1. Duplex (Table 2): a candidate from a full-duplex node whose kind (read- or write-heavy)
//!    goes against the node's dominant traffic is deferred: counted, and made eligible again
//!    so a later sample offers it when the traffic has turned.
//! 2. Granularity: candidates are grouped by (pid, 2 MiB region). With splitting configured,
//!    the region's folios are read; a candidate in a large folio gets its process's split
//!    decision. Split: write to debugfs, read the region again, and promote the hot subfolios
//!    plus each candidate's own, one address per folio, charged at the folio's size. While the
//!    process's histogram is too thin to decide, candidates in large folios are deferred
//!    (un-queued, offered again by a later sample) rather than promoted 2 MiB at a time. Any
//!    other outcome promotes the folio whole (one address, charged at its size) and counts why.
//!
//! 3. Re-check ([`AdmissionGate::recheck`], called by the migrator just before a group's
//!    move_pages): pages admitted at 4 KiB (or subfolios up to 1 MiB) in a region this gate
//!    split may sit in a THP again by then, and move_pages on one address moves its whole
//!    folio. khugepaged does that: `hpage_collapse_scan_pmd()` (mm/khugepaged.c, Linux 6.12)
//!    finds the split range's 512 PTEs mapped, and `collapse_huge_page()` copies them into a
//!    new PMD THP allocated on the node most of them were on
//!    (`hpage_collapse_find_target_node()`): the slow node, which keeps the range's cold
//!    pages. Such a candidate's folio is split again (`thp_recollapsed`, once per range) and
//!    it moves at its size; where the split does not take, it waits for its next sample
//!    (`pgpromote_deferred_recollapsed`).
//! 4. Collapsed ranges ([`AdmissionGate::collapsed_ranges`], from the migrator's `maintain`
//!    once per khugepaged pass, 1-60 s): every range this gate split is looked at; one that
//!    is a PMD THP again took the hot pages promoted from it back to the slow node, so the
//!    migrator asks where the range's pages believed fast are and tracks those on a lower
//!    tier as lower-tier again: their next samples offer them anew, and admission splits the
//!    THP again. The table-wide audit finds them too, but reads a sixteenth of the table a
//!    second.
//!
//! Every candidate ends in exactly one outcome counter as before; hot subfolios promoted
//! without a candidate of their own ("riders") are counted in `thp_split_riders` and then end
//! in an outcome counter too, so outcomes = candidates + riders.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::per_folio::DecidedOn;
use super::split::{MIN_SPLIT_ORDER, SplitDecision, SplitPlan};
use super::thp::{PAGE_SIZE, REGION_BYTES, Region, ThpError, ThpKernel};
use super::{Admission, duplex_admits};
use crate::hotness::candidate::Candidate;
use crate::hotness::{HotTable, PageKey};
use crate::migrator::audit::AUDIT_EVERY;
use crate::migrator::folios::{Folio, one_per_folio};
use crate::migrator::{Admit, Headroom};
use crate::stats::{Counter, Stats};
use crate::topology::NodeId;

/// Regions (pid, 2 MiB start) a gate remembers having split, for [`AdmissionGate::recheck`];
/// when full the set starts over (its pages then move unchecked, as before the re-check).
pub const MAX_SPLIT_REGIONS: usize = 65_536;

/// The admission a migrator runs; `K` is the kernel (or a fake).
pub struct AdmissionGate<K: ThpKernel> {
    pub(super) admission: Arc<Admission>,
    pub(super) kernel: K,
    /// Decide and count, but do not split (`dry_run`): the plan is applied to a copy.
    pub(super) dry_run: bool,
    /// Regions this gate split (verified): their 4 KiB moves are re-checked before the move,
    /// and each is looked at once per khugepaged pass for a collapse
    /// ([`Admit::collapsed_ranges`], [`collapse_scan_every`]).
    split_regions: HashSet<(u32, u64)>,
    /// Regions found collapsed again since the migrator last asked.
    collapsed: Vec<(u32, u64)>,
}

/// The longest wait between two looks at the split ranges, however long khugepaged sleeps.
const MAX_COLLAPSE_SCAN_EVERY: Duration = Duration::from_secs(60);

/// How often the split ranges are looked at for a collapse: once per khugepaged pass (its
/// pause between passes, `pause`), as a range collapses again only in a pass
/// (mm/khugepaged.c `khugepaged_do_scan`, then `khugepaged_wait_work`), and each look is a
/// pagemap and a kpageflags read per range; within one audit period and a minute. Looked at
/// every second, those reads were up to 4 % of pghotd's own profile samples in the Debian
/// rig's TCG guest (BENCHMARKS.md, issue 18, "Redis beside pghotd", t30b). Unknown (no THP
/// in the kernel): every audit period.
fn collapse_scan_every(pause: Option<Duration>) -> Duration {
    pause.map_or(AUDIT_EVERY, |p| {
        p.clamp(AUDIT_EVERY, MAX_COLLAPSE_SCAN_EVERY)
    })
}

impl<K: ThpKernel> AdmissionGate<K> {
    pub fn new(admission: Arc<Admission>, kernel: K, dry_run: bool) -> Self {
        AdmissionGate {
            admission,
            kernel,
            dry_run,
            split_regions: HashSet::new(),
            collapsed: Vec::new(),
        }
    }

    /// [`Admit::collapsed_ranges`]: with `scan`, every region this gate split is looked at (one
    /// pagemap and one kpageflags entry each); one that is a PMD THP again is counted
    /// (`thp_recollapsed`) and forgotten (a later split notes it again), as is one whose
    /// process is gone. Returns those and the ones the pre-move re-check found.
    pub fn collapsed_ranges(&mut self, scan: bool, stats: &Stats) -> Vec<(u32, u64)> {
        if scan && !self.dry_run && !self.split_regions.is_empty() {
            let mut regions: Vec<(u32, u64)> = self.split_regions.iter().copied().collect();
            regions.sort_unstable();
            for (pid, start) in regions {
                match self.kernel.is_pmd_thp(pid, start) {
                    Ok(false) => {}
                    Ok(true) => {
                        stats.add(Counter::ThpRecollapsed, 1);
                        self.split_regions.remove(&(pid, start));
                        self.collapsed.push((pid, start));
                    }
                    Err(e) => {
                        self.split_regions.remove(&(pid, start));
                        if e.is_unavailable() {
                            self.kernel_failed(&e);
                        }
                    }
                }
            }
        }
        std::mem::take(&mut self.collapsed)
    }

    /// Remembers a region split by this gate (not in a dry run: nothing was split).
    pub(super) fn note_split(&mut self, pid: u32, start: u64) {
        if self.dry_run {
            return;
        }
        if self.split_regions.len() >= MAX_SPLIT_REGIONS {
            self.split_regions.clear();
        }
        self.split_regions.insert((pid, start));
    }

    /// Step 3 of the module doc, on one group about to be moved (one pid, sorted by address):
    /// the candidates charged under 2 MiB in regions this gate split are looked up again: a
    /// 4 KiB one is collapsed when its page is in any large folio (one pagemap span per
    /// region, one kpageflags entry per page), a subfolio (64 KiB .. 1 MiB) when its region is
    /// a PMD THP (one entry per region). Each region found so is counted (`thp_recollapsed`)
    /// and its folio split again to the smallest order charged there (one debugfs write, first
    /// to last such page: the kernel splits each folio the range meets, whole), then looked up
    /// once more. Those still collapsed are taken out of `group`, counted
    /// (`pgpromote_deferred_recollapsed`) and un-queued: moving them would move 2 MiB. A failed
    /// read leaves the group as it is (the move reports a gone process itself).
    pub fn recheck(&mut self, group: &mut Vec<Candidate>, table: &HotTable, stats: &Stats) {
        if self.split_regions.is_empty() || self.dry_run || group.is_empty() {
            return;
        }
        let pid = group[0].key.pid();
        let checked: Vec<(u64, u64)> = group
            .iter()
            .filter(|c| {
                c.bytes < REGION_BYTES
                    && self
                        .split_regions
                        .contains(&(pid, c.key.vaddr() & !(REGION_BYTES - 1)))
            })
            .map(|c| (c.key.vaddr(), c.bytes))
            .collect();
        if checked.is_empty() {
            return;
        }
        let collapsed = match self.collapsed_now(pid, &checked) {
            Ok(c) => c,
            Err(e) => {
                self.kernel_failed(&e);
                return;
            }
        };
        if collapsed.is_empty() {
            return;
        }
        let region_of = |&(v, _): &(u64, u64)| v & !(REGION_BYTES - 1);
        for pages in collapsed.chunk_by(|a, b| region_of(a) == region_of(b)) {
            let (first, last) = (pages[0].0, pages[pages.len() - 1].0);
            let order = pages
                .iter()
                .map(|&(_, bytes)| (bytes / PAGE_SIZE).trailing_zeros() as u8)
                .min()
                .unwrap_or(0);
            // The range's other pages went into the new THP too: the migrator looks them up.
            stats.add(Counter::ThpRecollapsed, 1);
            self.collapsed.push((pid, region_of(&pages[0])));
            if let Err(e) = self.kernel.split(pid, first, last + PAGE_SIZE, order) {
                self.split_failed(&e, stats);
            }
        }
        let still: HashSet<u64> = match self.collapsed_now(pid, &collapsed) {
            Ok(c) => c.iter().map(|&(v, _)| v).collect(),
            Err(e) => {
                self.kernel_failed(&e);
                collapsed.iter().map(|&(v, _)| v).collect()
            }
        };
        tracing::debug!(
            pid,
            "{} candidates admitted under 2 MiB were in a THP again before their move \
             (khugepaged); {} of them still are after splitting it again, and wait",
            collapsed.len(),
            still.len()
        );
        if still.is_empty() {
            return;
        }
        group.retain(|c| {
            if c.bytes < REGION_BYTES && still.contains(&c.key.vaddr()) {
                stats.add(Counter::PgpromoteDeferredRecollapsed, 1);
                table.unqueue(c.key);
                false
            } else {
                true
            }
        });
    }

    /// Of `pages` ((address, bytes charged), sorted), those in a THP again: a 4 KiB page in
    /// any large folio, a subfolio in a region that is one PMD THP.
    fn collapsed_now(
        &mut self,
        pid: u32,
        pages: &[(u64, u64)],
    ) -> Result<Vec<(u64, u64)>, ThpError> {
        let base: Vec<u64> = pages
            .iter()
            .filter(|&&(_, b)| b == PAGE_SIZE)
            .map(|&(v, _)| v)
            .collect();
        let mut large = if base.is_empty() {
            Vec::new()
        } else {
            self.kernel.in_large_folio(pid, &base)?
        }
        .into_iter();
        let mut pmd: Option<(u64, bool)> = None;
        let mut out = Vec::new();
        for &(v, bytes) in pages {
            let collapsed = if bytes == PAGE_SIZE {
                large.next().unwrap_or(false)
            } else {
                let region = v & !(REGION_BYTES - 1);
                match pmd {
                    Some((r, is)) if r == region => is,
                    _ => {
                        let is = self.kernel.is_pmd_thp(pid, region)?;
                        pmd = Some((region, is));
                        is
                    }
                }
            };
            if collapsed {
                out.push((v, bytes));
            }
        }
        Ok(out)
    }

    /// Table 2 for each candidate; returns those admitted.
    fn duplex(&self, batch: &mut Vec<Candidate>, table: &HotTable, stats: &Stats) {
        let adm = &*self.admission;
        batch.retain(|c| {
            let Some(kind) = adm.page_kind(c.from_node, c.key) else {
                return true;
            };
            let Some(traffic) = adm.traffic(c.from_node) else {
                return true;
            };
            if duplex_admits(traffic.direction, kind) {
                return true;
            }
            stats.add(Counter::PgpromoteDeferredDuplex, 1);
            stats.add(
                match kind {
                    super::PageKind::WriteHeavy => Counter::AdmissionDeferredWriteHeavy,
                    super::PageKind::ReadHeavy => Counter::AdmissionDeferredReadHeavy,
                },
                1,
            );
            table.unqueue(c.key);
            false
        });
    }

    /// One region's candidates (same pid, sorted by address) into `out`.
    fn region(
        &mut self,
        group: &[Candidate],
        out: &mut Vec<Candidate>,
        table: &HotTable,
        stats: &Stats,
        (now, headroom): (Instant, &dyn Fn(NodeId) -> Headroom),
    ) {
        let pid = group[0].key.pid();
        let start = group[0].key.vaddr() & !(REGION_BYTES - 1);
        // The candidates' own pages first: a region of base pages, the usual case once a
        // program's hot part is split or was never a THP, has nothing to decide, and its
        // whole read costs up to 512 kpageflags reads (base pages' PFNs are not consecutive;
        // see `SysThp::region`): in the Debian rig's guest they led the migrator's profile,
        // and looking first cut its CPU there by a third (BENCHMARKS.md, "Admission reads only
        // the candidates' pages"). The look says "large" wherever the region's read would (a
        // page of a multi-page run in `Region::from_raw` has the flags `in_large_thp_folio`
        // asks for).
        let vaddrs: Vec<u64> = group.iter().map(|c| c.key.vaddr()).collect();
        let region = match self.kernel.in_large_folio(pid, &vaddrs) {
            Ok(large) if !large.contains(&true) => {
                // Base pages (or gone): nothing to decide.
                out.extend_from_slice(group);
                return;
            }
            Ok(_) => self.kernel.region(pid, start),
            Err(e) => Err(e),
        };
        let region = match region {
            Ok(r) => r,
            Err(e) => {
                self.kernel_failed(&e);
                stats.add(Counter::ThpSplitFailRegion, 1);
                out.extend_from_slice(group);
                return;
            }
        };
        let in_large = |c: &Candidate| {
            region
                .folio_of(c.key.vaddr())
                .is_some_and(|f| f.order() > 0)
        };
        if !group.iter().any(in_large) {
            // A large folio the region's read no longer finds (split or moved since).
            out.extend_from_slice(group);
            return;
        }
        stats.add(Counter::ThpSplitCandidates, group.len() as u64);
        let node = group[0].from_node;
        // Ok: split by the plan; Err: promote whole, counted under that reason.
        let plan = if !self.admission.contended(node) {
            Err(Counter::ThpSplitUncontended)
        } else {
            let d = self.admission.region_decision(table, pid, start, now);
            if !matches!(d.decision, SplitDecision::FewSamples { .. }) {
                stats.add(
                    match d.on {
                        DecidedOn::PerFolio => Counter::ThpSplitPerFolio,
                        DecidedOn::Folded => Counter::ThpSplitFolded,
                    },
                    1,
                );
            }
            match d.decision {
                SplitDecision::FewSamples { .. } => {
                    stats.add(Counter::ThpSplitFewSamples, 1);
                    defer(
                        group,
                        in_large,
                        Counter::PgpromoteDeferredFewSamples,
                        out,
                        table,
                        stats,
                    );
                    return;
                }
                SplitDecision::Flat { .. } => Err(Counter::ThpSplitFlat),
                SplitDecision::Split(p) if !p.splits() => Err(Counter::ThpSplitDense),
                SplitDecision::Split(p) => Ok((p, d.on)),
            }
        };
        let plan = match plan {
            Ok((plan, DecidedOn::PerFolio)) => {
                let room = headroom(group[0].to_node);
                return self.per_folio(&region, &plan, group, out, (table, stats), room);
            }
            Ok((plan, DecidedOn::Folded)) => plan,
            Err(why_whole) => {
                stats.add(why_whole, 1);
                return by_folio(&region, group, out, stats);
            }
        };
        let target_pages = 1u16 << plan.order;
        let needs_split = group.iter().any(|c| {
            region
                .folio_of(c.key.vaddr())
                .is_some_and(|f| f.folio_pages > target_pages)
        });
        if !needs_split {
            // Split earlier (its riders went then): promote the candidates' own folios.
            return by_folio(&region, group, out, stats);
        }
        let split = match self.split(pid, start, &region, &plan, group, stats) {
            Some(r) => r,
            None => return by_folio(&region, group, out, stats),
        };
        self.promote_split(&split, &plan, group, out, stats);
    }

    /// Splits the region and verifies it; `None` (counted) when it did not split.
    pub(super) fn split(
        &mut self,
        pid: u32,
        start: u64,
        region: &Region,
        plan: &SplitPlan,
        group: &[Candidate],
        stats: &Stats,
    ) -> Option<Region> {
        let target_pages = 1u16 << plan.order;
        let after = if self.dry_run {
            stats.add(Counter::ThpSplitDryRun, 1);
            let mut r = region.clone();
            for (i, p) in r.pages.iter_mut().enumerate() {
                if p.present && p.folio_pages > target_pages {
                    p.folio_start = (i - i % usize::from(target_pages)) as u16;
                    p.folio_pages = target_pages;
                }
            }
            r
        } else {
            if let Err(e) = self
                .kernel
                .split(pid, start, start + REGION_BYTES, plan.order)
            {
                self.split_failed(&e, stats);
                return None;
            }
            match self.kernel.region(pid, start) {
                Ok(r) => r,
                Err(e) => {
                    self.kernel_failed(&e);
                    stats.add(Counter::ThpSplitFailRegion, 1);
                    return None;
                }
            }
        };
        // Verified when every candidate's folio is now at most the target size.
        let split_ok = group.iter().all(|c| {
            after
                .folio_of(c.key.vaddr())
                .is_none_or(|f| f.folio_pages <= target_pages)
        });
        if !split_ok {
            // The kernel skipped it (pinned, locked, under migration): it says so only here.
            stats.add(Counter::ThpSplitFailUnsplit, 1);
            return None;
        }
        if !self.dry_run {
            stats.add(split_counter(plan.order), 1);
        }
        self.note_split(pid, start);
        Some(after)
    }

    /// The hot subfolios and each candidate's own, one address per folio.
    fn promote_split(
        &self,
        region: &Region,
        plan: &SplitPlan,
        group: &[Candidate],
        out: &mut Vec<Candidate>,
        stats: &Stats,
    ) {
        let len = plan.subfolio_pages();
        let sub_of = |c: &Candidate| ((c.key.vaddr() - region.start) / PAGE_SIZE) as usize / len;
        let mut selected = 0u64;
        let mut c = 0;
        for j in 0..plan.subfolio_count() {
            let first = c;
            while c < group.len() && sub_of(&group[c]) == j {
                c += 1;
            }
            let here = &group[first..c];
            if !here.is_empty() {
                selected += 1;
                by_folio(region, here, out, stats);
            } else if plan.hot_subfolios.contains(j) {
                let vaddr = region.start + (j * len) as u64 * PAGE_SIZE;
                let Some(folio) = region.folio_of(vaddr) else {
                    continue; // nothing mapped there
                };
                let Some(key) = PageKey::new(group[0].key.pid(), vaddr) else {
                    continue;
                };
                selected += 1;
                stats.add(Counter::ThpSplitRiders, 1);
                out.push(Candidate {
                    key,
                    bytes: u64::from(folio.folio_pages) * PAGE_SIZE,
                    ..group[0]
                });
            }
        }
        stats.add(Counter::ThpSubfoliosSelected, selected);
        stats.add(
            Counter::ThpSubfoliosLeft,
            plan.subfolio_count() as u64 - selected,
        );
    }

    /// A split write failed: logged as `kernel_failed` does and counted.
    pub(super) fn split_failed(&self, e: &ThpError, stats: &Stats) {
        self.kernel_failed(e);
        stats.add(
            if e.is_unavailable() {
                Counter::ThpSplitFailUnavailable
            } else {
                Counter::ThpSplitFailOther
            },
            1,
        );
    }

    pub(super) fn kernel_failed(&self, e: &ThpError) {
        if e.is_unavailable() {
            if self.admission.mark_split_unavailable() {
                tracing::warn!("THP splitting turned off, THPs are promoted whole: {e}");
            }
        } else {
            tracing::debug!("THP admission: {e}");
        }
    }
}

/// One address per folio (`migrator::folios::one_per_folio`, every folio moving): the first
/// candidate in each folio moves it, charged at the folio's size; later ones in the same folio
/// are counted `pgpromote_same_folio`.
pub(super) fn by_folio(
    region: &Region,
    group: &[Candidate],
    out: &mut Vec<Candidate>,
    stats: &Stats,
) {
    let folios: Vec<Option<Folio>> = group
        .iter()
        .map(|c| {
            region
                .folio_of(c.key.vaddr())
                .filter(|f| f.order() > 0)
                .map(|f| Folio {
                    start: region.start + u64::from(f.folio_start) * PAGE_SIZE,
                    pages: u32::from(f.folio_pages),
                })
        })
        .collect();
    let waiting = one_per_folio(group, &folios, stats, |_, _| true, out);
    debug_assert!(waiting.is_empty());
}

pub(super) fn split_counter(order: u8) -> Counter {
    match order {
        o if o <= MIN_SPLIT_ORDER => Counter::ThpSplitOrder64k,
        5 => Counter::ThpSplitOrder128k,
        6 => Counter::ThpSplitOrder256k,
        7 => Counter::ThpSplitOrder512k,
        _ => Counter::ThpSplitOrder1m,
    }
}

/// Un-queues the candidates in large folios (counted under `why`); base pages go on.
pub(super) fn defer(
    group: &[Candidate],
    in_large: impl Fn(&Candidate) -> bool,
    why: Counter,
    out: &mut Vec<Candidate>,
    table: &HotTable,
    stats: &Stats,
) {
    for c in group {
        if in_large(c) {
            stats.add(why, 1);
            table.unqueue(c.key);
        } else {
            out.push(*c);
        }
    }
}

impl<K: ThpKernel> Admit for AdmissionGate<K> {
    fn sizes_folios(&self) -> bool {
        self.admission.split_enabled()
    }

    fn recheck(&mut self, group: &mut Vec<Candidate>, table: &HotTable, stats: &Stats) {
        AdmissionGate::recheck(self, group, table, stats);
    }

    fn collapsed_ranges(&mut self, scan: bool, stats: &Stats) -> Vec<(u32, u64)> {
        AdmissionGate::collapsed_ranges(self, scan, stats)
    }

    fn collapse_scan_every(&self) -> Duration {
        collapse_scan_every(self.kernel.khugepaged_pause())
    }

    fn admit(
        &mut self,
        batch: &mut Vec<Candidate>,
        table: &HotTable,
        stats: &Stats,
        headroom: &dyn Fn(NodeId) -> Headroom,
    ) {
        if !self.admission.config().full_duplex_nodes.is_empty() {
            self.duplex(batch, table, stats);
        }
        if !self.admission.split_enabled() || batch.is_empty() {
            return;
        }
        batch.sort_unstable_by_key(|c| (c.key.pid(), c.key.vaddr()));
        let now = Instant::now();
        let mut out = Vec::with_capacity(batch.len());
        let mut start = 0;
        while start < batch.len() {
            let region = |c: &Candidate| (c.key.pid(), c.key.vaddr() / REGION_BYTES);
            let r = region(&batch[start]);
            let end = start + batch[start..].iter().take_while(|c| region(c) == r).count();
            self.region(&batch[start..end], &mut out, table, stats, (now, headroom));
            start = end;
        }
        *batch = out;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::config::SplitHistogram;
    use super::super::split::SUBPAGES;
    use super::super::thp::fake::FakeThp;
    use super::super::{AdmissionConfig, LocalAdmission};
    use super::*;
    use crate::hotness::{HotnessConfig, Recorded};
    use crate::sample::{AccessOp, SourceKind};

    pub(crate) const PID: u32 = 10;
    const BASE: u64 = 0x7f00_0000_0000;

    /// A 4 KiB candidate of `PID` from node 2 to node 0 (also for `per_folio`'s tests).
    pub(crate) fn cand(vaddr: u64) -> Candidate {
        Candidate {
            key: PageKey::new(PID, vaddr).unwrap(),
            from_node: 2,
            to_node: 0,
            bytes: PAGE_SIZE,
            source: SourceKind::Trace,
        }
    }

    fn feed(adm: &Admission, local: &mut LocalAdmission, vaddr: u64, op: AccessOp, t: u64) {
        let s = super::super::tests::sample(PID, vaddr, op, t);
        local.observe(adm, &s, PageKey::new(PID, vaddr).unwrap(), 2);
    }

    /// Samples a 64 KiB cluster at subpage 256 of four THPs.
    fn clustered(config: AdmissionConfig) -> Arc<Admission> {
        let adm = Arc::new(Admission::new(config, 2));
        let mut local = adm.local();
        for t in 0..2000u64 {
            let v = BASE + (t % 4) * REGION_BYTES + (256 + t % 16) * PAGE_SIZE;
            feed(&adm, &mut local, v, AccessOp::Load, t * 1_000_000);
        }
        local.flush(&adm);
        adm
    }

    fn split_config() -> AdmissionConfig {
        AdmissionConfig {
            split: true,
            ..AdmissionConfig::default()
        }
    }

    struct Rig {
        gate: AdmissionGate<FakeThp>,
        table: HotTable,
        stats: Stats,
    }

    fn rig(adm: Arc<Admission>, kernel: FakeThp) -> Rig {
        Rig {
            gate: AdmissionGate::new(adm, kernel, false),
            table: HotTable::new(4096, HotnessConfig::default()),
            stats: Stats::new(),
        }
    }

    impl Rig {
        fn admit(&mut self, batch: &mut Vec<Candidate>) {
            let unlimited = |_| Headroom::UNLIMITED;
            self.gate.admit(batch, &self.table, &self.stats, &unlimited);
        }
        fn get(&self, c: Counter) -> u64 {
            self.stats.get(c)
        }
    }

    /// khugepaged's default pause, 10 s (mm/khugepaged.c `khugepaged_scan_sleep_millisecs`),
    /// is the period; a shorter one waits an audit period, a longer one a minute at most;
    /// none known, an audit period.
    #[test]
    fn split_ranges_are_looked_at_once_per_khugepaged_pass() {
        let s = Duration::from_secs;
        assert_eq!(collapse_scan_every(Some(s(10))), s(10));
        assert_eq!(collapse_scan_every(Some(Duration::from_millis(100))), s(1));
        assert_eq!(collapse_scan_every(Some(s(3600))), s(60));
        assert_eq!(collapse_scan_every(None), s(1));
        assert_eq!(AUDIT_EVERY, s(1));
    }

    #[test]
    fn a_thp_with_a_hot_64k_cluster_is_split_and_only_that_subfolio_moves() {
        let mut k = FakeThp::default();
        k.thp(PID, BASE);
        let mut rig = rig(clustered(split_config()), k);
        // Two candidates in the hot cluster, one cold page sampled once (in subfolio 3).
        let mut batch = vec![
            cand(BASE + 260 * PAGE_SIZE),
            cand(BASE + 258 * PAGE_SIZE),
            cand(BASE + 50 * PAGE_SIZE),
        ];
        rig.admit(&mut batch);
        assert_eq!(
            rig.gate.kernel.splits,
            vec![(PID, BASE, BASE + REGION_BYTES, 4)]
        );
        let moves: Vec<(u64, u64)> = batch
            .iter()
            .map(|c| ((c.key.vaddr() - BASE) / PAGE_SIZE, c.bytes))
            .collect();
        // The sampled cold subfolio and the hot one, one address each, 64 KiB each.
        assert_eq!(moves, vec![(50, 65536), (258, 65536)]);
        assert_eq!(rig.get(Counter::ThpSplitOrder64k), 1);
        assert_eq!(rig.get(Counter::PgpromoteSameFolio), 1);
        assert_eq!(rig.get(Counter::ThpSubfoliosSelected), 2);
        assert_eq!(rig.get(Counter::ThpSubfoliosLeft), 30);
        assert_eq!(rig.get(Counter::ThpSplitRiders), 0);
    }

    /// By hand: three regions, two of base pages (subpages 3 and 9 of the first, 40 of the
    /// second), one a THP. The base pages' regions are not read (three page lookups, one per
    /// candidate) and pass unchanged; the THP's region is read once whole and split.
    #[test]
    fn base_page_regions_are_not_read_whole() {
        let mut k = FakeThp::default();
        k.regions.insert((PID, BASE), [1; SUBPAGES]);
        k.regions.insert((PID, BASE + REGION_BYTES), [1; SUBPAGES]);
        k.thp(PID, BASE + 2 * REGION_BYTES);
        let mut rig = rig(clustered(split_config()), k);
        let base = [
            BASE + 3 * PAGE_SIZE,
            BASE + 9 * PAGE_SIZE,
            BASE + REGION_BYTES + 40 * PAGE_SIZE,
        ];
        let mut batch: Vec<Candidate> = base.iter().map(|&v| cand(v)).collect();
        rig.admit(&mut batch);
        assert_eq!(rig.gate.kernel.page_lookups, 3);
        assert_eq!(rig.gate.kernel.reads, 0);
        let kept: Vec<u64> = batch.iter().map(|c| c.key.vaddr()).collect();
        assert_eq!(kept, base);
        assert!(batch.iter().all(|c| c.bytes == PAGE_SIZE));
        assert_eq!(rig.get(Counter::ThpSplitCandidates), 0);

        let mut batch = vec![cand(BASE + 2 * REGION_BYTES + 260 * PAGE_SIZE)];
        rig.admit(&mut batch);
        assert_eq!(rig.gate.kernel.page_lookups, 4);
        // The read before the split and the one that verifies it.
        assert_eq!(rig.gate.kernel.reads, 2);
        assert_eq!(rig.get(Counter::ThpSplitCandidates), 1);
        assert_eq!(rig.gate.kernel.splits.len(), 1);
    }

    #[test]
    fn hot_subfolios_without_a_candidate_ride_along() {
        let mut k = FakeThp::default();
        k.thp(PID, BASE + REGION_BYTES);
        let mut rig = rig(clustered(split_config()), k);
        let mut batch = vec![cand(BASE + REGION_BYTES + 7 * PAGE_SIZE)];
        rig.admit(&mut batch);
        let moves: Vec<u64> = batch
            .iter()
            .map(|c| (c.key.vaddr() - BASE - REGION_BYTES) / PAGE_SIZE)
            .collect();
        assert_eq!(moves, vec![7, 256]);
        assert_eq!(rig.get(Counter::ThpSplitRiders), 1);
        assert!(batch.iter().all(|c| c.bytes == 65536));
    }

    #[test]
    fn an_unsplit_thp_is_promoted_whole_with_a_counted_reason() {
        let mut k = FakeThp::default();
        k.thp(PID, BASE);
        k.refuse = true;
        let mut rig = rig(clustered(split_config()), k);
        let mut batch = vec![cand(BASE + 260 * PAGE_SIZE), cand(BASE + 300 * PAGE_SIZE)];
        rig.admit(&mut batch);
        assert_eq!(rig.get(Counter::ThpSplitFailUnsplit), 1);
        assert_eq!(rig.get(Counter::ThpWholePromotions), 1);
        assert_eq!(rig.get(Counter::PgpromoteSameFolio), 1);
        assert_eq!(batch.len(), 1);
        assert_eq!(batch[0].bytes, REGION_BYTES);
    }

    #[test]
    fn no_debugfs_turns_splitting_off_once_and_promotes_whole() {
        let mut k = FakeThp::default();
        k.thp(PID, BASE);
        k.thp(PID, BASE + REGION_BYTES);
        k.unavailable = true;
        let adm = clustered(split_config());
        let mut rig = rig(Arc::clone(&adm), k);
        let mut batch = vec![cand(BASE + 260 * PAGE_SIZE)];
        rig.admit(&mut batch);
        assert_eq!(rig.get(Counter::ThpSplitFailUnavailable), 1);
        assert_eq!(batch[0].bytes, REGION_BYTES);
        assert!(!adm.split_enabled());
        // Later batches pass through untouched (charged per base page, as without admission).
        let mut batch = vec![cand(BASE + REGION_BYTES + 260 * PAGE_SIZE)];
        rig.admit(&mut batch);
        assert_eq!(batch[0].bytes, PAGE_SIZE);
        assert_eq!(rig.get(Counter::ThpSplitFailUnavailable), 1);
    }

    #[test]
    fn flat_uncontended_and_base_pages_are_not_split() {
        // Flat: every subpage sampled alike (the paper's folded histogram decides).
        let folded = AdmissionConfig {
            split_histogram: SplitHistogram::Folded,
            ..split_config()
        };
        let adm = Arc::new(Admission::new(folded, 2));
        let mut local = adm.local();
        for t in 0..(SUBPAGES as u64 * 4) {
            feed(
                &adm,
                &mut local,
                BASE + (t % 512) * PAGE_SIZE,
                AccessOp::Load,
                t,
            );
        }
        local.flush(&adm);
        let mut k = FakeThp::default();
        k.thp(PID, BASE);
        let mut rig = rig(adm, k);
        let mut batch = vec![cand(BASE + 3 * PAGE_SIZE)];
        rig.admit(&mut batch);
        assert_eq!(rig.get(Counter::ThpSplitFlat), 1);
        assert!(rig.gate.kernel.splits.is_empty());
        assert_eq!(batch[0].bytes, REGION_BYTES);

        // Contention threshold never reached.
        let adm = clustered(AdmissionConfig {
            split_contention_mbps: 1 << 20,
            ..split_config()
        });
        let mut k = FakeThp::default();
        k.thp(PID, BASE);
        let mut rig2 = super::tests::rig(adm, k);
        let mut batch = vec![cand(BASE + 260 * PAGE_SIZE)];
        rig2.admit(&mut batch);
        assert_eq!(rig2.get(Counter::ThpSplitUncontended), 1);
        assert!(rig2.gate.kernel.splits.is_empty());

        // Base pages: untouched, nothing counted.
        let mut batch = vec![cand(BASE + 9 * REGION_BYTES)];
        rig2.admit(&mut batch);
        assert_eq!(batch[0].bytes, PAGE_SIZE);
        assert_eq!(rig2.get(Counter::ThpSplitCandidates), 1);
    }

    #[test]
    fn a_thin_histogram_defers_thp_candidates_instead_of_promoting_2m() {
        // Contended (threshold 0), but only 10 samples against split_min_samples 64.
        let adm = Arc::new(Admission::new(
            AdmissionConfig {
                split_contention_mbps: 0,
                ..split_config()
            },
            2,
        ));
        let mut local = adm.local();
        for t in 0..10u64 {
            feed(&adm, &mut local, BASE + 260 * PAGE_SIZE, AccessOp::Load, t);
        }
        local.flush(&adm);
        let mut k = FakeThp::default();
        k.thp(PID, BASE);
        let mut rig = rig(Arc::clone(&adm), k);
        let access = |vaddr, time_ns| crate::hotness::Access {
            key: cand(vaddr).key,
            time_ns,
            node: 2,
            op: AccessOp::Load,
        };
        let in_thp = BASE + 260 * PAGE_SIZE;
        // The default policy wants two samples in its window.
        rig.table.record(&access(in_thp, 0));
        assert_eq!(rig.table.record(&access(in_thp, 1)), Recorded::Candidate);
        assert_eq!(rig.table.record(&access(in_thp, 2)), Recorded::Tracked);
        let base_page = BASE + 9 * REGION_BYTES;
        let mut batch = vec![cand(in_thp), cand(BASE + 300 * PAGE_SIZE), cand(base_page)];
        rig.admit(&mut batch);
        let kept: Vec<u64> = batch.iter().map(|c| c.key.vaddr()).collect();
        assert_eq!(kept, vec![base_page], "base pages are not held back");
        assert_eq!(rig.get(Counter::ThpSplitFewSamples), 1);
        assert_eq!(rig.get(Counter::PgpromoteDeferredFewSamples), 2);
        assert_eq!(rig.get(Counter::ThpWholePromotions), 0);
        assert!(rig.gate.kernel.splits.is_empty());
        // Un-queued: the page's next sample offers it again.
        assert_eq!(
            rig.table.record(&access(in_thp, 1_000_000)),
            Recorded::Candidate
        );

        // Once the histogram holds enough samples, the same THP is split. The THP's own map is
        // still thin and bears the fold out: 6 samples on 3 pages of the hot subfolio (4 on
        // page 260, one each on 257 and 263); 3 or fewer distinct pages in 6 draws from the 12
        // the fold claims hot has a chance of 122,904 / 12^6 = 4.1 % (the sequences with 1, 2
        // and 3 distinct pages: 12 + 66 * 62 + 220 * 540), not under 1 %.
        for t in 0..2000u64 {
            let v = BASE + (256 + t % 16) * PAGE_SIZE;
            feed(&adm, &mut local, v, AccessOp::Load, t * 1_000_000);
        }
        local.flush(&adm);
        for p in [257, 263] {
            let recorded = rig.table.record(&access(BASE + p * PAGE_SIZE, 2_000_000));
            assert_eq!(recorded, Recorded::Tracked);
        }
        adm.forget_regions();
        let mut batch = vec![cand(in_thp)];
        rig.admit(&mut batch);
        assert_eq!(
            rig.gate.kernel.splits,
            vec![(PID, BASE, BASE + REGION_BYTES, 4)]
        );
        assert_eq!(batch[0].bytes, 65536);
    }

    #[test]
    fn dry_run_plans_the_split_without_writing() {
        let mut k = FakeThp::default();
        k.thp(PID, BASE);
        let mut rig = rig(clustered(split_config()), k);
        rig.gate.dry_run = true;
        let mut batch = vec![cand(BASE + 260 * PAGE_SIZE)];
        rig.admit(&mut batch);
        assert!(rig.gate.kernel.splits.is_empty());
        assert_eq!(rig.get(Counter::ThpSplitDryRun), 1);
        assert_eq!(batch[0].bytes, 65536);
    }

    #[test]
    fn duplex_defers_write_heavy_pages_under_read_dominant_traffic() {
        let config = AdmissionConfig {
            full_duplex_nodes: vec![2],
            ..AdmissionConfig::default()
        };
        let adm = Arc::new(Admission::new(config, 2));
        let mut local = adm.local();
        let (reader, writer) = (BASE, BASE + PAGE_SIZE);
        // 90 % of traffic loads on `reader`, `writer` mostly stored to.
        for t in 0..1000u64 {
            let (v, op) = if t % 10 == 0 {
                (writer, AccessOp::Store)
            } else {
                (reader, AccessOp::Load)
            };
            feed(&adm, &mut local, v, op, t * 2_000_000);
        }
        local.flush(&adm);
        let mut rig = rig(adm, FakeThp::default());
        rig.table.record(&crate::hotness::Access {
            key: cand(writer).key,
            time_ns: 0,
            node: 2,
            op: AccessOp::Store,
        });
        let mut batch = vec![cand(reader), cand(writer), cand(BASE + 9 * PAGE_SIZE)];
        rig.admit(&mut batch);
        let kept: Vec<u64> = batch.iter().map(|c| c.key.vaddr()).collect();
        assert_eq!(
            kept,
            vec![reader, BASE + 9 * PAGE_SIZE],
            "never-seen pages pass"
        );
        assert_eq!(rig.get(Counter::PgpromoteDeferredDuplex), 1);
        assert_eq!(rig.get(Counter::AdmissionDeferredWriteHeavy), 1);
    }
}
