//! The candidate queue's wake-ups and the thread's finish and stop.

use super::*;

#[test]
fn the_queue_wakes_its_migrator_at_the_first_candidate_and_at_a_batch() {
    let (tx, rx) = candidate_queue(16, 4);
    tx.offer(cand(10, 0, 0)).unwrap();
    assert!(
        rx.wait_wake(Duration::ZERO),
        "the first into an empty queue"
    );
    assert!(!rx.batch_waiting());
    for p in 1..3 {
        tx.offer(cand(10, p, 0)).unwrap();
    }
    assert!(
        !rx.wait_wake(Duration::ZERO),
        "no more wake-ups below the batch size"
    );
    tx.offer(cand(10, 3, 0)).unwrap();
    tx.offer(cand(10, 4, 0)).unwrap();
    assert!(rx.batch_waiting());
    assert!(rx.wait_wake(Duration::ZERO));
    assert!(!rx.wait_wake(Duration::ZERO), "one pending wake-up at most");
    for p in 5..16 {
        tx.offer(cand(10, p, 0)).unwrap();
    }
    let refused = tx.offer(cand(10, 16, 0)).unwrap_err();
    assert_eq!(
        (refused.candidate.key, refused.counter),
        (cand(10, 16, 0).key, Counter::PgpromoteQueueFull)
    );
    assert_eq!(rx.len(), 16);
    // Shutdown: the migrator has stopped and dropped its end.
    drop(rx);
    assert_eq!(
        tx.offer(cand(10, 17, 0)).unwrap_err().counter,
        Counter::PgpromoteAbandoned
    );
}

#[test]
fn the_thread_drains_on_finish_and_counts_abandoned_on_stop() {
    let rig1 = rig(MigratorConfig::default());
    map(&rig1, 10, 0..10);
    let stats = Arc::clone(&rig1.stats);
    let (tx, rx) = candidate_queue(64, 512);
    let handle = MigratorHandle::spawn(rig1.migrator, rx).unwrap();
    for p in 0..10 {
        tx.offer(cand(10, p, 0)).unwrap();
    }
    handle.send(MigratorEvent::Finish);
    assert!(handle.join(Duration::from_secs(5)));
    assert_eq!(stats.get(Counter::PgpromoteSuccess), 10);

    let config = MigratorConfig {
        migrate_interval_ms: 60_000,
        ..MigratorConfig::default()
    };
    let rig2 = rig(config);
    let stats = Arc::clone(&rig2.stats);
    let (tx, rx) = candidate_queue(64, 512);
    for p in 0..7 {
        tx.offer(cand(10, p, 0)).unwrap();
    }
    let handle = MigratorHandle::spawn(rig2.migrator, rx).unwrap();
    handle.send(MigratorEvent::Stop);
    assert!(handle.join(Duration::from_secs(5)));
    assert_eq!(
        stats.get(Counter::PgpromoteAbandoned) + stats.get(Counter::PgpromoteSuccess),
        7
    );
}

/// A trickle is moved once its first candidate has waited the hold, counted from its arrival
/// (the queue's first-candidate wake-up), not from a tick: with `migrate_interval_ms` 300 and
/// no hold of its own (the hold is at least the interval), one candidate offered to a thread
/// that has slept 450 ms is promoted 300 ms after the offer, and not 150 ms after it, when a
/// thread ticking every 300 ms from its start would have looked.
#[test]
fn a_trickle_moves_when_its_first_candidate_has_waited_the_hold() {
    let config = MigratorConfig {
        migrate_interval_ms: 300,
        migrate_hold_ms: 0,
        ..MigratorConfig::default()
    };
    let rig1 = rig(config);
    map(&rig1, 10, 0..2);
    let stats = Arc::clone(&rig1.stats);
    let (tx, rx) = candidate_queue(64, 512);
    let handle = MigratorHandle::spawn(rig1.migrator, rx).unwrap();
    // Long after the thread started, so no tick of its own lines up with the offer.
    std::thread::sleep(Duration::from_millis(450));
    let offered = std::time::Instant::now();
    tx.offer(cand(10, 0, 0)).unwrap();
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(stats.get(Counter::PgpromoteSuccess), 0, "held");
    while stats.get(Counter::PgpromoteSuccess) == 0 {
        assert!(offered.elapsed() < Duration::from_secs(5), "never moved");
        std::thread::sleep(Duration::from_millis(5));
    }
    let waited = offered.elapsed();
    assert!(
        waited >= Duration::from_millis(300),
        "moved after {waited:?}"
    );
    handle.send(MigratorEvent::Finish);
    assert!(handle.join(Duration::from_secs(5)));
}
