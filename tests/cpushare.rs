//! `cpu_policy = "auto"` on this machine's real scheduler: a worker thread goes to SCHED_IDLE
//! when it starts, stays there while the CPUs have room, and goes back to the policy it started
//! with once busy threads on every CPU leave it waiting (it reads its own wait from
//! /proc/thread-self/schedstat, which the kernel fills: nothing here fakes it).
//!
//! One test, in phases, because a second test running beside it would be load of its own.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pghotd::cpushare::{self, CpuPolicy};

/// The calling thread's policy, as sched_getscheduler(2) gives it.
fn policy_now() -> i32 {
    // SAFETY: sched_getscheduler takes a pid (0: the caller) and touches no memory.
    unsafe { libc::sched_getscheduler(0) }
}

/// Works 2 ms of CPU, then sleeps `every`, like a sampler with samples to parse (each wake-up
/// a look, at most once a second), until `until` says stop or `limit` passes; returns the
/// thread's policy after each wake-up. A thread that needs next to no CPU is not starved at
/// SCHED_IDLE even beside busy CPUs (it ran 128 times a second beside two here): what starves
/// is a thread that needs more than SCHED_IDLE's weight gives it (3 against nice 0's 1024,
/// kernel/sched/core.c `sched_prio_to_weight`, `WEIGHT_IDLEPRIO`).
fn wake_repeatedly(every: Duration, limit: Duration, until: impl Fn(i32) -> bool) -> Vec<i32> {
    let start = Instant::now();
    let mut seen = Vec::new();
    while start.elapsed() < limit {
        {
            let _waiting = pghotd::heartbeat::waiting();
            std::thread::sleep(every);
        }
        let work = Instant::now();
        while work.elapsed() < Duration::from_millis(2) {
            std::hint::spin_loop();
        }
        let p = policy_now();
        seen.push(p);
        if until(p) {
            break;
        }
    }
    seen
}

#[test]
fn auto_lowers_a_worker_and_raises_it_once_busy_cpus_starve_it() {
    if let Err(e) = cpushare::can_raise() {
        // Leaving SCHED_IDLE needs CAP_SYS_NICE or RLIMIT_NICE 20 (the daemon then keeps the
        // started policy, which its own start-up check covers); CI runs as root.
        eprintln!("\n*** SKIPPED: a thread cannot leave SCHED_IDLE here ({e}) ***\n");
        return;
    }
    let raises = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&raises);
    cpushare::install(CpuPolicy::Auto, move |thread, wait| {
        assert_eq!(thread, "test-worker");
        assert!(wait > cpushare::STARVED_WAIT, "raised at {wait:?} a run");
        counted.fetch_add(1, Ordering::Relaxed);
    });
    let started_with = policy_now();
    assert_ne!(started_with, libc::SCHED_IDLE);

    let worker = std::thread::spawn(move || {
        let _beat = pghotd::heartbeat::attach("test-worker");
        let lowered = policy_now();
        // Free CPUs: 3 s of wake-ups every 5 ms, each run at once, so none is raised.
        let calm = wake_repeatedly(Duration::from_millis(5), Duration::from_secs(3), |_| false);
        (lowered, calm)
    });
    let (lowered, calm) = worker.join().unwrap();
    assert_eq!(lowered, libc::SCHED_IDLE, "lowered when it attached");
    assert!(
        calm.iter().all(|&p| p == libc::SCHED_IDLE),
        "raised with the CPUs free: {calm:?}"
    );
    assert_eq!(raises.load(Ordering::Relaxed), 0);

    // Every CPU busy with a thread at the started policy: the worker waits for them.
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let stop = Arc::new(AtomicBool::new(false));
    let hogs: Vec<_> = (0..cpus)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    let worker = std::thread::spawn(move || {
        let _beat = pghotd::heartbeat::attach("test-worker");
        let lowered = policy_now();
        let started = Instant::now();
        let seen = wake_repeatedly(Duration::from_millis(5), Duration::from_secs(60), |p| {
            p != libc::SCHED_IDLE
        });
        (lowered, seen, started.elapsed())
    });
    let (lowered, seen, took) = worker.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    for h in hogs {
        h.join().unwrap();
    }
    assert_eq!(lowered, libc::SCHED_IDLE);
    assert_eq!(
        seen.last(),
        Some(&started_with),
        "not raised in {took:?} with {cpus} busy CPUs ({} wake-ups)",
        seen.len()
    );
    assert_eq!(raises.load(Ordering::Relaxed), 1);
    eprintln!(
        "raised back after {took:?} and {} wake-ups beside {cpus} busy threads",
        seen.len()
    );
}
