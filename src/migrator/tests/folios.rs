//! Folio sizes (`folios.rs`): a candidate in a THP is charged, rate-limited, held at the
//! watermark and counted at the THP's size, one candidate per folio moves it, and a THP too
//! thinly sampled waits. Expected values are worked by hand from the sizes.

use super::*;
use crate::migrator::folios::{Folio, FolioError, FolioMap, RECOUNT_AFTER};
use std::sync::atomic::{AtomicUsize, Ordering};

const PID: u32 = 10;
/// 2 MiB in 4 KiB pages: a PMD THP on x86-64.
const THP: u32 = 512;

/// Large folios of `PID` by hand; counts the lookups.
struct FakeFolios {
    folios: Vec<Folio>,
    unavailable: bool,
    calls: Arc<AtomicUsize>,
}

impl FolioMap for FakeFolios {
    fn large_folios(&mut self, pid: u32, vaddrs: &[u64]) -> Result<Vec<Option<Folio>>, FolioError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if self.unavailable {
            return Err(FolioError::Unavailable(
                "kpageflags: permission denied".into(),
            ));
        }
        Ok(vaddrs
            .iter()
            .map(|&v| {
                self.folios
                    .iter()
                    .find(|f| pid == PID && v >= f.start && v < f.start + f.bytes())
                    .copied()
            })
            .collect())
    }
}

/// A rig whose pid 10 has a THP at pages 512..1024 and a 64 KiB mTHP at pages 16..32; pages
/// 0..16 are base pages.
fn folio_rig(config: MigratorConfig, unavailable: bool) -> (Rig, Arc<AtomicUsize>) {
    let mut rig = rig(config);
    let calls = Arc::new(AtomicUsize::new(0));
    let folios = FakeFolios {
        folios: vec![
            Folio {
                start: 512 * PAGE_SIZE,
                pages: THP,
            },
            Folio {
                start: 16 * PAGE_SIZE,
                pages: 16,
            },
        ],
        unavailable,
        calls: Arc::clone(&calls),
    };
    rig.migrator = rig.migrator.with_folios(Box::new(folios));
    map(&rig, PID, 0..1024);
    (rig, calls)
}

fn moves_everything() -> MigratorConfig {
    MigratorConfig {
        promote_thp_min_samples_pct: 0,
        ..MigratorConfig::default()
    }
}

#[test]
fn a_thp_candidate_is_charged_and_counted_at_2_mib_and_moves_once() {
    let (mut rig, _) = folio_rig(moves_everything(), false);
    // Two candidates in the THP, one in the mTHP, one base page.
    let mut batch = vec![
        cand(PID, 600, 0),
        cand(PID, 513, 0),
        cand(PID, 20, 0),
        cand(PID, 3, 0),
    ];
    rig.migrator.process(&mut batch);
    // 2 MiB + 64 KiB + 4 KiB.
    assert_eq!(rig.stats.promoted_bytes(0), (2 << 20) + 65_536 + 4096);
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 3);
    assert_eq!(counter(&rig, Counter::PgpromoteSameFolio), 1);
    assert_eq!(counter(&rig, Counter::ThpWholePromotions), 1);
    // Three sizes of one process: one query and one move of three addresses, by address;
    // the THP's is the lowest candidate address in it (page 513).
    let mem = rig.mover.0.lock();
    assert_eq!(mem.calls, vec![(PID, 3, false), (PID, 3, true)]);
    assert_eq!(mem.move_nodes, vec![vec![0, 0, 0]]);
    assert_eq!(mem.pages[&(PID, 513 * PAGE_SIZE)], 0);
    assert_eq!(mem.pages[&(PID, 600 * PAGE_SIZE)], SLOW);
}

#[test]
fn the_rate_limit_charges_a_thp_its_2_mib() {
    // 4 MiB/s: two THPs use the whole one-second burst; the third and a base page wait.
    let (mut rig, _) = folio_rig(
        MigratorConfig {
            promote_rate_limit_mbps: 4,
            ..moves_everything()
        },
        false,
    );
    let second = Folio {
        start: 1024 * PAGE_SIZE,
        pages: THP,
    };
    let third = Folio {
        start: 1536 * PAGE_SIZE,
        pages: THP,
    };
    map(&rig, PID, 1024..2048);
    let calls = Arc::new(AtomicUsize::new(0));
    rig.migrator.folios = Some(Box::new(FakeFolios {
        folios: vec![
            Folio {
                start: 512 * PAGE_SIZE,
                pages: THP,
            },
            second,
            third,
        ],
        unavailable: false,
        calls,
    }));
    let mut batch = vec![cand(PID, 520, 0), cand(PID, 1030, 0), cand(PID, 1600, 0)];
    rig.migrator.process(&mut batch);
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 2);
    assert_eq!(counter(&rig, Counter::PgpromoteRatelimited), 1);
    assert_eq!(rig.stats.promoted_bytes(0), 4 << 20);
    let mut batch = vec![cand(PID, 5, 0)];
    rig.migrator.process(&mut batch);
    assert_eq!(counter(&rig, Counter::PgpromoteRatelimited), 2);
    // Half a second refills 2 MiB: the third THP moves.
    rig.clock.advance(std::time::Duration::from_millis(500));
    let mut batch = vec![cand(PID, 1600, 0)];
    rig.migrator.process(&mut batch);
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 3);
}

#[test]
fn the_watermark_holds_a_thp_back_when_2_mib_do_not_fit() {
    let (mut rig, _) = folio_rig(moves_everything(), false);
    let free = Arc::new(FakeFree::default());
    // 1 MiB above the reserve: a 64 KiB mTHP and base pages fit, the THP does not.
    free.0.lock().insert(0, NODE0_RESERVE_KB + 1024);
    rig.migrator.free = Arc::clone(&free) as Arc<dyn FreeMemory>;
    let mut batch = vec![cand(PID, 700, 0), cand(PID, 17, 0), cand(PID, 1, 0)];
    rig.migrator.process(&mut batch);
    assert_eq!(counter(&rig, Counter::PgpromoteFailWatermark), 1);
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 2);
    assert_eq!(rig.stats.promoted_bytes(0), 65_536 + 4096);
}

#[test]
fn a_thinly_sampled_thp_waits_until_its_pages_hold_a_quarters_worth_of_samples() {
    let (mut rig, _) = folio_rig(MigratorConfig::default(), false);
    assert_eq!(MigratorConfig::default().promote_thp_min_samples_pct, 25);
    // A quarter of 512 pages at freq_threshold 2 each: 128 * 2 = 256 samples, by hand.
    // One page with 2 samples: deferred, un-queued (its next sample offers it again).
    assert_eq!(sample(&rig, PID, 520, 2, 1), Recorded::Candidate);
    let mut batch = vec![cand(PID, 520, 0)];
    rig.migrator.process(&mut batch);
    assert_eq!(counter(&rig, Counter::PgpromoteDeferredSparseFolio), 1);
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 0);
    assert!(!rig.table.get(cand(PID, 520, 0).key).unwrap().is_queued());
    // Heat in a few pages counts as much as heat spread thin: 9 more pages with 28 samples
    // each make 2 + 252 = 254, still short; one more sample of page 520 makes 255, and one
    // of a tenth page 256.
    for p in 521..530 {
        sample(&rig, PID, p, 28, 2);
    }
    sample(&rig, PID, 520, 1, 2);
    // Each count a second after the last (a folio found sparse is not counted sooner: the
    // next test).
    rig.clock.advance(RECOUNT_AFTER);
    let mut batch = vec![cand(PID, 520, 0)];
    rig.migrator.process(&mut batch);
    assert_eq!(counter(&rig, Counter::PgpromoteDeferredSparseFolio), 2);
    sample(&rig, PID, 530, 1, 2);
    rig.clock.advance(RECOUNT_AFTER);
    let mut batch = vec![cand(PID, 520, 0)];
    rig.migrator.process(&mut batch);
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 1);
    assert_eq!(rig.stats.promoted_bytes(0), 2 << 20);
    // The 64 KiB mTHP (16 pages): a quarter is 4 pages, 8 samples. One page with 2 waits;
    // three more with 2 each make 8.
    sample(&rig, PID, 20, 2, 3);
    let mut batch = vec![cand(PID, 20, 0)];
    rig.migrator.process(&mut batch);
    assert_eq!(counter(&rig, Counter::PgpromoteDeferredSparseFolio), 3);
    for p in 21..24 {
        sample(&rig, PID, p, 2, 3);
    }
    rig.clock.advance(RECOUNT_AFTER);
    let mut batch = vec![cand(PID, 20, 0)];
    rig.migrator.process(&mut batch);
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 2);
}

/// By hand: the THP at page 512 holds 2 samples (256 needed) and waits; then 300 more land
/// in it. Within a second of the count that found it sparse its candidates wait without a
/// count (counted skipped and deferred); a second after it, the count finds 302 and it moves.
/// Another folio (the mTHP at 16) is counted meanwhile: the skip is per folio.
#[test]
fn a_folio_found_sparse_is_not_counted_again_for_a_second() {
    let (mut rig, _) = folio_rig(MigratorConfig::default(), false);
    sample(&rig, PID, 520, 2, 1);
    let mut batch = vec![cand(PID, 520, 0)];
    rig.migrator.process(&mut batch);
    assert_eq!(counter(&rig, Counter::PgpromoteDeferredSparseFolio), 1);
    assert_eq!(counter(&rig, Counter::FolioRecountsSkipped), 0);
    for p in 521..531 {
        sample(&rig, PID, p, 30, 2);
    }
    // 2 + 300 samples: enough, but within the second it is not counted.
    rig.clock
        .advance(RECOUNT_AFTER - std::time::Duration::from_millis(1));
    let mut batch = vec![cand(PID, 521, 0), cand(PID, 525, 0)];
    rig.migrator.process(&mut batch);
    assert_eq!(counter(&rig, Counter::FolioRecountsSkipped), 1);
    assert_eq!(counter(&rig, Counter::PgpromoteDeferredSparseFolio), 3);
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 0);
    // The mTHP at 16 (16 pages, 8 samples needed) has its own count: 8 samples, it moves.
    for p in 16..20 {
        sample(&rig, PID, p, 2, 3);
    }
    let mut batch = vec![cand(PID, 16, 0)];
    rig.migrator.process(&mut batch);
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 1);
    // A second after the count: counted again, and it moves.
    rig.clock.advance(std::time::Duration::from_millis(1));
    let mut batch = vec![cand(PID, 521, 0)];
    rig.migrator.process(&mut batch);
    assert_eq!(counter(&rig, Counter::FolioRecountsSkipped), 1);
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 2);
    assert_eq!(rig.stats.promoted_bytes(0), (2 << 20) + 65_536);
}

#[test]
fn without_folio_sizes_candidates_go_on_at_4_kib_and_sizing_stops() {
    let (mut rig, calls) = folio_rig(moves_everything(), true);
    let mut batch = vec![cand(PID, 600, 0), cand(PID, 3, 0)];
    rig.migrator.process(&mut batch);
    assert_eq!(counter(&rig, Counter::FolioSizeUnknown), 2);
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 2);
    assert_eq!(rig.stats.promoted_bytes(0), 2 * 4096);
    let mut batch = vec![cand(PID, 601, 0)];
    rig.migrator.process(&mut batch);
    assert_eq!(calls.load(Ordering::Relaxed), 1);
    assert_eq!(counter(&rig, Counter::FolioSizeUnknown), 2);
}

/// Moving back under the floor (`demote_below_floor_pct`) leaves a page in a large folio where
/// it is. Pages 0 and 1 (base) and 20 (in the 64 KiB mTHP at 16..32) are promoted on two
/// samples each, then pages 0 and 1 take 100 samples each on the fast node: heats 102, 102,
/// 2, 2 samples, as in `our_pages_under_a_share_of_the_heat_floor_go_back_whatever_the_free_memory`
/// with page 20 for page 3 (a floor of 97.47; 2 < 48.7). Page 2 moves back; page 20 would move its
/// whole mTHP, so it is held and counted, at each upkeep that finds it.
#[test]
fn a_page_under_the_floor_in_a_large_folio_is_not_moved_back() {
    let (mut rig, calls) = folio_rig(moves_everything(), false);
    let pages = [0u64, 1, 2, 20];
    for &p in &pages {
        sample(&rig, PID, p, 2, 0);
    }
    rig.migrator
        .process(&mut pages.iter().map(|&p| cand(PID, p, 0)).collect());
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 4);
    for p in 0..2 {
        for _ in 0..100 {
            rig.table.touch(&Access {
                key: PageKey::new(PID, p * PAGE_SIZE).unwrap(),
                time_ns: 1_000_000,
                node: 0,
                op: AccessOp::Load,
            });
        }
    }
    rig.table.set_policy(HotnessConfig {
        heat_halflife_ms: 3_600_000,
        hot_share_pct: 80,
        demote_below_floor_pct: 50,
        ..rig.table.policy()
    });
    (0..8).for_each(|_| rig.table.set_recorded_rate(1.0));
    assert_eq!(rig.table.heat_floor(), Some(24_953.0 / 256.0));
    let looked_up = calls.load(Ordering::Relaxed);
    rig.migrator.maintain();
    assert_eq!(counter(&rig, Counter::PgdemoteBelowFloor), 1);
    assert_eq!(counter(&rig, Counter::PgdemoteHeldLargeFolio), 1);
    assert_eq!(
        calls.load(Ordering::Relaxed),
        looked_up + 1,
        "one lookup per process"
    );
    let mem = rig.mover.0.lock();
    assert_eq!(mem.pages[&(PID, 2 * PAGE_SIZE)], SLOW);
    assert_eq!(mem.pages[&(PID, 20 * PAGE_SIZE)], 0);
    drop(mem);
    // Still ours, still under: held again at the next upkeep.
    rig.migrator.maintain();
    assert_eq!(counter(&rig, Counter::PgdemoteHeldLargeFolio), 2);
    assert_eq!(counter(&rig, Counter::PgdemoteBelowFloor), 1);
}
