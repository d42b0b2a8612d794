//! The `hot_share_pct` heat-floor pass, timed for `benches/ingest.rs`.

use std::time::Instant;

use pghotd::hotness::{Access, HotTable, HotnessConfig};
use pghotd::sample::AccessOp;

use super::{LOWER_NODE, RUNS, key, time_ns};

/// Milliseconds of one `hot_share_pct` heat-floor pass (`set_recorded_rate` with the share
/// on: one slice of the shards read, the last 4 slices' histograms combined) on a table of
/// `tracked` pages holding `held` of them, each sampled once: best of [`RUNS`].
pub fn heat_floor_pass_ms(tracked: usize, held: usize) -> f64 {
    let policy = HotnessConfig {
        hot_share_pct: 80,
        ..HotnessConfig::default()
    };
    let table = HotTable::new(tracked, policy);
    for page in 0..held as u64 {
        table.record(&Access {
            key: key(page),
            time_ns: time_ns(page),
            node: LOWER_NODE,
            op: AccessOp::Load,
        });
    }
    (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            table.set_recorded_rate(1.0);
            start.elapsed().as_secs_f64() * 1e3
        })
        .fold(f64::INFINITY, f64::min)
}
