//! Per-destination promotion rate limit: a token bucket of bytes, refilled continuously.
//!
//! The clock is injected so tests drive time by hand, deterministically.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::topology::NodeId;

/// A monotonic clock.
pub trait Clock: Send {
    fn now(&self) -> Duration;
}

/// The real monotonic clock, as time since it was created. Clones share the epoch, so every
/// user of one set of buckets must hold a clone of the same clock.
#[derive(Debug, Clone)]
pub struct MonotonicClock {
    start: Instant,
}

impl Default for MonotonicClock {
    fn default() -> Self {
        MonotonicClock {
            start: Instant::now(),
        }
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> Duration {
        self.start.elapsed()
    }
}

/// Bytes per second with a one-second burst, like the kernel's NUMA-balancing promotion limit
/// (a per-second window of `numa_balancing_promote_rate_limit_MBps`).
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate_bytes_per_s: u64,
    tokens: u64,
    /// Bytes taken beyond the burst by an item larger than it (a THP under a limit below
    /// 2 MiB/s), repaid by the refill before any token accrues: the long-run rate holds.
    debt: u64,
    last: Duration,
}

impl TokenBucket {
    /// Starts full.
    pub fn new(rate_bytes_per_s: u64, now: Duration) -> TokenBucket {
        TokenBucket {
            rate_bytes_per_s,
            tokens: rate_bytes_per_s,
            debt: 0,
            last: now,
        }
    }

    pub fn set_rate(&mut self, rate_bytes_per_s: u64) {
        self.rate_bytes_per_s = rate_bytes_per_s;
        self.tokens = self.tokens.min(rate_bytes_per_s);
    }

    fn refill(&mut self, now: Duration) {
        let elapsed = now.saturating_sub(self.last);
        let add = (u128::from(self.rate_bytes_per_s) * elapsed.as_nanos() / 1_000_000_000)
            .min(u128::from(u64::MAX)) as u64;
        if add > 0 {
            let repaid = add.min(self.debt);
            self.debt -= repaid;
            let tokens = self.tokens.saturating_add(add - repaid);
            self.tokens = tokens.min(self.rate_bytes_per_s);
            // Advance by the time the bytes took, not to `now`: the rounded-off fraction of a
            // byte is kept for the next refill, so a bucket refilled often still fills.
            let took_ns =
                u128::from(add) * 1_000_000_000 / u128::from(self.rate_bytes_per_s.max(1));
            self.last = if tokens >= self.rate_bytes_per_s {
                now
            } else {
                (self.last + Duration::from_nanos(took_ns as u64)).min(now)
            };
        }
    }

    /// Takes tokens for as many `unit`-byte items as it can, up to `wanted`; returns how many.
    /// An item larger than the burst passes alone when the bucket is full, and its excess is
    /// owed (see `debt`): otherwise a 2 MiB THP could never move under a 1 MiB/s limit.
    pub fn take_units(&mut self, now: Duration, unit: u64, wanted: usize) -> usize {
        self.refill(now);
        if unit > self.rate_bytes_per_s {
            if wanted == 0 || self.debt > 0 || self.tokens < self.rate_bytes_per_s {
                return 0;
            }
            self.debt = unit - self.tokens;
            self.tokens = 0;
            return 1;
        }
        let affordable = (self.tokens / unit.max(1)).min(wanted as u64) as usize;
        self.tokens -= affordable as u64 * unit;
        affordable
    }

    /// Returns tokens for items that were charged but not moved.
    pub fn refund(&mut self, bytes: u64) {
        let repaid = bytes.min(self.debt);
        self.debt -= repaid;
        self.tokens = self
            .tokens
            .saturating_add(bytes - repaid)
            .min(self.rate_bytes_per_s);
    }

    pub fn tokens(&self) -> u64 {
        self.tokens
    }
}

/// The token buckets of every destination node, shared by all migrators: the limit is per
/// destination, whichever lower-tier node the pages come from.
#[derive(Debug, Clone, Default)]
pub struct RateLimits(Arc<Mutex<HashMap<NodeId, TokenBucket>>>);

impl RateLimits {
    /// Takes budget for up to `wanted` items of `unit` bytes going to `to`; returns how many.
    pub fn take(&self, to: NodeId, now: Duration, rate: u64, unit: u64, wanted: usize) -> usize {
        self.0
            .lock()
            .entry(to)
            .or_insert_with(|| TokenBucket::new(rate, now))
            .take_units(now, unit, wanted)
    }

    pub fn refund(&self, to: NodeId, bytes: u64) {
        if let Some(bucket) = self.0.lock().get_mut(&to) {
            bucket.refund(bytes);
        }
    }

    pub fn set_rate(&self, rate: u64) {
        for bucket in self.0.lock().values_mut() {
            bucket.set_rate(rate);
        }
    }

    /// Tokens left for `to`, if it has a bucket yet.
    pub fn tokens(&self, to: NodeId) -> Option<u64> {
        self.0.lock().get(&to).map(TokenBucket::tokens)
    }
}

#[cfg(test)]
pub(crate) mod fake {
    //! A clock for tests of any module that takes a [`Clock`] (the migrator, the control
    //! plane's migrate request), beside the trait it implements like `movepages::fake`.

    use super::Clock;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    /// A clock the test moves by hand.
    #[derive(Clone, Default)]
    pub(crate) struct FakeClock(pub(crate) Arc<AtomicU64>);

    impl FakeClock {
        pub(crate) fn advance(&self, d: Duration) {
            self.0.fetch_add(d.as_nanos() as u64, Ordering::SeqCst);
        }
    }

    impl Clock for FakeClock {
        fn now(&self) -> Duration {
            Duration::from_nanos(self.0.load(Ordering::SeqCst))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::FakeClock;
    use super::*;

    #[test]
    fn bucket_starts_full_and_refills_at_the_rate() {
        let clock = FakeClock::default();
        let mut b = TokenBucket::new(10 * 4096, clock.now());
        assert_eq!(b.take_units(clock.now(), 4096, 25), 10);
        assert_eq!(b.take_units(clock.now(), 4096, 1), 0);
        clock.advance(Duration::from_millis(500));
        assert_eq!(b.take_units(clock.now(), 4096, 25), 5);
        // Never more than one second of burst.
        clock.advance(Duration::from_secs(60));
        assert_eq!(b.take_units(clock.now(), 4096, 25), 10);
    }

    #[test]
    fn refunds_return_tokens_up_to_the_burst() {
        let clock = FakeClock::default();
        let mut b = TokenBucket::new(8192, clock.now());
        assert_eq!(b.take_units(clock.now(), 4096, 2), 2);
        b.refund(4096);
        b.refund(1 << 20);
        assert_eq!(b.tokens(), 8192);
    }

    #[test]
    fn an_item_larger_than_the_burst_passes_when_full_and_is_repaid_at_the_rate() {
        // 1 MiB/s and 2 MiB items (THPs): one at t=0 leaves 1 MiB owed, repaid by t=1 s, and
        // the bucket is full again at t=2 s: 2 MiB per 2 s, the rate (worked by hand).
        let clock = FakeClock::default();
        let mut b = TokenBucket::new(1 << 20, clock.now());
        assert_eq!(b.take_units(clock.now(), 2 << 20, 3), 1);
        assert_eq!(b.take_units(clock.now(), 4096, 1), 0);
        clock.advance(Duration::from_secs(1));
        assert_eq!(b.tokens(), 0);
        assert_eq!(b.take_units(clock.now(), 2 << 20, 1), 0);
        clock.advance(Duration::from_millis(999));
        assert_eq!(b.take_units(clock.now(), 2 << 20, 1), 0);
        clock.advance(Duration::from_millis(1));
        assert_eq!(b.take_units(clock.now(), 2 << 20, 1), 1);
        // A refund of an item that did not move pays the debt first, then fills the bucket.
        b.refund(2 << 20);
        assert_eq!(b.tokens(), 1 << 20);
        assert_eq!(b.take_units(clock.now(), 4096, 1), 1);
    }

    #[test]
    fn small_steps_accumulate() {
        // 1000 B/s in 1 ms steps: rounding must not starve the bucket forever.
        let clock = FakeClock::default();
        let mut b = TokenBucket::new(1000, clock.now());
        assert_eq!(b.take_units(clock.now(), 1000, 1), 1);
        for _ in 0..999 {
            clock.advance(Duration::from_millis(1));
            assert_eq!(b.take_units(clock.now(), 1000, 1), 0);
        }
        clock.advance(Duration::from_millis(1));
        assert_eq!(b.take_units(clock.now(), 1000, 1), 1);
    }
}
