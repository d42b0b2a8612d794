//! Widening the promotion window when samples are sparse.
//!
//! pghot's rule (a page is a candidate after `freq_threshold` samples, each within
//! `promote_window_ms` of the one before) ties hotness to an absolute sample rate: with a window
//! W, a page needs about one sample per W to qualify. How many samples a page gets depends on the
//! sampling period, the machine's speed and how many pages share the heat, so the same program
//! can have every hot page qualify on one machine and almost none on another. The pghot series
//! reports exactly that on Redis: "coverage is the limiter on very large, uniformly hot sets"
//! (~10 % of the hot set at both IBS periods; ../shared/seeds, the cover letter's Redis row).
//!
//! So the window is also given in samples: `window_samples` recorded lower-tier samples. Every
//! [`SPAN_NS`] of sample time the recorders measure the rate of recorded samples, and the table
//! uses `max(promote_window_ms, window_samples / rate)`, at most [`MAX_WINDOW_MS`]. Where samples
//! are plentiful (the seed's runs: 5,800 to 24,600 recorded samples a second, so its 3 s window
//! held 17,000 to 74,000) nothing changes; where they are sparse, a page still qualifies by
//! taking `freq_threshold` samples out of the last `window_samples`, that is by its share of the
//! lower tier's accesses rather than by their absolute rate. A cold page sampled once in a while
//! does not: two samples of one page among `window_samples` spread over many cold pages are rare
//! (the birthday bound: k samples over n pages give about k^2 / 2n such pages).
//!
//! That measure is of the lower tier as a whole, and misses heat spread thin over many pages.
//! A pointer chase over a 16 GB hot set at full size (4 M pages, Zipf 0.55 inside it, as
//! `pghot-sim` fits the pghot series' pointer-chase table) records 4,000 to 140,000 lower-tier
//! samples a second, so `window_samples` never widens the window, yet each page of the hot set's
//! tail is sampled about once every 30 s: its accesses are frequent (on the order of a hundred a
//! second), the samples of any one page are not. Under a 5 s (or even a 60 s) window most of
//! those pages never take two samples in one window, and threshold 2 left 4 % of the hot set on
//! the slow tier after the series' 240 s (issue 22; BENCHMARKS.md).
//!
//! So the window is also sized per page: the table counts its pages with a live count (sampled
//! on a lower tier and not promoted or demoted since; [`HotTable::counting_pages`]), the
//! recorded rate shared among them gives the mean gap between two samples of one such page,
//! and the window spans [`PAIR_GAPS`] of those gaps ([`per_page_horizon`]), at most
//! [`MAX_WINDOW_MS`]. A page's first sample is remembered that long, and its second promotes
//! it. A page sampled at rate r, against a mean of r0 per counting page, takes two samples
//! within the horizon with probability about (PAIR_GAPS r / r0)^2 / 2 when that is small: a
//! page 100 times colder than the pages the table is counting qualifies about once in 80
//! horizons, one as hot qualifies within the first. The absolute limit stays the cap: two
//! samples within 10 minutes, as the sample-count widening already allowed.
//!
//! [`HotTable::counting_pages`]: super::HotTable::counting_pages

/// How many mean gaps between two samples of one counting page the window spans (see
/// [`per_page_horizon`]). Chosen in `pghot-sim` on the calibrated pointer chase (issue 22,
/// seeds 1-3, the default 16 % budget): 4 gaps placed 98.3-98.4 % of the hot set in 240 s,
/// 8 gaps 99.0 % and 16 gaps 99.1 %, as much as a fixed 10-minute window; 16 is the smallest
/// of those that loses nothing to the horizon there.
pub const PAIR_GAPS: f64 = 16.0;

/// How much sample time one rate measurement spans.
pub const SPAN_NS: u64 = 5_000_000_000;

/// The widest window the rate can ask for (10 minutes).
pub const MAX_WINDOW_MS: u32 = 600_000;

/// The window for `window_samples` samples at `per_s` recorded samples a second, never under
/// `floor_ms` (the configured `promote_window_ms`). `window_samples` 0 turns widening off.
pub fn widened(floor_ms: u32, window_samples: u32, per_s: f64) -> u32 {
    if window_samples == 0 || per_s <= 0.0 || !per_s.is_finite() {
        return floor_ms;
    }
    let ms = f64::from(window_samples) * 1000.0 / per_s;
    let ceiling = MAX_WINDOW_MS.max(floor_ms);
    // `as` saturates a too-large float; the clamp keeps the configured floor.
    (ms.ceil() as u32).clamp(floor_ms, ceiling)
}

/// The window that spans [`PAIR_GAPS`] mean gaps between two samples of one page, for
/// `counting_pages` lower-tier pages holding a count and `per_s` recorded samples a second
/// shared among them; at most [`MAX_WINDOW_MS`], 0 without a rate or a page.
pub fn per_page_horizon(counting_pages: u64, per_s: f64) -> u32 {
    if counting_pages == 0 || per_s <= 0.0 || !per_s.is_finite() {
        return 0;
    }
    let ms = PAIR_GAPS * counting_pages as f64 * 1000.0 / per_s;
    (ms.ceil() as u32).min(MAX_WINDOW_MS)
}

/// Measures the rate of recorded samples over spans of [`SPAN_NS`] of sample time.
#[derive(Debug, Default)]
pub struct WindowTuner {
    /// Sample time and recorded total at the start of the current span.
    start: Option<(u64, u64)>,
}

impl WindowTuner {
    /// Notes the recorded total at sample time `now_ns`; at the end of a span, returns the
    /// rate over it in samples per second.
    pub fn observe(&mut self, recorded: u64, now_ns: u64) -> Option<f64> {
        let Some((t0, r0)) = self.start else {
            self.start = Some((now_ns, recorded));
            return None;
        };
        // Sample clocks from several CPUs are not ordered: an earlier time waits for a later one.
        let spanned = now_ns.checked_sub(t0)?;
        if spanned < SPAN_NS {
            return None;
        }
        self.start = Some((now_ns, recorded));
        Some(recorded.saturating_sub(r0) as f64 * 1e9 / spanned as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plentiful_samples_keep_the_configured_window() {
        // The seed's p10000 pointer chase: 1.40 M events in 240 s = 5833/s; 16384 samples take
        // 2.81 s, under a 5 s window, which stays.
        assert_eq!(widened(5000, 16384, 1_400_000.0 / 240.0), 5000);
    }

    #[test]
    fn sparse_samples_widen_the_window_to_hold_window_samples() {
        // 45 samples a second (Redis in the TCG guest): 16384 / 45 = 364.09 s, rounded up.
        assert_eq!(widened(5000, 16384, 45.0), 364_089);
        // 1 a second would need 16384 s: capped at 10 minutes.
        assert_eq!(widened(5000, 16384, 1.0), 600_000);
        // A floor above the cap wins.
        assert_eq!(widened(900_000, 16384, 1.0), 900_000);
    }

    #[test]
    fn no_rate_or_no_window_samples_leave_the_floor() {
        assert_eq!(widened(5000, 0, 45.0), 5000);
        assert_eq!(widened(5000, 16384, 0.0), 5000);
        assert_eq!(widened(5000, 16384, f64::NAN), 5000);
    }

    #[test]
    fn the_per_page_horizon_spans_pair_gaps_mean_gaps_of_one_page() {
        // Issue 22's pointer chase near the end of the run, at full size: ~150,000 pages of the
        // hot set's tail hold one sample, and the lower tier records 4224 samples a second.
        // One page's mean gap is 150000 / 4224 = 35.5 s; 16 of them are 568.2 s.
        assert_eq!(per_page_horizon(150_000, 4224.0), 568_182);
        // 1000 counting pages at 100 samples a second: a gap of 10 s, 160 s.
        assert_eq!(per_page_horizon(1000, 100.0), 160_000);
        // Capped at 10 minutes.
        assert_eq!(per_page_horizon(1_000_000, 100.0), 600_000);
        // No page or no rate: no horizon.
        assert_eq!(per_page_horizon(0, 100.0), 0);
        assert_eq!(per_page_horizon(1000, 0.0), 0);
        assert_eq!(per_page_horizon(1000, f64::NAN), 0);
    }

    #[test]
    fn the_rate_is_measured_over_whole_spans_of_sample_time() {
        let mut t = WindowTuner::default();
        assert_eq!(
            t.observe(100, 1_000_000_000),
            None,
            "the first call starts a span"
        );
        assert_eq!(t.observe(150, 3_000_000_000), None, "2 s: not a span yet");
        // An earlier clock (another CPU's) is ignored.
        assert_eq!(t.observe(160, 500_000_000), None);
        // 400 samples in 8 s: 50 a second; the next span starts here.
        assert_eq!(t.observe(500, 9_000_000_000), Some(50.0));
        assert_eq!(t.observe(510, 10_000_000_000), None);
        assert_eq!(t.observe(600, 14_000_000_000), Some(20.0));
    }
}
