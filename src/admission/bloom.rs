//! The dual blocked counting Bloom filter (TierBPF §5.1.3, after HybridTier): per-page read and
//! write counts in fixed memory, whatever the number of pages.
//!
//! Each filter is an array of 64-byte blocks of 64 saturating 8-bit counters. A key hashes to one
//! block and to [`HASHES`] counters in it, so a lookup touches one cache line. `get` is the
//! minimum of the key's counters; `update` increments only the counters at that minimum
//! (conservative update), which keeps over-counts small. Counters are halved every
//! `age_every` updates so counts follow the workload.
//!
//! Hand-rolled: the crates on crates.io are plain or counting Bloom filters without blocking,
//! conservative update or aging, which are what keep this at one cache line per sample.
//!
//! Shared by every recorder thread without a lock: counters are relaxed atomics updated with a
//! load and a store, so two threads updating the same counter at once may lose one increment.
//! The filter is an estimate either way.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

/// Counters per block: one 64-byte cache line of u8.
pub const BLOCK_COUNTERS: usize = 64;
/// Counters a key maps to within its block.
pub const HASHES: usize = 4;

#[repr(align(64))]
struct Block([AtomicU8; BLOCK_COUNTERS]);

/// One blocked counting Bloom filter.
pub struct BlockedCbf {
    blocks: Box<[Block]>,
    mask: u64,
    updates: AtomicU64,
    age_every: u64,
}

/// splitmix64's finalizer: a cheap full-avalanche mix of the page key.
#[inline]
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl BlockedCbf {
    /// A filter of at most `bytes` (rounded down to a power-of-two number of blocks, at least
    /// one), aged every `age_every` updates (0: never).
    pub fn new(bytes: usize, age_every: u64) -> Self {
        let blocks = (bytes / BLOCK_COUNTERS).max(1);
        let blocks = if blocks.is_power_of_two() {
            blocks
        } else {
            blocks.next_power_of_two() / 2
        };
        BlockedCbf {
            blocks: (0..blocks)
                .map(|_| Block(std::array::from_fn(|_| AtomicU8::new(0))))
                .collect(),
            mask: blocks as u64 - 1,
            updates: AtomicU64::new(0),
            age_every,
        }
    }

    pub fn bytes(&self) -> usize {
        self.blocks.len() * BLOCK_COUNTERS
    }

    pub fn block_count(&self) -> usize {
        self.blocks.len()
    }

    #[inline]
    fn slots(&self, key: u64) -> (&Block, [usize; HASHES]) {
        let h = mix(key);
        let block = &self.blocks[(h & self.mask) as usize];
        // The top 24 bits give four 6-bit counter indexes; the low bits chose the block.
        let pos = std::array::from_fn(|i| ((h >> (40 + 6 * i)) & 63) as usize);
        (block, pos)
    }

    /// The key's estimated count (never below its true count, unless aged or saturated).
    #[inline]
    pub fn get(&self, key: u64) -> u8 {
        let (block, pos) = self.slots(key);
        pos.iter()
            .map(|&p| block.0[p].load(Ordering::Relaxed))
            .min()
            .unwrap_or(0)
    }

    /// Counts one occurrence of the key (conservative update).
    #[inline]
    pub fn update(&self, key: u64) {
        let (block, pos) = self.slots(key);
        let min = pos
            .iter()
            .map(|&p| block.0[p].load(Ordering::Relaxed))
            .min()
            .unwrap_or(0);
        if min == u8::MAX {
            return;
        }
        for &p in &pos {
            if block.0[p].load(Ordering::Relaxed) == min {
                block.0[p].store(min + 1, Ordering::Relaxed);
            }
        }
    }

    /// Accounts `n` updates made since the last call and halves every counter when another
    /// `age_every` have passed. Called per recorder flush, not per update, so the update
    /// count is not a shared cache line per sample.
    pub fn note_updates(&self, n: u64) {
        if self.age_every == 0 || n == 0 {
            return;
        }
        let before = self.updates.fetch_add(n, Ordering::Relaxed);
        if before / self.age_every != (before + n) / self.age_every {
            self.halve();
        }
    }

    fn halve(&self) {
        for block in self.blocks.iter() {
            for c in &block.0 {
                c.store(c.load(Ordering::Relaxed) / 2, Ordering::Relaxed);
            }
        }
    }
}

/// The read and write filters, and a page's write ratio from them.
pub struct DualBcbf {
    pub reads: BlockedCbf,
    pub writes: BlockedCbf,
}

impl DualBcbf {
    /// Two filters of `bytes_each`, each aged after as many updates as it has counters.
    pub fn new(bytes_each: usize) -> Self {
        let age = |f: BlockedCbf| {
            let every = f.bytes() as u64;
            BlockedCbf {
                age_every: every,
                ..f
            }
        };
        DualBcbf {
            reads: age(BlockedCbf::new(bytes_each, 0)),
            writes: age(BlockedCbf::new(bytes_each, 0)),
        }
    }

    /// `w / (w + r)`, or `None` when the page was seen in neither filter.
    pub fn write_ratio(&self, key: u64) -> Option<f64> {
        let (r, w) = (self.reads.get(key), self.writes.get(key));
        let total = u32::from(r) + u32::from(w);
        (total > 0).then(|| f64::from(w) / f64::from(total))
    }
}

/// The false-positive rate the blocked filter should show with `keys` keys inserted into
/// `blocks` blocks: the chance that all [`HASHES`] counters of a key never inserted are
/// non-zero. Exact for uniform hashing: the keys per block are Binomial(keys, 1/blocks); with
/// `i` keys, `HASHES * i` draws with replacement set the block's counters (a Markov chain on the
/// number set), and a lookup's [`HASHES`] draws all hit set counters with `E[(s/64)^HASHES]`.
pub fn expected_false_positive_rate(keys: u64, blocks: u64) -> f64 {
    if blocks <= 1 {
        // Every key in the one block.
        let mut dist = vec![0.0f64; BLOCK_COUNTERS + 1];
        dist[0] = 1.0;
        for _ in 0..keys.saturating_mul(HASHES as u64).min(100_000) {
            dist = draw(&dist);
        }
        return lookup_hits(&dist);
    }
    let p_block = 1.0 / blocks as f64;
    let mean = keys as f64 * p_block;
    // Up to where the binomial's tail is negligible.
    let max_i = (mean + 12.0 * mean.sqrt() + 16.0).ceil() as usize;
    // dist[s]: probability that s counters are set after the draws so far.
    let mut dist = vec![0.0f64; BLOCK_COUNTERS + 1];
    dist[0] = 1.0;
    let mut fp = 0.0;
    // Binomial pmf in logs, so large key counts stay finite.
    let ln_binom = |i: usize| -> f64 {
        let (n, i) = (keys as f64, i as f64);
        ln_gamma(n + 1.0) - ln_gamma(i + 1.0) - ln_gamma(n - i + 1.0)
            + i * p_block.ln()
            + (n - i) * (-p_block).ln_1p()
    };
    for i in 0..=max_i.min(keys as usize) {
        fp += ln_binom(i).exp() * lookup_hits(&dist);
        for _ in 0..HASHES {
            dist = draw(&dist);
        }
    }
    fp
}

/// One more uniform draw of a counter: the distribution of how many are set, after.
fn draw(dist: &[f64]) -> Vec<f64> {
    let b = BLOCK_COUNTERS as f64;
    let mut next = vec![0.0f64; BLOCK_COUNTERS + 1];
    for (s, &p) in dist.iter().enumerate() {
        let new = (b - s as f64) / b;
        next[s] += p * (1.0 - new);
        if s < BLOCK_COUNTERS {
            next[s + 1] += p * new;
        }
    }
    next
}

/// The chance that a lookup's [`HASHES`] draws all hit set counters.
fn lookup_hits(dist: &[f64]) -> f64 {
    let b = BLOCK_COUNTERS as f64;
    dist.iter()
        .enumerate()
        .map(|(s, &p)| p * (s as f64 / b).powi(HASHES as i32))
        .sum()
}

/// Lanczos approximation of ln Gamma (g = 7, 9 terms), accurate to ~1e-13 for x > 0.
fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + G + 0.5;
    for (i, &c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// The textbook Bloom filter rate `(1 - e^(-k n / m))^k` for the same memory, unblocked: the
/// blocked filter pays a little over it for touching one cache line.
pub fn classic_false_positive_rate(keys: u64, counters: u64) -> f64 {
    let k = HASHES as f64;
    (1.0 - (-k * keys as f64 / counters as f64).exp()).powi(HASHES as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// splitmix64 stream for test keys.
    fn keys(seed: u64, n: usize) -> impl Iterator<Item = u64> {
        let mut x = seed;
        (0..n).map(move |_| {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            mix(x)
        })
    }

    #[test]
    fn counts_are_never_under_and_conservative_update_keeps_them_close() {
        let f = BlockedCbf::new(64 * 1024, 0);
        for (i, k) in keys(1, 2000).enumerate() {
            for _ in 0..(i % 7) {
                f.update(k);
            }
        }
        let mut over = 0;
        for (i, k) in keys(1, 2000).enumerate() {
            let got = f.get(k);
            assert!(got as usize >= i % 7, "key {i}: {got} < {}", i % 7);
            over += got as usize - i % 7;
        }
        // 2000 keys in 1024 blocks of 64: collisions are rare, so over-counts are too.
        assert!(over < 40, "total over-count {over}");
    }

    #[test]
    fn counters_saturate_and_age() {
        let f = BlockedCbf::new(64, 100);
        for _ in 0..300 {
            f.update(42);
        }
        assert_eq!(f.get(42), 255);
        f.note_updates(99);
        assert_eq!(f.get(42), 255);
        f.note_updates(1);
        assert_eq!(f.get(42), 127);
    }

    #[test]
    fn false_positive_rate_matches_the_blocked_formula() {
        // 1024 blocks (64 KiB), a load from light to heavy; 200k lookups of keys never
        // inserted per load.
        for keys_in in [2_000u64, 8_000, 16_000] {
            let f = BlockedCbf::new(64 * 1024, 0);
            for k in keys(7, keys_in as usize) {
                f.update(k);
            }
            let lookups = 200_000;
            let hits = keys(99, lookups).filter(|&k| f.get(k) > 0).count();
            let measured = hits as f64 / lookups as f64;
            let expected = expected_false_positive_rate(keys_in, f.block_count() as u64);
            let classic = classic_false_positive_rate(keys_in, f.bytes() as u64);
            // Binomial standard error of the measurement, plus 5 % for the hash.
            let sigma = (expected * (1.0 - expected) / lookups as f64).sqrt();
            assert!(
                (measured - expected).abs() <= 4.0 * sigma + 0.05 * expected,
                "{keys_in} keys: measured {measured:.5}, formula {expected:.5} (classic {classic:.5})"
            );
            assert!(expected >= classic, "blocking cannot beat the classic rate");
            eprintln!(
                "{keys_in} keys in {} blocks: measured {measured:.5}, blocked formula \
                 {expected:.5}, classic {classic:.5}",
                f.block_count()
            );
        }
    }

    #[test]
    fn the_formula_has_the_right_limits() {
        // Nothing inserted: no false positives; a saturated filter: all.
        assert_eq!(expected_false_positive_rate(0, 16), 0.0);
        assert!(expected_false_positive_rate(100_000, 1) > 0.999);
    }

    #[test]
    fn write_ratio_from_the_two_filters() {
        let d = DualBcbf::new(4096);
        assert_eq!(d.write_ratio(5), None);
        for _ in 0..3 {
            d.reads.update(5);
        }
        d.writes.update(5);
        assert_eq!(d.write_ratio(5), Some(0.25));
        assert_eq!(d.reads.age_every, 4096);
    }
}
