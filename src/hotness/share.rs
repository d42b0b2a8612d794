//! Stopping where the hot set ends: `hot_share_pct`.
//!
//! The threshold rule (`freq_threshold` samples, each within the window of the last) promotes
//! every page that ever takes that many samples close enough together. Where the window is
//! wide (the per-page horizon of [`window`](super::window) reaches minutes when a few hot pages
//! share the samples with many cold ones), that is nearly every page sampled that often at
//! all, and the longer a program runs the more of its warm pages get there: on Redis in the
//! rig's Debian guest, threshold 3 promoted 38-42 % more pages than the hot set in 12 rounds
//! and 94 % more in 24 (BENCHMARKS.md, issue 18). A rule that compares pages with each other
//! instead stops once the hot pages are placed.
//!
//! So a page can also be required to be among the hottest pages that together hold
//! `hot_share_pct` of the heat of every tracked page, those still on a lower tier and those
//! already promoted (their top-tier samples keep their heat, so placing the hot set does not
//! lower the bar for what is left). The heat is the table's decayed sample count, so with a
//! half-life that spans several samples of a hot page (`heat_halflife_ms`) it ranks pages by
//! their recent sample rate. Memtis (SOSP '23) draws its hot threshold from a histogram of
//! page access counts in the same way, sized to the fast tier's capacity rather than to a
//! share of the accesses.
//!
//! The floor is recomputed once per [`SPAN_NS`](super::window::SPAN_NS) of sample time from a
//! histogram of the tracked pages' heat: 8 buckets per octave, so the floor is the lower
//! bound of the bucket where the hottest pages' heat reaches the share, which admits up to
//! one bucket's pages (heats within 9 % of each other) more than the exact share.

/// Heats below this each have their own bucket.
const EXACT: u32 = 16;

/// Buckets: 16 exact, then 8 per octave from 2^4 to 2^31.
const BUCKETS: usize = 240;

/// Heat mass of the tracked pages, by heat.
#[derive(Debug, Clone)]
pub struct HeatHistogram {
    mass: [u128; BUCKETS],
}

impl Default for HeatHistogram {
    fn default() -> Self {
        HeatHistogram { mass: [0; BUCKETS] }
    }
}

/// The bucket of `heat`: itself below 16, else 8 per octave.
fn bucket(heat: u32) -> usize {
    if heat < EXACT {
        return heat as usize;
    }
    let msb = 31 - heat.leading_zeros();
    let top4 = heat >> (msb - 3);
    (8 * (msb - 3) + top4) as usize
}

/// The smallest heat in bucket `index`.
fn lower_bound(index: usize) -> u32 {
    if index < EXACT as usize {
        return index as u32;
    }
    let msb = index / 8 + 2;
    let top4 = (index % 8 + 8) as u32;
    top4 << (msb - 3)
}

impl HeatHistogram {
    /// Adds one page of heat `heat` (fixed point, as the table keeps it).
    pub fn add(&mut self, heat: u32) {
        self.mass[bucket(heat)] += u128::from(heat);
    }

    /// The lowest heat among the hottest pages that together hold `share_pct` of all the heat
    /// (to a bucket's precision); 0 when the share is 0 or 100 or more (no floor), `u32::MAX`
    /// when there is no heat to rank (no page can be shown to be among the hottest yet).
    pub fn floor_of_share(&self, share_pct: u32) -> u32 {
        if share_pct == 0 || share_pct >= 100 {
            return 0;
        }
        let total: u128 = self.mass.iter().sum();
        if total == 0 {
            return u32::MAX;
        }
        let target = total * u128::from(share_pct) / 100;
        let mut held = 0u128;
        for index in (0..BUCKETS).rev() {
            held += self.mass[index];
            if held >= target && self.mass[index] > 0 {
                return lower_bound(index);
            }
        }
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_exact_below_16_then_eight_per_octave() {
        for h in 0..16 {
            assert_eq!(bucket(h), h as usize);
            assert_eq!(lower_bound(h as usize), h);
        }
        // 16..32 is the octave 2^4: eight buckets two wide.
        assert_eq!(bucket(16), 16);
        assert_eq!(bucket(17), 16);
        assert_eq!(bucket(18), 17);
        assert_eq!(bucket(31), 23);
        assert_eq!(bucket(32), 24);
        // 2^31 .. 2^32 - 1: the last octave, the last bucket starting at 15 * 2^28.
        assert_eq!(bucket(u32::MAX), BUCKETS - 1);
        assert_eq!(lower_bound(BUCKETS - 1), 15 << 28);
        // Every bucket's lower bound falls in it, and the next bucket starts after it.
        for index in 0..BUCKETS {
            assert_eq!(bucket(lower_bound(index)), index, "bucket {index}");
            if index + 1 < BUCKETS {
                assert_eq!(bucket(lower_bound(index + 1) - 1), index);
            }
        }
    }

    #[test]
    fn the_floor_admits_the_hottest_pages_holding_the_share() {
        // By hand: 10 pages of heat 1,000 (10,000) and 90 of heat 10 (900); total 10,900.
        let mut h = HeatHistogram::default();
        (0..10).for_each(|_| h.add(1000));
        (0..90).for_each(|_| h.add(10));
        // 80 % is 8,720: the hot pages alone hold 10,000, so the floor is their bucket's
        // lower bound (1,000 = 0b1111101000: msb 9, top 4 bits 1111 -> 15 << 6 = 960).
        assert_eq!(h.floor_of_share(80), 960);
        // 95 % is 10,355: past the hot pages' 10,000, so the warm pages' bucket (10) too.
        assert_eq!(h.floor_of_share(95), 10);
        // No share, a full share: no floor. No heat: nothing is shown to be hot yet.
        assert_eq!(h.floor_of_share(0), 0);
        assert_eq!(h.floor_of_share(100), 0);
        assert_eq!(HeatHistogram::default().floor_of_share(80), u32::MAX);
    }

    #[test]
    fn mass_this_large_does_not_overflow() {
        let mut h = HeatHistogram::default();
        (0..1000).for_each(|_| h.add(u32::MAX));
        h.add(1);
        assert_eq!(h.floor_of_share(50), 15 << 28);
    }
}
