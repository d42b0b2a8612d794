//! How far any promoter that reads samples could have got at the plugin's sample rate: a
//! yardstick beside a promoter's hot-set share and over-promotion (issue 18's bars: >= 95 %
//! of the hot set on fast nodes with <= 10 % over-promotion).
//!
//! The plugin samples one in `interval` of a vCPU's user memory accesses (ibs-emu's state.rs
//! `reload`: a mean interval of `(period & !15) - 7.5`), so a page with `n` accesses in the
//! phase draws about Poisson(n / interval) samples. For a rule that decides each page from
//! its own samples, a threshold on their count is the best there is: the Poisson family has
//! a monotone likelihood ratio and every hot page's rate is at least every other page's, so
//! (Neyman-Pearson) promoting at the k-th sample, randomised between k and k + 1, finds the
//! most hot pages for a given number of other pages promoted. `reach` gives points of that
//! frontier for the phase as run and for longer phases with the same accesses per second.

use crate::truth::Contest;

/// Thresholds tried: enough for a page with `K_MAX` expected samples, far beyond the phases
/// the rig runs (its hottest boundary pages draw tens).
const K_MAX: usize = 256;

/// One point of the frontier per phase length.
#[derive(Debug, Clone, PartialEq)]
pub struct Reach {
    /// The phase's length as a multiple of the one measured.
    pub phase_x: u32,
    /// Promoting at the first sample (the rig's `freq_threshold` for the emulated IBS, as the
    /// pghot series' IBS runs).
    pub k1_hot_pct: f64,
    pub k1_over_pct: f64,
    /// Promoting at the second sample (pghotd's default `freq_threshold`), with no window.
    pub k2_hot_pct: f64,
    pub k2_over_pct: f64,
    /// The least over-promotion with 95 % of the hot set on fast nodes.
    pub over_pct_at_95: f64,
    /// The largest share of the hot set with at most 10 % over-promotion (None: not even
    /// at the K_MAX-th sample).
    pub hot_pct_at_10: Option<f64>,
}

/// Adds P(Poisson(lambda) >= k) to `into[k]` for every k (log space: e^-lambda underflows
/// for the hottest pages).
fn add_tails(lambda: f64, into: &mut [f64]) {
    if lambda <= 0.0 {
        into[0] += 1.0;
        return;
    }
    let ln_lambda = lambda.ln();
    let mut below = 0.0_f64; // P(X < k)
    let mut ln_term = -lambda; // ln P(X = k)
    for (k, slot) in into.iter_mut().enumerate() {
        let tail = (1.0 - below).max(0.0);
        if tail < 1e-12 {
            break;
        }
        *slot += tail;
        below += ln_term.exp();
        ln_term += ln_lambda - ((k + 1) as f64).ln();
    }
}

/// Expected hot pages on fast nodes and other pages promoted by the end of the phase, for a
/// promoter that moves a page at its k-th sample, k = 0..=K_MAX.
fn by_threshold(c: &Contest, samples_per_access: f64) -> (Vec<f64>, Vec<f64>) {
    let mut hot = vec![0.0; K_MAX + 1];
    let mut other = vec![0.0; K_MAX + 1];
    for &n in &c.hot {
        add_tails(n as f64 * samples_per_access, &mut hot);
    }
    for &n in &c.other {
        add_tails(n as f64 * samples_per_access, &mut other);
    }
    hot.iter_mut().for_each(|h| *h += c.hot_placed as f64);
    (hot, other)
}

/// The mix of rules k and k + 1 (weights `a`, `1 - a`) whose `lead` meets `target`, and the
/// `follow` that mix gives.
fn mixed(lead: (f64, f64), follow: (f64, f64), target: f64) -> f64 {
    if lead.0 == lead.1 {
        return follow.1;
    }
    let a = ((target - lead.1) / (lead.0 - lead.1)).clamp(0.0, 1.0);
    a * follow.0 + (1.0 - a) * follow.1
}

pub fn reach(c: &Contest, interval: f64, phase_x: u32) -> Reach {
    let total = (c.hot_placed + c.hot.len()) as f64;
    let (hot, other) = by_threshold(c, f64::from(phase_x) / interval);
    let pct = |x: f64| 100.0 * x / total.max(1.0);
    // hot[k] falls with k and hot[0] = total: the last k still holding 95 %.
    let target = 0.95 * total;
    let k = (0..K_MAX).take_while(|&k| hot[k + 1] >= target).count();
    let over_at_95 = if k == K_MAX {
        other[K_MAX]
    } else {
        mixed((hot[k], hot[k + 1]), (other[k], other[k + 1]), target)
    };
    let limit = 0.10 * total;
    let hot_at_10 = (0..=K_MAX).find(|&k| other[k] <= limit).map(|k| match k {
        0 => hot[0],
        k => mixed((other[k - 1], other[k]), (hot[k - 1], hot[k]), limit),
    });
    Reach {
        phase_x,
        k1_hot_pct: pct(hot[1]),
        k1_over_pct: pct(other[1]),
        k2_hot_pct: pct(hot[2]),
        k2_over_pct: pct(other[2]),
        over_pct_at_95: pct(over_at_95),
        hot_pct_at_10: hot_at_10.map(pct),
    }
}

/// The hot set's share on fast nodes after each of `rounds` equal rounds (index 0 the start)
/// for a promoter that moves a page the moment its first sample arrives: the most any
/// promoter that learns of a page from samples alone can have placed by then. A page's
/// accesses are taken to be spread evenly over the phase, so by the end of round r it has
/// drawn Poisson(n r / (rounds x interval)) samples.
pub fn first_sample_series(c: &Contest, interval: f64, rounds: usize) -> Vec<f64> {
    let total = (c.hot_placed + c.hot.len()) as f64;
    (0..=rounds)
        .map(|r| {
            let share = r as f64 / rounds.max(1) as f64 / interval;
            let sampled: f64 = c
                .hot
                .iter()
                .map(|&n| 1.0 - (-(n as f64) * share).exp())
                .sum();
            100.0 * (c.hot_placed as f64 + sampled) / total.max(1.0)
        })
        .collect()
}

/// The mean number of user accesses between two of the plugin's samples at `period`.
pub fn mean_interval(period: u64) -> f64 {
    ((period & !15) as f64 - 7.5).max(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn near(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-4, "{a} != {b}");
    }

    /// P(Poisson(2) >= 2) = 1 - e^-2 (1 + 2) = 0.593994; >= 0 is 1; and a rate so high that
    /// e^-lambda underflows still gives tails of 1 for small k.
    #[test]
    fn poisson_tails_by_hand() {
        let mut t = vec![0.0; 4];
        add_tails(2.0, &mut t);
        near(t[0], 1.0);
        near(t[1], 1.0 - (-2f64).exp());
        near(t[2], 0.593994);
        let mut t = vec![0.0; 4];
        add_tails(5000.0, &mut t);
        assert_eq!(t, vec![1.0; 4]);
        let mut t = vec![0.0; 4];
        add_tails(0.0, &mut t);
        assert_eq!(t, vec![1.0, 0.0, 0.0, 0.0]);
    }

    /// By hand, one sample per access (interval 1): one hot page with 3 accesses, one other
    /// with 1. Hot: P(>=k) = 1, 1 - e^-3 = 0.950213, 1 - 4e^-3 = 0.800852,
    /// 1 - 8.5e^-3 = 0.576810. Other: 1, 1 - e^-1 = 0.632121, 1 - 2e^-1 = 0.264241,
    /// 1 - 2.5e^-1 = 0.080301.
    /// 95 %: k = 1 holds it, k = 2 does not; a = (0.95 - 0.800852) / 0.149361 = 0.998574 of
    /// k = 1 gives over-promotion 0.998574 * 0.632121 + 0.001426 * 0.264241 = 63.16 %.
    /// 10 %: k = 3 is the first under (8.03 %); a = (0.1 - 0.080301) / 0.183940 = 0.107095
    /// of k = 2 gives 0.107095 * 0.800852 + 0.892905 * 0.576810 = 60.08 % of the hot set.
    #[test]
    fn the_frontier_by_hand() {
        let c = Contest {
            hot_placed: 0,
            hot: vec![3],
            other: vec![1],
        };
        let r = reach(&c, 1.0, 1);
        near(r.k2_hot_pct, 80.0852);
        near(r.k2_over_pct, 26.4241);
        assert!((r.over_pct_at_95 - 63.16).abs() < 0.01, "{r:?}");
        assert!((r.hot_pct_at_10.unwrap() - 60.08).abs() < 0.01, "{r:?}");
        // Twice the phase doubles every rate: the hot page's P(>= 2) = 1 - 7e^-6 = 0.982649.
        near(reach(&c, 1.0, 2).k2_hot_pct, 98.2649);
        // Half the interval is the same as twice the phase.
        assert_eq!(
            reach(&c, 0.5, 1),
            Reach {
                phase_x: 1,
                ..reach(&c, 1.0, 2)
            }
        );
    }

    /// A hot page already on a fast node counts as placed at every threshold; untouched
    /// pages are promoted only by the rule that moves everything (k = 0).
    #[test]
    fn placed_and_untouched_pages() {
        let c = Contest {
            hot_placed: 1,
            hot: vec![],
            other: vec![0, 0],
        };
        let r = reach(&c, 100.0, 1);
        assert_eq!((r.k2_hot_pct, r.k2_over_pct), (100.0, 0.0));
        assert_eq!(r.over_pct_at_95, 0.0);
        assert_eq!(r.hot_pct_at_10, Some(100.0));
    }

    /// By hand: one hot page placed, one with 3 accesses, interval 1, three rounds: by round r
    /// the second has drawn Poisson(r) samples, P(>= 1) = 1 - e^-r = 0.632121, 0.864665,
    /// 0.950213; the share is (1 + that) / 2. The k = 1 end point agrees with `reach`, whose
    /// over-promotion is the other page's 1 - e^-1 against the two-page hot set: 31.6061 %.
    #[test]
    fn first_sample_series_by_hand() {
        let c = Contest {
            hot_placed: 1,
            hot: vec![3],
            other: vec![1],
        };
        let s = first_sample_series(&c, 1.0, 3);
        assert_eq!(s.len(), 4);
        near(s[0], 50.0);
        near(s[1], 81.60605);
        near(s[2], 93.23325);
        near(s[3], 97.51065);
        let r = reach(&c, 1.0, 1);
        near(r.k1_hot_pct, s[3]);
        near(r.k1_over_pct, 31.60605);
    }

    /// period 200: (200 & !15) - 7.5 = 192 - 7.5 (state.rs `reload`'s mean).
    #[test]
    fn mean_interval_of_the_plugins_reload() {
        assert_eq!(mean_interval(200), 184.5);
        assert_eq!(mean_interval(16), 8.5);
    }
}
