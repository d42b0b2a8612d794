//! Capacity-aware promotion: where free memory comes from, and which candidates get the room
//! when the fast tier cannot take them all.
//!
//! Without this, a batch that does not fit under the watermark is cut in address order: the
//! first pages offered win, however lukewarm. [`HeatCut`] keeps a histogram of the heat of
//! recent candidates (log2 bins, halved every `HEAT_HALF_LIFE`, after MEMTIS's hotness
//! histogram, SOSP'23) and, when the room left is smaller than the demand, sets a heat cut so that what is
//! kept over an interval is about what fits; inside a batch the hottest go first. The
//! watermark itself is never crossed: the room is what stays above the reserve.

use std::time::Duration;

use crate::topology::{NodeId, Topology, TopologyError};

/// Free memory of a node, as the watermark sees it.
pub trait FreeMemory: Send + Sync {
    fn free_kb(&self, node: NodeId) -> Result<u64, TopologyError>;
}

/// The live machine: the node's meminfo under the topology's sysfs root.
impl FreeMemory for Topology {
    fn free_kb(&self, node: NodeId) -> Result<u64, TopologyError> {
        Topology::free_kb(self, node)
    }
}

/// The heat histogram's half-life (`HeatCut::decay`): the old 100 ms wake-up interval, at
/// which the capacity-aware cut was made and measured, now a time of its own. The migrator
/// thread ages the histogram by the clock; pghot-sim by its simulated one.
pub const HEAT_HALF_LIFE: Duration = Duration::from_millis(100);

/// Turns the time since the histogram was last aged into whole half-lives, keeping the
/// remainder for the next call. Times are since a clock's origin: the migrator thread's start,
/// or pghot-sim's simulated zero.
#[derive(Debug, Default)]
pub struct HeatAge {
    aged_to: Duration,
}

impl HeatAge {
    pub fn halvings(&mut self, now: Duration) -> u32 {
        let passed = now.saturating_sub(self.aged_to);
        let n = passed.as_nanos() / HEAT_HALF_LIFE.as_nanos();
        match u32::try_from(n) {
            Ok(n) => {
                self.aged_to += HEAT_HALF_LIFE * n;
                n
            }
            // Ages beyond counting: everything is gone either way.
            Err(_) => {
                self.aged_to = now;
                u32::MAX
            }
        }
    }
}

/// Heat bins: bin 0 holds heat below 1 sample, bin b >= 1 holds [2^(b-1), 2^b) samples.
const BINS: usize = 24;

fn bin_of(heat: f64) -> usize {
    if heat < 1.0 {
        0
    } else {
        // Truncation is intended: the exponent of a heat >= 1, capped to the last bin.
        (heat.log2().floor() as usize + 1).min(BINS - 1)
    }
}

/// Lower heat bound of a bin.
fn bin_floor(bin: usize) -> f64 {
    if bin == 0 {
        0.0
    } else {
        (1u64 << (bin - 1)) as f64
    }
}

/// The heat histogram of recent candidates, and the cut it implies for a given room.
#[derive(Debug, Clone, Default)]
pub struct HeatCut {
    bins: [u64; BINS],
}

impl HeatCut {
    pub fn observe(&mut self, heat: f64) {
        self.bins[bin_of(heat)] += 1;
    }

    /// Ages the histogram by `halvings` half-lives (`HEAT_HALF_LIFE` each): old demand counts
    /// half per half-life.
    pub fn decay(&mut self, halvings: u32) {
        for b in &mut self.bins {
            *b = b.checked_shr(halvings).unwrap_or(0);
        }
    }

    /// Candidates observed (decayed).
    pub fn demand(&self) -> u64 {
        self.bins.iter().sum()
    }

    /// The least heat a candidate needs to be kept when `room_pages` are left: 0 when the
    /// recent demand fits; else the floor of the coldest bin whose pages, with every hotter
    /// bin's, still fit (the hottest bin is always kept, so promotion never stalls).
    pub fn cut(&self, room_pages: u64) -> f64 {
        if self.demand() <= room_pages {
            return 0.0;
        }
        let mut kept = 0u64;
        let mut cut_bin = None;
        for bin in (0..BINS).rev() {
            if self.bins[bin] == 0 {
                continue;
            }
            kept += self.bins[bin];
            if kept > room_pages {
                // The hottest non-empty bin is kept even when it alone overflows.
                return bin_floor(cut_bin.unwrap_or(bin));
            }
            cut_bin = Some(bin);
        }
        0.0
    }
}

/// Splits `items` (with their heat) into the ones kept, hottest first, and the rest: at
/// most `room` items, none colder than `cut`. Ties keep their order.
pub fn keep_hottest<T: Copy>(items: &mut [(T, f64)], room: usize, cut: f64) -> usize {
    items.sort_by(|a, b| b.1.total_cmp(&a.1));
    items
        .iter()
        .take(room)
        .take_while(|(_, heat)| *heat >= cut)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// By hand, half-life 100 ms: 250 ms are two half-lives, the 50 ms left count towards the
    /// next (50 + 60 = 110 ms: one more); a clock that went nowhere ages nothing.
    #[test]
    fn heat_ages_in_whole_half_lives_and_keeps_the_rest() {
        let ms = Duration::from_millis;
        let mut age = HeatAge::default();
        assert_eq!(age.halvings(ms(250)), 2);
        assert_eq!(age.halvings(ms(250)), 0);
        assert_eq!(age.halvings(ms(310)), 1);
        assert_eq!(age.halvings(ms(399)), 0);
        assert_eq!(age.halvings(ms(400)), 1);
    }

    #[test]
    fn bins_are_log2_of_the_heat() {
        assert_eq!(bin_of(0.4), 0);
        assert_eq!(bin_of(1.0), 1);
        assert_eq!(bin_of(1.9), 1);
        assert_eq!(bin_of(2.0), 2);
        assert_eq!(bin_of(5.0), 3);
        assert_eq!(bin_of(1e12), BINS - 1);
        assert_eq!(bin_floor(3), 4.0);
    }

    #[test]
    fn no_cut_while_the_demand_fits() {
        let mut h = HeatCut::default();
        for heat in [1.0, 2.0, 9.0] {
            h.observe(heat);
        }
        assert_eq!(h.cut(3), 0.0);
        assert_eq!(h.cut(1_000), 0.0);
    }

    #[test]
    fn the_cut_keeps_only_what_fits_hottest_first() {
        let mut h = HeatCut::default();
        // 100 lukewarm (heat 1), 10 warm (heat 4..8), 2 hot (heat 32).
        for _ in 0..100 {
            h.observe(1.2);
        }
        for _ in 0..10 {
            h.observe(5.0);
        }
        h.observe(40.0);
        h.observe(33.0);
        // Room for 12: the hot and the warm, not the lukewarm.
        assert_eq!(h.cut(12), 4.0);
        // Room for 5: only the hot ones' bin.
        assert_eq!(h.cut(5), 32.0);
        // Room for nothing: still the hottest bin, so promotion never stalls for good.
        assert_eq!(h.cut(0), 32.0);
        h.decay(1);
        assert_eq!(h.demand(), 50 + 5 + 1);
        // Two more half-lives: 50 / 4, 5 / 4 and 1 / 4, rounded down.
        h.decay(2);
        assert_eq!(h.demand(), 12 + 1);
        // However long the migrator slept, no shift overflows.
        h.decay(u32::MAX);
        assert_eq!(h.demand(), 0);
    }

    #[test]
    fn keep_hottest_orders_by_heat_and_respects_room_and_cut() {
        let mut items = vec![(1, 0.5), (2, 8.0), (3, 2.0), (4, 16.0), (5, 1.0)];
        assert_eq!(keep_hottest(&mut items, 3, 0.0), 3);
        assert_eq!(
            items[..3].iter().map(|i| i.0).collect::<Vec<_>>(),
            [4, 2, 3]
        );
        assert_eq!(keep_hottest(&mut items, 10, 4.0), 2);
        assert_eq!(keep_hottest(&mut items, 0, 0.0), 0);
    }
}
