//! Fault injection through the scripted mover: a process that exits mid-batch, pages that turn
//! busy or vanish between the query and the move, whole-call ENOMEM/EACCES/EPERM, and random
//! mixes of all of them. Each must end in its counter and a log line, with every candidate in
//! exactly one outcome counter, and leave a migrator that still promotes the next batch.

use std::io::Write;

use parking_lot::Mutex;
use proptest::prelude::*;

use super::*;

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct LogBuf(Arc<Mutex<Vec<u8>>>);

impl Write for LogBuf {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs `f` with this thread's logs (info and up) captured; returns them.
fn logged(f: impl FnOnce()) -> String {
    let buf = LogBuf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    String::from_utf8_lossy(&buf.0.lock()).into_owned()
}

/// The next batch of a fresh process promotes in full: the migrator survived.
fn still_promotes(rig: &mut Rig) {
    let before = counter(rig, Counter::PgpromoteSuccess);
    map(rig, 99, 0..3);
    let mut batch: Vec<_> = (0..3).map(|p| cand(99, p, 0)).collect();
    rig.migrator.process(&mut batch);
    assert_eq!(counter(rig, Counter::PgpromoteSuccess), before + 3);
}

#[test]
fn a_process_exiting_between_query_and_move_fails_each_page_once() {
    let mut rig = rig(MigratorConfig::default());
    map(&rig, 10, 0..4);
    // The query finds the pages; the move then meets an exited process.
    rig.mover.0.lock().script.push_back(Script::Fail {
        moved: 0,
        errno: Errno::ESRCH,
    });
    let mut batch: Vec<_> = (0..4).map(|p| cand(10, p, 0)).collect();
    let log = logged(|| rig.migrator.process(&mut batch));
    assert_eq!(counter(&rig, Counter::PgpromoteFailNoProcess), 4);
    assert_eq!(outcomes(&rig), 4);
    assert!(
        log.contains("process exited; 4 queued pages counted as pgpromote_fail_no_process"),
        "{log}"
    );
    still_promotes(&mut rig);
}

#[test]
fn pages_that_turn_busy_or_vanish_before_the_move_are_counted_by_reason() {
    for (errno, want, retried) in [
        (libc::EBUSY, Counter::PgpromoteFailBusy, true),
        (libc::ENOENT, Counter::PgpromoteFailNotPresent, false),
        (libc::ENOMEM, Counter::PgpromoteFailNomem, true),
        (libc::EACCES, Counter::PgpromoteFailShared, false),
    ] {
        let mut rig = rig(MigratorConfig::default());
        map(&rig, 10, 0..6);
        let access = |page: u64| Access {
            key: PageKey::new(10, page * PAGE_SIZE).unwrap(),
            time_ns: 0,
            node: 2,
            op: AccessOp::Load,
        };
        for p in 0..6 {
            rig.table.record(&access(p));
            assert_eq!(rig.table.record(&access(p)), Recorded::Candidate);
        }
        rig.mover.0.lock().script.push_back(Script::PageStatus {
            every: 2,
            status: -errno,
        });
        let mut batch: Vec<_> = (0..6).map(|p| cand(10, p, 0)).collect();
        rig.migrator.process(&mut batch);
        assert_eq!(counter(&rig, want), 3, "{errno}");
        assert_eq!(counter(&rig, Counter::PgpromoteSuccess), 3, "{errno}");
        assert_eq!(outcomes(&rig), 6, "{errno}");
        // Transient failures are offered again by the next sample; permanent ones wait.
        let again = rig.table.record(&access(0)) == Recorded::Candidate;
        assert_eq!(again, retried, "{errno}");
        still_promotes(&mut rig);
    }
}

#[test]
fn whole_call_failures_are_logged_first_and_then_every_hundredth() {
    for (errno, want) in [
        (Errno::ENOMEM, Counter::PgpromoteFailNomem),
        (Errno::EACCES, Counter::PgpromoteFailNotAllowed),
    ] {
        let mut rig = rig(MigratorConfig::default());
        map(&rig, 10, 0..2);
        let log = logged(|| {
            for _ in 0..150 {
                rig.mover
                    .0
                    .lock()
                    .script
                    .push_back(Script::Fail { moved: 0, errno });
                let mut batch: Vec<_> = (0..2).map(|p| cand(10, p, 0)).collect();
                rig.migrator.process(&mut batch);
            }
        });
        assert_eq!(counter(&rig, want), 300, "{errno}");
        assert_eq!(outcomes(&rig), 300, "{errno}");
        let lines: Vec<_> = log.lines().filter(|l| l.contains("move_pages")).collect();
        assert_eq!(lines.len(), 2, "{errno}: {log}");
        assert!(
            lines[0].contains(&format!("{errno}, counted as {} (1 such", want.name())),
            "{}",
            lines[0]
        );
        assert!(lines[1].contains("(101 such"), "{}", lines[1]);
        still_promotes(&mut rig);
    }
}

#[test]
fn a_migrator_thread_survives_failing_batches_and_drains_on_finish() {
    let rig = rig(MigratorConfig {
        migrate_batch: 10,
        ..MigratorConfig::default()
    });
    map(&rig, 10, 0..30);
    {
        let mut mem = rig.mover.0.lock();
        mem.script.push_back(Script::Fail {
            moved: 0,
            errno: Errno::EACCES,
        });
        mem.script.push_back(Script::Fail {
            moved: 3,
            errno: Errno::ENOMEM,
        });
        mem.script.push_back(Script::PageStatus {
            every: 3,
            status: -libc::EBUSY,
        });
    }
    let stats = Arc::clone(&rig.stats);
    let (tx, rx) = candidate_queue(64, 10);
    let handle = MigratorHandle::spawn(rig.migrator, rx).unwrap();
    for p in 0..30 {
        tx.offer(cand(10, p, 0)).unwrap();
    }
    handle.send(MigratorEvent::Finish);
    assert!(handle.join(Duration::from_secs(5)));
    let total: u64 = [
        Counter::PgpromoteSuccess,
        Counter::PgpromoteFailNotAllowed,
        Counter::PgpromoteFailNomem,
        Counter::PgpromoteFailBusy,
    ]
    .iter()
    .map(|&c| stats.get(c))
    .sum();
    assert_eq!(total, 30);
    assert!(stats.get(Counter::PgpromoteFailNotAllowed) > 0);
    assert!(stats.get(Counter::PgpromoteFailBusy) > 0);
}

#[test]
fn candidates_queued_between_stop_and_close_are_abandoned_not_lost() {
    let rig = rig(MigratorConfig {
        migrate_batch: 1000,
        migrate_interval_ms: 60_000,
        ..MigratorConfig::default()
    });
    map(&rig, 10, 0..30);
    let stats = Arc::clone(&rig.stats);
    let (tx, rx) = candidate_queue(64, 1000);
    let handle = MigratorHandle::spawn(rig.migrator, rx).unwrap();
    for p in 0..10 {
        tx.offer(cand(10, p, 0)).unwrap();
    }
    handle.send(MigratorEvent::Stop);
    // A source that has not seen the stop yet still offers; the queue takes it.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while stats.get(Counter::PgpromoteAbandoned) < 10 {
        assert!(std::time::Instant::now() < deadline, "Stop not handled");
        std::thread::sleep(Duration::from_millis(1));
    }
    for p in 10..15 {
        tx.offer(cand(10, p, 0)).unwrap();
    }
    handle.send(MigratorEvent::Close);
    assert!(handle.join(Duration::from_secs(5)));
    assert_eq!(stats.get(Counter::PgpromoteAbandoned), 15);
    assert_eq!(
        stats.get(Counter::PgpromoteSuccess),
        0,
        "nothing moved after Stop"
    );
}

/// One injected fault for a batch.
#[derive(Debug, Clone)]
enum Fault {
    None,
    Call { moved: usize, errno: i32 },
    Partial { moved: usize },
    Pages { every: usize, errno: i32 },
    Exit { pid: u32 },
}

fn fault() -> impl Strategy<Value = Fault> {
    let errno = prop::sample::select(vec![
        libc::ENOMEM,
        libc::EACCES,
        libc::EBUSY,
        libc::ENOENT,
        libc::EPERM,
        libc::ESRCH,
        libc::EFAULT,
        libc::EINVAL,
    ]);
    prop_oneof![
        Just(Fault::None),
        (0usize..8, errno.clone()).prop_map(|(moved, errno)| Fault::Call { moved, errno }),
        (0usize..8).prop_map(|moved| Fault::Partial { moved }),
        (1usize..4, errno).prop_map(|(every, errno)| Fault::Pages { every, errno }),
        (10u32..13).prop_map(|pid| Fault::Exit { pid }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Batches over three processes whose pages sit on the slow node, a top node or nowhere,
    /// each with an injected fault: every candidate lands in exactly one outcome counter, the
    /// per-process counters agree, and the migrator promotes afterwards.
    #[test]
    fn every_candidate_ends_in_exactly_one_counter(
        pages in proptest::collection::vec((10u32..13, 0u64..16, 0u8..4), 1..48),
        faults in proptest::collection::vec(fault(), 1..6),
    ) {
        let mut rig = rig(MigratorConfig { migrate_batch: 8, ..MigratorConfig::default() });
        {
            let mut mem = rig.mover.0.lock();
            for &(pid, page, state) in &pages {
                let at = match state { 0 | 1 => SLOW, 2 => 0, _ => -libc::EFAULT };
                mem.pages.insert((pid, page * PAGE_SIZE), at);
            }
        }
        let mut offered = 0;
        for (chunk, f) in pages.chunks(8).zip(faults.iter().cycle()) {
            {
                let mut mem = rig.mover.0.lock();
                match *f {
                    Fault::None => {}
                    Fault::Call { moved, errno } => mem.script.push_back(Script::Fail {
                        moved,
                        errno: Errno::from_raw(errno),
                    }),
                    Fault::Partial { moved } => mem.script.push_back(Script::Partial { moved }),
                    Fault::Pages { every, errno } => mem.script.push_back(Script::PageStatus {
                        every,
                        status: -errno,
                    }),
                    Fault::Exit { pid } => mem.gone.push(pid),
                }
            }
            let mut batch: Vec<_> = chunk.iter().map(|&(pid, page, _)| cand(pid, page, 0)).collect();
            offered += batch.len() as u64;
            rig.migrator.process(&mut batch);
            rig.mover.0.lock().script.clear();
        }
        prop_assert_eq!(outcomes(&rig), offered);
        let per_pid: u64 = rig
            .migrator
            .pids
            .snapshot()
            .iter()
            .map(|(_, c)| c.promoted_pages + c.fail)
            .sum();
        prop_assert_eq!(per_pid, counter(&rig, Counter::PgpromoteSuccess)
            + outcomes_failed(&rig));
        rig.mover.0.lock().gone.clear();
        still_promotes(&mut rig);
    }
}

/// The failure counters the per-process `fail` figure sums.
fn outcomes_failed(rig: &Rig) -> u64 {
    outcomes(rig)
        - counter(rig, Counter::PgpromoteSuccess)
        - counter(rig, Counter::PgpromoteAlreadyToptier)
        - counter(rig, Counter::PgpromoteRatelimited)
        - counter(rig, Counter::PgpromoteFailWatermark)
}
