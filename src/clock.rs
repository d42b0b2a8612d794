//! The monotonic clock samples are stamped with.

use nix::time::{ClockId, clock_gettime};

/// CLOCK_MONOTONIC in nanoseconds, the clock of a sample's and a trace line's `time_ns`.
pub fn monotonic_ns() -> u64 {
    // CLOCK_MONOTONIC exists on every Linux (man 2 clock_gettime), so this cannot fail.
    let ts = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC is always available");
    (ts.tv_sec() as u64) * 1_000_000_000 + ts.tv_nsec() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_moves_forward_by_at_least_the_time_slept() {
        let a = monotonic_ns();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let b = monotonic_ns();
        assert!(b - a >= 5_000_000, "{a} -> {b}");
    }
}
