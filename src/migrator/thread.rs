//! The `pghot-mig/nodeN` thread: waits on its candidate queue and the daemon's events, and
//! drains, abandons or reconfigures its [`Migrator`] accordingly. Its heartbeat
//! ([`crate::heartbeat`]) waits in the `select!` and beats after every batch.
//!
//! It wakes for work: the first candidate into its empty queue (the hold starts), the hold's
//! end, a whole batch waiting, an event; and for upkeep (`Migrator::maintain`): every
//! `migrate_interval_ms` with demotion on, else once per audit period, and up to eight times
//! as long while the upkeeps find nothing to do ([`UpkeepPace`]). Each wake-up costs a
//! program sharing the CPU (in the Debian rig's TCG guest a few milliseconds of a vCPU), and
//! an idle migrator that looked every 100 ms woke ten times a second for nothing.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, select};

use super::capacity::HeatAge;
use super::maintain::Upkeep;
use super::ratelimit::Clock;
use super::{Migrator, MigratorConfig, MigratorEvent};
use crate::hotness::candidate::{Candidate, CandidateReceiver};
use crate::movepages::Mover;
use crate::stats::Counter;
use crate::topology::NodeId;

/// A running migrator thread.
pub struct MigratorHandle {
    node: NodeId,
    events: Sender<MigratorEvent>,
    done: Receiver<()>,
    thread: Option<JoinHandle<()>>,
}

impl MigratorHandle {
    /// Spawns `pghot-mig/nodeN`.
    pub fn spawn<M: Mover + 'static, C: Clock + 'static>(
        mut migrator: Migrator<M, C>,
        candidates: CandidateReceiver,
    ) -> std::io::Result<MigratorHandle> {
        let node = migrator.node();
        let (events_tx, events_rx) = crossbeam_channel::bounded(16);
        // Never sent on: the thread drops it when it exits, which disconnects `done`.
        let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(0);
        let thread = std::thread::Builder::new()
            .name(format!("pghot-mig/node{node}"))
            .spawn(move || {
                let _done = done_tx;
                let _beat = crate::heartbeat::attach(format!("pghot-mig/node{node}"));
                run(&mut migrator, &candidates, &events_rx);
            })?;
        Ok(MigratorHandle {
            node,
            events: events_tx,
            done: done_rx,
            thread: Some(thread),
        })
    }

    pub fn node(&self) -> NodeId {
        self.node
    }

    /// Disconnects (a `recv` returns an error) once the thread has exited: wait on it in a
    /// `select!` with other channels.
    pub fn done(&self) -> &Receiver<()> {
        &self.done
    }

    /// A sender of events to this migrator (the control plane's `Reconfigure`).
    pub fn events(&self) -> Sender<MigratorEvent> {
        self.events.clone()
    }

    pub fn send(&self, event: MigratorEvent) {
        // A migrator that already exited has nothing left to do with it.
        let _ = self.events.send(event);
    }

    /// Closes the migrator (after a `Stop`, no more candidates will come; a running or
    /// finishing one abandons or drains as it would anyway) and waits for the thread to exit,
    /// up to `timeout`. Returns false if it is still running.
    pub fn join(mut self, timeout: Duration) -> bool {
        let Some(thread) = self.thread.take() else {
            return true;
        };
        let _ = self.events.try_send(MigratorEvent::Close);
        if self.done.recv_timeout(timeout) == Err(RecvTimeoutError::Timeout) {
            tracing::warn!(node = self.node, "migrator did not stop within {timeout:?}");
            return false;
        }
        if thread.join().is_err() {
            tracing::error!(node = self.node, "migrator thread panicked");
            return false;
        }
        true
    }
}

fn run<M: Mover, C: Clock>(
    migrator: &mut Migrator<M, C>,
    queue: &CandidateReceiver,
    events: &Receiver<MigratorEvent>,
) {
    let mut batch: Vec<Candidate> = Vec::with_capacity(migrator.config.migrate_batch);
    let mut next_upkeep = Instant::now() + upkeep_every(&migrator.config);
    let mut pace = UpkeepPace::default();
    let mut hold = Hold::default();
    // The heat histogram's clock: time since the thread started.
    let started = Instant::now();
    let mut heat = HeatAge::default();
    loop {
        let wake_by = hold
            .deadline(hold_for(&migrator.config), queue.len(), Instant::now())
            .map_or(next_upkeep, |end| end.min(next_upkeep));
        let timeout = wake_by.saturating_duration_since(Instant::now());
        // Waiting in the select (however long: an idle migrator sleeps), busy from the wake.
        let wake = {
            let _waiting = crate::heartbeat::waiting();
            select! {
                recv(queue.wake_channel()) -> _ => Wake::Queue,
                recv(events) -> e => Wake::Event(e.ok()),
                default(timeout) => Wake::Timer,
            }
        };
        let now = Instant::now();
        match wake {
            // A first candidate starts the hold; its end, or a whole batch, moves them. The
            // upkeep wake also looks: a first candidate whose wake-up was lost to a race.
            Wake::Queue | Wake::Timer => {
                if queue.batch_waiting() || hold.due(queue.len(), hold_for(&migrator.config), now) {
                    migrator.age_heat(heat.halvings(now.saturating_duration_since(started)));
                    drain(migrator, queue, &mut batch);
                    hold = Hold::default();
                }
            }
            Wake::Event(Some(MigratorEvent::Finish)) => {
                drain(migrator, queue, &mut batch);
                return;
            }
            Wake::Event(Some(MigratorEvent::Stop)) => {
                abandon(migrator, queue, &mut batch);
                // Sources may still be offering (they stop within their poll slice):
                // keep the queue open and count those too, once Close says none is left.
                wait_for_close(events);
                abandon(migrator, queue, &mut batch);
                return;
            }
            Wake::Event(Some(MigratorEvent::Close) | None) => {
                abandon(migrator, queue, &mut batch);
                return;
            }
            Wake::Event(Some(MigratorEvent::Reconfigure(config))) => {
                migrator.reconfigure(config);
                next_upkeep = next_upkeep.min(now + upkeep_every(&migrator.config));
            }
        }
        if now >= next_upkeep {
            migrator.age_heat(heat.halvings(now.saturating_duration_since(started)));
            let upkeep = migrator.maintain();
            next_upkeep = Instant::now() + pace.after(upkeep, upkeep_every(&migrator.config));
        }
    }
}

/// How often the upkeep runs: demotion watches the fast nodes every interval; without it the
/// audit (at most once per `AUDIT_EVERY`) and admission's collapse scan (the same) are all
/// there is, and the heat histogram ages by the clock.
fn upkeep_every(config: &MigratorConfig) -> Duration {
    if config.demote {
        interval(config)
    } else {
        interval(config).max(super::audit::AUDIT_EVERY)
    }
}

/// How long the migrator leaves between upkeeps: `upkeep_every` after one that found work,
/// twice as long after each that found none in a row, up to [`UPKEEP_STRETCH`] times. An
/// upkeep reads each fast node's meminfo (drivers/base/node.c `node_read_meminfo`, dozens of
/// formatted lines), walks the promoted pages for those fallen under the floor and ages the
/// heat, and a migrator with a trickle of candidates did it every second for nothing: in the
/// Debian rig's TCG guest, beside MariaDB, the migrator's wake-ups took about 2 % of a vCPU
/// (BENCHMARKS.md, issue 18, "MariaDB beside pghotd over 44 pairs"). What an upkeep watches
/// changes slowly while it finds nothing (the heat floor's pages age over `heat_halflife_ms`;
/// the audit and the collapse scan are due at most once per `AUDIT_EVERY` anyway), and the
/// fast nodes' room, which pghotd's own promotions change, is noted by each batch. MariaDB
/// offers a few candidates a second there: with every promotion making the next upkeep busy,
/// the migrator woke 179 times in a phase, without, 146 (BENCHMARKS.md, issue 18, "Half of
/// pghotd's CPU beside MariaDB").
#[derive(Debug, Default)]
struct UpkeepPace {
    /// Upkeeps in a row that found nothing to do.
    idle: u32,
}

/// The longest wait between upkeeps, in `upkeep_every`s: 8 s without demotion. A power of two
/// (the wait doubles up to it).
const UPKEEP_STRETCH: u32 = 8;
const _: () = assert!(UPKEEP_STRETCH.is_power_of_two());

impl UpkeepPace {
    /// The wait before the next upkeep, after one that found `upkeep`.
    fn after(&mut self, upkeep: Upkeep, every: Duration) -> Duration {
        self.idle = match upkeep {
            Upkeep::Busy => 0,
            Upkeep::Idle => self.idle.saturating_add(1),
        };
        let times = 1u32 << self.idle.min(UPKEEP_STRETCH.trailing_zeros());
        every * times
    }
}

/// A trickle of candidates waits to share one move_pages call. Every call that moves a
/// process's pages shoots down its TLB on every CPU it runs on, once per call
/// (mm/migrate.c `migrate_pages_batch` unmaps with TTU_BATCH_FLUSH, mm/rmap.c
/// `try_to_unmap_flush`), and drains the LRU caches of every CPU (mm/swap.c
/// `lru_cache_disable`). In the QEMU rig 150 calls moving 8192 cold pages slowed the workload
/// 8-13 % and 38 calls 0-4 % (BENCHMARKS.md, "Time to 99 % against NUMAB2: the bar met").
/// A program sampled sparsely offers a page or two per 100 ms;
/// in the Debian guest, Redis at 13 candidates a second served 25 % fewer GETs with a call per
/// 100 ms interval than with one per second (BENCHMARKS.md, "Redis on the Debian guest").
/// A flood is not held: `migrate_batch` waiting wakes the migrator at once.
///
/// A trickle too thin to bring [`HOLD_WORTH`] candidates within the hold waits on, for as long
/// as it takes to bring them at the rate it came so far, up to [`HOLD_STRETCH`] holds: a
/// program with a page or two on offer a second gains nothing measurable from having them a
/// few seconds sooner, and each call costs it the same shootdowns and LRU drains. In the Debian
/// guest MariaDB, offering 1.6 candidates a second, took 54 move_pages calls in a 60 s phase at
/// a 1 s hold and ran 0.91x and 0.96x of baseline, 16 calls at a 10 s hold and 1.03x and
/// 0.95x (BENCHMARKS.md, "MariaDB: fewer wake-ups and fewer calls").
#[derive(Debug, Default)]
struct Hold {
    /// When a wake-up first found candidates waiting since the last drain (normally the one
    /// the first candidate into the empty queue sends).
    since: Option<Instant>,
}

/// What one move_pages call should carry when the trickle allows it: Redis in the Debian guest
/// offers 13 a second at its steady state (more than this within the default 1 s hold, so its
/// calls are as before); MariaDB 1.6.
const HOLD_WORTH: usize = 8;
/// The longest a stretched hold lasts, in holds: 10 s at the default `migrate_hold_ms`.
const HOLD_STRETCH: u32 = 10;

impl Hold {
    /// When the hold that started ends, with `waiting` candidates queued at `now`; `None`
    /// when none started.
    fn deadline(&self, hold: Duration, waiting: usize, now: Instant) -> Option<Instant> {
        self.since
            .map(|since| since + stretched(hold, waiting, now.saturating_duration_since(since)))
    }

    /// Whether the candidates waiting now should be moved: none wait (nothing to do, the
    /// hold restarts), or the first were seen at least the (stretched) hold ago.
    fn due(&mut self, waiting: usize, hold: Duration, now: Instant) -> bool {
        if waiting == 0 {
            self.since = None;
            return false;
        }
        let since = *self.since.get_or_insert(now);
        let held = now.saturating_duration_since(since);
        held >= stretched(hold, waiting, held)
    }
}

/// How long a hold lasts when `waiting` candidates came in `held`: `hold` once
/// [`HOLD_WORTH`] wait; else the time the trickle takes to bring that many at the rate it
/// came (over at least one hold), between `hold` and [`HOLD_STRETCH`] holds.
fn stretched(hold: Duration, waiting: usize, held: Duration) -> Duration {
    if waiting >= HOLD_WORTH || waiting == 0 {
        return hold;
    }
    let worth = u32::try_from(HOLD_WORTH).unwrap_or(u32::MAX);
    let waiting = u32::try_from(waiting).unwrap_or(u32::MAX);
    (held.max(hold) * worth / waiting).clamp(hold, hold * HOLD_STRETCH)
}

/// How long the first of a trickle waits: `migrate_hold_ms`, and at least one
/// `migrate_interval_ms`, so a zero hold still gathers an interval's candidates into one call,
/// as the migrator that woke every interval did (the seed's kmigrated: 100 ms).
fn hold_for(config: &MigratorConfig) -> Duration {
    Duration::from_millis(u64::from(config.migrate_hold_ms)).max(interval(config))
}

/// What ended a wait of the migrator thread.
enum Wake {
    Queue,
    /// `None`: the daemon's end of the events channel is gone.
    Event(Option<MigratorEvent>),
    Timer,
}

/// Counts the unfinished batch and everything queued as abandoned.
fn abandon<M: Mover, C: Clock>(
    migrator: &mut Migrator<M, C>,
    queue: &CandidateReceiver,
    batch: &mut Vec<Candidate>,
) {
    let abandoned = batch.len() + queue.discard_all();
    migrator
        .stats
        .add(Counter::PgpromoteAbandoned, abandoned as u64);
    batch.clear();
}

/// After `Stop`: waits for `Close` (or `Finish`, or the daemon gone), ignoring the rest.
fn wait_for_close(events: &Receiver<MigratorEvent>) {
    loop {
        let event = {
            let _waiting = crate::heartbeat::waiting();
            events.recv()
        };
        match event {
            Ok(MigratorEvent::Close | MigratorEvent::Finish) | Err(_) => return,
            Ok(MigratorEvent::Stop | MigratorEvent::Reconfigure(_)) => {}
        }
    }
}

/// Promotes everything queued, `migrate_batch` at a time.
fn drain<M: Mover, C: Clock>(
    migrator: &mut Migrator<M, C>,
    queue: &CandidateReceiver,
    batch: &mut Vec<Candidate>,
) {
    while let Some(c) = queue.try_recv() {
        batch.push(c);
        if batch.len() >= migrator.config.migrate_batch {
            migrator.process(batch);
            // A batch done is progress: a long drain is not a stuck migrator.
            crate::heartbeat::beat();
        }
    }
    if !batch.is_empty() {
        migrator.process(batch);
    }
}

fn interval(config: &MigratorConfig) -> Duration {
    Duration::from_millis(u64::from(config.migrate_interval_ms.max(1)))
}

#[cfg(test)]
mod hold_tests {
    use super::*;

    /// By hand, hold 1000 ms, timer wakes every 100 ms: candidates first seen at t = 0 are due
    /// at t = 1000, not at 900; an empty queue restarts the hold; a zero hold is the old
    /// behaviour, a drain at every wake that finds any.
    #[test]
    fn a_trickle_waits_the_hold_from_the_wake_that_first_saw_it() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let hold = Duration::from_millis(1000);
        let mut h = Hold::default();
        assert!(!h.due(0, hold, ms(0)));
        assert!(!h.due(2, hold, ms(100)));
        assert!(!h.due(5, hold, ms(1000)));
        assert!(h.due(9, hold, ms(1100)));
        let mut h = Hold::default();
        assert!(!h.due(8, hold, ms(0)));
        assert!(!h.due(0, hold, ms(500)));
        assert!(!h.due(8, hold, ms(600)));
        assert!(!h.due(8, hold, ms(1500)));
        assert!(h.due(8, hold, ms(1600)));
        let mut h = Hold::default();
        assert!(h.due(1, Duration::ZERO, ms(0)));
    }

    /// By hand, hold 1000 ms: fewer than 8 waiting when the hold ends wait as long as the
    /// trickle takes to bring 8 at its rate so far (2 in 1 s: 4 s), up to 10 s; 8 end it.
    #[test]
    fn a_thin_trickle_waits_until_it_has_brought_enough_for_a_call_or_ten_holds() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let hold = Duration::from_millis(1000);
        let mut h = Hold::default();
        assert!(!h.due(1, hold, ms(0)));
        assert!(!h.due(2, hold, ms(1000)));
        assert_eq!(h.deadline(hold, 2, ms(1000)), Some(ms(4000)));
        // 5 by 4 s: 8 take 6.4 s.
        assert!(!h.due(5, hold, ms(4000)));
        assert_eq!(h.deadline(hold, 5, ms(4000)), Some(ms(6400)));
        // 8 wait: the hold is over.
        assert!(h.due(8, hold, ms(5000)));
        // One candidate and nothing more: 8 s, then 10 s at the most.
        let mut h = Hold::default();
        assert!(!h.due(1, hold, ms(0)));
        assert_eq!(h.deadline(hold, 1, ms(1000)), Some(ms(8000)));
        assert!(!h.due(1, hold, ms(8000 - 1)));
        assert_eq!(h.deadline(hold, 1, ms(8000)), Some(ms(10_000)));
        assert!(!h.due(1, hold, ms(9999)));
        assert!(h.due(1, hold, ms(10_000)));
    }

    /// By hand: a hold that started at t = 0 ends at t = hold when enough wait; none before
    /// it started.
    #[test]
    fn a_hold_ends_its_length_after_it_started() {
        let t0 = Instant::now();
        let hold = Duration::from_millis(1000);
        let mut h = Hold::default();
        assert_eq!(h.deadline(hold, 0, t0), None);
        assert!(!h.due(8, hold, t0));
        assert_eq!(h.deadline(hold, 8, t0), Some(t0 + hold));
    }

    /// By hand, 1 s upkeeps: each that finds nothing doubles the wait (2, 4, 8 s), which
    /// stops at 8 s; one that finds work brings it back to 1 s.
    #[test]
    fn upkeeps_that_find_nothing_wait_twice_as_long_each_up_to_eight_times() {
        let s = Duration::from_secs;
        let mut pace = UpkeepPace::default();
        let waits: Vec<Duration> = [
            Upkeep::Idle,
            Upkeep::Idle,
            Upkeep::Idle,
            Upkeep::Idle,
            Upkeep::Idle,
            Upkeep::Busy,
            Upkeep::Idle,
            Upkeep::Busy,
            Upkeep::Busy,
        ]
        .into_iter()
        .map(|u| pace.after(u, s(1)))
        .collect();
        assert_eq!(
            waits,
            [s(2), s(4), s(8), s(8), s(8), s(1), s(2), s(1), s(1)]
        );
        // With demotion the base is the 100 ms interval: 800 ms at the most.
        let mut pace = UpkeepPace::default();
        for _ in 0..10 {
            pace.after(Upkeep::Idle, Duration::from_millis(100));
        }
        assert_eq!(
            pace.after(Upkeep::Idle, Duration::from_millis(100)),
            Duration::from_millis(800)
        );
    }

    /// By hand: demotion keeps the interval's upkeep; without it, the audit period (1 s) is
    /// the least wait, and a longer interval stays longer.
    #[test]
    fn upkeep_waits_the_audit_period_unless_demotion_watches() {
        let at = |interval_ms, demote| {
            upkeep_every(&MigratorConfig {
                migrate_interval_ms: interval_ms,
                demote,
                ..MigratorConfig::default()
            })
        };
        assert_eq!(at(100, true), Duration::from_millis(100));
        assert_eq!(at(100, false), Duration::from_secs(1));
        assert_eq!(at(5000, false), Duration::from_secs(5));
        // The hold is at least the interval: a zero hold still gathers 100 ms.
        let hold = hold_for(&MigratorConfig {
            migrate_hold_ms: 0,
            ..MigratorConfig::default()
        });
        assert_eq!(hold, Duration::from_millis(100));
    }
}
