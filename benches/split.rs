//! The cost of one THP split decision on the migrator thread (issue 24): reading a THP's own
//! 512-subpage map from the hotness table (`per_folio::ThpMap::read`: 512 lookups through
//! `HotTable::visit_range`, which `migrator::folios` also uses), the four stages on it
//! (`split::decide`), and both through
//! `Admission::region_decision` with its cache forgotten (what a region costs once per
//! `REGION_TTL`); the folded decision (`split::decide` on the process histogram alone) beside.
//!
//! The table holds 1 Mi pages (the default `max_tracked_pages`), 256 Ki of them tracked at
//! random, plus one THP with a 128 KiB run at page 37 sampled 4 times per page. Each figure is
//! the best of `RUNS` runs of `ITERS` decisions. Run with `cargo bench --bench split`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use pghotd::admission::per_folio::ThpMap;
use pghotd::admission::split::{self, SplitParams};
use pghotd::admission::{Admission, AdmissionConfig};
use pghotd::hotness::{Access, HotTable, HotnessConfig, PageKey};
use pghotd::sample::AccessOp;

const PID: u32 = 4242;
const THP: u64 = 0x7f00_0000_0000;
const PAGE: u64 = 4096;
const RUNS: usize = 7;
const ITERS: u32 = 2000;

fn best(mut run: impl FnMut() -> u64) -> Duration {
    let mut best = Duration::MAX;
    for _ in 0..RUNS {
        let t = Instant::now();
        for _ in 0..ITERS {
            black_box(run());
        }
        best = best.min(t.elapsed() / ITERS);
    }
    best
}

fn main() {
    let table = HotTable::new(1 << 20, HotnessConfig::default());
    let record = |vaddr: u64, ms: u64| {
        table.record(&Access {
            key: PageKey::new(PID, vaddr).unwrap(),
            time_ns: ms * 1_000_000,
            node: 2,
            op: AccessOp::Load,
        });
    };
    // Background: 256 Ki random pages elsewhere (splitmix64).
    let mut x = 1u64;
    for _ in 0..(1 << 18) {
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        record(0x1000_0000_0000 + ((z ^ (z >> 31)) % (1 << 30)) * PAGE, 0);
    }
    for round in 0..4 {
        for p in 37..69 {
            record(THP + p * PAGE, round);
        }
    }
    let adm = Admission::new(
        AdmissionConfig {
            split: true,
            ..AdmissionConfig::default()
        },
        2,
    );
    let params = SplitParams::default();
    let map = ThpMap::read(&table, PID, THP);
    assert!(map.trusted(), "{} samples, {} seen", map.samples, map.seen);

    let read = best(|| ThpMap::read(&table, PID, THP).samples);
    let decide = best(|| {
        u64::from(matches!(
            split::decide(&map.counts, &params),
            split::SplitDecision::Split(_)
        ))
    });
    let region = best(|| {
        adm.forget_regions();
        let d = adm.region_decision(&table, PID, THP, Instant::now());
        u64::from(matches!(d.decision, split::SplitDecision::Split(_)))
    });
    let cached = best(|| {
        let d = adm.region_decision(&table, PID, THP, Instant::now());
        u64::from(matches!(d.decision, split::SplitDecision::Split(_)))
    });
    println!(
        "split decision, best of {RUNS} x {ITERS} (table: 1 Mi slots, {} tracked):",
        table.len()
    );
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!("  ThpMap::read (512 lookups)         {:7.2} us", us(read));
    println!("  split::decide (the four stages)    {:7.2} us", us(decide));
    println!("  region_decision, cache forgotten   {:7.2} us", us(region));
    println!("  region_decision, cached            {:7.2} us", us(cached));
}
