//! The workload's random numbers: SplitMix64, seeded, one generator per thread.
//!
//! Hand-rolled rather than the `rand` crate: the access loop draws one number per access and
//! must cost about a nanosecond next to a memory access of 100 ns or more, a run must replay
//! exactly from `--seed` on any build (rand's generators and their stream layouts change between
//! major versions), and SplitMix64 is one add and three multiply-xorshift steps with good
//! statistical quality (it passes BigCrush; Steele, Lea, Flood, "Fast splittable pseudorandom
//! number generators", OOPSLA 2014). Any seed, including 0, is fine.

/// SplitMix64 (the reference constants of `java.util.SplittableRandom`).
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// A generator for stream `index` of `seed` (worker threads, the hot-set choice), so
    /// streams do not overlap in practice and each depends only on (seed, index).
    pub fn stream(seed: u64, index: u64) -> Self {
        let mut mix = SplitMix64::new(seed ^ index.wrapping_mul(0xD1B5_4A32_D192_ED03));
        SplitMix64::new(mix.next_u64())
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`), by multiply-shift (Lemire): the bias is below n / 2^64.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Fisher-Yates shuffle.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_streams_differ() {
        let a: Vec<u64> = {
            let mut r = SplitMix64::stream(7, 1);
            (0..8).map(|_| r.next_u64()).collect()
        };
        let b: Vec<u64> = {
            let mut r = SplitMix64::stream(7, 1);
            (0..8).map(|_| r.next_u64()).collect()
        };
        let c: Vec<u64> = {
            let mut r = SplitMix64::stream(7, 2);
            (0..8).map(|_| r.next_u64()).collect()
        };
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn below_is_uniform() {
        let mut r = SplitMix64::new(0);
        let mut seen = [0u32; 10];
        for _ in 0..10_000 {
            seen[r.below(10) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 800 && n < 1200), "{seen:?}");
    }
}
