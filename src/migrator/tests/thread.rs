//! The candidate queue's wake-ups and the thread's finish and stop.

use super::*;

#[test]
fn the_queue_wakes_its_migrator_once_per_batch() {
    let (tx, rx) = candidate_queue(16, 4);
    for p in 0..3 {
        tx.offer(cand(10, p, 0)).unwrap();
    }
    assert!(
        !rx.wait_wake(Duration::ZERO),
        "no wake-up below the batch size"
    );
    tx.offer(cand(10, 3, 0)).unwrap();
    tx.offer(cand(10, 4, 0)).unwrap();
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
