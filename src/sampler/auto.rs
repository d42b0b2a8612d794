//! `--source auto` (the default): the best source this machine has, and why not the others.
//!
//! Order: IBS, then PEBS (hardware samples: no faults, no scans), then DAMON and soft-dirty
//! (software sources that watch selected processes), then page faults (every kernel has them). Each
//! is really opened, so a PMU that exists but may not be used (permissions, a busy PMU) is
//! skipped with the reason the kernel gave.

use super::{OpenContext, Source, SourceError, SourceSpec};
use crate::sample::SourceKind;
use crate::sampler::SinkFactory;
use crate::stop::StopToken;

/// The candidates, best first.
const ORDER: [SourceSpec; 5] = [
    SourceSpec::Ibs,
    SourceSpec::Pebs,
    SourceSpec::Damon,
    SourceSpec::SoftDirty,
    SourceSpec::PageFault,
];

/// True for the sources that watch selected processes (explicit pids or a followed scope)
/// rather than the whole machine. DAMON comes before soft-dirty for both kinds of selection:
/// it reads accessed bits, so it sees a hot set that is only read, which soft-dirty (written
/// pages only) never sees; soft-dirty places a scattered written hot set page by page where
/// DAMON's regions take cold neighbours along (issue 19's measurements, BENCHMARKS.md), and
/// is the explicit choice there.
fn watches_processes(spec: &SourceSpec) -> bool {
    matches!(spec, SourceSpec::Damon | SourceSpec::SoftDirty)
}

/// Opens the first usable source and logs what was passed over.
pub fn open(ctx: &OpenContext) -> Result<Box<dyn Source>, SourceError> {
    let mut passed_over = Vec::new();
    for spec in ORDER {
        if watches_processes(&spec) && ctx.pids.is_empty() && ctx.followed_scope.is_none() {
            passed_over.push(format!(
                "{spec}: watches selected processes and none were selected"
            ));
            continue;
        }
        match spec.open(ctx) {
            Ok(inner) => {
                let why = if passed_over.is_empty() {
                    "the first choice".to_string()
                } else {
                    format!("not usable: {}", passed_over.join("; "))
                };
                tracing::info!("source auto chose {spec}; {why}");
                return Ok(Box::new(Chosen { inner, why }));
            }
            Err(e) => {
                let reason = e.to_string().replace('\n', " ");
                tracing::debug!("source auto: {spec} not usable: {reason}");
                passed_over.push(format!("{spec}: {reason}"));
            }
        }
    }
    Err(SourceError::NoneUsable(passed_over.join("\n  ")))
}

/// The chosen source, describing itself with why it was chosen.
struct Chosen {
    inner: Box<dyn Source>,
    why: String,
}

impl Source for Chosen {
    fn kind(&self) -> SourceKind {
        self.inner.kind()
    }

    fn describe(&self) -> String {
        format!("{} [auto; {}]", self.inner.describe(), self.why)
    }

    fn run(&mut self, sinks: &dyn SinkFactory, stop: &StopToken) -> Result<(), SourceError> {
        self.inner.run(sinks, stop)
    }
}
