//! The split decision of TierBPF §5.2.1, on one 512-slot subpage histogram.
//!
//! 1. Flat check: normalized Shannon entropy `H = -sum(p log2 p) / log2 512`; `H >= flat`
//!    means no hot region to isolate: no split.
//! 2. Hot threshold: sort the counts descending, take the smallest K with the top K holding
//!    `coverage` of all samples; `T` is the K-th count; subpages with `c >= T` are hot.
//! 3. Size: the largest mTHP size (2 MiB .. 64 KiB) whose aligned subfolios include one with at
//!    least `density` of its subpages hot. 2 MiB means no split.
//! 4. Targets: at that size, the subfolios whose heat density reaches `density` (the migrator
//!    adds the one holding the sampled page).
//!
//! When no size down to 64 KiB reaches the density (hot subpages scattered one by one), the
//! smallest size is chosen: the paper leaves this case open, and 64 KiB moves the least cold
//! data while keeping some TLB reach; its targets are then only the sampled subfolios.

/// Subpages (4 KiB) in a 2 MiB PMD THP on x86_64.
pub const SUBPAGES: usize = 512;
/// Folio order of a PMD THP.
pub const PMD_ORDER: u8 = 9;
/// The smallest split target (64 KiB, order 4), as in the paper.
pub const MIN_SPLIT_ORDER: u8 = 4;

/// The three tunables of the decision, as fractions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SplitParams {
    /// Entropy at or above which the histogram is flat (paper: 0.95).
    pub flat_entropy: f64,
    /// Share of samples the hot subpages must hold (paper: P = 0.80).
    pub coverage: f64,
    /// Share of hot subpages a subfolio needs (paper: tau = 0.75).
    pub density: f64,
    /// Fewest samples a histogram needs before it is trusted.
    pub min_samples: u64,
}

impl Default for SplitParams {
    fn default() -> Self {
        SplitParams {
            flat_entropy: 0.95,
            coverage: 0.80,
            density: 0.75,
            min_samples: 64,
        }
    }
}

/// What the decision says for a process's THPs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SplitDecision {
    /// Too few samples to tell.
    FewSamples { samples: u64 },
    /// Flat: promote whole THPs.
    Flat { entropy: f64 },
    /// Split to `order` (PMD_ORDER: the whole 2 MiB reaches the density, no split).
    Split(SplitPlan),
}

/// A split to `order` and the subfolios worth promoting.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SplitPlan {
    pub order: u8,
    pub entropy: f64,
    /// The hot threshold T (samples).
    pub threshold: u32,
    pub hot_subpages: u16,
    /// Bit i: subpage i counts at least the threshold (the hot map of stage 2).
    pub hot: Subfolios,
    /// Bit j: subfolio j (of the `512 / 2^order` in a THP) reaches the heat density.
    pub hot_subfolios: Subfolios,
}

/// A set of subfolio (or subpage) indices within one THP: 512 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Subfolios([u64; SUBPAGES / 64]);

impl Subfolios {
    pub fn insert(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }

    pub fn contains(&self, i: usize) -> bool {
        self.0[i / 64] & (1 << (i % 64)) != 0
    }

    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        (0..SUBPAGES).filter(|&i| self.contains(i))
    }
}

impl SplitPlan {
    /// Subfolios of this plan in one THP.
    pub fn subfolio_count(&self) -> usize {
        SUBPAGES >> self.order
    }

    /// Subpages per subfolio.
    pub fn subfolio_pages(&self) -> usize {
        1 << self.order
    }

    /// Whether the plan actually splits (a 2 MiB plan does not).
    pub fn splits(&self) -> bool {
        self.order < PMD_ORDER
    }
}

/// Normalized Shannon entropy of the counts, in [0, 1]; 0 for an empty histogram.
pub fn normalized_entropy(counts: &[u32; SUBPAGES]) -> f64 {
    let total: u64 = counts.iter().map(|&c| u64::from(c)).sum();
    if total == 0 {
        return 0.0;
    }
    let total = total as f64;
    let h: f64 = counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = f64::from(c) / total;
            -p * p.log2()
        })
        .sum();
    h / (SUBPAGES as f64).log2()
}

/// The hot threshold T: the count of the K-th busiest subpage, K the smallest with the top K
/// holding `coverage` of the samples. 0 for an empty histogram.
pub fn coverage_threshold(counts: &[u32; SUBPAGES], coverage: f64) -> u32 {
    let mut sorted = *counts;
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    let total: u64 = sorted.iter().map(|&c| u64::from(c)).sum();
    if total == 0 {
        return 0;
    }
    // ceil so that coverage 0.8 of 10 samples needs 8, never 7.
    let need = (coverage.clamp(0.0, 1.0) * total as f64).ceil() as u64;
    let mut sum = 0u64;
    for &c in &sorted {
        sum += u64::from(c);
        if sum >= need {
            return c.max(1);
        }
    }
    sorted[SUBPAGES - 1].max(1)
}

/// Heat density of each aligned subfolio of `2^order` subpages: hot subpages / subpages.
pub fn heat_densities(hot: &Subfolios, order: u8) -> impl Iterator<Item = f64> + '_ {
    let len = 1usize << order;
    (0..SUBPAGES / len).map(move |j| {
        let n = (j * len..(j + 1) * len)
            .filter(|&i| hot.contains(i))
            .count();
        n as f64 / len as f64
    })
}

/// Runs the four stages on one histogram.
pub fn decide(counts: &[u32; SUBPAGES], params: &SplitParams) -> SplitDecision {
    let samples: u64 = counts.iter().map(|&c| u64::from(c)).sum();
    if samples < params.min_samples.max(1) {
        return SplitDecision::FewSamples { samples };
    }
    let entropy = normalized_entropy(counts);
    if entropy >= params.flat_entropy {
        return SplitDecision::Flat { entropy };
    }
    let threshold = coverage_threshold(counts, params.coverage);
    let mut hot = Subfolios::default();
    for (i, &c) in counts.iter().enumerate() {
        if c >= threshold {
            hot.insert(i);
        }
    }
    // Largest size first; a tiny epsilon so 0.75 of 16 (12 pages) counts as 0.75.
    let reaches = |d: f64| d + 1e-9 >= params.density;
    let order = (MIN_SPLIT_ORDER..=PMD_ORDER)
        .rev()
        .find(|&order| heat_densities(&hot, order).any(reaches))
        .unwrap_or(MIN_SPLIT_ORDER);
    let mut hot_subfolios = Subfolios::default();
    for (j, d) in heat_densities(&hot, order).enumerate() {
        if reaches(d) {
            hot_subfolios.insert(j);
        }
    }
    SplitDecision::Split(SplitPlan {
        order,
        entropy,
        threshold,
        hot_subpages: hot.len() as u16,
        hot,
        hot_subfolios,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(f: impl Fn(usize) -> u32) -> [u32; SUBPAGES] {
        std::array::from_fn(f)
    }

    fn plan(d: SplitDecision) -> SplitPlan {
        match d {
            SplitDecision::Split(p) => p,
            other => panic!("expected a split plan, got {other:?}"),
        }
    }

    #[test]
    fn entropy_is_one_for_uniform_zero_for_one_slot_and_log_of_support_between() {
        assert!((normalized_entropy(&hist(|_| 7)) - 1.0).abs() < 1e-12);
        assert_eq!(normalized_entropy(&hist(|i| u32::from(i == 3) * 100)), 0.0);
        assert_eq!(normalized_entropy(&[0; SUBPAGES]), 0.0);
        // Uniform over 16 of 512 slots: log2(16) / log2(512) = 4 / 9.
        let h = normalized_entropy(&hist(|i| u32::from(i < 16) * 5));
        assert!((h - 4.0 / 9.0).abs() < 1e-12, "{h}");
        // Two slots, p = 1/4 and 3/4: H = 0.811278 bits.
        let h = normalized_entropy(&hist(|i| [1, 3].get(i).copied().unwrap_or(0)));
        assert!((h * 9.0 - 0.811_278_124_459_132_8).abs() < 1e-9, "{h}");
    }

    #[test]
    fn coverage_threshold_is_the_count_of_the_kth_busiest_subpage() {
        // Counts 10, 9, ..., 1 on ten subpages: total 55, 80 % = 44; 10+9+8+7+6 = 40 < 44,
        // + 5 = 45 >= 44: K* = 6, T = 5.
        let h = hist(|i| if i < 10 { 10 - i as u32 } else { 0 });
        assert_eq!(coverage_threshold(&h, 0.8), 5);
        assert_eq!(coverage_threshold(&h, 1.0), 1);
        // 10 of 55 is 18 %: the top subpage alone.
        assert_eq!(coverage_threshold(&h, 0.18), 10);
        assert_eq!(coverage_threshold(&[0; SUBPAGES], 0.8), 0);
    }

    #[test]
    fn heat_density_counts_hot_subpages_per_aligned_subfolio() {
        let mut hot = Subfolios::default();
        for i in 16..28 {
            hot.insert(i); // 12 hot pages in the second 64 KiB subfolio
        }
        let d: Vec<f64> = heat_densities(&hot, 4).take(3).collect();
        assert_eq!(d, vec![0.0, 0.75, 0.0]);
        assert_eq!(heat_densities(&hot, 5).next(), Some(12.0 / 32.0));
        assert_eq!(heat_densities(&hot, 9).count(), 1);
    }

    #[test]
    fn a_64k_cluster_splits_to_64k_and_marks_only_its_subfolio() {
        // 16 subpages at 0x100000 (subpage 256) hot, the rest never sampled.
        let h = hist(|i| if (256..272).contains(&i) { 50 } else { 0 });
        let p = plan(decide(&h, &SplitParams::default()));
        assert_eq!(p.order, 4);
        assert_eq!(p.hot_subfolios.iter().collect::<Vec<_>>(), vec![16]);
        assert_eq!(p.hot_subpages, 16);
        assert!(p.splits());
    }

    #[test]
    fn a_128k_cluster_with_background_noise_splits_to_128k() {
        // 32 hot subpages at 64..96 with 200 samples each, every other subpage 1 sample: the
        // cluster holds 93 % of the samples, so the coverage threshold is its count.
        let h = hist(|i| if (64..96).contains(&i) { 200 } else { 1 });
        let p = plan(decide(&h, &SplitParams::default()));
        assert_eq!(p.order, 5);
        assert_eq!(p.hot_subfolios.iter().collect::<Vec<_>>(), vec![2]);
        // With 40 each the noise is 27 % of the samples: reaching 80 % takes noise subpages
        // too, the threshold falls to 1, every subpage is hot and the THP stays whole.
        let h = hist(|i| if (64..96).contains(&i) { 40 } else { 1 });
        let p = plan(decide(&h, &SplitParams::default()));
        assert_eq!((p.threshold, p.order), (1, 9));
    }

    #[test]
    fn a_flat_histogram_is_not_split() {
        let h = hist(|i| 20 + (i % 3) as u32);
        match decide(&h, &SplitParams::default()) {
            SplitDecision::Flat { entropy } => assert!(entropy > 0.99),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_dense_half_keeps_1m_and_dense_whole_keeps_2m() {
        // The first 1 MiB hot, the rest cold but sampled a little: entropy below 0.95.
        let h = hist(|i| if i < 256 { 100 } else { 1 });
        let p = plan(decide(&h, &SplitParams::default()));
        assert_eq!(
            (p.order, p.hot_subfolios.iter().collect::<Vec<_>>()),
            (8, vec![0])
        );
        // Lower the flat bar so a nearly even histogram is still analysed: 2 MiB, no split.
        let h = hist(|i| 10 + u32::from(i % 8 == 0));
        let params = SplitParams {
            flat_entropy: 1.0,
            ..SplitParams::default()
        };
        assert!(!plan(decide(&h, &params)).splits());
    }

    #[test]
    fn scattered_single_hot_subpages_fall_to_the_smallest_size_with_no_hot_subfolio() {
        let h = hist(|i| if i % 64 == 0 { 100 } else { 0 });
        let p = plan(decide(&h, &SplitParams::default()));
        assert_eq!(p.order, MIN_SPLIT_ORDER);
        assert!(p.hot_subfolios.is_empty());
    }

    /// Draws `n` samples from a shape (relative weight per subpage) like a sampler would:
    /// multinomial, with a splitmix64 stream.
    fn sampled(weights: impl Fn(usize) -> f64, n: usize, seed: u64) -> [u32; SUBPAGES] {
        let w: Vec<f64> = (0..SUBPAGES).map(&weights).collect();
        let total: f64 = w.iter().sum();
        let mut cdf = Vec::with_capacity(SUBPAGES);
        let mut acc = 0.0;
        for x in &w {
            acc += x / total;
            cdf.push(acc);
        }
        let mut counts = [0u32; SUBPAGES];
        let mut x = seed;
        for _ in 0..n {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            let u = (z ^ (z >> 31)) as f64 / u64::MAX as f64;
            let i = cdf.partition_point(|&c| c < u).min(SUBPAGES - 1);
            counts[i] += 1;
        }
        counts
    }

    /// The paper's Table 4 in kind: skewed workloads (Figure 1's graph and database shapes)
    /// split to 64-256 KiB (bfs-web, with a wider hot region, to 512 KiB), flat ones (NPB's
    /// array sweeps) do not split. Shapes: hot regions with 95 % of the accesses, the rest
    /// spread over the THP; 20 000 samples each.
    #[test]
    fn figure_1_shaped_histograms_split_like_table_4() {
        let region = |lo: usize, hi: usize, skew: bool| {
            move |i: usize| {
                let hot = (lo..hi).contains(&i);
                let base = if hot {
                    0.95 / (hi - lo) as f64
                } else {
                    0.05 / 512.0
                };
                // Inside the region a power-law falloff, as with high-degree vertices.
                if hot && skew {
                    base * 2.0 / (1.0 + (i - lo) as f64 / (hi - lo) as f64)
                } else {
                    base
                }
            }
        };
        type Shape = Box<dyn Fn(usize) -> f64>;
        let cases: [(&str, Shape, Option<u8>); 6] = [
            (
                "cc-twitter (one 64K hot cluster)",
                Box::new(region(320, 336, false)),
                Some(4),
            ),
            (
                "cc-web (128K hot run)",
                Box::new(region(64, 96, false)),
                Some(5),
            ),
            (
                "bc-twitter (256K, skewed)",
                Box::new(region(128, 192, true)),
                Some(6),
            ),
            ("bfs-web (512K)", Box::new(region(256, 384, false)), Some(7)),
            ("NPB array sweep (flat)", Box::new(|_| 1.0), None),
            (
                "silo-ycsb (two 64K records)",
                Box::new(|i: usize| {
                    if (16..32).contains(&i) || (400..416).contains(&i) {
                        1.0
                    } else {
                        0.003
                    }
                }),
                Some(4),
            ),
        ];
        for (name, shape, want) in cases {
            let h = sampled(shape, 20_000, 42);
            let got = match decide(&h, &SplitParams::default()) {
                SplitDecision::Split(p) => Some(p.order),
                SplitDecision::Flat { .. } => None,
                other => panic!("{name}: {other:?}"),
            };
            assert_eq!(got, want, "{name}: entropy {:.3}", normalized_entropy(&h));
        }
    }

    #[test]
    fn few_samples_are_not_trusted() {
        let h = hist(|i| u32::from(i < 10));
        assert_eq!(
            decide(&h, &SplitParams::default()),
            SplitDecision::FewSamples { samples: 10 }
        );
    }

    #[test]
    fn the_density_tunable_moves_the_size() {
        // 24 hot subpages at 0..24: at tau 0.75 the 128 KiB subfolio 0..32 does not reach
        // (0.75 exactly: it does), at tau 0.8 only 64 KiB does.
        let h = hist(|i| if i < 24 { 30 } else { 0 });
        let p = plan(decide(&h, &SplitParams::default()));
        assert_eq!(p.order, 5);
        let strict = SplitParams {
            density: 0.8,
            ..SplitParams::default()
        };
        assert_eq!(plan(decide(&h, &strict)).order, 4);
    }
}
