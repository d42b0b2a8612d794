//! Sample sources: where access samples come from.
//!
//! Every source (trace replay, DAMON and soft-dirty now; IBS and PEBS later) turns what it reads into
//! [`Sample`]s and hands them to a [`SampleSink`] on its own thread. A source never looks at the
//! hotness table or the migrators: it only produces samples and counts what it could not parse.
//! The sink (see `hotness::ingest`) does the filtering, classification and recording inline, so
//! there is no channel on the per-sample path.

pub mod adaptive;
mod auto;
pub mod damon;
pub mod datasrc;
pub mod hwplan;
pub mod hwsample;
pub mod ibs;
pub mod pagefault;
pub mod pebs;
pub mod perf;
pub mod pmu;
pub(crate) mod procpid;
pub mod softdirty;
pub mod trace;

pub use hwsample::{DropReason, HwSample};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::stats::Counter;
use crate::topology::{NodeId, SysfsRoot};

/// Load or store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AccessOp {
    Load,
    Store,
}

/// Where the sampled access was served from, as the hardware reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataSource {
    L1,
    L2,
    L3,
    /// Another core's or socket's cache.
    PeerCache,
    LocalDram,
    RemoteDram,
    /// Extension memory: CXL or another slow tier.
    ExtMem,
    Unknown,
}

impl DataSource {
    /// Served from some cache: says nothing about which memory the page sits in.
    pub fn is_cache(self) -> bool {
        matches!(
            self,
            DataSource::L1 | DataSource::L2 | DataSource::L3 | DataSource::PeerCache
        )
    }
}

/// Which kind of source produced a sample; samples are counted per kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceKind {
    Trace,
    Ibs,
    Pebs,
    PageFault,
    Damon,
    SoftDirty,
}

impl SourceKind {
    pub const ALL: &'static [SourceKind] = &[
        SourceKind::Trace,
        SourceKind::Ibs,
        SourceKind::Pebs,
        SourceKind::PageFault,
        SourceKind::Damon,
        SourceKind::SoftDirty,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            SourceKind::Trace => "trace",
            SourceKind::Ibs => "ibs",
            SourceKind::Pebs => "pebs",
            SourceKind::PageFault => "pagefault",
            SourceKind::Damon => "damon",
            SourceKind::SoftDirty => "softdirty",
        }
    }
}

/// One memory access sample, whatever produced it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Sample time in nanoseconds; the hotness table's only clock.
    pub time_ns: u64,
    pub cpu: u32,
    pub pid: u32,
    pub tid: u32,
    /// Linear (virtual) address of the data access; 0 when the hardware gave none.
    pub vaddr: u64,
    pub paddr: Option<u64>,
    pub op: AccessOp,
    pub served_from: DataSource,
    /// The page's current NUMA node, when the source knows it.
    pub node: Option<NodeId>,
    /// Access latency in core cycles, when the hardware reports it.
    pub latency: Option<u32>,
    pub source: SourceKind,
}

impl Sample {
    /// An access known by its address alone: no physical address, data source, node or
    /// latency (software sources, emulated samples, a perf record before its decoder runs).
    #[inline]
    pub fn at_address(
        (time_ns, cpu): (u64, u32),
        (pid, tid): (u32, u32),
        vaddr: u64,
        op: AccessOp,
        source: SourceKind,
    ) -> Sample {
        Sample {
            time_ns,
            cpu,
            pid,
            tid,
            vaddr,
            paddr: None,
            op,
            served_from: DataSource::Unknown,
            node: None,
            latency: None,
            source,
        }
    }
}

/// Where a source delivers samples. One sink per source thread, so `&mut self` is free of locks.
pub trait SampleSink {
    fn record(&mut self, sample: &Sample);
    /// Records several samples in order. Sources that read in batches (the perf rings) call
    /// this, so that the sink can overlap the memory latency of consecutive samples.
    fn record_batch(&mut self, samples: &[Sample]) {
        for s in samples {
            self.record(s);
        }
    }
    /// Adds to a counter the source owns (lost records, malformed trace lines).
    fn count(&mut self, counter: Counter, n: u64);
    /// The source finished a pass (a scan, a snapshot): settle anything held back for a batch
    /// now rather than with the next pass's samples.
    fn end_batch(&mut self) {}
    /// How many events one of the samples that follow stands for (the perf sources' sampling
    /// period, which the adaptive controller may change); admission's bandwidth estimate uses
    /// it unless `admission.sample_period` is set.
    fn set_sample_period(&mut self, _period: u64) {}
}

/// Makes one sink per source thread: a per-CPU sampler runs one thread, and needs one sink, per
/// CPU. Sinks flush what they hold when dropped.
pub trait SinkFactory: Sync {
    fn sink(&self) -> Box<dyn SampleSink + Send>;
}

/// A stop request shared between the daemon and its worker threads.
#[derive(Debug, Clone, Default)]
pub struct StopToken(Arc<AtomicBool>);

impl StopToken {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn stop(&self) {
        self.0.store(true, Ordering::Release);
    }

    pub fn is_stopped(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// Errors a source can end with.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("opening trace {path}: {source}")]
    TraceOpen {
        path: String,
        source: std::io::Error,
    },
    #[error("reading trace {path}: {source}")]
    TraceRead {
        path: String,
        source: std::io::Error,
    },
    #[error("unknown source '{0}' (known: {KNOWN_SPECS})")]
    UnknownSpec(String),
    #[error(transparent)]
    Perf(#[from] perf::PerfError),
    // Boxed: these carry paths and names, and would make every Result of a source large.
    #[error(transparent)]
    Pmu(Box<pmu::PmuError>),
    #[error("ibs: {0}")]
    IbsConfig(Box<ibs::IbsConfigError>),
    #[error(transparent)]
    Pebs(Box<pebs::PebsError>),
    #[error("no sample source is usable here:\n  {0}")]
    NoneUsable(String),
    #[error("{name} watches processes, not the whole system: it needs {what}")]
    NeedsPids {
        name: &'static str,
        /// The selections it can work from.
        what: &'static str,
    },
    #[error("pid {pid} does not exist")]
    NoSuchPid { pid: u32 },
    #[error("{what} is not available in this kernel ({detail}); it needs {option}")]
    Unsupported {
        what: &'static str,
        detail: String,
        option: &'static str,
    },
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: String,
        source: std::io::Error,
    },
    #[error("damon: {0}")]
    Damon(String),
}

impl From<pmu::PmuError> for SourceError {
    fn from(e: pmu::PmuError) -> Self {
        SourceError::Pmu(Box::new(e))
    }
}

impl From<ibs::IbsConfigError> for SourceError {
    fn from(e: ibs::IbsConfigError) -> Self {
        SourceError::IbsConfig(Box::new(e))
    }
}

impl From<pebs::PebsError> for SourceError {
    fn from(e: pebs::PebsError) -> Self {
        SourceError::Pebs(Box::new(e))
    }
}

impl SourceError {
    /// The machine or kernel lacks what the source needs (a PMU, a kernel option): no setting
    /// will fix it here, unlike a bad path or value.
    pub fn is_unsupported(&self) -> bool {
        match self {
            SourceError::Unsupported { .. } | SourceError::NoneUsable(_) => true,
            SourceError::Pmu(e) => matches!(**e, pmu::PmuError::Missing { .. }),
            SourceError::Pebs(e) => {
                matches!(**e, pebs::PebsError::Pmu(pmu::PmuError::Missing { .. }))
            }
            _ => false,
        }
    }
}

/// Every `--source` spelling, for help and errors.
pub const KNOWN_SPECS: &str = "auto, ibs, pebs, pagefault, damon, softdirty, trace:PATH";

/// A sample producer. `run` blocks until the input ends or `stop` is raised.
pub trait Source: Send {
    fn kind(&self) -> SourceKind;
    /// Short description for logs and status (`trace:/tmp/x.trace`).
    fn describe(&self) -> String;
    /// Produces samples into sinks made by `sinks` (one per thread the source runs).
    fn run(&mut self, sinks: &dyn SinkFactory, stop: &StopToken) -> Result<(), SourceError>;
}

/// What a source may need to know when it opens: whom it serves and where the kernel's files are.
#[derive(Debug, Clone, Default)]
pub struct OpenContext {
    /// Managed pids; empty means every process in scope.
    pub pids: Vec<u32>,
    /// Prefix for `/sys` (tests point it at a fixture).
    pub sysfs_root: std::path::PathBuf,
    pub perf: perf::PerfSettings,
    pub pagefault: pagefault::PageFaultTunables,
    pub ibs: ibs::IbsTunables,
    /// Set with `ibs.period = "auto"`: the IBS samplers follow it (see `perf::adaptive_loop`).
    pub ibs_period_control: Option<perf::period::PeriodControl>,
    pub pebs: pebs::PebsTunables,
    /// Where state that must outlive a crash goes (DAMON's kdamond claim): `/run/pghotd`.
    pub run_dir: std::path::PathBuf,
    pub damon: damon::DamonConfig,
    pub softdirty: softdirty::SoftDirtyConfig,
    /// The daemon's scope when it follows cgroups or a command regex: the sources that watch
    /// processes (softdirty) re-read its members instead of a fixed pid list.
    pub followed_scope: Option<std::sync::Arc<crate::scope::Scope>>,
}

/// A parsed `--source` / `enabled_sources` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceSpec {
    /// `trace:PATH`; `-` is stdin.
    Trace(String),
    /// The best source this machine has (the default).
    Auto,
    /// AMD IBS op samples on every CPU.
    Ibs,
    /// Intel PEBS mem-loads/mem-stores samples on every CPU.
    Pebs,
    /// The `page-faults` software event on every CPU.
    PageFault,
    /// `damon`: DAMON region snapshots of the managed pids.
    Damon,
    /// `softdirty`: pages the managed pids wrote, from soft-dirty bits.
    SoftDirty,
}

impl SourceSpec {
    pub fn parse(spec: &str) -> Result<Self, SourceError> {
        match spec.split_once(':') {
            Some(("trace", path)) if !path.is_empty() => Ok(SourceSpec::Trace(path.to_string())),
            None if spec == "auto" => Ok(SourceSpec::Auto),
            None if spec == "ibs" => Ok(SourceSpec::Ibs),
            None if spec == "pebs" => Ok(SourceSpec::Pebs),
            None if spec == "pagefault" => Ok(SourceSpec::PageFault),
            None if spec == "damon" => Ok(SourceSpec::Damon),
            None if spec == "softdirty" => Ok(SourceSpec::SoftDirty),
            _ => Err(SourceError::UnknownSpec(spec.to_string())),
        }
    }

    /// Opens the source now, so a bad path fails at startup rather than in a thread.
    pub fn open(&self, ctx: &OpenContext) -> Result<Box<dyn Source>, SourceError> {
        match self {
            SourceSpec::Trace(path) => Ok(Box::new(trace::TraceSource::open(path)?)),
            SourceSpec::Auto => auto::open(ctx),
            SourceSpec::Ibs => {
                let root = SysfsRoot::new(&ctx.sysfs_root);
                let (plan, describe) = hwplan::ibs_plan(&root, &ctx.ibs)?;
                Ok(Box::new(perf::PerfSource::open(
                    plan, ctx.perf, root, describe,
                )?))
            }
            SourceSpec::Pebs => {
                let root = SysfsRoot::new(&ctx.sysfs_root);
                let (plan, describe) = hwplan::pebs_plan(&root, &ctx.pebs)?;
                Ok(Box::new(perf::PerfSource::open(
                    plan, ctx.perf, root, describe,
                )?))
            }
            SourceSpec::PageFault => Ok(Box::new(perf::PerfSource::open(
                pagefault::plan(&ctx.pagefault),
                ctx.perf,
                SysfsRoot::new(&ctx.sysfs_root),
                format!("pagefault (period {})", ctx.pagefault.period),
            )?)),
            SourceSpec::Damon => Ok(Box::new(damon::DamonSource::open(ctx)?)),
            SourceSpec::SoftDirty => Ok(Box::new(softdirty::SoftDirtySource::open(ctx)?)),
        }
    }
}

impl std::fmt::Display for SourceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SourceSpec::Trace(path) => write!(f, "trace:{path}"),
            SourceSpec::Auto => f.write_str("auto"),
            SourceSpec::Ibs => f.write_str("ibs"),
            SourceSpec::Pebs => f.write_str("pebs"),
            SourceSpec::PageFault => f.write_str("pagefault"),
            SourceSpec::Damon => f.write_str("damon"),
            SourceSpec::SoftDirty => f.write_str("softdirty"),
        }
    }
}

/// Test sinks that keep every sample and count, shared across the threads of a source.
#[cfg(test)]
pub(crate) mod collect {
    use std::sync::Arc;

    use parking_lot::Mutex;

    use super::{Sample, SampleSink, SinkFactory};
    use crate::stats::Counter;

    #[derive(Default)]
    pub(crate) struct Collected {
        pub samples: Vec<Sample>,
        pub counts: Vec<(Counter, u64)>,
        /// Sample periods the source announced, with how many samples came before each.
        pub periods: Vec<(usize, u64)>,
    }

    impl Collected {
        pub fn count_of(&self, counter: Counter) -> u64 {
            self.counts
                .iter()
                .filter(|(c, _)| *c == counter)
                .map(|(_, n)| n)
                .sum()
        }
    }

    /// A factory whose sinks all append to one shared `Collected`.
    #[derive(Clone, Default)]
    pub(crate) struct Collector {
        pub shared: Arc<Mutex<Collected>>,
        /// Keep only this process's samples (system-wide sources see every process).
        pub only_pid: Option<u32>,
    }

    impl Collector {
        pub fn this_process() -> Self {
            Self {
                only_pid: Some(std::process::id()),
                ..Self::default()
            }
        }

        pub fn take(&self) -> Collected {
            std::mem::take(&mut *self.shared.lock())
        }
    }

    impl SampleSink for Collector {
        fn record(&mut self, sample: &Sample) {
            if self.only_pid.is_none_or(|pid| pid == sample.pid) {
                self.shared.lock().samples.push(*sample);
            }
        }
        fn count(&mut self, counter: Counter, n: u64) {
            self.shared.lock().counts.push((counter, n));
        }
        fn set_sample_period(&mut self, period: u64) {
            let mut shared = self.shared.lock();
            let before = shared.samples.len();
            shared.periods.push((before, period));
        }
    }

    impl SinkFactory for Collector {
        fn sink(&self) -> Box<dyn SampleSink + Send> {
            Box::new(self.clone())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_spec_parses_trace_and_rejects_others() {
        assert_eq!(
            SourceSpec::parse("trace:-").ok(),
            Some(SourceSpec::Trace("-".into()))
        );
        assert!(SourceSpec::parse("trace:").is_err());
        let err = SourceSpec::parse("ibz").unwrap_err().to_string();
        assert!(err.contains("unknown source 'ibz'"), "{err}");
        assert!(err.contains(KNOWN_SPECS), "{err}");
    }

    #[test]
    fn source_spec_parses_the_software_sources() {
        for (text, spec) in [
            ("damon", SourceSpec::Damon),
            ("softdirty", SourceSpec::SoftDirty),
        ] {
            assert_eq!(SourceSpec::parse(text).ok(), Some(spec.clone()));
            assert_eq!(spec.to_string(), text);
        }
        assert!(SourceSpec::parse("damon:x").is_err());
    }
}
