//! `pghot-workload`: a test workload with a known hot set, for measuring promotion.
//!
//! It maps a buffer, faults every page in on one node (the slow tier, in the QEMU rig), lifts
//! the binding, and then has worker threads access it in a [`pattern::Pattern`] whose hot set is
//! known exactly. While they run, the main thread asks the kernel every `--report-ms` where each
//! page is (move_pages(2) query mode on its own pid) and prints how much of the hot set sits on
//! fast (top-tier) nodes and how much cold memory does, then a `RESULT {json}` line with how long
//! the hot set took to reach 90% and 99% on fast nodes. With `--emit-samples` the workers also
//! write every N-th access as a pghot-trace v1 sample, so pghotd can be fed from a FIFO.
//!
//! Files: [`pattern`] (hot sets and access streams), [`placement`] (initial placement and the
//! per-page census), [`emit`] (the sample stream), [`report`] (output lines), [`mod@run`] (threads
//! and timeline), `sys` (the only `unsafe`: mmap, mbind, move_pages, clocks).

pub mod emit;
pub mod pattern;
pub mod placement;
pub mod report;
pub mod rng;
pub mod run;
mod sys;
pub mod threadtime;
pub mod zipf;

use std::path::PathBuf;
use std::time::Duration;

pub use pattern::Pattern;
/// CLOCK_MONOTONIC in ns: the trace's clock, also used by the software sources.
pub use pghotd::clock::monotonic_ns;
pub use report::RunResult;
pub use run::run;

use pghotd::topology::{NodeId, TopologyError};

const MIB: u64 = 1 << 20;
/// Accesses pick pages by a 32-bit multiply-shift (see `pattern`), so at most 2^32 pages.
const MAX_SIZE_MB: u64 = (1 << 32) * pattern::PAGE_SIZE as u64 / MIB;
pub const MAX_THREADS: usize = 1024;
/// Most places a `--shift-s` hot set takes in one run.
pub const MAX_HOT_SET_PLACES: usize = 100;

/// Everything a run needs; built by the binary from its flags, checked by [`Options::validate`].
#[derive(Debug, Clone)]
pub struct Options {
    pub pattern: Pattern,
    pub size_mb: u64,
    /// Hot-set size; ignored for `uniform`.
    pub hot_mb: u64,
    pub node: NodeId,
    pub duration: Duration,
    pub threads: usize,
    pub write_pct: u8,
    pub seed: u64,
    pub report_every: Duration,
    /// MADV_HUGEPAGE instead of MADV_NOHUGEPAGE.
    pub thp: bool,
    pub emit: Option<EmitOptions>,
    /// Move the hot set to a new place (a plan of the next seed) every this long; `None` keeps
    /// it where it is.
    pub shift: Option<Duration>,
    /// Where the topology is read from: `/sys`.
    pub sysfs_root: PathBuf,
}

#[derive(Debug, Clone)]
pub struct EmitOptions {
    pub path: PathBuf,
    /// One sample per this many accesses of each worker.
    pub period: u64,
}

impl Options {
    pub fn validate(&self) -> Result<(), WorkloadError> {
        let bad = |name: &'static str, value: String, allowed: String| {
            Err(WorkloadError::BadArg {
                name,
                value,
                allowed,
            })
        };
        if !(1..=MAX_SIZE_MB).contains(&self.size_mb) {
            return bad(
                "size-mb",
                self.size_mb.to_string(),
                format!("1..={MAX_SIZE_MB}"),
            );
        }
        if self.pattern.uses_hot_size() {
            if self.hot_mb == 0 {
                return bad("hot-mb", "0".into(), "at least 1".into());
            }
            if self.hot_mb > self.size_mb {
                return Err(WorkloadError::HotLargerThanSize {
                    hot_mb: self.hot_mb,
                    size_mb: self.size_mb,
                });
            }
            // Fewer regions than clusters would shrink the hot set below what was asked (and
            // the report, in whole MiB, to 0).
            if self.pattern == Pattern::HotClusters
                && self.hot_mb.saturating_mul(CLUSTERS_SPREAD) > self.size_mb
            {
                return Err(WorkloadError::ClustersDoNotFit {
                    hot_mb: self.hot_mb,
                    size_mb: self.size_mb,
                });
            }
            // Runs at random places need room to fall without overlapping (see run_pages).
            if self.pattern.run_pages().is_some()
                && self.hot_mb.saturating_mul(RUNS_SPREAD) > self.size_mb
            {
                return Err(WorkloadError::RunsDoNotFit {
                    pattern: self.pattern,
                    hot_mb: self.hot_mb,
                    size_mb: self.size_mb,
                });
            }
        }
        if !(1..=MAX_THREADS).contains(&self.threads) {
            return bad(
                "threads",
                self.threads.to_string(),
                format!("1..={MAX_THREADS}"),
            );
        }
        if self.write_pct > 100 {
            return bad("write-pct", self.write_pct.to_string(), "0..=100".into());
        }
        if self.duration.is_zero() {
            return bad(
                "duration",
                format!("{:?}", self.duration),
                "more than 0 seconds".into(),
            );
        }
        if self.report_every.is_zero() {
            return bad("report-ms", "0".into(), "at least 1".into());
        }
        if let Some(emit) = &self.emit
            && emit.period == 0
        {
            return bad("sample-period", "0".into(), "at least 1".into());
        }
        if let Some(shift) = self.shift {
            if shift.is_zero() {
                return bad("shift-s", "0".into(), "more than 0 seconds".into());
            }
            // Every place is planned before the run (a plan per place, each as large as the
            // buffer's page count), so their number is bounded.
            let places = (self.duration.as_secs_f64() / shift.as_secs_f64()).ceil();
            if places > MAX_HOT_SET_PLACES as f64 {
                return bad(
                    "shift-s",
                    shift.as_secs_f64().to_string(),
                    format!(
                        "at least --duration / {MAX_HOT_SET_PLACES} ({} s): the hot set takes \
                         at most {MAX_HOT_SET_PLACES} places in a run",
                        self.duration.as_secs_f64() / MAX_HOT_SET_PLACES as f64
                    ),
                );
            }
            // The chase's links are written into the buffer once, before the workers start.
            if !self.pattern.uses_hot_size() || self.pattern == Pattern::Chase {
                return bad(
                    "shift-s",
                    format!("{} with --pattern {}", shift.as_secs_f64(), self.pattern),
                    "used with a pattern whose hot set can move (not uniform or chase)".into(),
                );
            }
        }
        Ok(())
    }

    pub fn pages(&self) -> usize {
        (self.size_mb * MIB) as usize / pattern::PAGE_SIZE
    }

    /// Hot pages as asked (the plan makes it every page for `uniform`).
    pub fn hot_pages(&self) -> usize {
        (self.hot_mb * MIB) as usize / pattern::PAGE_SIZE
    }
}

/// `hot-clusters` spreads its hot set 32-fold: one 64 KiB cluster per 2 MiB region.
const CLUSTERS_SPREAD: u64 = 32;
/// The `runs-*` patterns keep their hot set to at most a quarter of the buffer.
const RUNS_SPREAD: u64 = 4;

#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error("--{name} {value}: must be {allowed}")]
    BadArg {
        name: &'static str,
        value: String,
        allowed: String,
    },
    #[error("--hot-mb {hot_mb} is larger than --size-mb {size_mb}")]
    HotLargerThanSize { hot_mb: u64, size_mb: u64 },
    #[error(
        "--pattern hot-clusters --hot-mb {hot_mb}: the hot set is one 64 KiB cluster per 2 MiB \
         region, so {hot_mb} MiB needs --size-mb {} or more (got {size_mb})",
        hot_mb * CLUSTERS_SPREAD
    )]
    ClustersDoNotFit { hot_mb: u64, size_mb: u64 },
    #[error(
        "--pattern {pattern} --hot-mb {hot_mb}: runs at random places keep the hot set to a \
         quarter of the buffer, so {hot_mb} MiB needs --size-mb {} or more (got {size_mb})",
        hot_mb * RUNS_SPREAD
    )]
    RunsDoNotFit {
        pattern: Pattern,
        hot_mb: u64,
        size_mb: u64,
    },
    #[error("reading the NUMA topology: {0}")]
    Topology(#[from] TopologyError),
    #[error("--node {node}: not a memory node of this machine (memory nodes: {available})")]
    NoSuchNode { node: NodeId, available: String },
    #[error("--size-mb {size_mb}: mapping {bytes} bytes: {source}")]
    Mmap {
        size_mb: u64,
        bytes: usize,
        source: std::io::Error,
    },
    #[error("madvise({}): {source}", if *.thp { "MADV_HUGEPAGE for --thp" } else { "MADV_NOHUGEPAGE" })]
    Madvise { thp: bool, source: std::io::Error },
    #[error("mbind(MPOL_BIND) to node {node}: {source}")]
    Bind {
        node: NodeId,
        source: std::io::Error,
    },
    #[error("mbind(MPOL_DEFAULT) to lift the binding: {source}")]
    Unbind { source: std::io::Error },
    #[error("move_pages query of the buffer: {source}")]
    Query { source: std::io::Error },
    #[error("opening --emit-samples {}: {source}", path.display())]
    EmitOpen {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("starting thread {name}: {source}")]
    Spawn {
        name: String,
        source: std::io::Error,
    },
    #[error("worker thread {0} panicked")]
    WorkerPanicked(usize),
    #[error("writing the report: {0}")]
    Output(std::io::Error),
}

/// Bad input (flags, or a node or path they name): exit 2.
pub const EXIT_USAGE: u8 = 2;
/// Anything else that went wrong: exit 1.
pub const EXIT_RUNTIME: u8 = 1;

impl WorkloadError {
    pub fn exit_code(&self) -> u8 {
        match self {
            WorkloadError::BadArg { .. }
            | WorkloadError::HotLargerThanSize { .. }
            | WorkloadError::ClustersDoNotFit { .. }
            | WorkloadError::RunsDoNotFit { .. }
            | WorkloadError::NoSuchNode { .. }
            | WorkloadError::Mmap { .. }
            | WorkloadError::Madvise { .. }
            | WorkloadError::Bind { .. }
            | WorkloadError::EmitOpen { .. } => EXIT_USAGE,
            WorkloadError::Topology(_)
            | WorkloadError::Unbind { .. }
            | WorkloadError::Query { .. }
            | WorkloadError::Spawn { .. }
            | WorkloadError::WorkerPanicked(_)
            | WorkloadError::Output(_) => EXIT_RUNTIME,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> Options {
        Options {
            pattern: Pattern::HotScattered,
            size_mb: 256,
            hot_mb: 32,
            node: 2,
            duration: Duration::from_secs(20),
            threads: 1,
            write_pct: 30,
            seed: 1,
            report_every: Duration::from_millis(250),
            thp: false,
            emit: None,
            shift: None,
            sysfs_root: PathBuf::from("/sys"),
        }
    }

    #[test]
    fn validation_names_the_value() {
        assert!(options().validate().is_ok());
        let err = Options {
            hot_mb: 300,
            ..options()
        }
        .validate()
        .unwrap_err();
        assert_eq!(err.to_string(), "--hot-mb 300 is larger than --size-mb 256");
        assert_eq!(err.exit_code(), EXIT_USAGE);
        let err = Options {
            threads: 0,
            ..options()
        }
        .validate()
        .unwrap_err();
        assert_eq!(err.to_string(), "--threads 0: must be 1..=1024");
        // uniform ignores --hot-mb
        let uniform = Options {
            pattern: Pattern::Uniform,
            hot_mb: 0,
            ..options()
        };
        assert!(uniform.validate().is_ok());
        assert_eq!(options().pages(), 65536);
        // hot-clusters: 2 MiB of clusters needs 64 MiB of regions.
        let clusters = |size_mb| Options {
            pattern: Pattern::HotClusters,
            size_mb,
            hot_mb: 2,
            ..options()
        };
        let err = clusters(63).validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "--pattern hot-clusters --hot-mb 2: the hot set is one 64 KiB cluster per 2 MiB \
             region, so 2 MiB needs --size-mb 64 or more (got 63)"
        );
        assert_eq!(err.exit_code(), EXIT_USAGE);
        let ok = clusters(64);
        ok.validate().unwrap();
        let plan = pattern::Plan::new(ok.pattern, ok.pages(), ok.hot_pages(), 0, 1);
        assert_eq!(
            plan.hot_count(),
            ok.hot_pages(),
            "the hot set is what was asked"
        );
        assert_eq!(options().hot_pages(), 8192);
        // runs-128k: 8 MiB of runs needs 32 MiB of buffer.
        let runs = |size_mb| Options {
            pattern: Pattern::Runs128k,
            size_mb,
            hot_mb: 8,
            ..options()
        };
        let err = runs(31).validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "--pattern runs-128k --hot-mb 8: runs at random places keep the hot set to a \
             quarter of the buffer, so 8 MiB needs --size-mb 32 or more (got 31)"
        );
        assert_eq!(err.exit_code(), EXIT_USAGE);
        let ok = runs(32);
        ok.validate().unwrap();
        let plan = pattern::Plan::new(ok.pattern, ok.pages(), ok.hot_pages(), 0, 1);
        assert_eq!(plan.hot_count(), ok.hot_pages(), "every run placed");
    }

    #[test]
    fn a_shift_needs_a_hot_set_that_can_move() {
        let shifting = |pattern, secs| Options {
            pattern,
            shift: Some(Duration::from_secs_f64(secs)),
            ..options()
        };
        shifting(Pattern::HotBlock, 10.0).validate().unwrap();
        let err = shifting(Pattern::Chase, 10.0).validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "--shift-s 10 with --pattern chase: must be used with a pattern whose hot set can \
             move (not uniform or chase)"
        );
        let err = shifting(Pattern::HotBlock, 0.0).validate().unwrap_err();
        assert_eq!(err.to_string(), "--shift-s 0: must be more than 0 seconds");
        // 20 s in steps of 0.2 s is 100 places, the most; 0.1 s would be 200.
        shifting(Pattern::HotBlock, 0.2).validate().unwrap();
        let err = shifting(Pattern::HotBlock, 0.1).validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "--shift-s 0.1: must be at least --duration / 100 (0.2 s): the hot set takes at \
             most 100 places in a run"
        );
    }
}
