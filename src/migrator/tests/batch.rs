//! Grouping, the query and move, per-page and whole-call outcomes, the rate limit, dry runs.

use super::*;

/// By hand: pid 10 has pages 0, 1 and 3 bound for node 0 and page 2 for node 1, pid 11 pages
/// 0 and 1 for node 1. Each process is one query and one move (four pages, then two), the
/// move's pages in one run per destination (node 0's three by address, then node 1's one).
#[test]
fn one_query_and_one_move_per_process_whatever_the_destinations() {
    let mut rig = rig(MigratorConfig::default());
    map(&rig, 10, 0..4);
    map(&rig, 11, 0..2);
    let mut batch = vec![
        cand(10, 0, 0),
        cand(11, 0, 1),
        cand(10, 1, 0),
        cand(10, 2, 1),
        cand(11, 1, 1),
        cand(10, 3, 0),
    ];
    rig.migrator.process(&mut batch);
    assert!(batch.is_empty());
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 6);
    assert_eq!(rig.stats.promoted_bytes(0), 3 * PAGE_SIZE);
    assert_eq!(rig.stats.promoted_bytes(1), 3 * PAGE_SIZE);
    let mem = rig.mover.0.lock();
    assert_eq!(
        mem.calls,
        vec![(10, 4, false), (10, 4, true), (11, 2, false), (11, 2, true)]
    );
    assert_eq!(mem.move_nodes, vec![vec![0, 0, 0, 1], vec![1, 1]]);
    assert_eq!(mem.pages[&(10, 2 * PAGE_SIZE)], 1);
    assert_eq!(mem.pages[&(10, 3 * PAGE_SIZE)], 0);
    assert_eq!(counter(&rig, Counter::MigratorSyscalls), 4);
    drop(mem);
    // Every destination's bucket was charged its three pages, none refunded.
    let full = 65536u64 << 20;
    assert_eq!(rig.migrator.limits.tokens(0), Some(full - 3 * PAGE_SIZE));
    assert_eq!(rig.migrator.limits.tokens(1), Some(full - 3 * PAGE_SIZE));
}

/// A move that stops after the first destination's run (the kernel returns the pages it did
/// not migrate and leaves later entries unwritten): node 0's two pages moved, node 1's two
/// are found still on the slow node by the re-query, counted as not migrated and refunded
/// to node 1's bucket alone.
#[test]
fn a_call_stopped_between_destinations_refunds_only_the_one_left() {
    let mut rig = rig(MigratorConfig::default());
    map(&rig, 10, 0..4);
    rig.mover
        .0
        .lock()
        .script
        .push_back(Script::Partial { moved: 2 });
    let mut batch = vec![
        cand(10, 3, 1),
        cand(10, 0, 0),
        cand(10, 2, 1),
        cand(10, 1, 0),
    ];
    rig.migrator.process(&mut batch);
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 2);
    assert_eq!(counter(&rig, Counter::PgpromoteFailNotMigrated), 2);
    assert_eq!(rig.stats.promoted_bytes(0), 2 * PAGE_SIZE);
    assert_eq!(rig.stats.promoted_bytes(1), 0);
    assert_eq!(outcomes(&rig), 4);
    let full = 65536u64 << 20;
    assert_eq!(rig.migrator.limits.tokens(0), Some(full - 2 * PAGE_SIZE));
    assert_eq!(rig.migrator.limits.tokens(1), Some(full));
}

#[test]
fn per_page_statuses_land_in_their_counters() {
    let mut rig = rig(MigratorConfig::default());
    map(&rig, 10, 0..2);
    {
        let mut mem = rig.mover.0.lock();
        mem.pages.insert((10, 2 * PAGE_SIZE), -libc::EFAULT);
        mem.pages.insert((10, 3 * PAGE_SIZE), 0); // already promoted by someone else
        // page 4: never mapped -> -ENOENT
    }
    let mut batch: Vec<_> = (0..5).map(|p| cand(10, p, 0)).collect();
    rig.migrator.process(&mut batch);
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 2);
    assert_eq!(counter(&rig, Counter::PgpromoteFailFault), 1);
    assert_eq!(counter(&rig, Counter::PgpromoteAlreadyToptier), 1);
    assert_eq!(counter(&rig, Counter::PgpromoteFailNotPresent), 1);
    assert_eq!(outcomes(&rig), 5);
}

#[test]
fn a_positive_return_is_resolved_by_requery() {
    let mut rig = rig(MigratorConfig::default());
    map(&rig, 10, 0..5);
    rig.mover
        .0
        .lock()
        .script
        .push_back(Script::Partial { moved: 2 });
    let mut batch: Vec<_> = (0..5).map(|p| cand(10, p, 0)).collect();
    rig.migrator.process(&mut batch);
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 2);
    assert_eq!(counter(&rig, Counter::PgpromoteFailNotMigrated), 3);
    assert_eq!(outcomes(&rig), 5);
    // The three that stayed behind are refunded to the bucket.
    assert_eq!(
        rig.migrator.limits.tokens(0),
        Some((65536u64 << 20) - 2 * PAGE_SIZE)
    );
}

#[test]
fn enomem_mid_call_counts_what_moved_before_it() {
    let mut rig = rig(MigratorConfig::default());
    map(&rig, 10, 0..4);
    rig.mover.0.lock().script.push_back(Script::Fail {
        moved: 1,
        errno: Errno::ENOMEM,
    });
    let mut batch: Vec<_> = (0..4).map(|p| cand(10, p, 0)).collect();
    rig.migrator.process(&mut batch);
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 1);
    assert_eq!(counter(&rig, Counter::PgpromoteFailNomem), 3);
    assert_eq!(outcomes(&rig), 4);
}

#[test]
fn whole_call_errors_count_every_page() {
    for (errno, want) in [
        (Errno::EACCES, Counter::PgpromoteFailNotAllowed),
        (Errno::ENODEV, Counter::PgpromoteFailNoNode),
        (Errno::EPERM, Counter::PgpromoteFailPermission),
        (Errno::EINVAL, Counter::PgpromoteFailOther),
    ] {
        let mut rig = rig(MigratorConfig::default());
        map(&rig, 10, 0..3);
        rig.mover
            .0
            .lock()
            .script
            .push_back(Script::Fail { moved: 0, errno });
        let mut batch: Vec<_> = (0..3).map(|p| cand(10, p, 0)).collect();
        rig.migrator.process(&mut batch);
        assert_eq!(counter(&rig, want), 3, "{errno}");
        assert_eq!(outcomes(&rig), 3, "{errno}");
    }
}

#[test]
fn a_process_that_exited_fails_its_pages_not_the_batch() {
    let mut rig = rig(MigratorConfig::default());
    map(&rig, 10, 0..2);
    map(&rig, 11, 0..2);
    rig.mover.0.lock().gone.push(11);
    let mut batch = vec![
        cand(10, 0, 0),
        cand(11, 0, 0),
        cand(11, 1, 0),
        cand(10, 1, 0),
    ];
    rig.migrator.process(&mut batch);
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 2);
    assert_eq!(counter(&rig, Counter::PgpromoteFailNoProcess), 2);
}

#[test]
fn rate_limit_holds_back_and_refills_with_the_clock() {
    let config = MigratorConfig {
        promote_rate_limit_mbps: 1, // 256 pages per second
        ..MigratorConfig::default()
    };
    let mut rig = rig(config);
    map(&rig, 10, 0..600);
    let mut batch: Vec<_> = (0..300).map(|p| cand(10, p, 0)).collect();
    rig.migrator.process(&mut batch);
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 256);
    assert_eq!(counter(&rig, Counter::PgpromoteRatelimited), 44);
    rig.clock.advance(Duration::from_millis(250));
    let mut batch: Vec<_> = (300..400).map(|p| cand(10, p, 0)).collect();
    rig.migrator.process(&mut batch);
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 256 + 64);
    assert_eq!(counter(&rig, Counter::PgpromoteRatelimited), 44 + 36);
}

#[test]
fn reconfigure_applies_a_lower_rate_to_existing_buckets() {
    let mut rig = rig(MigratorConfig::default());
    map(&rig, 10, 0..400);
    rig.migrator.process(&mut vec![cand(10, 0, 0)]);
    rig.migrator.reconfigure(MigratorConfig {
        promote_rate_limit_mbps: 1,
        ..MigratorConfig::default()
    });
    rig.migrator
        .process(&mut (1..400).map(|p| cand(10, p, 0)).collect());
    // The bucket was capped to the new one-second burst: 256 pages.
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 1 + 256);
    assert_eq!(counter(&rig, Counter::PgpromoteRatelimited), 399 - 256);
}

#[test]
fn migrators_share_the_budget_of_a_destination() {
    let config = MigratorConfig {
        promote_rate_limit_mbps: 1, // 256 pages per second to each destination
        ..MigratorConfig::default()
    };
    let mut a = rig(config);
    let mut b = rig(config);
    b.migrator.limits = a.migrator.limits.clone();
    b.migrator.clock = a.clock.clone();
    map(&a, 10, 0..200);
    map(&b, 11, 0..300);
    a.migrator
        .process(&mut (0..200).map(|p| cand(10, p, 0)).collect());
    b.migrator
        .process(&mut (0..200).map(|p| cand(11, p, 0)).collect());
    let promoted = counter(&a, Counter::PgpromoteSuccess) + counter(&b, Counter::PgpromoteSuccess);
    assert_eq!(promoted, 256);
    // Another destination has its own budget.
    b.migrator
        .process(&mut (200..300).map(|p| cand(11, p, 1)).collect());
    assert_eq!(counter(&b, Counter::PgpromoteSuccess), 56 + 100);
}

#[test]
fn pages_held_back_by_the_rate_limit_are_offered_again_permanent_failures_are_not() {
    let config = MigratorConfig {
        promote_rate_limit_mbps: 1,
        ..MigratorConfig::default()
    };
    let mut rig = rig(config);
    map(&rig, 10, 0..300);
    let access = |page: u64| Access {
        key: PageKey::new(10, page * PAGE_SIZE).unwrap(),
        time_ns: 0,
        node: 2,
        op: AccessOp::Load,
    };
    let mut batch = Vec::new();
    for page in 0..300 {
        rig.table.record(&access(page));
        assert_eq!(rig.table.record(&access(page)), Recorded::Candidate);
        batch.push(cand(10, page, 0));
    }
    // Page 10 cannot be moved at all (no VMA): permanent.
    rig.mover
        .0
        .lock()
        .pages
        .insert((10, 10 * PAGE_SIZE), -libc::EFAULT);
    rig.migrator.process(&mut batch);
    // 1 MiB/s is 256 pages of budget: pages 0..256 are tried, the rest held back.
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 255);
    assert_eq!(counter(&rig, Counter::PgpromoteFailFault), 1);
    assert_eq!(counter(&rig, Counter::PgpromoteRatelimited), 44);
    // A held-back page is a candidate again on its next sample ...
    assert_eq!(rig.table.record(&access(280)), Recorded::Candidate);
    // ... a page that cannot move waits for its window, and a promoted one is done.
    assert!(rig.table.get(access(10).key).unwrap().is_queued());
    assert_eq!(rig.table.record(&access(10)), Recorded::Tracked);
    assert_eq!(rig.table.record(&access(0)), Recorded::Tracked);
}

#[test]
fn dry_run_counts_without_calling_the_kernel() {
    let config = MigratorConfig {
        dry_run: true,
        ..MigratorConfig::default()
    };
    let mut rig = rig(config);
    let mut batch: Vec<_> = (0..3).map(|p| cand(999, p, 1)).collect();
    rig.migrator.process(&mut batch);
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 3);
    assert!(rig.mover.0.lock().calls.is_empty());
}

#[test]
fn promotion_updates_the_table() {
    let mut rig = rig(MigratorConfig::default());
    map(&rig, 10, 0..1);
    let c = cand(10, 0, 1);
    let access = Access {
        key: c.key,
        time_ns: 0,
        node: 2,
        op: AccessOp::Load,
    };
    rig.table.record(&access);
    assert_eq!(rig.table.record(&access), Recorded::Candidate);
    rig.migrator.process(&mut vec![c]);
    let e = rig.table.get(c.key).unwrap();
    assert_eq!((e.node(), e.is_queued()), (1, false));
}

/// Records the headroom admission is shown for node 0 before each batch.
struct SeesHeadroom(Arc<parking_lot::Mutex<Vec<Headroom>>>);

impl Admit for SeesHeadroom {
    fn admit(
        &mut self,
        _: &mut Vec<Candidate>,
        _: &HotTable,
        _: &Stats,
        headroom: &dyn Fn(NodeId) -> Headroom,
    ) {
        self.0.lock().push(headroom(0));
    }
}

#[test]
fn admission_sees_each_destinations_budget_and_room() {
    let (rig, free) = rig_with_free(MigratorConfig {
        promote_rate_limit_mbps: 64,
        ..MigratorConfig::default()
    });
    let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let mut rig = Rig {
        migrator: rig
            .migrator
            .with_admission(Box::new(SeesHeadroom(Arc::clone(&seen)))),
        ..rig
    };
    // 1000 kB free above node 0's 2 % reserve.
    free.0.lock().insert(0, NODE0_RESERVE_KB + 1000);
    map(&rig, 10, 0..10);
    let mut batch: Vec<Candidate> = (0..10).map(|p| cand(10, p, 0)).collect();
    rig.migrator.process(&mut batch);
    assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 10);
    let mut batch = vec![cand(10, 20, 0)];
    rig.migrator.process(&mut batch);
    // First batch: no bucket yet, so one second at 64 MiB/s; then 10 pages (40 KiB) fewer,
    // the clock not having moved.
    let mib64 = 64 << 20;
    assert_eq!(
        *seen.lock(),
        vec![
            Headroom {
                budget_bytes: mib64,
                room_bytes: 1000 * 1024,
            },
            Headroom {
                budget_bytes: mib64 - 10 * PAGE_SIZE,
                room_bytes: 1000 * 1024,
            },
        ]
    );
}
