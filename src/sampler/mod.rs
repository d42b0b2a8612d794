//! Sample sources: where access samples come from.
//!
//! Every source (IBS, PEBS, page faults, DAMON, soft-dirty, trace replay; `auto` picks the best
//! this machine has) turns what it reads into [`Sample`]s and hands them to a [`SampleSink`] on
//! its own thread. A source never looks at the hotness table or the migrators: it only produces
//! samples and counts what it could not parse. The sink (see `ingest`) does the filtering,
//! classification and recording inline, so there is no channel on the per-sample path.

pub mod adaptive;
mod auto;
pub mod damon;
pub mod datasrc;
pub mod hwplan;
pub mod hwsample;
pub mod ibs;
pub mod pace;
pub mod pagefault;
pub mod pebs;
pub mod perf;
pub mod perfdata;
pub mod pmu;
pub(crate) mod procpid;
pub mod softdirty;
pub mod trace;

pub use hwsample::{DropReason, HwSample};

use crate::sample::{Sample, SourceKind};
use crate::stats::Counter;
use crate::stop::StopToken;
use crate::topology::SysfsRoot;

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
    #[error("perf.data {path} {source}")]
    PerfData {
        path: String,
        source: Box<perfdata::PerfDataError>,
    },
    #[error("unknown source '{0}' (known: {KNOWN_SPECS})")]
    UnknownSpec(String),
    #[error(transparent)]
    Perf(#[from] perf::PerfError),
    // Boxed: these carry paths and names, and would make every Result of a source large.
    #[error(transparent)]
    Pmu(Box<pmu::PmuError>),
    #[error("ibs: {0}")]
    IbsEvent(Box<ibs::IbsEventError>),
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
    /// A `/proc` file the `procfs` crate read, wrote or parsed.
    #[error("{op} {path}: {source}")]
    Proc {
        op: &'static str,
        path: String,
        source: Box<procfs::ProcError>,
    },
    #[error("damon: {0}")]
    Damon(String),
}

impl From<pmu::PmuError> for SourceError {
    fn from(e: pmu::PmuError) -> Self {
        SourceError::Pmu(Box::new(e))
    }
}

impl From<ibs::IbsEventError> for SourceError {
    fn from(e: ibs::IbsEventError) -> Self {
        SourceError::IbsEvent(Box::new(e))
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
pub const KNOWN_SPECS: &str =
    "auto, ibs, pebs, pagefault, damon, softdirty, trace:PATH, perfdata:PATH";

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
    pub perf: perf::PerfConfig,
    pub pagefault: pagefault::PageFaultConfig,
    pub ibs: ibs::IbsConfig,
    /// Set with `ibs.period = "auto"`: the IBS samplers follow it (see `perf::adaptive_loop`).
    pub ibs_period_control: Option<perf::period::PeriodControl>,
    pub pebs: pebs::PebsConfig,
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
    /// `perfdata:PATH`: a file `perf record` wrote, replayed through the perf decoders.
    PerfData(String),
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
            Some(("perfdata", path)) if !path.is_empty() => {
                Ok(SourceSpec::PerfData(path.to_string()))
            }
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
            SourceSpec::PerfData(path) => Ok(Box::new(perfdata::PerfDataSource::open(path)?)),
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
            SourceSpec::PerfData(path) => write!(f, "perfdata:{path}"),
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

    use crate::sample::Sample;
    use crate::sampler::{SampleSink, SinkFactory};
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
