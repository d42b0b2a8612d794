//! Slow-tier traffic from the samples: bandwidth (for contention-aware splitting, TierBPF §3.2)
//! and direction (for duplex-aware admission, §5.3), per lower-tier node.
//!
//! Bandwidth is estimated as `samples/s x sample_period x 64 B`: each sample stands for
//! `sample_period` accesses of one cache line. Recorders add their per-node load and store
//! counts once per flush (every 1024 samples or 100 ms of sample time), never per sample; a
//! window closes after one second of sample time and publishes its figures in atomics the
//! migrators read.
//!
//! Uncore CXL counters would be better where the kernel exposes them; pghotd does not read
//! them yet (see the issue), so the estimate is only as good as `sample_period`.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use parking_lot::Mutex;

/// Bytes one sampled access stands for (a cache line).
pub const LINE_BYTES: u64 = 64;
/// Sample time a window covers.
pub const WINDOW_NS: u64 = 1_000_000_000;
/// Fewest samples a window needs before its direction is trusted.
pub const MIN_DIRECTION_SAMPLES: u64 = 64;

pub use pghot_protocol::views::Direction;

fn direction_from_u8(v: u8) -> Direction {
    match v {
        1 => Direction::ReadDominant,
        2 => Direction::WriteDominant,
        _ => Direction::Balanced,
    }
}

fn direction_to_u8(d: Direction) -> u8 {
    match d {
        Direction::Balanced => 0,
        Direction::ReadDominant => 1,
        Direction::WriteDominant => 2,
    }
}

/// The direction of `loads` and `stores` when one side has at least `dominant` of them.
pub fn direction_of(loads: u64, stores: u64, dominant: f64) -> Direction {
    let total = loads + stores;
    if total < MIN_DIRECTION_SAMPLES {
        return Direction::Balanced;
    }
    if loads as f64 >= dominant * total as f64 {
        Direction::ReadDominant
    } else if stores as f64 >= dominant * total as f64 {
        Direction::WriteDominant
    } else {
        Direction::Balanced
    }
}

#[derive(Debug, Default)]
struct Window {
    start_ns: u64,
    end_ns: u64,
    loads: u64,
    stores: u64,
}

/// One lower-tier node's meter.
#[derive(Debug, Default)]
pub struct NodeTraffic {
    window: Mutex<Window>,
    /// Estimated bandwidth of the last closed window, bytes/s.
    bytes_per_s: AtomicU64,
    direction: AtomicU8,
    windows: AtomicU64,
}

/// What the migrators and the control plane read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrafficReading {
    pub mb_per_s: f64,
    pub direction: Direction,
    /// Windows closed so far (0: no estimate yet).
    pub windows: u64,
}

impl NodeTraffic {
    /// Adds a recorder's counts of samples taken from `from_ns` to `to_ns` (sample time);
    /// closes the window after one second.
    pub fn add(
        &self,
        loads: u64,
        stores: u64,
        (from_ns, to_ns): (u64, u64),
        period: u64,
        dominant: f64,
    ) {
        let mut w = self.window.lock();
        if w.start_ns == 0 {
            w.start_ns = from_ns;
        }
        w.end_ns = w.end_ns.max(to_ns);
        w.loads += loads;
        w.stores += stores;
        let span = w.end_ns.saturating_sub(w.start_ns);
        if span >= WINDOW_NS {
            let samples = w.loads + w.stores;
            let bytes = samples as f64 * period as f64 * LINE_BYTES as f64;
            let per_s = bytes / (span as f64 / 1e9);
            self.bytes_per_s.store(per_s as u64, Ordering::Relaxed);
            self.direction.store(
                direction_to_u8(direction_of(w.loads, w.stores, dominant)),
                Ordering::Relaxed,
            );
            self.windows.fetch_add(1, Ordering::Relaxed);
            *w = Window {
                start_ns: w.end_ns,
                end_ns: w.end_ns,
                ..Window::default()
            };
        }
    }

    pub fn reading(&self) -> TrafficReading {
        TrafficReading {
            mb_per_s: self.bytes_per_s.load(Ordering::Relaxed) as f64 / (1 << 20) as f64,
            direction: direction_from_u8(self.direction.load(Ordering::Relaxed)),
            windows: self.windows.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_is_samples_times_period_times_a_line() {
        let t = NodeTraffic::default();
        // 8192 samples over 1 s at period 100: 8192 * 100 * 64 B = 50 MiB/s.
        t.add(2048, 2048, (1_000, 500_000_000), 100, 0.7);
        assert_eq!(t.reading().windows, 0, "the window is still open");
        t.add(2048, 2048, (500_001_000, 1_000_001_000), 100, 0.7);
        let r = t.reading();
        assert_eq!(r.windows, 1);
        assert!((r.mb_per_s - 50.0).abs() < 0.01, "{r:?}");
        assert_eq!(r.direction, Direction::Balanced);
    }

    #[test]
    fn direction_needs_a_dominant_share_and_enough_samples() {
        assert_eq!(direction_of(80, 20, 0.7), Direction::ReadDominant);
        assert_eq!(direction_of(20, 80, 0.7), Direction::WriteDominant);
        assert_eq!(direction_of(60, 40, 0.7), Direction::Balanced);
        assert_eq!(direction_of(10, 0, 0.7), Direction::Balanced);
        let t = NodeTraffic::default();
        t.add(900, 100, (1, 1 + WINDOW_NS), 1, 0.7);
        assert_eq!(t.reading().direction, Direction::ReadDominant);
    }
}
