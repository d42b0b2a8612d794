//! Migration admission, as in TierBPF (arXiv 2604.12300): two filters between "this page is hot"
//! and "move it", done from userspace because pghotd owns the migration decision.
//!
//! - **Granularity** (§5.2): each process has a 512-slot subpage histogram ([`histogram`]); the
//!   split decision ([`split`]) picks an mTHP size by entropy, coverage and heat density. When a
//!   candidate sits in a THP and splitting is active, the migrator splits that THP through
//!   debugfs, verifies with pagemap/kpageflags what split ([`thp`]), and promotes the hot
//!   subfolios plus the sampled one ([`gate`]). Splitting is active only while the slow node's
//!   estimated bandwidth reaches `split_contention_MBps` ([`traffic`]).
//! - **Duplex** (§5.3): for a lower-tier node configured full-duplex (CXL), a dual blocked
//!   counting Bloom filter ([`bloom`]) gives each page's write ratio; with the node's traffic
//!   read- or write-dominant, pages of the other kind are deferred (Table 2).
//!
//! Stages and threads: recorders (sampler threads) feed the histogram, the filters and the
//! traffic meters through a [`LocalAdmission`] (local counts, folded per flush); migrators run
//! the [`gate::AdmissionGate`] on each batch before the watermark and the rate limit. Shared
//! state is [`Admission`]: atomics plus two small mutexes (the process map and the decision
//! cache), neither taken per sample.

pub mod bloom;
pub mod config;
pub mod gate;
pub mod histogram;
pub mod per_folio;
#[cfg(test)]
mod recollapse;
pub mod split;
pub mod thp;
pub mod traffic;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::hotness::PageKey;
use crate::sample::{AccessOp, Sample};
use crate::topology::NodeId;
pub use config::AdmissionConfig;
use histogram::{HistogramSet, LocalHistogram};
use split::{SplitDecision, SplitParams};
use traffic::{Direction, NodeTraffic, TrafficReading};

/// Processes with a histogram (2 KiB each); later ones get whole-THP promotion.
pub const MAX_HISTOGRAMS: usize = 4096;
/// How long a split decision holds before it is recomputed (and the histogram halved).
pub const DECISION_TTL: Duration = Duration::from_secs(1);

/// A page's read/write kind (paper Table 2 rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageKind {
    ReadHeavy,
    WriteHeavy,
}

/// Table 2: whether a page of `kind` is admitted with the node's traffic `direction`.
pub fn duplex_admits(direction: Direction, kind: PageKind) -> bool {
    !matches!(
        (direction, kind),
        (Direction::ReadDominant, PageKind::WriteHeavy)
            | (Direction::WriteDominant, PageKind::ReadHeavy)
    )
}

struct CachedDecision {
    at: Instant,
    decision: SplitDecision,
}

/// State shared by recorders, migrators and the control plane.
pub struct Admission {
    config: AdmissionConfig,
    params: SplitParams,
    histograms: HistogramSet,
    /// Allocated only when a full-duplex node is configured (as in the paper).
    filters: Option<bloom::DualBcbf>,
    traffic: Vec<NodeTraffic>,
    full_duplex: Vec<bool>,
    decisions: Mutex<HashMap<u32, CachedDecision>>,
    /// Per-THP decisions (`split_histogram` `per_folio`, `auto`), cached per region.
    regions: Mutex<per_folio::RegionCache>,
    /// Set when the kernel cannot split (no debugfs, lockdown, no CAP_SYS_ADMIN for PFNs).
    split_unavailable: AtomicBool,
}

impl Admission {
    /// `max_node`: the highest node id of the topology.
    pub fn new(config: AdmissionConfig, max_node: NodeId) -> Admission {
        let nodes = usize::from(max_node) + 1;
        let mut full_duplex = vec![false; nodes];
        for &n in &config.full_duplex_nodes {
            if let Some(slot) = full_duplex.get_mut(usize::from(n)) {
                *slot = true;
            }
        }
        let filters = full_duplex
            .contains(&true)
            .then(|| bloom::DualBcbf::new(config.duplex_filter_kib as usize * 1024));
        Admission {
            params: config.split_params(),
            histograms: HistogramSet::new(MAX_HISTOGRAMS),
            filters,
            traffic: (0..nodes).map(|_| NodeTraffic::default()).collect(),
            full_duplex,
            decisions: Mutex::new(HashMap::new()),
            regions: Mutex::new(per_folio::RegionCache::default()),
            split_unavailable: AtomicBool::new(false),
            config,
        }
    }

    pub fn config(&self) -> &AdmissionConfig {
        &self.config
    }

    /// A recorder's local side.
    pub fn local(&self) -> LocalAdmission {
        LocalAdmission {
            hist: LocalHistogram::default(),
            counts: vec![(0, 0); self.traffic.len()],
            filter_updates: 0,
            span_ns: (u64::MAX, 0),
            source_period: 1,
        }
    }

    pub fn is_full_duplex(&self, node: NodeId) -> bool {
        self.full_duplex
            .get(usize::from(node))
            .copied()
            .unwrap_or(false)
    }

    pub fn traffic(&self, node: NodeId) -> Option<TrafficReading> {
        self.traffic
            .get(usize::from(node))
            .map(NodeTraffic::reading)
    }

    /// Splitting is configured, and the kernel has not refused it.
    pub fn split_enabled(&self) -> bool {
        self.config.split && !self.split_unavailable.load(Ordering::Relaxed)
    }

    /// Turns splitting off for the rest of the run; true the first time.
    pub fn mark_split_unavailable(&self) -> bool {
        !self.split_unavailable.swap(true, Ordering::Relaxed)
    }

    /// Whether the node's slow-tier bandwidth is contended enough to split.
    pub fn contended(&self, node: NodeId) -> bool {
        let threshold = self.config.split_contention_mbps;
        threshold == 0
            || self
                .traffic(node)
                .is_some_and(|t| t.windows > 0 && t.mb_per_s >= threshold as f64)
    }

    /// The page's kind from the filters; `None` when duplex admission does not apply to the
    /// node or the page was never seen.
    pub fn page_kind(&self, node: NodeId, key: PageKey) -> Option<PageKind> {
        if !self.is_full_duplex(node) {
            return None;
        }
        let ratio = self.filters.as_ref()?.write_ratio(key.raw())?;
        Some(
            if ratio * 100.0 >= f64::from(self.config.duplex_write_heavy_pct) {
                PageKind::WriteHeavy
            } else {
                PageKind::ReadHeavy
            },
        )
    }

    /// The process's split decision, recomputed (and its histogram halved, so it follows
    /// phase changes) at most every [`DECISION_TTL`].
    pub fn decision(&self, pid: u32, now: Instant) -> SplitDecision {
        let mut decisions = self.decisions.lock();
        if let Some(c) = decisions.get(&pid)
            && now.saturating_duration_since(c.at) < DECISION_TTL
        {
            return c.decision;
        }
        let decision = match self.histograms.get(pid) {
            Some(h) => {
                let d = split::decide(&h.counts(), &self.params);
                // Few samples: keep them, so they add up to a decision.
                if !matches!(d, SplitDecision::FewSamples { .. }) {
                    h.halve();
                }
                d
            }
            None => SplitDecision::FewSamples { samples: 0 },
        };
        // Too few samples is not cached: the next candidate looks again (a 512-slot scan), so
        // a process's first second is not promoted whole for want of a histogram.
        if matches!(decision, SplitDecision::FewSamples { .. }) {
            return decision;
        }
        if decisions.len() >= MAX_HISTOGRAMS {
            decisions.retain(|_, c| now.saturating_duration_since(c.at) < DECISION_TTL * 60);
        }
        decisions.insert(pid, CachedDecision { at: now, decision });
        decision
    }

    /// Forgets the cached region decisions, so the next candidate reads its THP's map again.
    pub fn forget_regions(&self) {
        self.regions.lock().clear();
    }

    /// What `pghotctl stats`/`top` show.
    pub fn view(&self, lower_nodes: &[NodeId]) -> AdmissionView {
        let nodes = lower_nodes
            .iter()
            .filter_map(|&node| {
                let t = self.traffic(node)?;
                Some(NodeAdmissionRow {
                    node,
                    mb_per_s: (t.mb_per_s * 10.0).round() / 10.0,
                    contended: self.contended(node),
                    direction: t.direction,
                    full_duplex: self.is_full_duplex(node),
                })
            })
            .collect();
        let mut pids: Vec<PidSplitRow> = self
            .decisions
            .lock()
            .iter()
            .map(|(&pid, c)| split_row(pid, &c.decision))
            .collect();
        pids.sort_unstable_by_key(|r| r.pid);
        AdmissionView {
            split: self.config.split,
            split_unavailable: self.split_unavailable.load(Ordering::Relaxed),
            split_contention_mbps: self.config.split_contention_mbps,
            nodes,
            pids,
        }
    }
}

/// A recorder's pending admission counts: folded per flush, never shared per sample.
pub struct LocalAdmission {
    hist: LocalHistogram,
    /// (loads, stores) per node since the last flush.
    counts: Vec<(u64, u64)>,
    filter_updates: u64,
    /// Sample times of the first and last sample since the last flush.
    span_ns: (u64, u64),
    /// Events one sample stands for, as the source says (1 until it does).
    source_period: u64,
}

impl LocalAdmission {
    /// Counts one lower-tier sample.
    #[inline]
    pub fn observe(&mut self, admission: &Admission, s: &Sample, key: PageKey, node: NodeId) {
        self.span_ns = (self.span_ns.0.min(s.time_ns), self.span_ns.1.max(s.time_ns));
        if admission.config.split {
            self.hist.observe(&admission.histograms, s.pid, s.vaddr);
        }
        if let Some(c) = self.counts.get_mut(usize::from(node)) {
            match s.op {
                AccessOp::Load => c.0 += 1,
                AccessOp::Store => c.1 += 1,
            }
        }
        if let Some(filters) = &admission.filters
            && admission.is_full_duplex(node)
        {
            match s.op {
                AccessOp::Load => filters.reads.update(key.raw()),
                AccessOp::Store => filters.writes.update(key.raw()),
            }
            self.filter_updates += 1;
        }
    }

    /// The source's sampling period, for the samples from now on (call after a flush).
    pub fn set_source_period(&mut self, period: u64) {
        self.source_period = period.max(1);
    }

    /// Folds everything into the shared state.
    pub fn flush(&mut self, admission: &Admission) {
        self.hist.fold();
        let cfg = &admission.config;
        let dominant = f64::from(cfg.duplex_dominant_pct) / 100.0;
        for (node, c) in self.counts.iter_mut().enumerate() {
            if *c != (0, 0) {
                let period = cfg.sample_period.unwrap_or(self.source_period);
                admission.traffic[node].add(c.0, c.1, self.span_ns, period, dominant);
                *c = (0, 0);
            }
        }
        self.span_ns = (u64::MAX, 0);
        if let Some(filters) = &admission.filters {
            // Each filter ages after as many of its own updates as it has counters; the
            // split between them is not known here, so both count every update.
            filters.reads.note_updates(self.filter_updates);
            filters.writes.note_updates(self.filter_updates);
        }
        self.filter_updates = 0;
    }
}

pub use pghot_protocol::views::{AdmissionView, NodeAdmissionRow, PidSplitRow};

/// The control plane's row for a process's last split decision.
fn split_row(pid: u32, d: &SplitDecision) -> PidSplitRow {
    let round = |e: f64| (e * 1000.0).round() / 1000.0;
    match d {
        SplitDecision::FewSamples { .. } => PidSplitRow {
            pid,
            decision: "few_samples".into(),
            entropy: None,
            size_kb: None,
            hot_subfolios: None,
        },
        SplitDecision::Flat { entropy } => PidSplitRow {
            pid,
            decision: "flat".into(),
            entropy: Some(round(*entropy)),
            size_kb: None,
            hot_subfolios: None,
        },
        SplitDecision::Split(p) => PidSplitRow {
            pid,
            decision: "split".into(),
            entropy: Some(round(p.entropy)),
            size_kb: Some(4 << p.order),
            hot_subfolios: Some(p.hot_subfolios.len() as u32),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::{DataSource, SourceKind};

    /// A lower-tier (node 2) sample, for this module's and `gate`'s tests.
    pub(super) fn sample(pid: u32, vaddr: u64, op: AccessOp, time_ns: u64) -> Sample {
        Sample {
            time_ns,
            cpu: 0,
            pid,
            tid: pid,
            vaddr,
            paddr: None,
            op,
            served_from: DataSource::ExtMem,
            node: Some(2),
            latency: None,
            source: SourceKind::Trace,
        }
    }

    fn config() -> AdmissionConfig {
        AdmissionConfig {
            split: true,
            full_duplex_nodes: vec![2],
            sample_period: Some(100),
            ..AdmissionConfig::default()
        }
    }

    #[test]
    fn table_2_admits_what_matches_the_dominant_direction() {
        use Direction::*;
        use PageKind::*;
        assert!(duplex_admits(ReadDominant, ReadHeavy));
        assert!(!duplex_admits(ReadDominant, WriteHeavy));
        assert!(duplex_admits(Balanced, ReadHeavy));
        assert!(duplex_admits(Balanced, WriteHeavy));
        assert!(!duplex_admits(WriteDominant, ReadHeavy));
        assert!(duplex_admits(WriteDominant, WriteHeavy));
    }

    #[test]
    fn samples_feed_histogram_filters_and_traffic_through_the_local_side() {
        let adm = Admission::new(config(), 2);
        let mut local = adm.local();
        let base = 0x7f00_0000_0000u64;
        let key = |v| PageKey::new(10, v).unwrap();
        // A 64 KiB cluster at subpage 32 in each of 4 THPs, read; one page written 3:1.
        for t in 0..400u64 {
            let v = base + (t % 4) * (2 << 20) + (32 + t % 16) * 4096;
            local.observe(
                &adm,
                &sample(10, v, AccessOp::Load, t * 5_000_000),
                key(v),
                2,
            );
        }
        let w = base + 0x1000;
        for (i, op) in [
            AccessOp::Store,
            AccessOp::Store,
            AccessOp::Store,
            AccessOp::Load,
        ]
        .into_iter()
        .enumerate()
        {
            local.observe(
                &adm,
                &sample(10, w, op, 2_000_000_000 + i as u64),
                key(w),
                2,
            );
        }
        local.flush(&adm);
        assert_eq!(adm.page_kind(2, key(w)), Some(PageKind::WriteHeavy));
        assert_eq!(
            adm.page_kind(2, key(base + 32 * 4096)),
            Some(PageKind::ReadHeavy)
        );
        assert_eq!(adm.page_kind(1, key(w)), None, "node 1 is not full-duplex");
        let t = adm.traffic(2).unwrap();
        assert_eq!(t.direction, Direction::ReadDominant);
        // 404 samples over 2 s at period 100: 404 * 100 * 64 B / 2 s.
        let want = 404.0 * 100.0 * 64.0 / 2.0 / (1 << 20) as f64;
        assert!((t.mb_per_s - want).abs() < 0.01, "{t:?} want {want}");
        match adm.decision(10, Instant::now()) {
            SplitDecision::Split(p) => {
                assert_eq!(p.order, 4);
                assert_eq!(p.hot_subfolios.iter().collect::<Vec<_>>(), vec![2]);
            }
            other => panic!("{other:?}"),
        }
        let view = adm.view(&[2]);
        assert_eq!(view.pids[0].size_kb, Some(64));
        assert!(view.nodes[0].contended, "threshold 0: always contended");
        let line = view.summary(|name| match name {
            "thp_split_order_64k" => 3,
            "pgpromote_deferred_few_samples" => 7,
            _ => 0,
        });
        assert_eq!(
            line,
            "admission: split >= 0 MB/s  node2 1 MB/s ACTIVE duplex R-dominant  \
             pid 10 -> 64K (H 0.45)  splits 3  subfolios 0/0  whole 0  deferred W 0 R 0 thin 7"
        );
    }

    #[test]
    fn contention_needs_a_window_at_the_threshold() {
        let adm = Admission::new(
            AdmissionConfig {
                split_contention_mbps: 10,
                ..config()
            },
            2,
        );
        assert!(!adm.contended(2), "no estimate yet");
        let mut local = adm.local();
        // 2000 samples in 1.0015 s at period 100 = 12.2 MiB/s.
        for t in 0..2000u64 {
            let s = sample(10, 0x1000, AccessOp::Load, t * 501_000);
            local.observe(&adm, &s, PageKey::new(10, 0x1000).unwrap(), 2);
        }
        local.flush(&adm);
        assert!(adm.contended(2));
        assert!(!adm.contended(1));
    }

    #[test]
    fn no_filters_without_a_full_duplex_node() {
        let adm = Admission::new(
            AdmissionConfig {
                full_duplex_nodes: vec![],
                ..config()
            },
            2,
        );
        assert!(adm.filters.is_none());
        assert_eq!(adm.page_kind(2, PageKey::new(1, 0x1000).unwrap()), None);
    }
}
