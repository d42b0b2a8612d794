//! Liveness of the worker threads, for the systemd watchdog (`service`).
//!
//! A worker thread [`attach`]es a [`Heartbeat`] to itself. Its state is one of: waiting (blocked
//! in a wait it is expected to block in: [`crate::stop::wait_until`], [`crate::stop::wait_fd`],
//! a migrator's queue), or busy since a moment (it woke, or last made progress, then). The thread
//! marks itself waiting with [`waiting`] around each such wait and reports progress with
//! [`beat`]; a thread that is waiting is healthy however long it waits (an idle daemon sleeps),
//! and a busy one is stuck once it has been busy for longer than the limit without a beat (a
//! `move_pages(2)` that never returns, a loop that never ends). A thread that has exited drops
//! out ([`Attached`] deregisters it).
//!
//! The states live in one process-wide [`Registry`]; the checker passes the time in, so the
//! health logic runs on a fake clock in tests.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// The state value of a thread blocked in a known wait.
const WAITING: u64 = u64::MAX;

/// One thread's liveness: [`WAITING`], or the tick (ms since [`epoch`]) it has been busy since.
#[derive(Debug)]
pub struct Heartbeat {
    name: String,
    state: AtomicU64,
}

impl Heartbeat {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Busy, having made progress (or woken) at `now`.
    pub fn busy_at(&self, now: u64) {
        self.state.store(now.min(WAITING - 1), Ordering::Relaxed);
    }

    /// Blocked in a known wait.
    pub fn wait(&self) {
        self.state.store(WAITING, Ordering::Relaxed);
    }

    /// How long the thread has been busy without progress at `now`; `None` while it waits.
    pub fn busy_for(&self, now: u64) -> Option<Duration> {
        match self.state.load(Ordering::Relaxed) {
            WAITING => None,
            since => Some(Duration::from_millis(now.saturating_sub(since))),
        }
    }
}

/// A thread busy past the limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stuck {
    pub name: String,
    pub busy_for: Duration,
}

/// The heartbeats of the live threads.
#[derive(Debug, Default)]
pub struct Registry {
    beats: Mutex<Vec<Arc<Heartbeat>>>,
}

impl Registry {
    /// The process's registry, which [`attach`] registers in.
    pub fn global() -> &'static Registry {
        static GLOBAL: OnceLock<Registry> = OnceLock::new();
        GLOBAL.get_or_init(Registry::default)
    }

    /// A new heartbeat, busy since `now`.
    pub fn register(&self, name: impl Into<String>, now: u64) -> Arc<Heartbeat> {
        let beat = Arc::new(Heartbeat {
            name: name.into(),
            state: AtomicU64::new(0),
        });
        beat.busy_at(now);
        self.beats.lock().push(Arc::clone(&beat));
        beat
    }

    pub fn deregister(&self, beat: &Arc<Heartbeat>) {
        self.beats.lock().retain(|b| !Arc::ptr_eq(b, beat));
    }

    /// Every registered thread busy for longer than `limit` at `now`; empty when all are healthy.
    pub fn stuck(&self, now: u64, limit: Duration) -> Vec<Stuck> {
        self.beats
            .lock()
            .iter()
            .filter_map(|b| {
                let busy_for = b.busy_for(now)?;
                (busy_for > limit).then(|| Stuck {
                    name: b.name.clone(),
                    busy_for,
                })
            })
            .collect()
    }

    pub fn len(&self) -> usize {
        self.beats.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Milliseconds since the first reading in this process (monotonic).
pub fn now() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    u64::try_from(epoch.elapsed().as_millis()).unwrap_or(WAITING - 1)
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<Heartbeat>>> = const { RefCell::new(None) };
}

/// The current thread's registration; deregisters it when dropped (when the thread ends).
#[must_use = "the thread is deregistered when this is dropped"]
pub struct Attached {
    beat: Arc<Heartbeat>,
    registry: &'static Registry,
}

impl Drop for Attached {
    fn drop(&mut self) {
        self.registry.deregister(&self.beat);
        CURRENT.with(|c| c.borrow_mut().take());
    }
}

/// Registers the current thread as `name` in the global registry, busy from now. A worker
/// thread also follows `cpu_policy` from now on ([`crate::cpushare::join`]).
pub fn attach(name: impl Into<String>) -> Attached {
    let registry = Registry::global();
    let name = name.into();
    crate::cpushare::join(&name);
    let beat = registry.register(name, now());
    CURRENT.with(|c| *c.borrow_mut() = Some(Arc::clone(&beat)));
    Attached { beat, registry }
}

fn with_current(f: impl FnOnce(&Heartbeat)) {
    CURRENT.with(|c| {
        if let Some(beat) = c.borrow().as_ref() {
            f(beat);
        }
    });
}

/// The current thread made progress (or woke). A no-op on a thread that did not [`attach`].
/// It is also where a worker looks at its CPU policy ([`crate::cpushare::step`]): where it
/// wakes anyway, so that the look costs no wake-up of its own, and between the batches of a
/// long stretch of work, so that a thread that starves at SCHED_IDLE in the middle of one
/// (and would then beat rarely, and look stuck to the watchdog) is raised before it ends.
pub fn beat() {
    with_current(|b| b.busy_at(now()));
    crate::cpushare::step();
}

/// Marks the current thread waiting until the guard drops, then busy from that moment.
pub fn waiting() -> Waiting {
    with_current(Heartbeat::wait);
    Waiting(())
}

/// See [`waiting`].
#[must_use = "the thread counts as waiting only while this lives"]
pub struct Waiting(());

impl Drop for Waiting {
    fn drop(&mut self) {
        beat();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Duration = Duration::from_secs(30);

    #[test]
    fn a_busy_thread_is_stuck_only_past_the_limit_without_a_beat() {
        let registry = Registry::default();
        let mig = registry.register("pghot-mig/node2", 1_000);
        assert!(
            registry.stuck(31_000, LIMIT).is_empty(),
            "exactly the limit"
        );
        assert_eq!(
            registry.stuck(31_001, LIMIT),
            vec![Stuck {
                name: "pghot-mig/node2".into(),
                busy_for: Duration::from_millis(30_001),
            }]
        );
        // A beat is progress: healthy again.
        mig.busy_at(31_001);
        assert!(registry.stuck(60_000, LIMIT).is_empty());
    }

    #[test]
    fn a_waiting_thread_is_healthy_however_long_it_waits() {
        let registry = Registry::default();
        let idle = registry.register("pghot-mig/node1", 0);
        idle.wait();
        assert!(registry.stuck(10_000_000, LIMIT).is_empty());
        // Woken: busy from the wake, not from before the wait.
        idle.busy_at(10_000_000);
        assert!(registry.stuck(10_000_000 + 30_000, LIMIT).is_empty());
        assert_eq!(registry.stuck(10_000_000 + 30_001, LIMIT).len(), 1);
    }

    #[test]
    fn only_the_stuck_thread_is_named_and_an_exited_one_drops_out() {
        let registry = Registry::default();
        let src = registry.register("pghot-src/0", 0);
        let stuck = registry.register("pghot-mig/node2", 0);
        src.wait();
        let found = registry.stuck(40_000, LIMIT);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].name, "pghot-mig/node2");
        registry.deregister(&stuck);
        assert!(registry.stuck(40_000, LIMIT).is_empty());
        assert_eq!(registry.len(), 1);
    }

    #[test]
    fn attach_and_the_waiting_guard_drive_the_global_state() {
        let thread = std::thread::spawn(|| {
            let attached = attach("test-heartbeat-thread");
            let beat = Arc::clone(&attached.beat);
            assert!(beat.busy_for(now()).is_some(), "busy from the attach");
            {
                let _w = waiting();
                assert_eq!(beat.busy_for(now()), None, "waiting inside the guard");
            }
            assert!(beat.busy_for(now()).is_some(), "busy after the wait");
            let registered = |b: &Arc<Heartbeat>| {
                Registry::global()
                    .beats
                    .lock()
                    .iter()
                    .any(|r| Arc::ptr_eq(r, b))
            };
            assert!(registered(&beat));
            drop(attached);
            assert!(!registered(&beat), "deregistered at the end");
        });
        thread.join().unwrap();
    }
}
