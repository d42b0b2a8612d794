//! The upkeep: the audit and demotion; the heat histogram's ageing.

use super::*;

/// Records one slow-node sample of each candidate's page at 1 ms, then promotes the batch.
fn promote_sampled(rig: &mut Rig, batch: &mut Vec<Candidate>) {
    for c in batch.iter() {
        rig.table.record(&Access {
            key: c.key,
            time_ns: 1_000_000,
            node: 2,
            op: AccessOp::Load,
        });
    }
    rig.migrator.process(batch);
}

/// One sample of pid 10's page `page` on fast node 0 at `ms`.
fn fast_sample(rig: &Rig, page: u64, ms: u64) {
    rig.table.touch(&Access {
        key: PageKey::new(10, page * PAGE_SIZE).unwrap(),
        time_ns: ms * 1_000_000,
        node: 0,
        op: AccessOp::Load,
    });
}

#[test]
fn the_audit_finds_pages_the_kernel_moved_back_and_tracks_them_as_lower_tier() {
    let mut rig = rig(MigratorConfig::default());
    map(&rig, 10, 0..3);
    let mut batch = vec![cand(10, 0, 0), cand(10, 1, 0), cand(10, 2, 1)];
    promote_sampled(&mut rig, &mut batch);
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 3);
    // The kernel demotes one page behind pghotd's back; the table still says node 0, and
    // samples without a node have been taking the table's word.
    let key = PageKey::new(10, PAGE_SIZE).unwrap();
    rig.mover.0.lock().pages.insert((10, PAGE_SIZE), SLOW);
    assert_eq!(rig.table.get(key).unwrap().node(), 0);
    rig.stats.add(Counter::PghotBelievedNodeSamples, 1);
    rig.migrator.maintain();
    assert_eq!(counter(&rig, Counter::PghotAuditPages), 3);
    assert_eq!(counter(&rig, Counter::PghotAuditMovedBack), 1);
    let e = rig.table.get(key).unwrap();
    assert_eq!(e.node(), 2, "tracked as lower-tier again");
    assert!(!e.is_promoted());
    // Once a second, not per interval.
    rig.migrator.maintain();
    assert_eq!(counter(&rig, Counter::PghotAuditPages), 3);
    rig.clock.advance(audit::AUDIT_EVERY);
    rig.stats.add(Counter::PghotBelievedNodeSamples, 1);
    rig.migrator.maintain();
    assert_eq!(counter(&rig, Counter::PghotAuditPages), 5);
}

/// Samples that show their page's node (a physical address, as IBS and PEBS give, or a node)
/// correct the table themselves, so a second without node-less samples is a second without
/// an audit; the first such sample makes the next due audit run.
#[test]
fn no_audit_while_every_sample_shows_its_node() {
    let mut rig = rig(MigratorConfig::default());
    map(&rig, 10, 0..2);
    let mut batch = vec![cand(10, 0, 0), cand(10, 1, 0)];
    promote_sampled(&mut rig, &mut batch);
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 2);
    rig.mover.0.lock().pages.insert((10, 0), SLOW);
    for _ in 0..3 {
        rig.migrator.maintain();
        rig.clock.advance(audit::AUDIT_EVERY);
    }
    assert_eq!(counter(&rig, Counter::PghotAuditPages), 0);
    let key = PageKey::new(10, 0).unwrap();
    assert_eq!(rig.table.get(key).unwrap().node(), 0, "not re-checked");
    rig.stats.add(Counter::PghotBelievedNodeSamples, 1);
    rig.migrator.maintain();
    assert_eq!(counter(&rig, Counter::PghotAuditPages), 2);
    assert_eq!(rig.table.get(key).unwrap().node(), 2);
}

#[test]
fn a_dry_run_never_audits() {
    let mut rig = rig(MigratorConfig {
        dry_run: true,
        ..MigratorConfig::default()
    });
    let key = PageKey::new(10, 0).unwrap();
    rig.table.record(&Access {
        key,
        time_ns: 1_000_000,
        node: 2,
        op: AccessOp::Load,
    });
    rig.table.mark_promoted(key, 0);
    assert_eq!(audit::pick(&rig.table, &[0, 1], 10), vec![key]);
    rig.migrator.maintain();
    assert_eq!(counter(&rig, Counter::PghotAuditPages), 0);
    assert_eq!(rig.table.get(key).unwrap().node(), 0);
}

/// A rig with pages 0..`mapped` of pid 10 on the slow node, of which 0..`promoted` were
/// sampled twice at 0 ms and promoted to node 0.
fn rig_with_promoted(demote: bool, mapped: u64, promoted: u64) -> (Rig, Arc<FakeFree>) {
    let config = MigratorConfig {
        demote,
        ..MigratorConfig::default()
    };
    let (mut rig, free) = rig_with_free(config);
    map(&rig, 10, 0..mapped);
    for page in 0..promoted {
        sample(&rig, 10, page, 2, 0);
    }
    rig.migrator
        .process(&mut (0..promoted).map(|p| cand(10, p, 0)).collect());
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), promoted);
    (rig, free)
}

/// After a shift: eight of our pages went cold, six single-sample candidates of the new
/// set and two hotter ones arrive, with room for four. Returns (promoted of the new set,
/// held back as cold, held back at the watermark).
fn shifted_set_with_room_for_four(demote: bool) -> (u64, u64, u64) {
    let (mut rig, free) = rig_with_promoted(demote, 40, 8);
    // The old demand ages out (three half-lives); plenty free, nothing demoted.
    rig.migrator.age_heat(3);
    for _ in 0..3 {
        rig.migrator.maintain();
    }
    // 10 s later the new set is sampled: once (heat 1) or four times (heat 4).
    for page in 10..16 {
        sample(&rig, 10, page, 1, 10_000);
    }
    for page in 20..22 {
        sample(&rig, 10, page, 4, 10_000);
    }
    // Two pages under the low watermark: a pass demotes two of the cold eight.
    free.0.lock().insert(0, 51_535 - 8);
    rig.migrator.maintain();
    let demoted = counter(&rig, Counter::PgdemoteSuccess);
    assert_eq!(demoted, if demote { 2 } else { 0 });
    free.0.lock().insert(0, NODE0_RESERVE_KB + 4 * 4);
    let mut batch: Vec<_> = (10..16).chain(20..22).map(|p| cand(10, p, 0)).collect();
    rig.migrator.process(&mut batch);
    (
        counter(&rig, Counter::PgpromoteSuccess) - 8,
        counter(&rig, Counter::PgpromoteFailCold),
        counter(&rig, Counter::PgpromoteFailWatermark),
    )
}

#[test]
fn with_demotion_our_cold_pages_count_as_room_for_the_heat_cut() {
    // Without demotion the old set's pages are there for good: the cut keeps the room for
    // the hotter pages and refuses the single-sample ones as cold, room left over.
    assert_eq!(shifted_set_with_room_for_four(false), (2, 6, 0));
    // With it, the six cold pages left are room demotion can make: the room is filled,
    // and what it cannot take waits at the watermark (which makes the next pass demote).
    assert_eq!(shifted_set_with_room_for_four(true), (4, 0, 4));
}

#[test]
fn demotion_moves_back_our_coldest_pages_under_the_low_watermark() {
    // Promote six pages; pages 0-2 then go cold, 3-5 stay hot.
    let (mut rig, free) = rig_with_promoted(true, 6, 6);
    for page in 3..6 {
        fast_sample(&rig, page, 10_000);
    }
    // Plenty free: nothing moves.
    rig.migrator.maintain();
    assert_eq!(counter(&rig, Counter::PgdemoteSuccess), 0);
    // Two pages short of the 5 % low watermark (51535 kB): the two coldest of ours go.
    free.0.lock().insert(0, 51_535 - 8);
    rig.migrator.maintain();
    assert_eq!(counter(&rig, Counter::PgdemoteSuccess), 2);
    let mem = rig.mover.0.lock();
    let on_slow: Vec<u64> = (0..6)
        .filter(|p| mem.pages[&(10, p * PAGE_SIZE)] == SLOW)
        .collect();
    drop(mem);
    assert_eq!(on_slow.len(), 2);
    assert!(on_slow.iter().all(|p| *p < 3), "{on_slow:?}");
    let e = rig
        .table
        .get(PageKey::new(10, on_slow[0] * PAGE_SIZE).unwrap());
    assert_eq!(
        e.map(|e| (e.node(), e.is_promoted())),
        Some((SLOW as u16, false))
    );
    // Hot pages stay even when far short, with nothing waiting and no cold page left.
    free.0.lock().insert(0, 0);
    rig.migrator.maintain();
    assert_eq!(counter(&rig, Counter::PgdemoteSuccess), 3);
}

#[test]
fn demotion_is_off_by_default() {
    let (mut rig, free) = rig_with_free(MigratorConfig::default());
    map(&rig, 10, 0..2);
    sample(&rig, 10, 0, 1, 0);
    rig.migrator.process(&mut vec![cand(10, 0, 0)]);
    sample(&rig, 10, 1, 1, 60_000); // moves the table clock on: page 0 is cold
    free.0.lock().insert(0, 0);
    rig.migrator.maintain();
    assert_eq!(counter(&rig, Counter::PgdemoteSuccess), 0);
}

#[test]
fn our_pages_under_a_share_of_the_heat_floor_go_back_whatever_the_free_memory() {
    // Four pages promoted on two samples each; then pages 0 and 1 take 100 samples on the
    // fast node. Heat is the sample count (an hour's half-life). By hand: 80 % of 208 is
    // 166.4, inside the 102-sample pages' 204: 102 = 0b110_0110, top 4 bits 1100 -> a bucket
    // from 96 samples to 104, 166.4 of its 204 down from its top: 96 + 8 * 0.1843 = 97.47
    // (24,953 in fixed point); pages 2 and 3 (2 samples) are under half of it.
    for (pct, back) in [(0, 0), (50, 2)] {
        let (mut rig, _free) = rig_with_promoted(false, 4, 4);
        for page in 0..2 {
            (0..100).for_each(|_| fast_sample(&rig, page, 1));
        }
        rig.table.set_policy(HotnessConfig {
            heat_halflife_ms: 3_600_000,
            hot_share_pct: 80,
            demote_below_floor_pct: pct,
            ..rig.table.policy()
        });
        // 4 shards, so 4 slices: one sweep sets the floor, a second checks every page with it.
        (0..8).for_each(|_| rig.table.set_recorded_rate(1.0));
        assert_eq!(rig.table.heat_floor(), Some(24_953.0 / 256.0));
        // Paused: nothing moves.
        rig.migrator
            .paused
            .store(true, std::sync::atomic::Ordering::Relaxed);
        rig.migrator.maintain();
        assert_eq!(counter(&rig, Counter::PgdemoteSuccess), 0);
        rig.migrator
            .paused
            .store(false, std::sync::atomic::Ordering::Relaxed);
        // Plenty free (no watermark involved), demote = false.
        rig.migrator.maintain();
        assert_eq!(counter(&rig, Counter::PgdemoteSuccess), back);
        assert_eq!(counter(&rig, Counter::PgdemoteBelowFloor), back);
        let mem = rig.mover.0.lock();
        let on_slow: Vec<u64> = (0..4)
            .filter(|p| mem.pages[&(10, p * PAGE_SIZE)] == SLOW)
            .collect();
        assert_eq!(on_slow, if back > 0 { vec![2, 3] } else { vec![] });
    }
}

#[test]
fn with_hot_share_room_only_what_a_short_node_lacks_goes_back() {
    // As above, pages 2 and 3 of the four on node 0 are under 50 % of the floor; node 1 keeps
    // the fake's 1 TiB free. By hand: 16 MiB of room is 16,384 kB above node 0's 20,614 kB
    // reserve; a node has room again at a quarter more, 20,480 kB.
    let (mut rig, free) = rig_with_promoted(false, 4, 4);
    for page in 0..2 {
        (0..100).for_each(|_| fast_sample(&rig, page, 1));
    }
    rig.table.set_policy(HotnessConfig {
        heat_halflife_ms: 3_600_000,
        hot_share_pct: 80,
        demote_below_floor_pct: 50,
        hot_share_room_mb: 16,
        ..rig.table.policy()
    });
    (0..8).for_each(|_| rig.table.set_recorded_rate(1.0));
    let below_floor = |rig: &Rig| counter(rig, Counter::PgdemoteBelowFloor);
    // Room on both: the share stands aside and nothing goes back.
    rig.migrator.maintain();
    assert!(!rig.table.share_applies(Some(0)));
    assert_eq!(below_floor(&rig), 0);
    // Node 0 is 4 kB short: one 4 KiB page goes back, the first of the two by address.
    free.0.lock().insert(0, NODE0_RESERVE_KB + 16_384 - 4);
    rig.migrator.maintain();
    assert!(rig.table.share_applies(Some(0)));
    assert_eq!(rig.table.short_nodes(), 0b1);
    assert_eq!(below_floor(&rig), 1);
    assert_eq!(rig.mover.0.lock().pages[&(10, 2 * PAGE_SIZE)], SLOW);
    // With the setting's room again it stays short until a quarter above, moving nothing.
    for room_kb in [16_384, 20_479] {
        free.0.lock().insert(0, NODE0_RESERVE_KB + room_kb);
        rig.migrator.maintain();
        assert!(rig.table.share_applies(Some(0)), "{room_kb}");
        assert_eq!(below_floor(&rig), 1, "{room_kb}");
    }
    free.0.lock().insert(0, NODE0_RESERVE_KB + 20_480);
    rig.migrator.maintain();
    assert!(!rig.table.share_applies(Some(0)));
    assert_eq!(below_floor(&rig), 1);
    assert_eq!(rig.mover.0.lock().pages[&(10, 3 * PAGE_SIZE)], 0);
}

/// By hand: an upkeep is busy while a fast node is short of `hot_share_room_mb` (16 MiB: node
/// 0 with 8 MiB above its 2 % reserve is short, and stays so until it has a quarter more than
/// the setting), else idle, promotions or not; and a batch whose promotions leave node 0 short
/// makes it short for the table at once, before any upkeep reads it.
#[test]
fn an_upkeep_is_busy_while_a_fast_node_is_short_and_a_batch_notes_the_room_it_left() {
    let (mut rig, free) = rig_with_free(MigratorConfig::default());
    map(&rig, 10, 0..4);
    assert_eq!(rig.migrator.maintain(), Upkeep::Idle, "nothing yet");
    let mut batch = vec![cand(10, 0, 0), cand(10, 1, 0)];
    promote_sampled(&mut rig, &mut batch);
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 2);
    assert_eq!(rig.migrator.maintain(), Upkeep::Idle, "promotions alone");
    rig.table.set_policy(HotnessConfig {
        hot_share_room_mb: 16,
        ..rig.table.policy()
    });
    free.0.lock().insert(0, NODE0_RESERVE_KB + 8 * 1024);
    assert_eq!(rig.migrator.maintain(), Upkeep::Busy, "node 0 short");
    free.0.lock().insert(0, NODE0_RESERVE_KB + 18 * 1024);
    assert_eq!(rig.migrator.maintain(), Upkeep::Busy, "still under 20 MiB");
    free.0.lock().insert(0, NODE0_RESERVE_KB + 21 * 1024);
    assert_eq!(rig.migrator.maintain(), Upkeep::Idle, "room again");
    assert_eq!(rig.table.short_nodes(), 0);
    // 16 MiB + 4 KiB free above the reserve before a batch of two 4 KiB pages: it leaves
    // 16 MiB - 4 KiB, short, and the table knows it with no upkeep in between.
    free.0.lock().insert(0, NODE0_RESERVE_KB + 16 * 1024 + 4);
    let mut batch = vec![cand(10, 2, 0), cand(10, 3, 0)];
    promote_sampled(&mut rig, &mut batch);
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 4);
    assert_eq!(rig.table.short_nodes(), 1, "node 0 short after the batch");
}
