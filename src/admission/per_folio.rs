//! Per-THP split decisions (issue 24): each THP's own 512-subpage map, read from the hotness
//! table's per-(pid, page) sample counts, instead of (or before) the process's folded histogram.
//!
//! TierBPF §5.1.1 folds every THP of a process into one histogram by subpage offset: an eBPF
//! design with a 4 KB budget per application, whose workloads put their hot regions at similar
//! offsets. Where hot runs sit at different offsets in different THPs, the fold is close to flat
//! and every THP is promoted whole. pghotd already keeps a count per (pid, 4 KiB page) in its
//! table, so it can see where the heat is inside each THP at no extra memory; the four stages of
//! [`split::decide`] then run on that THP's own counts.
//!
//! **When a THP's own map is trusted.** At least [`MIN_SAMPLES`] samples, and at least
//! [`SAMPLES_PER_SEEN`] per distinct sampled subpage. The second bound is the one that matters:
//! with `s` samples spread over `h` equally hot subpages, a hot subpage is unseen with
//! probability about `e^(-s/h)`, and `s / seen` rises with `s / h` (`seen = h (1 - e^(-s/h))`).
//! At `s / seen >= 3`, `s / h` is at least 2.8 and at most 6 % of a hot run is unseen, so a
//! 64 KiB run (16 subpages) still reads at or above the 0.75 heat density with high
//! probability; at `s / seen = 1.6` (`s = h`) 37 % would be unseen and runs would read as
//! sparse. Thinner THPs use the folded histogram under `auto` only when that one splits and
//! the THP's own few samples fit its plan (at most `1 - split_coverage_pct` of them outside
//! its hot subfolios) and bear it out (in each hot subfolio, no fewer distinct pages than
//! the density it claims makes plausible: [`ThpMap::bears_out`]): an aligned shape, as the
//! paper's workloads. A flat or dense fold, or a
//! split one that this THP's samples contradict, says nothing about a THP whose runs sit
//! elsewhere (a fold of runs at random offsets is noisy, and early on it may split at an
//! offset that is cold in most THPs: the first rig run of `runs-128k` promoted 53 such cold
//! subfolios); the THP waits for its own samples (its candidates are deferred as while a
//! process's histogram is thin).
//!
//! **Pages moved alone.** With its own map, a THP's hot subpages outside every subfolio that
//! reaches the heat density (the ragged edges of a run at a random offset, or sparse hot pages)
//! are moved at 4 KiB: their subfolio is split to order 0. Where no subfolio reaches the density
//! at all (sparse heat), [`sparse_choice`] weighs the whole THP against its hot pages, and a
//! THP whose hot pages move alone is split to order 0 whole, in one write.
//!
//! Decisions are made on the migrator thread, once per region per [`REGION_TTL`] (cached), never
//! per sample: reading a map is 512 table lookups (BENCHMARKS.md, "split decision").

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::Admission;
use super::config::SplitHistogram;
use super::gate::{AdmissionGate, by_folio, defer};
use super::split::{self, SUBPAGES, SplitDecision, SplitParams, SplitPlan, Subfolios};
use super::thp::{PAGE_SIZE, REGION_BYTES, Region, ThpKernel};
use crate::hotness::candidate::Candidate;
use crate::hotness::{HotTable, PageKey};
use crate::migrator::Headroom;
use crate::stats::{Counter, Stats};

/// Fewest samples a THP's own map needs.
pub const MIN_SAMPLES: u64 = 32;
/// Fewest samples per distinct sampled subpage a THP's own map needs (see the module doc).
pub const SAMPLES_PER_SEEN: u64 = 3;
/// How long a region's decision holds before it is read again.
pub const REGION_TTL: Duration = Duration::from_millis(100);
/// Regions with a cached decision (about 200 bytes each); expired ones go first when full.
pub const MAX_REGION_DECISIONS: usize = 16_384;
/// A destination is contended when its rate-limit budget or its room above the watermark is
/// under this: 16 whole THPs (32 MiB).
pub const CONTENDED_HEADROOM: u64 = 16 * REGION_BYTES;
/// Hot subpages from which an uncontended sparse THP is moved whole: a quarter of it, so the
/// whole THP moves at most 4 times its hot bytes and keeps its TLB reach.
pub const SPARSE_WHOLE_MIN_HOT: usize = SUBPAGES / 4;

/// One THP's own subpage map: each subpage's samples in the hotness table (loads + stores).
#[derive(Debug, Clone)]
pub struct ThpMap {
    pub counts: [u32; SUBPAGES],
    pub samples: u64,
    /// Subpages with at least one sample.
    pub seen: u32,
}

impl ThpMap {
    /// Reads the 512 subpages of the THP at `start` (2 MiB aligned): 512 lookups, their home
    /// slots prefetched first (`HotTable::visit_range`), on the migrator thread.
    pub fn read(table: &HotTable, pid: u32, start: u64) -> ThpMap {
        let mut counts = [0u32; SUBPAGES];
        let (mut samples, mut seen) = (0u64, 0u32);
        table.visit_range(pid, start, SUBPAGES as u32, |i, e| {
            let c = u32::from(e.loads()) + u32::from(e.stores());
            counts[i as usize] = c;
            samples += u64::from(c);
            seen += u32::from(c > 0);
        });
        ThpMap {
            counts,
            samples,
            seen,
        }
    }

    /// Whether this THP's own (thin) samples fit a folded plan: at most `1 - coverage` of them
    /// (20 % by default) fall outside the plan's hot subfolios. With no samples nothing
    /// contradicts the plan.
    ///
    /// Worked example: a plan at order 4 whose hot subfolio is 16 (pages 256..272); 10 samples
    /// at pages 258-262 and 2 at page 40: 2 of 12 outside, 17 % <= 20 %: fits. 3 at page 40:
    /// 3 of 13, 23 %: does not.
    pub fn agrees_with(&self, plan: &SplitPlan, coverage: f64) -> bool {
        let outside: u64 = (0..SUBPAGES)
            .filter(|&i| !plan.hot_subfolios.contains(i >> plan.order))
            .map(|i| u64::from(self.counts[i]))
            .sum();
        outside as f64 <= (1.0 - coverage) * self.samples as f64 + 1e-9
    }

    /// Whether this THP's own samples in each hot subfolio of a folded plan are plausible
    /// under what the plan claims of that subfolio: at least `density` of its pages hot. A
    /// subfolio with `s` of this THP's samples on `seen` distinct pages is refuted when, were
    /// its samples spread evenly over the fewest hot pages the claim allows, `seen` or fewer
    /// distinct pages would turn up less often than [`FOLD_REFUTED_BELOW`]: the samples keep
    /// landing on the same few pages, as a few hot pages scattered through a THP give, not a
    /// dense run.
    ///
    /// The fold is a sum over every THP of the process, so one THP's dense run at some offset
    /// makes a split fold whose hot subfolio holds, in another THP, one hot page (Redis on the
    /// Debian guest: in three runs of nine, one folded decision moved 256 KiB or 512 KiB
    /// subfolios holding 61-250 pages never touched in the phase; BENCHMARKS.md, "Folded plans
    /// a THP's own samples refute").
    ///
    /// Worked example (order 4, 16 pages, density 0.75: 12 hot pages claimed): one page
    /// sampled 3 times is refuted (the chance of one distinct page in 3 draws from 12 is
    /// 1/144); one page sampled twice is not (1/12); 3 pages once each is not.
    pub fn bears_out(&self, plan: &SplitPlan, density: f64) -> bool {
        let len = plan.subfolio_pages();
        let claimed = ((density * len as f64).ceil() as usize).clamp(1, len);
        (0..plan.subfolio_count())
            .filter(|&j| plan.hot_subfolios.contains(j))
            .all(|j| {
                let sub = &self.counts[j * len..(j + 1) * len];
                let samples: u64 = sub.iter().map(|&c| u64::from(c)).sum();
                let seen = sub.iter().filter(|&&c| c > 0).count();
                samples == 0
                    || chance_of_at_most_distinct(samples, claimed, seen) >= FOLD_REFUTED_BELOW
            })
    }

    /// Enough samples to decide on (see the module doc).
    pub fn trusted(&self) -> bool {
        self.samples >= MIN_SAMPLES && self.samples >= SAMPLES_PER_SEEN * u64::from(self.seen)
    }
}

/// The chance below which a thin THP's own samples refute a folded plan ([`ThpMap::bears_out`]).
pub const FOLD_REFUTED_BELOW: f64 = 0.01;

/// The chance that `draws` independent, uniform draws from `n` pages hit at most `k`
/// distinct pages (the occupancy distribution, built one draw at a time: after a draw that
/// has seen `j` pages, the next one repeats with probability `j / n`).
fn chance_of_at_most_distinct(draws: u64, n: usize, k: usize) -> f64 {
    let most = n.min(usize::try_from(draws).unwrap_or(usize::MAX));
    if k >= most {
        return 1.0;
    }
    // p[j]: the chance of exactly j distinct pages so far. Past `most` nothing is reachable;
    // a thin map holds under 3 samples per seen page (at most 1,536), so this stays small.
    let mut p = vec![0.0f64; most + 1];
    p[0] = 1.0;
    let n_f = n as f64;
    for t in 0..draws {
        let top = most.min(usize::try_from(t + 1).unwrap_or(usize::MAX));
        for j in (1..=top).rev() {
            p[j] = p[j] * j as f64 / n_f + p[j - 1] * (n - j + 1) as f64 / n_f;
        }
        p[0] = 0.0;
    }
    p[..=k].iter().sum()
}

/// Which histogram a region's decision came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecidedOn {
    PerFolio,
    Folded,
}

/// A region's split decision and where it came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RegionDecision {
    pub decision: SplitDecision,
    pub on: DecidedOn,
}

pub(super) struct CachedRegion {
    at: Instant,
    decision: RegionDecision,
}

/// The bounded cache of region decisions.
#[derive(Default)]
pub(super) struct RegionCache(HashMap<(u32, u64), CachedRegion>);

impl RegionCache {
    fn get(&self, key: (u32, u64), now: Instant) -> Option<RegionDecision> {
        self.0
            .get(&key)
            .filter(|c| now.saturating_duration_since(c.at) < REGION_TTL)
            .map(|c| c.decision)
    }

    fn insert(&mut self, key: (u32, u64), decision: RegionDecision, now: Instant) {
        if self.0.len() >= MAX_REGION_DECISIONS {
            self.0
                .retain(|_, c| now.saturating_duration_since(c.at) < REGION_TTL);
            if self.0.len() >= MAX_REGION_DECISIONS {
                self.0.clear();
            }
        }
        self.0.insert(key, CachedRegion { at: now, decision });
    }

    pub(super) fn clear(&mut self) {
        self.0.clear();
    }
}

impl Admission {
    /// The split decision for the THP at `start` of `pid`, by `split_histogram`.
    pub fn region_decision(
        &self,
        table: &HotTable,
        pid: u32,
        start: u64,
        now: Instant,
    ) -> RegionDecision {
        let mode = self.config.split_histogram;
        if mode == SplitHistogram::Folded {
            return RegionDecision {
                decision: self.decision(pid, now),
                on: DecidedOn::Folded,
            };
        }
        if let Some(d) = self.regions.lock().get((pid, start), now) {
            return d;
        }
        let map = ThpMap::read(table, pid, start);
        let own = |decision| RegionDecision {
            decision,
            on: DecidedOn::PerFolio,
        };
        let d = if map.trusted() {
            // The trust bound replaces `split_min_samples`, which is for a whole process.
            let params = SplitParams {
                min_samples: MIN_SAMPLES,
                ..self.params
            };
            own(split::decide(&map.counts, &params))
        } else {
            let thin = own(SplitDecision::FewSamples {
                samples: map.samples,
            });
            match (mode, self.decision(pid, now)) {
                (SplitHistogram::Auto, d @ SplitDecision::Split(p))
                    if p.splits()
                        && map.agrees_with(&p, self.params.coverage)
                        && map.bears_out(&p, self.params.density) =>
                {
                    RegionDecision {
                        decision: d,
                        on: DecidedOn::Folded,
                    }
                }
                _ => thin,
            }
        };
        self.regions.lock().insert((pid, start), d, now);
        d
    }
}

/// What a sparse THP (hot subpages, none of its subfolios at the heat density) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SparseChoice {
    /// Split the hot pages' subfolios to order 0 and move the hot 4 KiB pages.
    BasePages,
    /// Move the THP whole.
    Whole,
    /// Leave the THP where it is, unsplit; its candidates wait.
    Leave,
}

/// Weighs a sparse THP with `hot` hot (or candidate) subpages by what each choice costs the
/// destination: 4 KiB pages cost `hot * 4 KiB` of rate budget and fast capacity (plus the
/// THP's TLB reach on the slow tier, where only cold pages stay); the whole THP costs 2 MiB of
/// each. The destination is contended when its budget or its room is under
/// [`CONTENDED_HEADROOM`]: then a whole THP is never moved for sparse heat, and when even the
/// hot pages do not fit now, the THP is left unsplit (splitting what cannot move gains
/// nothing). Uncontended, the whole THP moves only when a quarter or more of it is hot.
///
/// Worked example: 16 hot pages, 1 GiB of budget and room: uncontended, 16 < 128: base pages
/// (64 KiB instead of 2 MiB). 200 hot pages, same headroom: whole (2 MiB for 800 KiB hot). One
/// hot page and 8 MiB of budget: contended, the page fits: base pages. 16 hot pages, 32 KiB of
/// budget: contended and 64 KiB does not fit: leave.
pub fn sparse_choice(hot: usize, h: Headroom) -> SparseChoice {
    let contended = h.budget_bytes < CONTENDED_HEADROOM || h.room_bytes < CONTENDED_HEADROOM;
    let need = hot as u64 * PAGE_SIZE;
    if !contended && hot >= SPARSE_WHOLE_MIN_HOT {
        SparseChoice::Whole
    } else if contended && (h.budget_bytes < need || h.room_bytes < need) {
        SparseChoice::Leave
    } else {
        SparseChoice::BasePages
    }
}

impl<K: ThpKernel> AdmissionGate<K> {
    /// Promotes a region by its own map's plan: the hot subfolios at the plan's order, and the
    /// hot subpages and candidates outside them at 4 KiB (their subfolios split to order 0).
    pub(super) fn per_folio(
        &mut self,
        region: &Region,
        plan: &SplitPlan,
        group: &[Candidate],
        out: &mut Vec<Candidate>,
        (table, stats): (&HotTable, &Stats),
        headroom: Headroom,
    ) {
        let len = plan.subfolio_pages();
        let page_of = |c: &Candidate| ((c.key.vaddr() - region.start) / PAGE_SIZE) as usize;
        let mut alone = Subfolios::default();
        for i in plan.hot.iter().chain(group.iter().map(page_of)) {
            if !plan.hot_subfolios.contains(i / len) {
                alone.insert(i);
            }
        }
        if plan.hot_subfolios.is_empty() {
            let in_large = |c: &Candidate| {
                region
                    .folio_of(c.key.vaddr())
                    .is_some_and(|f| f.order() > 0)
            };
            match sparse_choice(alone.len(), headroom) {
                SparseChoice::BasePages => {}
                SparseChoice::Whole => {
                    stats.add(Counter::ThpSparseWhole, 1);
                    return by_folio(region, group, out, stats);
                }
                SparseChoice::Leave => {
                    stats.add(Counter::ThpSparseLeft, 1);
                    let why = Counter::PgpromoteDeferredSparse;
                    return defer(group, in_large, why, out, table, stats);
                }
            }
        }
        let Some(after) = self.split_for(region, plan, &alone, group, stats) else {
            return by_folio(region, group, out, stats);
        };
        // One address per hot subfolio and per page moved alone, the candidates' own first.
        let pid = group[0].key.pid();
        let from = group[0].from_node;
        // A page the table already places on another node went with an earlier move (this
        // THP's decision is taken again for later candidates): it needs no rider.
        let moved = |i: usize| {
            PageKey::new(pid, region.start + i as u64 * PAGE_SIZE)
                .and_then(|k| table.get(k))
                .is_some_and(|e| e.node() != from)
        };
        let mut moves: Vec<Candidate> = Vec::new();
        let mut selected = Subfolios::default();
        for i in 0..SUBPAGES {
            let here: Vec<&Candidate> = group.iter().filter(|c| page_of(c) == i).collect();
            let first_of_hot = plan.hot_subfolios.contains(i / len)
                && i % len == 0
                && !group.iter().any(|c| page_of(c) / len == i / len);
            if !here.is_empty() {
                moves.extend(here.into_iter().copied());
            } else if alone.contains(i) || first_of_hot {
                let gone = if alone.contains(i) {
                    moved(i)
                } else {
                    (i..i + len).filter(|&p| plan.hot.contains(p)).any(moved)
                };
                if gone {
                    continue;
                }
                let vaddr = region.start + i as u64 * PAGE_SIZE;
                let (Some(folio), Some(key)) = (after.folio_of(vaddr), PageKey::new(pid, vaddr))
                else {
                    continue; // nothing mapped there
                };
                stats.add(Counter::ThpSplitRiders, 1);
                moves.push(Candidate {
                    key,
                    bytes: u64::from(folio.folio_pages) * PAGE_SIZE,
                    ..group[0]
                });
            } else {
                continue;
            }
            selected.insert(i / len);
            if after
                .folio_of(region.start + i as u64 * PAGE_SIZE)
                .is_some_and(|f| f.folio_pages == 1)
                && alone.contains(i)
            {
                stats.add(Counter::ThpSplitBasePages, 1);
            }
        }
        by_folio(&after, &moves, out, stats);
        stats.add(Counter::ThpSubfoliosSelected, selected.len() as u64);
        stats.add(
            Counter::ThpSubfoliosLeft,
            (plan.subfolio_count() - selected.len()) as u64,
        );
    }

    /// Splits the region for the plan and reads it again, once: a sparse THP (no hot subfolio)
    /// to order 0 in one write; otherwise to the plan's order, then each run of adjacent
    /// subfolios holding a page moved alone to order 0 (one write per run). Under TCG a region
    /// read costs milliseconds, so the writes go first and one read verifies them (the first
    /// rig run of `sparse` read each region three times and split each subfolio apart, and its
    /// migrator fell behind the whole run). `None` (counted) when the first write failed or
    /// left a candidate in a folio above its target size.
    fn split_for(
        &mut self,
        region: &Region,
        plan: &SplitPlan,
        alone: &Subfolios,
        group: &[Candidate],
        stats: &Stats,
    ) -> Option<Region> {
        let pid = group[0].key.pid();
        let sparse = plan.hot_subfolios.is_empty();
        let order = if sparse { 0 } else { plan.order };
        let len = plan.subfolio_pages();
        let page_addr = |i: usize| region.start + i as u64 * PAGE_SIZE;
        let larger = |pages: std::ops::Range<usize>, size: u16| {
            region.pages[pages]
                .iter()
                .any(|p| p.present && p.folio_pages > size)
        };
        let mut writes: Vec<(u64, u64, u8)> = Vec::new();
        if larger(0..SUBPAGES, 1 << order) {
            writes.push((region.start, region.start + REGION_BYTES, order));
        }
        if !sparse {
            let mut subs = Subfolios::default();
            for i in alone.iter() {
                subs.insert(i / len);
            }
            for j in subs.iter() {
                let pages = j * len..(j + 1) * len;
                if !larger(pages.clone(), 1) {
                    continue;
                }
                match writes.last_mut() {
                    // Adjacent to the previous run: one write covers both.
                    Some(w) if w.2 == 0 && w.1 == page_addr(pages.start) => {
                        w.1 = page_addr(pages.end)
                    }
                    _ => writes.push((page_addr(pages.start), page_addr(pages.end), 0)),
                }
            }
        }
        if writes.is_empty() {
            return Some(region.clone());
        }
        let after = if self.dry_run {
            stats.add(Counter::ThpSplitDryRun, 1);
            let mut r = region.clone();
            for &(from, to, o) in &writes {
                let pages = ((from - region.start) / PAGE_SIZE) as usize
                    ..((to - region.start) / PAGE_SIZE) as usize;
                for i in pages {
                    let p = &mut r.pages[i];
                    if p.present && p.folio_pages > 1 << o {
                        (p.folio_start, p.folio_pages) = ((i - i % (1 << o)) as u16, 1 << o);
                    }
                }
            }
            r
        } else {
            for (n, &(from, to, o)) in writes.iter().enumerate() {
                if let Err(e) = self.kernel.split(pid, from, to, o) {
                    self.split_failed(&e, stats);
                    if n == 0 {
                        return None;
                    }
                    break; // the region split went through: what is left moves at its size
                }
            }
            match self.kernel.region(pid, region.start) {
                Ok(r) => r,
                Err(e) => {
                    self.kernel_failed(&e);
                    stats.add(Counter::ThpSplitFailRegion, 1);
                    return None;
                }
            }
        };
        let target = 1u16 << order;
        if group.iter().any(|c| {
            after
                .folio_of(c.key.vaddr())
                .is_some_and(|f| f.folio_pages > target)
        }) {
            // The kernel skipped it (pinned, locked, under migration): it says so only here.
            stats.add(Counter::ThpSplitFailUnsplit, 1);
            return None;
        }
        if !self.dry_run && !sparse && writes[0].1 - writes[0].0 == REGION_BYTES {
            stats.add(super::gate::split_counter(plan.order), 1);
        }
        self.note_split(pid, region.start);
        Some(after)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::AdmissionConfig;
    use super::super::gate::tests::{PID, cand};
    use super::super::thp::fake::FakeThp;
    use super::*;
    use crate::hotness::{Access, HotnessConfig};
    use crate::migrator::Admit;
    use crate::sample::AccessOp;

    const A: u64 = 0x7f00_0000_0000;
    const B: u64 = A + 7 * REGION_BYTES;
    const P: u64 = PAGE_SIZE;

    struct Rig {
        adm: Arc<Admission>,
        gate: AdmissionGate<FakeThp>,
        table: HotTable,
        stats: Stats,
    }

    fn rig(split_histogram: SplitHistogram) -> Rig {
        let adm = Arc::new(Admission::new(
            AdmissionConfig {
                split: true,
                split_histogram,
                ..AdmissionConfig::default()
            },
            2,
        ));
        let mut k = FakeThp::default();
        k.thp(PID, A);
        k.thp(PID, B);
        Rig {
            gate: AdmissionGate::new(Arc::clone(&adm), k, false),
            adm,
            table: HotTable::new(1 << 16, HotnessConfig::default()),
            stats: Stats::new(),
        }
    }

    impl Rig {
        /// `n` samples of each page in `pages` of the THP at `thp`, into the table and the
        /// process's folded histogram.
        fn heat(&self, thp: u64, pages: impl Iterator<Item = u64> + Clone, n: u64) {
            let mut local = self.adm.local();
            for round in 0..n {
                for p in pages.clone() {
                    let vaddr = thp + p * P;
                    let key = PageKey::new(PID, vaddr).unwrap();
                    let time_ns = round * 1_000_000;
                    self.table.record(&Access {
                        key,
                        time_ns,
                        node: 2,
                        op: AccessOp::Load,
                    });
                    let s = super::super::tests::sample(PID, vaddr, AccessOp::Load, time_ns);
                    local.observe(&self.adm, &s, key, 2);
                }
            }
            local.flush(&self.adm);
        }

        fn admit(&mut self, batch: &mut Vec<Candidate>, headroom: Headroom) {
            self.gate
                .admit(batch, &self.table, &self.stats, &move |_| headroom);
        }

        /// (THP, page, bytes) of each move.
        fn moves(batch: &[Candidate]) -> Vec<(char, u64, u64)> {
            batch
                .iter()
                .map(|c| {
                    let (name, thp) = if c.key.vaddr() >= B {
                        ('B', B)
                    } else {
                        ('A', A)
                    };
                    (name, (c.key.vaddr() - thp) / P, c.bytes)
                })
                .collect()
        }
    }

    #[test]
    fn a_thp_map_is_trusted_from_32_samples_and_3_per_seen_subpage() {
        let map = |pages: u32, each: u32| {
            let counts = std::array::from_fn(|i| if (i as u32) < pages { each } else { 0 });
            ThpMap {
                counts,
                samples: u64::from(pages * each),
                seen: pages,
            }
        };
        // 16 pages x 3 = 48 samples >= 32 and >= 3 x 16.
        assert!(map(16, 3).trusted());
        // 16 x 2 = 32 samples: 2 per seen subpage, under 3.
        assert!(!map(16, 2).trusted());
        // 10 x 3 = 30 samples: under 32.
        assert!(!map(10, 3).trusted());
    }

    #[test]
    fn a_thin_map_agrees_with_a_fold_that_holds_its_samples() {
        let plan = match split::decide(
            &std::array::from_fn(|i| u32::from((256..272).contains(&i)) * 50),
            &SplitParams::default(),
        ) {
            SplitDecision::Split(p) => p,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            (plan.order, plan.hot_subfolios.iter().collect::<Vec<_>>()),
            (4, vec![16])
        );
        let map = |outside: u32| {
            let mut counts = [0; SUBPAGES];
            counts[258..263].fill(2);
            counts[40] = outside;
            ThpMap {
                counts,
                samples: 10 + u64::from(outside),
                seen: 6,
            }
        };
        assert!(map(2).agrees_with(&plan, 0.8), "2 of 12 outside");
        assert!(!map(3).agrees_with(&plan, 0.8), "3 of 13 outside");
        let empty = ThpMap {
            counts: [0; SUBPAGES],
            samples: 0,
            seen: 0,
        };
        assert!(empty.agrees_with(&plan, 0.8));
    }

    #[test]
    fn reading_a_map_counts_each_subpage_samples_from_the_table() {
        let r = rig(SplitHistogram::Auto);
        r.heat(A, [3u64, 4].into_iter(), 5);
        r.heat(A, std::iter::once(511u64), 2);
        r.heat(B, std::iter::once(3u64), 9); // another THP: not in A's map
        let m = ThpMap::read(&r.table, PID, A);
        assert_eq!((m.counts[3], m.counts[4], m.counts[511]), (5, 5, 2));
        assert_eq!((m.samples, m.seen), (12, 3));
    }

    #[test]
    fn sparse_choice_follows_its_worked_example() {
        let gib = Headroom {
            budget_bytes: 1 << 30,
            room_bytes: 1 << 30,
        };
        assert_eq!(sparse_choice(16, gib), SparseChoice::BasePages);
        assert_eq!(sparse_choice(200, gib), SparseChoice::Whole);
        let budget = |b| Headroom {
            budget_bytes: b,
            ..gib
        };
        // Never the whole THP for one hot page when contended (8 MiB < 32 MiB).
        assert_eq!(sparse_choice(1, budget(8 << 20)), SparseChoice::BasePages);
        assert_eq!(sparse_choice(200, budget(8 << 20)), SparseChoice::BasePages);
        assert_eq!(sparse_choice(16, budget(32 << 10)), SparseChoice::Leave);
        // The watermark's room counts the same way.
        let room = Headroom {
            room_bytes: 8 << 10,
            ..gib
        };
        assert_eq!(sparse_choice(3, room), SparseChoice::Leave);
    }

    /// 128 KiB runs at different offsets in two THPs, 4 samples per hot page (128 samples, 32
    /// seen: trusted).
    ///
    /// THP A, run at pages 37..69: every hot page counts 4, so the coverage threshold is 4 and
    /// all 32 are hot. Order 5 (32 pages): subfolio 1 (32..64) holds 27 hot, 0.84 >= 0.75; no
    /// larger size reaches the density. Pages 64..69 (5 hot) are moved alone: subfolio 2
    /// (64..96) is split to order 0. Moved: 128 KiB + 5 x 4 KiB = 148 KiB for 128 KiB hot.
    ///
    /// THP B, run at pages 300..332: at order 5, 288..320 holds 20 (0.625) and 320..352 12;
    /// at order 4, 304..320 holds 16 and 320..336 12 (0.75): both hot. Pages 300..304 are
    /// moved alone (subfolio 18, 288..304, to order 0). Moved: 2 x 64 KiB + 4 x 4 KiB.
    #[test]
    fn runs_at_different_offsets_split_by_each_thps_own_map() {
        let mut r = rig(SplitHistogram::Auto);
        r.heat(A, 37..69u64, 4);
        r.heat(B, 300..332u64, 4);
        let mut batch = vec![cand(A + 40 * P), cand(A + 66 * P), cand(B + 310 * P)];
        r.admit(&mut batch, Headroom::UNLIMITED);
        let k = 4096;
        assert_eq!(
            Rig::moves(&batch),
            vec![
                ('A', 40, 32 * k),
                ('A', 64, k),
                ('A', 65, k),
                ('A', 66, k),
                ('A', 67, k),
                ('A', 68, k),
                ('B', 300, k),
                ('B', 301, k),
                ('B', 302, k),
                ('B', 303, k),
                ('B', 310, 16 * k),
                ('B', 320, 16 * k),
            ]
        );
        assert_eq!(
            r.gate.kernel.splits,
            vec![
                (PID, A, A + REGION_BYTES, 5),
                (PID, A + 64 * P, A + 96 * P, 0),
                (PID, B, B + REGION_BYTES, 4),
                (PID, B + 288 * P, B + 304 * P, 0),
            ]
        );
        let get = |c| r.stats.get(c);
        assert_eq!(get(Counter::ThpSplitPerFolio), 2);
        assert_eq!(get(Counter::ThpSplitFolded), 0);
        assert_eq!(get(Counter::ThpSplitBasePages), 9);
        // A: 4 base-page riders; B: 4 base-page riders and hot subfolio 20.
        assert_eq!(get(Counter::ThpSplitRiders), 9);
        let bytes: u64 = batch.iter().map(|c| c.bytes).sum();
        assert_eq!(bytes, (148 + 144) * 1024, "against 2 x 128 KiB hot");
    }

    /// Two runs in one THP, 4 samples per page: 96..112 fills 64 KiB subfolio 6 (hot); 200..216
    /// straddles subfolios 12 and 13 (8 of 16 each: moved alone). Both go to order 0 in one
    /// write, after the region's split to 64 KiB.
    #[test]
    fn adjacent_subfolios_of_pages_moved_alone_split_in_one_write() {
        let mut r = rig(SplitHistogram::PerFolio);
        r.heat(A, (96..112u64).chain(200..216), 4);
        let mut batch = vec![cand(A + 100 * P)];
        r.admit(&mut batch, Headroom::UNLIMITED);
        assert_eq!(
            r.gate.kernel.splits,
            vec![
                (PID, A, A + REGION_BYTES, 4),
                (PID, A + 192 * P, A + 224 * P, 0)
            ]
        );
        let mut want = vec![('A', 100, 16 * 4096)];
        want.extend((200..216).map(|p| ('A', p, 4096)));
        assert_eq!(Rig::moves(&batch), want);
    }

    /// The same heat under the paper's folded histogram: both runs fold into one histogram
    /// (pages 37..69 and 300..332, 64 hot subpages), whose only subfolio at the density is
    /// 32..64 at order 5 (27 of 32; 288..320 holds 20). In THP B that subfolio is cold and
    /// rides along, and the candidate's own 128 KiB subfolio moves too.
    #[test]
    fn the_folded_histogram_moves_a_cold_subfolio_where_offsets_differ() {
        let mut r = rig(SplitHistogram::Folded);
        r.heat(A, 37..69u64, 4);
        r.heat(B, 300..332u64, 4);
        let mut batch = vec![cand(B + 310 * P)];
        r.admit(&mut batch, Headroom::UNLIMITED);
        let k = 4096;
        assert_eq!(
            Rig::moves(&batch),
            vec![('B', 32, 32 * k), ('B', 310, 32 * k)]
        );
        assert_eq!(r.stats.get(Counter::ThpSplitFolded), 1);
        assert_eq!(r.stats.get(Counter::ThpSplitPerFolio), 0);
    }

    /// Three hot pages (10, 200, 411; 20 samples each: 60 samples, 3 seen, trusted), no
    /// subfolio near the density: a sparse THP.
    #[test]
    fn sparse_hot_pages_move_alone_or_wait_never_whole_when_contended() {
        let sparse = [10u64, 200, 411];
        let mut r = rig(SplitHistogram::PerFolio);
        r.heat(A, sparse.into_iter(), 20);
        // Contended (8 MiB of budget) but the 12 KiB fit: the three pages, alone.
        let contended = Headroom {
            budget_bytes: 8 << 20,
            room_bytes: 1 << 30,
        };
        let mut batch = vec![cand(A + 200 * P)];
        r.admit(&mut batch, contended);
        assert_eq!(
            Rig::moves(&batch),
            vec![('A', 10, 4096), ('A', 200, 4096), ('A', 411, 4096)]
        );
        // No hot subfolio: the whole THP to order 0 in one write.
        assert_eq!(r.gate.kernel.splits, vec![(PID, A, A + REGION_BYTES, 0)]);
        assert_eq!(r.stats.get(Counter::ThpWholePromotions), 0);

        // THP B, the same three pages, 8 KiB of budget: the THP is left, unsplit.
        r.heat(B, sparse.into_iter(), 20);
        let starved = Headroom {
            budget_bytes: 8 << 10,
            room_bytes: 1 << 30,
        };
        let mut batch = vec![cand(B + 10 * P)];
        r.admit(&mut batch, starved);
        assert!(batch.is_empty());
        assert_eq!(r.stats.get(Counter::ThpSparseLeft), 1);
        assert_eq!(r.stats.get(Counter::PgpromoteDeferredSparse), 1);
        assert_eq!(r.gate.kernel.splits.len(), 1, "B was not split");
    }

    /// Every other page of 0..400 hot (200 pages, 3 samples each: 600 samples, 200 seen): 8 of
    /// 16 per 64 KiB subfolio, 0.5 < 0.75, sparse. Uncontended, 200 >= 128: moved whole.
    #[test]
    fn an_uncontended_thp_a_quarter_hot_is_moved_whole() {
        let mut r = rig(SplitHistogram::PerFolio);
        r.heat(A, (0..400u64).step_by(2), 3);
        let mut batch = vec![cand(A + 2 * P)];
        r.admit(&mut batch, Headroom::UNLIMITED);
        assert_eq!(Rig::moves(&batch), vec![('A', 2, REGION_BYTES)]);
        assert_eq!(r.stats.get(Counter::ThpSparseWhole), 1);
        assert!(r.gate.kernel.splits.is_empty());
    }

    /// B's 64 KiB cluster at pages 256..272 (10 samples each) makes the fold split at order 4,
    /// subfolio 16. A THP with 2 samples of its own at page 40 contradicts that plan and waits;
    /// one with 2 samples at page 260 fits it and is split by the fold.
    #[test]
    fn auto_takes_a_split_fold_only_where_the_thps_own_samples_fit_it() {
        admit_under_b_cluster(&[40], 2).waited();
        admit_under_b_cluster(&[260], 2).split_by_the_fold();
    }

    /// The same fold (B's 64 KiB cluster, order 4, subfolio 16: 12 of its 16 pages claimed
    /// hot). A thin THP whose only sampled page, 260, holds 3 samples fits the plan but
    /// refutes it (one distinct page in 3 draws from 12: 1/144) and waits; one whose samples
    /// fell on three pages of the subfolio, once each, bears it out and is split by the fold.
    #[test]
    fn auto_leaves_a_fold_that_the_thps_repeated_samples_refute() {
        admit_under_b_cluster(&[260], 3).waited();
        admit_under_b_cluster(&[258, 260, 262], 1).split_by_the_fold();
    }

    /// What [`admit_under_b_cluster`] left: the rig and the moves of its batch.
    struct Admitted {
        rig: Rig,
        moved: Vec<(char, u64, u64)>,
    }

    impl Admitted {
        /// A's candidate waits for its own samples: nothing split, nothing moved.
        fn waited(&self) {
            assert!(self.moved.is_empty());
            assert_eq!(self.rig.stats.get(Counter::PgpromoteDeferredFewSamples), 1);
            assert_eq!(self.rig.stats.get(Counter::ThpSplitFolded), 0);
            assert!(self.rig.gate.kernel.splits.is_empty());
        }

        /// A is split by the fold and the candidate's 64 KiB subfolio moves.
        fn split_by_the_fold(&self) {
            assert_eq!(self.moved, vec![('A', 260, 16 * 4096)]);
            assert_eq!(self.rig.stats.get(Counter::ThpSplitFolded), 1);
        }
    }

    /// Under `auto`: THP B's 64 KiB cluster at pages 256..272 (10 samples each) makes the fold
    /// split at order 4, subfolio 16; THP A gets `n` samples on each of `pages` and a
    /// candidate at the second of them (or the only one).
    fn admit_under_b_cluster(pages: &[u64], n: u64) -> Admitted {
        let mut r = rig(SplitHistogram::Auto);
        r.heat(B, 256..272u64, 10);
        r.heat(A, pages.iter().copied(), n);
        let mut batch = vec![cand(A + pages[pages.len() / 2] * P)];
        r.admit(&mut batch, Headroom::UNLIMITED);
        Admitted {
            moved: Rig::moves(&batch),
            rig: r,
        }
    }

    /// Chances counted by hand: sequences of `s` draws from `n` pages with at most `k`
    /// distinct, over `n^s` (the number with exactly `j` distinct is `C(n, j)` times the
    /// onto maps from `s` draws to `j` pages: 1, `2^s - 2`, `3^s - 3 * 2^s + 3`).
    #[test]
    fn the_chance_of_few_distinct_pages_matches_counting_by_hand() {
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        // n = 12, 3 draws, one page: 12 / 12^3.
        assert!(close(chance_of_at_most_distinct(3, 12, 1), 1.0 / 144.0));
        // n = 12, 2 draws, one page: 12 / 12^2.
        assert!(close(chance_of_at_most_distinct(2, 12, 1), 1.0 / 12.0));
        // n = 48, 4 draws, at most 2: (48 + C(48,2) * 14) / 48^4 = 15,840 / 5,308,416.
        assert!(close(
            chance_of_at_most_distinct(4, 48, 2),
            15_840.0 / 5_308_416.0
        ));
        // n = 48, 5 draws, at most 3: (48 + 1,128 * 30 + 17,296 * 150) / 48^5.
        let at_most_3 = 48.0 + 1_128.0 * 30.0 + 17_296.0 * 150.0;
        assert!(close(
            chance_of_at_most_distinct(5, 48, 3),
            at_most_3 / 254_803_968.0
        ));
        // As many distinct as draws (or pages) allow: certain.
        assert_eq!(chance_of_at_most_distinct(3, 12, 3), 1.0);
        assert_eq!(chance_of_at_most_distinct(40, 12, 12), 1.0);
        assert_eq!(chance_of_at_most_distinct(0, 12, 0), 1.0);
    }

    /// [`ThpMap::bears_out`]'s worked example, on a plan at order 4 with subfolio 16 hot (as
    /// in `a_thin_map_agrees_with_a_fold_that_holds_its_samples`); samples outside the hot
    /// subfolios do not count.
    #[test]
    fn a_thin_map_bears_out_a_fold_unless_its_samples_repeat_on_few_pages() {
        let mut plan = SplitPlan {
            order: 4,
            entropy: 0.5,
            threshold: 1,
            hot_subpages: 12,
            hot: Subfolios::default(),
            hot_subfolios: Subfolios::default(),
        };
        plan.hot_subfolios.insert(16);
        let map = |pages: &[(usize, u32)]| {
            let mut counts = [0; SUBPAGES];
            for &(i, c) in pages {
                counts[i] = c;
            }
            ThpMap {
                counts,
                samples: pages.iter().map(|&(_, c)| u64::from(c)).sum(),
                seen: pages.len() as u32,
            }
        };
        assert!(!map(&[(260, 3)]).bears_out(&plan, 0.75), "1/144");
        assert!(map(&[(260, 2)]).bears_out(&plan, 0.75), "1/12");
        assert!(map(&[(258, 1), (260, 1), (262, 1)]).bears_out(&plan, 0.75));
        // Many samples on a page outside the hot subfolio say nothing of it.
        assert!(map(&[(40, 9), (260, 1)]).bears_out(&plan, 0.75));
        assert!(map(&[]).bears_out(&plan, 0.75));
    }

    /// Thin own map (2 samples), folded histogram flat (every subpage of another THP sampled
    /// alike): `auto` does not promote 2 MiB on the fold's word, the candidate waits; `folded`
    /// promotes the THP whole.
    #[test]
    fn auto_waits_for_a_thin_thp_when_the_fold_is_flat() {
        let mut r = rig(SplitHistogram::Auto);
        r.heat(B, 0..512u64, 4);
        r.heat(A, std::iter::once(7u64), 2);
        let mut batch = vec![cand(A + 7 * P)];
        r.admit(&mut batch, Headroom::UNLIMITED);
        assert!(batch.is_empty());
        assert_eq!(r.stats.get(Counter::PgpromoteDeferredFewSamples), 1);

        let mut r = rig(SplitHistogram::Folded);
        r.heat(B, 0..512u64, 4);
        r.heat(A, std::iter::once(7u64), 2);
        let mut batch = vec![cand(A + 7 * P)];
        r.admit(&mut batch, Headroom::UNLIMITED);
        assert_eq!(Rig::moves(&batch), vec![('A', 7, REGION_BYTES)]);
        assert_eq!(r.stats.get(Counter::ThpSplitFlat), 1);
    }
}
