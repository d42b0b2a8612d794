//! How long a sampler leaves a stream of samples to gather before it drains it again.
//!
//! A stream that only trickles (a program the promoter can do little for, or an idle machine)
//! would otherwise wake its reader every [`FIRST`] for a handful of samples, on every CPU's
//! sampler thread. Each wake-up costs a context switch on a CPU the programs use, and nothing
//! is gained by draining sooner: a page sampled that rarely is not urgent. So the wait follows
//! the stream's own rate: the time it takes to bring about a page of samples ([`PAGE_BYTES`] of
//! trace lines, [`PAGE_OF_RECORDS`] perf records), between [`FIRST`] and [`LONGEST`]. A stream
//! that brings that much within [`FIRST`] is drained every [`FIRST`] as before; a perf ring
//! wakes its reader early anyway once it holds its wakeup watermark
//! (include/uapi/linux/perf_event.h `wakeup_watermark`), so a burst is never held back by a
//! long wait.

use std::time::Duration;

/// The shortest wait: the perf sampler's drain interval before this pace, and the most a
/// sample of a busy stream waits.
pub const FIRST: Duration = Duration::from_millis(100);
/// The longest wait: what a sample of a stream that barely moves may wait before pghotd sees
/// it. Far below the promotion window (`promote_window_ms`) and the heat half-life.
pub const LONGEST: Duration = Duration::from_secs(1);
/// What one drain of a byte stream should find: a page (about 60 trace lines).
pub const PAGE_BYTES: usize = 4096;
/// What one drain of a perf ring should find: about a page of IBS op or PEBS records (each
/// 100-150 bytes with the fields pghotd asks for).
pub const PAGE_OF_RECORDS: usize = 32;

/// The wait before the next drain of one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainPace {
    /// What a drain should find, in the stream's unit (bytes or records).
    enough: usize,
    next: Duration,
}

impl DrainPace {
    /// A pace that aims at `enough` units (bytes or records) a drain, starting at [`FIRST`].
    pub fn new(enough: usize) -> DrainPace {
        DrainPace {
            enough: enough.max(1),
            next: FIRST,
        }
    }

    /// How long to wait before the next drain.
    pub fn wait(&self) -> Duration {
        self.next
    }

    /// A drain found `got` units that had come in `over` (the time since the drain before
    /// it): the next wait is the time the stream takes to bring what a drain should find at
    /// that rate, within [`FIRST`] and [`LONGEST`]. An empty drain waits the longest.
    pub fn drained(&mut self, got: usize, over: Duration) {
        self.next = if got == 0 {
            LONGEST
        } else {
            // u128: a long `over` times `enough` does not overflow.
            let nanos = over.as_nanos() * self.enough as u128 / got as u128;
            Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX)).clamp(FIRST, LONGEST)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_wait_is_the_time_the_stream_takes_to_bring_a_page() {
        let mut pace = DrainPace::new(PAGE_BYTES);
        assert_eq!(pace.wait(), ms(100));
        // 1,024 bytes in 100 ms: 4,096 take 400 ms.
        pace.drained(1024, ms(100));
        assert_eq!(pace.wait(), ms(400));
        // 2,048 bytes in those 400 ms: 4,096 take 800 ms.
        pace.drained(2048, ms(400));
        assert_eq!(pace.wait(), ms(800));
        // 100 bytes in 800 ms: 4,096 would take 32.8 s; the wait stops at a second.
        pace.drained(100, ms(800));
        assert_eq!(pace.wait(), ms(1000));
        // Nothing at all: a second.
        pace.drained(0, ms(1000));
        assert_eq!(pace.wait(), ms(1000));
        // 40,960 bytes in that second: 4,096 took 100 ms, the shortest wait.
        pace.drained(40_960, ms(1000));
        assert_eq!(pace.wait(), ms(100));
        // A burst far above a page a tenth of a second: still 100 ms, never less.
        pace.drained(1 << 20, ms(100));
        assert_eq!(pace.wait(), ms(100));
        // 8,192 bytes in 1 s: 500 ms.
        pace.drained(8192, ms(1000));
        assert_eq!(pace.wait(), ms(500));
        // Counted in records: 8 records in 100 ms, 32 take 400 ms.
        let mut records = DrainPace::new(PAGE_OF_RECORDS);
        records.drained(8, ms(100));
        assert_eq!(records.wait(), ms(400));
    }

    #[test]
    fn a_drain_over_a_very_long_time_does_not_overflow() {
        let mut pace = DrainPace::new(PAGE_OF_RECORDS);
        pace.drained(1, Duration::MAX);
        assert_eq!(pace.wait(), LONGEST);
    }
}
