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
//! The floor is one for the whole table, every managed process's pages together: a process
//! sampled less than another (fewer accesses, or a sparser source) has to meet the floor the
//! busier one's pages set. A floor per process would need a histogram per process; not built.
//!
//! The floor comes from a histogram of the tracked pages' heat: 8 buckets per octave, so the
//! floor is placed inside the bucket where the hottest pages' heat reaches the share, as far
//! into it as the share needs of its heat. Pages are ranked by heat plus a fixed offset under
//! one sample drawn from their key ([`rank`]): the heats of the pages near the floor sit on a
//! few whole sample counts, and a floor on a bucket's lower bound admitted every page of the
//! count it fell on, up to a level of pages more than the share (BENCHMARKS.md, issue 18,
//! "pages at the floor's sample count", measures both on Redis in the rig's Debian guest).
//! With the offset, pages with the floor's whole count pass in the proportion the share needs:
//! the randomised test between k and k + 1 samples, the best rule on Poisson counts
//! (Neyman-Pearson; the rig's `reach`, tests/vm/ibs-emu/guest/src/reach.rs, draws its frontier
//! with it), made stable per page so that the same pages pass each time.
//!
//! Reading every slot of the table for the histogram is the cost: 4.9 ms for a full 1 Mi table
//! natively (`cargo bench --bench ingest`), but about 4 s in the rig's TCG guest, whose
//! modelled memory makes each cache miss cost microseconds, so one pass per 5 s of sample time
//! took most of a vCPU there. So each pass reads one of up to [`SLICES`] slices of the shards
//! and keeps its histogram with the time it was taken, and the floor is drawn from every
//! slice's last histogram brought to now ([`SliceRead::factor_now`]). Decay is exact for that:
//! a page's heat halves every half-life whether it is read or not, which moves its mass down
//! 8 buckets and halves it ([`HeatHistogram::add_scaled`]). What a slice's histogram misses is
//! the samples its pages took since it was read; each shard counts the samples that add heat
//! to its pages, and in a steady phase every page's heat grows by the same factor (its sample
//! rate times a time that is the same for all), so a slice is grown by the heat its shards
//! took since, in proportion. A slice read before the last epoch boundary, or grown by more
//! than half since ([`GROWN_AT_MOST`]: a phase's first minute, when the samples go to pages
//! the slice did not hold yet), is left out, except the [`RECENT_SLICES`] latest, which are
//! then taken as read (decayed, not grown). With only
//! those four, each draw read a quarter of the pages and the floor moved by up to a quarter
//! from one draw to the next while every heat grew (BENCHMARKS.md, issue 18, "Moving back
//! less"); with all 16 and no growth, a table whose heats were still rising kept a floor drawn
//! mostly from slices read when every page had a sample or two (r23b). The shards are a hash
//! partition of the pages, so the slices are uniform samples of the table; when those drawn
//! from hold no heat at all (a few tracked pages, all in other slices) the last floor stands.
//!
//! The floor also corrects what was promoted before it stood where it does
//! (`demote_below_floor_pct`): see [`fallen`](super::fallen).

/// A floor (fixed point, as [`Entry`](super::Entry) keeps heat; 0: off; `u32::MAX`: no heat
/// to rank yet) with the sample time it was drawn at, in one word so that both are read
/// together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DrawnFloor(u64);

impl DrawnFloor {
    pub(crate) const OFF: DrawnFloor = DrawnFloor(0);

    pub(crate) fn new(floor: u32, at_ms: u32) -> DrawnFloor {
        DrawnFloor(u64::from(floor) << 32 | u64::from(at_ms))
    }

    pub(crate) fn from_bits(bits: u64) -> DrawnFloor {
        DrawnFloor(bits)
    }

    pub(crate) fn bits(self) -> u64 {
        self.0
    }

    /// The floor as drawn.
    pub(crate) fn drawn(self) -> u32 {
        (self.0 >> 32) as u32
    }

    /// A floor that ranks pages: neither off nor "no heat to rank yet".
    pub(crate) fn ranks(self) -> bool {
        self.drawn() != 0 && self.drawn() != u32::MAX
    }

    /// The floor at `now_ms`: halved at each epoch boundary since it was drawn, as every heat
    /// it was drawn from is (a page's heat halves at the boundary, the floor would otherwise
    /// wait up to 5 s for the next pass, and for those seconds stand at twice the heats: r24c
    /// moved back 7 % of the hot set at once). Off and "no heat yet" stay what they are.
    pub(crate) fn at(self, now_ms: u32, halflife_ms: u32) -> u32 {
        let floor = self.drawn();
        if !self.ranks() {
            return floor;
        }
        // The floor decays as a heat last updated when it was drawn.
        super::entry::decayed(floor, self.0 as u32, now_ms, halflife_ms)
    }
}

/// Floors a moved-back page must be under, the latest draw included (20 s of sample time).
pub const DEMOTE_FLOOR_DRAWS: usize = 4;

/// The last [`DEMOTE_FLOOR_DRAWS`] floors drawn, for moving back: a page goes back only under
/// the lowest of them, as each stands now.
///
/// Why: each draw reads a different slice, a different quarter of the pages, and (before
/// ranks, above) put the floor on a bucket's lower bound, so from one draw to the next the
/// floor stepped up or down a bucket (9-25 %) while the pages' heats sit on a few sample-count
/// levels. A step up put a whole level of hot pages under `demote_below_floor_pct` at once:
/// every Redis pass at 85 % lost 3-6 points of the hot set in one round and took 6-10 rounds
/// to win them back (BENCHMARKS.md, issue 18). Promotion still reads the latest draw.
#[derive(Debug, Default)]
pub(crate) struct RecentFloors {
    drawn: std::collections::VecDeque<DrawnFloor>,
}

impl RecentFloors {
    /// Adds a draw (one that [`ranks`](DrawnFloor::ranks)).
    pub(crate) fn push(&mut self, floor: DrawnFloor) {
        if self.drawn.len() == DEMOTE_FLOOR_DRAWS {
            self.drawn.pop_front();
        }
        self.drawn.push_back(floor);
    }

    pub(crate) fn clear(&mut self) {
        self.drawn.clear();
    }

    /// The lowest of the recent draws at `now_ms`, as a floor drawn then; `None` before any.
    pub(crate) fn lowest(&self, now_ms: u32, halflife_ms: u32) -> Option<DrawnFloor> {
        self.drawn
            .iter()
            .map(|f| f.at(now_ms, halflife_ms))
            .min()
            .map(|floor| DrawnFloor::new(floor, now_ms))
    }
}

/// Slices of the shards one heat-floor pass reads one of (fewer with fewer shards).
pub const SLICES: usize = 16;

/// The slices read in this many latest passes always join a draw (a quarter of the table,
/// read within the last 20 s of sample time).
pub const RECENT_SLICES: usize = 4;

/// An older slice joins a draw while its heat grew by at most this factor since it was read,
/// within the same epoch: beyond that (a phase's first minute) its pages are not the ones
/// taking the samples, and a growth spread over them in proportion would misplace it.
pub const GROWN_AT_MOST: f64 = 1.5;

/// One slice's histogram as a heat-floor pass read it.
#[derive(Debug, Clone)]
pub(crate) struct SliceRead {
    /// The table's clock then (ms).
    pub(crate) taken_ms: u32,
    pub(crate) histogram: HeatHistogram,
    /// The samples that had added heat to its shards' pages, ever, then.
    pub(crate) heat_added: u64,
}

impl SliceRead {
    /// What to multiply this slice's heats by for them to stand for now, given the samples
    /// that have added heat to its shards, ever (`heat_added_now`): halved at each epoch
    /// boundary since the read, as every heat is, and grown by the heat those samples added
    /// since, spread over its pages in proportion to their heat (a page's decayed heat is its
    /// sample rate times a time that is the same for every page, so in a steady phase every
    /// heat grows by the same factor). A slice grown by more than [`GROWN_AT_MOST`] is not
    /// grown: `None` unless `recent`, which then counts as read (decayed only); an older slice
    /// read before the last epoch boundary is `None` too. `None` also when it holds no heat.
    pub(crate) fn factor_now(
        &self,
        heat_added_now: u64,
        now_ms: u32,
        halflife_ms: u32,
        recent: bool,
    ) -> Option<f64> {
        let epochs = super::entry::epochs_between(self.taken_ms, now_ms, halflife_ms);
        let decay = (-f64::from(epochs)).exp2();
        let held = self.histogram.total() * decay;
        if held <= 0.0 {
            return None;
        }
        // Samples taken before a boundary the slice crossed have halved since: counted whole,
        // which overstates a recent slice's growth by half of those (at most 15 s of samples:
        // an older slice that crossed one is left out).
        let added = heat_added_now.saturating_sub(self.heat_added) as f64;
        let growth = (held + added * f64::from(super::HEAT_ONE)) / held;
        if growth > GROWN_AT_MOST {
            // A phase's first seconds: the samples go mostly to pages the slice did not hold,
            // and spread over those it did they made a floor ten times the heats (t41b's first
            // draw: 23.5 samples, where t41a's, as read, was 2.4).
            return recent.then_some(decay);
        }
        if epochs > 0 && !recent {
            return None;
        }
        Some(decay * growth)
    }
}

/// Heats below this each have their own bucket.
const EXACT: u32 = 16;

/// Buckets: 16 exact, then 8 per octave from 2^4 to 2^31.
const BUCKETS: usize = 240;

/// A page's rank against the floor: its heat (fixed point) plus an offset under one sample
/// taken from bits of its key's hash that pick neither its shard (the low bits) nor its home
/// slot (the high bits), fixed for the page.
#[inline]
pub(crate) fn rank(heat: u32, hash: u64) -> u32 {
    heat.saturating_add((hash >> 24) as u32 % super::HEAT_ONE)
}

/// Heat mass of the tracked pages, by rank.
#[derive(Debug, Clone)]
pub struct HeatHistogram {
    mass: [f64; BUCKETS],
}

impl Default for HeatHistogram {
    fn default() -> Self {
        HeatHistogram {
            mass: [0.0; BUCKETS],
        }
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

/// One past the largest heat in bucket `index` (2^32 for the last).
fn upper_bound(index: usize) -> u64 {
    if index + 1 < BUCKETS {
        u64::from(lower_bound(index + 1))
    } else {
        1 << 32
    }
}

impl HeatHistogram {
    /// Adds one page of heat `heat` (fixed point, as the table keeps it) at its [`rank`]: the
    /// rank orders the pages, the heat is what they hold of the share.
    pub fn add(&mut self, rank: u32, heat: u32) {
        self.mass[bucket(rank)] += f64::from(heat);
    }

    /// All the heat it holds.
    pub fn total(&self) -> f64 {
        self.mass.iter().sum()
    }

    /// Adds `other` with every page's heat (and rank) multiplied by `factor`, the mass with
    /// them. Each bucket's heats are taken as spread evenly over it, as
    /// [`floor_of_share`](Self::floor_of_share) takes them: its range times `factor` is laid
    /// over the buckets it covers, each taking the part of the mass it overlaps. A decay of
    /// `n` half-lives is the factor 2^-n, whole octaves, which move each per-octave bucket
    /// exactly 8 buckets down per half-life; a growth of a few percent moves part of a
    /// bucket's mass to the next (one bucket is 6-12 %, too coarse to round to).
    pub fn add_scaled(&mut self, other: &HeatHistogram, factor: f64) {
        if !(factor > 0.0 && factor.is_finite()) {
            return;
        }
        const TOP: f64 = 4_294_967_296.0;
        for (index, &mass) in other.mass.iter().enumerate() {
            if mass <= 0.0 {
                continue;
            }
            let low = (f64::from(lower_bound(index)) * factor).min(TOP - 1.0);
            let high = (upper_bound(index) as f64 * factor).min(TOP);
            let mass = mass * factor;
            let width = high - low;
            // `as` saturates: a heat past u32 is the last bucket's.
            let mut target = bucket(low as u32);
            if width <= 0.0 {
                self.mass[target] += mass;
                continue;
            }
            loop {
                let overlap = (upper_bound(target) as f64).min(high)
                    - f64::from(lower_bound(target)).max(low);
                if overlap > 0.0 {
                    self.mass[target] += mass * overlap / width;
                }
                if upper_bound(target) as f64 >= high || target + 1 == BUCKETS {
                    break;
                }
                target += 1;
            }
        }
    }

    /// The lowest rank among the highest-ranked pages that together hold `share_pct` of all
    /// the heat: inside the bucket where the share is reached, as far down it as the share
    /// needs of its mass (ranks taken as spread evenly over the bucket); 0 when the share is 0
    /// or 100 or more (no floor), `u32::MAX` when there is no heat to rank (no page can be
    /// shown to be among the hottest yet).
    pub fn floor_of_share(&self, share_pct: u32) -> u32 {
        if share_pct == 0 || share_pct >= 100 {
            return 0;
        }
        let total = self.total();
        if total <= 0.0 {
            return u32::MAX;
        }
        let target = total * f64::from(share_pct) / 100.0;
        let mut held = 0.0;
        for index in (0..BUCKETS).rev() {
            let mass = self.mass[index];
            if held + mass >= target && mass > 0.0 {
                let needed = ((target - held) / mass).clamp(0.0, 1.0);
                let low = u64::from(lower_bound(index));
                let width = upper_bound(index) - low;
                // Truncated: the floor errs by under a fixed-point unit towards admitting.
                return (low + ((1.0 - needed) * width as f64) as u64) as u32;
            }
            held += mass;
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
        // Ranks are the heats here.
        let mut h = HeatHistogram::default();
        (0..10).for_each(|_| h.add(1000, 1000));
        (0..90).for_each(|_| h.add(10, 10));
        // 80 % is 8,720: the hot pages alone hold 10,000, so the floor is in their bucket
        // (1,000 = 0b1111101000: msb 9, top 4 bits 1111 -> 15 << 6 = 960 up to 1,024), 8,720
        // of its 10,000 down from its top: 960 + 64 * 0.128 = 968.2.
        assert_eq!(h.floor_of_share(80), 968);
        // 95 % is 10,355: past the hot pages' 10,000, so 355 of the warm pages' 900, in their
        // bucket 10 (one unit wide): 10 + 0.61.
        assert_eq!(h.floor_of_share(95), 10);
        // No share, a full share: no floor. No heat: nothing is shown to be hot yet.
        assert_eq!(h.floor_of_share(0), 0);
        assert_eq!(h.floor_of_share(100), 0);
        assert_eq!(HeatHistogram::default().floor_of_share(80), u32::MAX);
    }

    #[test]
    fn a_decayed_histogram_is_the_histogram_of_the_decayed_heats() {
        // By hand: 10 pages of 1,000 and 90 of 10, as above, two half-lives later: 250 and
        // 2.5 (the table's heats are whole fixed-point numbers, 2 after two halvings). The
        // 1,000s move from bucket 9 * 8 - 24 + 15 = 63 (960..1,024) down 16 to 47 (240..256);
        // the 10s, in exact bucket 10 (10..11), move to 2.5..2.75, in bucket 2.
        let mut h = HeatHistogram::default();
        (0..10).for_each(|_| h.add(1000, 1000));
        (0..90).for_each(|_| h.add(10, 10));
        let mut later = HeatHistogram::default();
        later.add_scaled(&h, 0.25);
        assert_eq!(later.mass[47], 2500.0);
        assert_eq!(later.mass[2], 225.0);
        // 80 % of 2,725 is 2,180, 0.872 of bucket 47 down from its top: 240 + 16 * 0.128.
        assert_eq!(later.floor_of_share(80), 242);
        // No time, no change.
        let mut same = HeatHistogram::default();
        same.add_scaled(&h, 1.0);
        assert_eq!(same.mass, h.mass);
        // Forty half-lives later everything is in bucket 0 (960 * 2^-40 is under one unit).
        let mut gone = HeatHistogram::default();
        gone.add_scaled(&h, (-40f64).exp2());
        assert_eq!(gone.mass[1..], [0.0; BUCKETS - 1]);
        assert!(gone.mass[0] > 0.0);
    }

    #[test]
    fn a_grown_histogram_lays_each_bucket_over_the_buckets_its_heats_grew_into() {
        // By hand: 1,000 is in bucket 63 (960..1,024: msb 9, top four bits 1111), 1,100 in 64
        // (1,024..1,152: msb 10, 1000); from 1,024 the buckets are 128 wide. A quarter more:
        // 960..1,024 becomes 1,200..1,280, inside bucket 65 (1,152..1,280), so all its 1,250
        // goes there; 1,024..1,152 becomes 1,280..1,440, of which 128 of 160 fall in bucket 66
        // (1,280..1,408) and 32 in 67 (1,408..1,536): 1,375 x 0.8 and x 0.2.
        let mut h = HeatHistogram::default();
        h.add(1000, 1000);
        h.add(1100, 1100);
        let mut grown = HeatHistogram::default();
        grown.add_scaled(&h, 1.25);
        let near = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(near(grown.mass[65], 1250.0), "{}", grown.mass[65]);
        assert!(near(grown.mass[66], 1100.0), "{}", grown.mass[66]);
        assert!(near(grown.mass[67], 275.0), "{}", grown.mass[67]);
        assert!(near(grown.total(), 2625.0));
        // Off the top: the last bucket keeps it.
        let mut top = HeatHistogram::default();
        top.add_scaled(&h, 1e9);
        assert!(near(top.mass[BUCKETS - 1], 2100.0 * 1e9));
    }

    #[test]
    fn a_slice_is_grown_by_the_heat_its_shards_took_since_unless_that_is_most_of_it() {
        // By hand: a slice read at 10 s holding 1,000 samples of heat (256,000 fixed point),
        // its shards having taken 100 samples ever; a one-minute half-life.
        let mut histogram = HeatHistogram::default();
        histogram.add(256_000, 256_000);
        let read = SliceRead {
            taken_ms: 10_000,
            histogram,
            heat_added: 100,
        };
        // 300 samples since, in the same epoch: (1,000 + 300) / 1,000, recent or not.
        assert_eq!(read.factor_now(400, 50_000, 60_000, false), Some(1.3));
        assert_eq!(read.factor_now(400, 50_000, 60_000, true), Some(1.3));
        // 2,000 since: three times the heat, most of it on pages the slice did not hold. A
        // recent slice counts as read, an older one is left out.
        assert_eq!(read.factor_now(2100, 50_000, 60_000, true), Some(1.0));
        assert_eq!(read.factor_now(2100, 50_000, 60_000, false), None);
        // Past the 60 s boundary its heat is 500: 200 since is (500 + 200) / 500 = 1.4 times
        // that, half of what it was read at (0.7); an older slice read before the boundary is
        // left out. 300 since is 1.6 times: a recent slice is then only halved.
        assert_eq!(read.factor_now(300, 61_000, 60_000, true), Some(0.7));
        assert_eq!(read.factor_now(300, 61_000, 60_000, false), None);
        assert_eq!(read.factor_now(400, 61_000, 60_000, true), Some(0.5));
        // No heat held: nothing to add.
        let empty = SliceRead {
            taken_ms: 0,
            histogram: HeatHistogram::default(),
            heat_added: 0,
        };
        assert_eq!(empty.factor_now(10, 1, 60_000, true), None);
    }

    #[test]
    fn mass_this_large_does_not_overflow() {
        let mut h = HeatHistogram::default();
        (0..1000).for_each(|_| h.add(u32::MAX, u32::MAX));
        h.add(1, 1);
        // Half of the last bucket (15 << 28 up to 2^32) and a hair: one unit under its middle.
        assert_eq!(h.floor_of_share(50), (15 << 28) + (1 << 27) - 1);
    }

    #[test]
    fn the_floor_admits_the_share_s_part_of_a_level_of_equal_heats_by_rank() {
        // By hand: 100 pages of heat 8 samples (2,048 = 0b1000_0000_0000: msb 11, top 4 bits
        // 1000 -> the bucket 2,048 up to 2,304), ranked 2,048 + 0, 2, 5, ... 253 (i * 256 /
        // 100), holding 204,800. Half of it is the upper half of the bucket: the floor is 2,176
        // and pages 50..=99 are at or over it. On the bucket's lower bound all 100 would be.
        let mut h = HeatHistogram::default();
        let ranks: Vec<u32> = (0..100).map(|i| 2048 + i * 256 / 100).collect();
        ranks.iter().for_each(|&r| h.add(r, 2048));
        let floor = h.floor_of_share(50);
        assert_eq!(floor, 2176);
        assert_eq!(ranks.iter().filter(|&&r| r >= floor).count(), 50);
    }

    #[test]
    fn a_rank_is_the_heat_and_under_one_sample_more() {
        // Bits 24..=31 of the hash, one sample being 256 in fixed point.
        assert_eq!(rank(1000, 0), 1000);
        assert_eq!(rank(1000, 0xab << 24 | 0x00ff_ffff), 1000 + 0xab);
        assert_eq!(rank(1000, 0x1_ff00_0000), 1000 + 0xff);
        assert_eq!(rank(u32::MAX, u64::MAX), u32::MAX);
    }
}
