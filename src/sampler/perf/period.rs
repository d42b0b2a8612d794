//! Live changes of the sampling period: the adaptive controller (`sampler::adaptive`) writes
//! the period it wants into a shared [`PeriodControl`]; each CPU's sampler thread compares it
//! once per drain with what it applied and, when it changed, applies it to its events with
//! PERF_EVENT_IOC_PERIOD (no reopen, no lost ring).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The period every CPU thread of a perf source should sample at.
#[derive(Debug, Clone)]
pub struct PeriodControl(Arc<AtomicU64>);

impl PeriodControl {
    pub fn new(period: u64) -> PeriodControl {
        PeriodControl(Arc::new(AtomicU64::new(period.max(1))))
    }

    /// Asks every CPU thread to switch to `period` (at least 1) at its next drain.
    pub fn set(&self, period: u64) {
        self.0.store(period.max(1), Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}
