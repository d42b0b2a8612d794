//! `--source pagefault`: the kernel's `page-faults` software event, with the faulting address,
//! through the same per-CPU perf sampler as IBS and PEBS.
//!
//! Every machine has it, so it is how the perf path is exercised where there is no PMU, and it
//! is a first-touch signal: a page that faults is a page a process is about to use. It says
//! nothing about loads versus stores or where data was served from; the page's node is found by
//! the ingest's batched move_pages query (the physical address the kernel would compute at fault
//! time is that of a page not mapped yet, so it is not asked for).

use perf_event_open_sys::bindings;

use super::hwsample::Notes;
use super::perf::record::{SampleFormat, SampleRecord};
use super::perf::{EventClass, EventSpec, Group, PerfPlan, SampleDecoder};
use crate::sample::{Sample, SourceKind};
use crate::stats::Counter;

/// Tunables of the page-fault source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageFaultConfig {
    /// One sample every `period` faults per CPU.
    pub period: u64,
}

impl Default for PageFaultConfig {
    fn default() -> Self {
        // Faults are rare next to memory accesses (one per page at first touch): take them all.
        Self { period: 1 }
    }
}

/// The page-fault plan: one software event per CPU, user-mode faults only.
pub fn plan(t: &PageFaultConfig) -> PerfPlan {
    let format = bindings::PERF_SAMPLE_TID
        | bindings::PERF_SAMPLE_TIME
        | bindings::PERF_SAMPLE_ADDR
        | bindings::PERF_SAMPLE_CPU;
    PerfPlan {
        kind: SourceKind::PageFault,
        classes: vec![EventClass {
            cpus: None,
            events: vec![EventSpec {
                name: "page-faults".into(),
                pmu_type: bindings::PERF_TYPE_SOFTWARE,
                config: u64::from(bindings::PERF_COUNT_SW_PAGE_FAULTS),
                config1: 0,
                config2: 0,
                period: t.period,
                precise_ip: 0,
                exclude_kernel: true,
                sampling: true,
                group: Group::Alone,
            }],
        }],
        format: SampleFormat::new(u64::from(format))
            .unwrap_or_else(|e| unreachable!("a fixed, supported format: {e}")),
        decoder: Box::new(PageFaultDecoder),
    }
}

struct PageFaultDecoder;

impl SampleDecoder for PageFaultDecoder {
    fn decode(
        &self,
        _rec: &SampleRecord<'_>,
        _event: usize,
        _out: &mut Sample,
        _notes: &mut Notes,
    ) -> Result<(), Counter> {
        // The generic fields are all a fault has: pid, tid, cpu, time and the address. The
        // ingest drops address 0 and kernel addresses with their own counters.
        Ok(())
    }
}
