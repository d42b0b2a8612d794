//! Models of the promoters the pghot series compares against. They are not pghotd code: each is
//! the smallest model that keeps the mechanism the series' findings hinge on.
//!
//! - NUMAB2: the NUMA-balancing scanner unmaps `scan_size` (256 MiB) of the address space per
//!   second; a page that then faults within the hot threshold (1 s) is promoted. Exact for a
//!   hot set whose pages are touched more often than once a second; costs one hint fault per
//!   scanned page that is touched at all, paid by the application.
//! - DAMON (`migrate_hot`, paddr, quota 128 MiB/s, hottest first): the buffer is split into
//!   contiguous regions (the pghot series saw 21-71 settle); every 100 ms aggregation each region's
//!   `nr_accesses` is 20 checks of one random page's accessed bit (5 ms sampling); regions with
//!   any access are promoted whole, hottest region first, within the quota.

use super::memory::{FAST, Memory, SLOW};
use pghot_workload::rng::SplitMix64;

/// Probability that a page accessed `rate` times per second is touched within `secs`.
fn touched_within(rate: f64, secs: f64) -> f64 {
    1.0 - (-rate * secs).exp()
}

/// A uniform draw in [0, 1).
pub fn unit(rng: &mut SplitMix64) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// What a baseline promoter needs each tick.
pub struct Tick<'a> {
    pub dt_s: f64,
    /// Accesses per second of the full-size workload.
    pub access_rate: f64,
    pub scale: f64,
    pub mem: &'a mut Memory,
    pub rng: &'a mut SplitMix64,
    /// Pages the fast tier must keep free (the watermark).
    pub reserve_pages: u64,
}

impl Tick<'_> {
    /// Full-size accesses per second of one page.
    fn page_rate(&self, page: usize) -> f64 {
        self.access_rate * self.mem.weight(page) / self.scale
    }

    fn room(&self) -> bool {
        self.mem.fast_free_pages() > self.reserve_pages
    }
}

pub struct Numab2 {
    scan_pages_per_s: f64,
    cursor: usize,
    carry: f64,
    /// Expected hint faults (scaled run).
    pub hint_faults: f64,
}

/// numa_balancing_scan_size_mb per scan_period_min (1 s).
const NUMAB_SCAN_MIB_PER_S: f64 = 256.0;
/// numa_balancing_hot_threshold_ms.
const NUMAB_HOT_THRESHOLD_S: f64 = 1.0;

impl Numab2 {
    pub fn new(scale: f64) -> Numab2 {
        Numab2 {
            scan_pages_per_s: NUMAB_SCAN_MIB_PER_S * 256.0 / scale,
            cursor: 0,
            carry: 0.0,
            hint_faults: 0.0,
        }
    }

    pub fn tick(&mut self, t: &mut Tick<'_>) {
        let pages = t.mem.pages();
        let want = self.scan_pages_per_s * t.dt_s + self.carry;
        let n = want as usize;
        self.carry = want - n as f64;
        // One full pass of the address space, the window in which a page can fault once.
        let pass_s = pages as f64 / self.scan_pages_per_s;
        for _ in 0..n {
            let page = self.cursor;
            self.cursor = (self.cursor + 1) % pages;
            let rate = t.page_rate(page);
            self.hint_faults += touched_within(rate, pass_s);
            if t.mem.node_of(page) == SLOW
                && unit(t.rng) < touched_within(rate, NUMAB_HOT_THRESHOLD_S)
                && t.room()
            {
                t.mem.place(page, FAST);
            }
        }
    }
}

pub struct Damon {
    regions: usize,
    /// Next page to promote in each region.
    cursor: Vec<usize>,
    quota_pages_per_s: f64,
    carry: f64,
    since_aggr_s: f64,
    /// Accessed-bit checks done (scaled run), for kdamond's CPU.
    pub checks: u64,
}

const DAMON_REGIONS: usize = 50;
const DAMON_QUOTA_MIB_PER_S: f64 = 128.0;
const DAMON_AGGR_S: f64 = 0.1;
const DAMON_SAMPLE_S: f64 = 0.005;

impl Damon {
    pub fn new(pages: usize, scale: f64) -> Damon {
        let regions = DAMON_REGIONS.min(pages);
        Damon {
            regions,
            cursor: (0..regions).map(|r| r * pages / regions).collect(),
            quota_pages_per_s: DAMON_QUOTA_MIB_PER_S * 256.0 / scale,
            carry: 0.0,
            since_aggr_s: 0.0,
            checks: 0,
        }
    }

    fn bounds(&self, region: usize, pages: usize) -> (usize, usize) {
        (
            region * pages / self.regions,
            (region + 1) * pages / self.regions,
        )
    }

    pub fn tick(&mut self, t: &mut Tick<'_>) {
        self.since_aggr_s += t.dt_s;
        if self.since_aggr_s < DAMON_AGGR_S {
            return;
        }
        self.since_aggr_s -= DAMON_AGGR_S;
        let pages = t.mem.pages();
        let checks = (DAMON_AGGR_S / DAMON_SAMPLE_S) as usize;
        let mut hot: Vec<(usize, usize)> = Vec::new();
        for region in 0..self.regions {
            let (start, end) = self.bounds(region, pages);
            let mut nr_accesses = 0;
            for _ in 0..checks {
                let page = start + t.rng.below((end - start) as u64) as usize;
                if unit(t.rng) < touched_within(t.page_rate(page), DAMON_SAMPLE_S) {
                    nr_accesses += 1;
                }
            }
            self.checks += checks as u64;
            if nr_accesses > 0 {
                hot.push((nr_accesses, region));
            }
        }
        hot.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let budget = self.quota_pages_per_s * DAMON_AGGR_S + self.carry;
        let mut left = budget as usize;
        self.carry = budget - left as f64;
        for (_, region) in hot {
            let (_, end) = self.bounds(region, pages);
            while left > 0 && self.cursor[region] < end && t.room() {
                let page = self.cursor[region];
                self.cursor[region] += 1;
                if t.mem.node_of(page) == SLOW {
                    t.mem.place(page, FAST);
                    left -= 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(pages: usize, hot_every: usize) -> Memory {
        let mut m = Memory::new(pages, pages as u64);
        let hot: Vec<bool> = (0..pages).map(|p| p % hot_every == 0).collect();
        let n = hot.iter().filter(|&&h| h).count() as f64;
        let w = hot.iter().map(|&h| if h { 1.0 / n } else { 0.0 }).collect();
        m.set_truth(hot, w);
        m
    }

    #[test]
    fn numab2_promotes_exactly_the_hot_pages_in_one_pass() {
        let mut mem = memory(4096, 4);
        let mut rng = SplitMix64::new(1);
        let mut numab = Numab2::new(1024.0);
        // 64 pages/s at this scale: 4096 pages take 64 s.
        for _ in 0..6500 {
            numab.tick(&mut Tick {
                dt_s: 0.01,
                access_rate: 1e8,
                scale: 1024.0,
                mem: &mut mem,
                rng: &mut rng,
                reserve_pages: 0,
            });
        }
        assert_eq!(mem.coverage_pct(), 100.0);
        assert_eq!(mem.over_promotion_pct(), 0.0);
        // Each hot page faults once per pass (a little over one pass ran).
        assert!(
            (1024.0..1100.0).contains(&numab.hint_faults),
            "{}",
            numab.hint_faults
        );
    }

    #[test]
    fn damon_promotes_whole_regions_around_a_scattered_hot_set() {
        let mut mem = memory(4096, 4);
        let mut rng = SplitMix64::new(1);
        let mut damon = Damon::new(4096, 1024.0);
        // Quota: 32 pages/s at this scale.
        for _ in 0..1000 {
            damon.tick(&mut Tick {
                dt_s: 0.01,
                access_rate: 1e8,
                scale: 1024.0,
                mem: &mut mem,
                rng: &mut rng,
                reserve_pages: 0,
            });
        }
        // 99 aggregations of 3.2 pages in 10 s.
        assert_eq!(mem.fast_used(), 316, "quota-bound");
        // Hot and cold pages go together: 3 cold per hot one.
        assert!((mem.over_promotion_pct() / mem.coverage_pct() - 3.0).abs() < 0.2);
    }
}
