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

/// Opens the first usable source and logs what was passed over.
pub fn open(ctx: &OpenContext) -> Result<Box<dyn Source>, SourceError> {
    let mut passed_over = Vec::new();
    for spec in ORDER {
        let watches_processes = match spec {
            SourceSpec::Damon => !ctx.pids.is_empty(),
            SourceSpec::SoftDirty => !ctx.pids.is_empty() || ctx.followed_scope.is_some(),
            _ => true,
        };
        if !watches_processes {
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
