//! Data the daemon shows its tools: per-process counters and admission state.

use serde::{Deserialize, Serialize};

use crate::NodeId;

/// Counters of one process. Field names are the words used by `stats --json`, `top` and the
/// metrics (`pghotd_pid_<field>_total`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PidCounts {
    /// Samples of this process that passed the filters.
    pub samples: u64,
    /// Of those, lower-tier samples recorded in the hotness table.
    pub recorded: u64,
    /// Pages that crossed `freq_threshold`.
    pub candidates: u64,
    /// Pages promoted (or, in a dry run, that would have been).
    pub promoted_pages: u64,
    pub promoted_bytes: u64,
    /// Pages whose promotion failed (any `pgpromote_fail_*` but the watermark).
    pub fail: u64,
}

impl PidCounts {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &PidCounts) {
        self.samples += other.samples;
        self.recorded += other.recorded;
        self.candidates += other.candidates;
        self.promoted_pages += other.promoted_pages;
        self.promoted_bytes += other.promoted_bytes;
        self.fail += other.fail;
    }
}

/// Which way a node's traffic leans (TierBPF's Table 2 columns: read-dominant, balanced,
/// write-dominant).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    ReadDominant,
    Balanced,
    WriteDominant,
}

/// Admission state as the control plane shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdmissionView {
    /// `split` is configured.
    pub split: bool,
    /// The kernel refused splitting (see the log); THPs are promoted whole.
    pub split_unavailable: bool,
    #[serde(rename = "split_contention_MBps")]
    pub split_contention_mbps: u64,
    pub nodes: Vec<NodeAdmissionRow>,
    /// The last split decision per process.
    pub pids: Vec<PidSplitRow>,
}

impl AdmissionView {
    /// One line for `pghotctl top`: split state per slow node, the busiest decisions, and
    /// what was split or deferred (from the counters).
    pub fn summary(&self, counter: impl Fn(&str) -> u64) -> String {
        let mut parts = Vec::new();
        let split = match (self.split, self.split_unavailable) {
            (false, _) => "split off".to_string(),
            (true, true) => "split UNAVAILABLE (whole THPs)".to_string(),
            (true, false) => format!("split >= {} MB/s", self.split_contention_mbps),
        };
        parts.push(split);
        for n in &self.nodes {
            let dir = match n.direction {
                Direction::ReadDominant => "R-dominant",
                Direction::WriteDominant => "W-dominant",
                Direction::Balanced => "balanced",
            };
            parts.push(format!(
                "node{} {:.0} MB/s {}{}",
                n.node,
                n.mb_per_s,
                if n.contended { "ACTIVE" } else { "idle" },
                if n.full_duplex {
                    format!(" duplex {dir}")
                } else {
                    String::new()
                }
            ));
        }
        for p in self.pids.iter().take(3) {
            parts.push(match (p.size_kb, p.entropy) {
                (Some(kb), Some(h)) => format!("pid {} -> {kb}K (H {h:.2})", p.pid),
                (None, Some(h)) => format!("pid {} flat (H {h:.2})", p.pid),
                _ => format!("pid {} few samples", p.pid),
            });
        }
        let splits: u64 = [
            "thp_split_order_64k",
            "thp_split_order_128k",
            "thp_split_order_256k",
            "thp_split_order_512k",
            "thp_split_order_1m",
        ]
        .iter()
        .map(|n| counter(n))
        .sum();
        parts.push(format!(
            "splits {splits}  subfolios {}/{}  whole {}  deferred W {} R {} thin {}",
            counter("thp_subfolios_selected"),
            counter("thp_subfolios_selected") + counter("thp_subfolios_left"),
            counter("thp_whole_promotions"),
            counter("admission_deferred_write_heavy"),
            counter("admission_deferred_read_heavy"),
            counter("pgpromote_deferred_few_samples"),
        ));
        format!("admission: {}", parts.join("  "))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeAdmissionRow {
    pub node: NodeId,
    /// Estimated slow-tier bandwidth from the samples.
    pub mb_per_s: f64,
    /// Splitting is active for candidates from this node.
    pub contended: bool,
    pub direction: Direction,
    pub full_duplex: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PidSplitRow {
    pub pid: u32,
    /// `few_samples`, `flat`, or `split`.
    pub decision: String,
    pub entropy: Option<f64>,
    /// Split target in KiB (2048: the whole THP is dense).
    pub size_kb: Option<u32>,
    pub hot_subfolios: Option<u32>,
}

/// What else moves pages between tiers: a kernel mechanism or another program that promotes
/// or demotes the same pages pghotd does (double work, pages moved back and forth).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConflictKind {
    /// `kernel.numa_balancing` with NUMA_BALANCING_MEMORY_TIERING (2): the kernel promotes on
    /// hint faults.
    NumaBalancing,
    /// `/sys/kernel/mm/numa/demotion_enabled`: reclaim demotes to the lower tier.
    Demotion,
    /// A running kdamond with a `migrate_hot` or `migrate_cold` scheme.
    Damon,
    /// Another pghotd.
    Pghotd,
    /// A kind a newer daemon knows and this tool does not.
    #[serde(other)]
    Other,
}

impl ConflictKind {
    /// Every kind a daemon reports (the metric has a sample for each, 0 when absent).
    pub const ALL: [ConflictKind; 4] = [
        ConflictKind::NumaBalancing,
        ConflictKind::Demotion,
        ConflictKind::Damon,
        ConflictKind::Pghotd,
    ];

    /// The name on the wire and in the metric's `kind` label.
    pub fn name(self) -> &'static str {
        match self {
            ConflictKind::NumaBalancing => "numa_balancing",
            ConflictKind::Demotion => "demotion",
            ConflictKind::Damon => "damon",
            ConflictKind::Pghotd => "pghotd",
            ConflictKind::Other => "other",
        }
    }
}

/// One competing promoter, as found.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Conflict {
    pub kind: ConflictKind,
    /// What was found, e.g. `kernel.numa_balancing = 2 (memory tiering)`.
    pub detail: String,
    /// What turns it off, e.g. `sysctl kernel.numa_balancing=0`.
    pub remedy: String,
}
