//! What the workload prints: one progress line per `--report-ms`, and one `RESULT {json}` line
//! at the end.
//!
//! ```text
//! t=1.25 ns_per_access=123.4 hot_fast_pct=12.34 cold_fast_mb=0.0 accesses=12345678
//! RESULT {"pattern":"hot-scattered","size_mb":256,"hot_mb":32,...}
//! ```
//!
//! `t` is seconds since the access phase started; `ns_per_access` is over the interval since
//! the previous line, as thread time per access (interval x threads / accesses of all threads),
//! so it reads as the average access latency whatever `--threads` is; `accesses` is the running
//! total of all threads.

use std::fmt;

use serde::Serialize;

use super::emit::EmitStats;
use super::placement::TierShare;
use super::threadtime::WorkerTimes;

/// One progress line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tick {
    pub t_s: f64,
    pub ns_per_access: f64,
    pub share: TierShare,
    pub accesses: u64,
}

impl fmt::Display for Tick {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "t={:.2} ns_per_access={:.1} hot_fast_pct={:.2} cold_fast_mb={:.1} accesses={}",
            self.t_s,
            self.ns_per_access,
            self.share.hot_fast_pct,
            self.share.cold_fast_mb,
            self.accesses
        )
    }
}

/// Thread time per access: `inf` when nothing was accessed (which a float parser reads).
pub fn ns_per_access(elapsed_ns: f64, threads: usize, accesses: u64) -> f64 {
    if accesses == 0 {
        f64::INFINITY
    } else {
        elapsed_ns * threads as f64 / accesses as f64
    }
}

/// First report times at which the hot set reached 90% and 99% on fast nodes.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Milestones {
    pub to_90_s: Option<f64>,
    pub to_95_s: Option<f64>,
    pub to_99_s: Option<f64>,
}

impl Milestones {
    pub fn observe(&mut self, tick: &Tick) {
        self.observe_since(tick, 0.0);
    }

    /// As [`observe`](Self::observe), with times counted from `origin_s` (the last shift of a
    /// moving hot set).
    pub fn observe_since(&mut self, tick: &Tick, origin_s: f64) {
        let pct = tick.share.hot_fast_pct;
        let t = tick.t_s - origin_s;
        for (bar, slot) in [
            (90.0, &mut self.to_90_s),
            (95.0, &mut self.to_95_s),
            (99.0, &mut self.to_99_s),
        ] {
            if pct >= bar && slot.is_none() {
                *slot = Some(t);
            }
        }
    }
}

/// The `RESULT` line's object. Keys after `pid` are extras for the rig.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    pub pattern: String,
    pub size_mb: u64,
    /// Effective hot-set size: `size_mb` for `uniform`.
    pub hot_mb: u64,
    pub threads: usize,
    /// Measured length of the access phase.
    pub duration_s: f64,
    pub accesses: u64,
    /// Over the whole access phase; `null` if nothing was accessed.
    pub ns_per_access: Option<f64>,
    pub hot_fast_pct: f64,
    pub cold_fast_mb: f64,
    pub time_to_90_s: Option<f64>,
    pub time_to_95_s: Option<f64>,
    pub time_to_99_s: Option<f64>,
    /// Where the workers' time went (run, runqueue, blocked); `null` without schedstat.
    pub workers: Option<WorkerTimes>,
    pub initial_on_node_pct: f64,
    pub pid: u32,
    pub node: u16,
    pub hot_pages: usize,
    pub write_pct: u8,
    pub seed: u64,
    /// `--shift-s`, and how many times the hot set moved (time to 90/95/99 % counts from the
    /// last move).
    pub shift_s: Option<f64>,
    pub shifts: usize,
    #[serde(flatten)]
    pub emit: EmitStats,
}

impl RunResult {
    /// `RESULT {json}`, one line.
    pub fn line(&self) -> String {
        // A struct of numbers, strings and options always serializes.
        let json = serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
        format!("RESULT {json}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tick(t_s: f64, pct: f64) -> Tick {
        Tick {
            t_s,
            ns_per_access: 123.44,
            share: TierShare {
                hot_fast_pct: pct,
                cold_fast_mb: 0.0,
            },
            accesses: 12_345_678,
        }
    }

    #[test]
    fn tick_line_has_the_documented_shape() {
        assert_eq!(
            tick(1.25, 12.344).to_string(),
            "t=1.25 ns_per_access=123.4 hot_fast_pct=12.34 cold_fast_mb=0.0 accesses=12345678"
        );
    }

    #[test]
    fn milestones_keep_the_first_crossing() {
        let mut m = Milestones::default();
        for (t, pct) in [
            (0.25, 10.0),
            (0.5, 91.0),
            (0.75, 89.0),
            (1.0, 99.5),
            (1.25, 100.0),
        ] {
            m.observe(&tick(t, pct));
        }
        assert_eq!(m.to_90_s, Some(0.5));
        assert_eq!(m.to_99_s, Some(1.0));
        // After a shift at 10 s: counted from it.
        let mut m = Milestones::default();
        m.observe_since(&tick(10.25, 40.0), 10.0);
        m.observe_since(&tick(12.5, 99.0), 10.0);
        assert_eq!((m.to_90_s, m.to_99_s), (Some(2.5), Some(2.5)));
        assert_eq!(ns_per_access(1000.0, 2, 0), f64::INFINITY);
        assert_eq!(ns_per_access(1000.0, 2, 20), 100.0);
    }
}
