//! Zipf-distributed ranks in constant time: Walker's alias method (Vose's construction).
//!
//! One draw is one random 64-bit number and one read of an 8-byte table entry. A first
//! version used rejection-inversion (Hörmann & Derflinger 1996), which needs no table but
//! several `exp`/`ln` per draw: about 60 ns natively, more than the DRAM access being measured,
//! and far worse under QEMU TCG, which emulates floating point in software. The table costs 8
//! bytes per page (2 MiB per GiB of buffer), mostly cache-resident, and only integer work per
//! draw.

use super::rng::SplitMix64;

/// Zipf(s) over ranks `0..n`: P(rank k) is proportional to (k + 1)^-s.
#[derive(Debug, Clone)]
pub struct Zipf {
    /// Per column: [accept threshold on 32 random bits, alias rank]. A full column aliases
    /// itself, so its threshold does not matter.
    table: Vec<[u32; 2]>,
    #[cfg(test)]
    exponent: f64,
}

impl Zipf {
    /// `1 <= n <= 2^32`, `exponent > 0`.
    pub fn new(n: usize, exponent: f64) -> Self {
        assert!(n >= 1 && n as u64 <= 1 << 32, "zipf over {n} ranks");
        let weights: Vec<f64> = (1..=n).map(|k| (k as f64).powf(-exponent)).collect();
        let total: f64 = weights.iter().sum();
        // Scaled so the average column holds exactly 1.
        let mut scaled: Vec<f64> = weights.iter().map(|w| w * n as f64 / total).collect();
        let mut table: Vec<[u32; 2]> = (0..n as u32).map(|i| [u32::MAX, i]).collect();
        let (mut small, mut large): (Vec<usize>, Vec<usize>) =
            (0..n).partition(|&i| scaled[i] < 1.0);
        while let (Some(s), Some(&l)) = (small.pop(), large.last()) {
            table[s] = [(scaled[s] * 4_294_967_296.0) as u32, l as u32];
            scaled[l] -= 1.0 - scaled[s];
            if scaled[l] < 1.0 {
                large.pop();
                small.push(l);
            }
        }
        // Whatever is left is full up to rounding: it keeps [MAX, itself].
        Zipf {
            table,
            #[cfg(test)]
            exponent,
        }
    }

    /// A rank in `0..n`; 0 is the most frequent.
    #[inline]
    pub fn sample(&self, rng: &mut SplitMix64) -> usize {
        let r = rng.next_u64();
        let column = (((r >> 32) * self.table.len() as u64) >> 32) as usize;
        let [threshold, alias] = self.table[column];
        if (r as u32) < threshold {
            column
        } else {
            alias as usize
        }
    }

    /// The exact probability of `rank` (O(n)).
    #[cfg(test)]
    pub fn probability(&self, rank: usize) -> f64 {
        let norm: f64 = (1..=self.table.len())
            .map(|k| (k as f64).powf(-self.exponent))
            .sum();
        ((rank + 1) as f64).powf(-self.exponent) / norm
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frequencies_match_the_zipf_law() {
        let zipf = Zipf::new(1000, 0.99);
        let mut rng = SplitMix64::new(3);
        let draws = 400_000;
        let mut counts = vec![0u32; 1000];
        for _ in 0..draws {
            counts[zipf.sample(&mut rng)] += 1;
        }
        for rank in [0, 1, 2, 9, 99, 999] {
            let want = zipf.probability(rank) * f64::from(draws);
            let got = f64::from(counts[rank]);
            let tolerance = 5.0 * want.sqrt() + 0.01 * want;
            assert!(
                (got - want).abs() < tolerance,
                "rank {rank}: got {got}, want {want:.0}"
            );
        }
        // Skew: the top 10% of ranks take far more than 10% of the draws.
        let top: u32 = counts[..100].iter().sum();
        let want: f64 = (0..100).map(|r| zipf.probability(r)).sum();
        let share = f64::from(top) / f64::from(draws);
        assert!(
            (share - want).abs() < 0.01,
            "top 10% share {share}, want {want}"
        );
        assert!(share > 0.6, "{share}");
    }

    #[test]
    fn table_columns_carry_the_exact_mass() {
        // Each rank's mass = its own column's kept share + what other columns alias to it.
        let n = 500;
        let zipf = Zipf::new(n, 0.99);
        let mut mass = vec![0.0f64; n];
        for (i, &[threshold, alias]) in zipf.table.iter().enumerate() {
            let keep = f64::from(threshold) / 4_294_967_296.0;
            mass[i] += keep / n as f64;
            mass[alias as usize] += (1.0 - keep) / n as f64;
        }
        for (rank, m) in mass.iter().enumerate() {
            let want = zipf.probability(rank);
            assert!((m - want).abs() < 1e-9, "rank {rank}: {m} vs {want}");
        }
    }

    #[test]
    fn single_rank_and_bounds() {
        let mut rng = SplitMix64::new(1);
        let one = Zipf::new(1, 0.99);
        assert!((0..100).all(|_| one.sample(&mut rng) == 0));
        let z = Zipf::new(7, 1.0);
        assert!((0..10_000).all(|_| z.sample(&mut rng) < 7));
    }
}
