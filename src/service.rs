//! systemd integration (`Type=notify`): READY=1 once every source and migrator thread runs,
//! STATUS= with a one-line summary (at start, then every [`STATUS_EVERY`] on
//! `pghot-notify`), and STOPPING=1 when shutdown begins. Outside systemd (`NOTIFY_SOCKET`
//! unset) every call is a no-op.
//!
//! With the watchdog on (`WatchdogSec=` in the unit: systemd sets `WATCHDOG_USEC`, and
//! `WATCHDOG_PID` if it names a process), `pghot-notify` sends WATCHDOG=1 at half the interval,
//! but only while every source and migrator thread is healthy ([`crate::heartbeat`]): waiting
//! in its known wait, or busy for no longer than the interval since its last progress. A stuck
//! thread is logged by name, the pings stop, and systemd restarts the service.
//!
//! The sd-notify crate sends the datagrams; a failed send is logged once and otherwise
//! ignored, since a daemon that cannot reach its supervisor still does its job (and
//! systemd's start timeout reports the missing READY).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sd_notify::NotifyState;

use crate::heartbeat::Registry;
use crate::stats::{Counter, Stats};
use crate::stop::StopToken;

/// How often STATUS= is refreshed while running.
pub const STATUS_EVERY: Duration = Duration::from_secs(10);

static SEND_FAILED: AtomicBool = AtomicBool::new(false);

fn send(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(states)
        && !SEND_FAILED.swap(true, Ordering::Relaxed)
    {
        tracing::warn!("notifying systemd (NOTIFY_SOCKET): {e}");
    }
}

/// Whether systemd (or another supervisor speaking its protocol) waits for notifications.
pub fn supervised() -> bool {
    std::env::var_os("NOTIFY_SOCKET").is_some()
}

/// What STATUS= says, besides the counters.
#[derive(Debug, Clone)]
pub struct StatusLine {
    pub sources: usize,
    pub migrators: usize,
    pub scope: String,
    pub dry_run: bool,
}

impl StatusLine {
    pub fn render(&self, stats: &Stats) -> String {
        format!(
            "{} source(s), {} migrator(s){}; scope: {}; {} samples, {} candidates, {} promoted",
            self.sources,
            self.migrators,
            if self.dry_run { ", dry run" } else { "" },
            self.scope,
            stats.get(Counter::HwhintTotalEvents),
            stats.get(Counter::PgpromoteCandidate),
            stats.get(Counter::PgpromoteSuccess),
        )
    }
}

/// READY=1 with the first STATUS=, then a `pghot-notify` thread refreshing STATUS= (and
/// pinging the watchdog, when it is on) until `stop`. Without a notify socket nothing is sent
/// and no thread starts.
pub fn ready(
    line: StatusLine,
    stats: Arc<Stats>,
    stop: StopToken,
) -> std::io::Result<Option<std::thread::JoinHandle<()>>> {
    if !supervised() {
        return Ok(None);
    }
    let watchdog = watchdog_interval(
        std::env::var("WATCHDOG_USEC").ok().as_deref(),
        std::env::var("WATCHDOG_PID").ok().as_deref(),
        std::process::id(),
    );
    let first = line.render(&stats);
    send(&[NotifyState::Ready, NotifyState::Status(&first)]);
    tracing::info!("notified systemd: ready ({first})");
    if let Some(interval) = watchdog {
        tracing::info!(
            "systemd watchdog: {interval:?}; pinging every {:?}",
            interval / 2
        );
    }
    std::thread::Builder::new()
        .name("pghot-notify".into())
        .spawn(move || notify_loop(&line, &stats, &stop, watchdog))
        .map(Some)
}

fn notify_loop(line: &StatusLine, stats: &Stats, stop: &StopToken, watchdog: Option<Duration>) {
    let mut watch = watchdog.map(|interval| Watch::new(Registry::global(), interval));
    let tick = watchdog.map_or(STATUS_EVERY, |w| {
        (w / 2).clamp(Duration::from_millis(1), STATUS_EVERY)
    });
    let mut next_status = Instant::now() + STATUS_EVERY;
    if let Some(watch) = &mut watch {
        watch.ping_if_healthy(crate::heartbeat::now());
    }
    while crate::stop::wait_until(Instant::now() + tick, stop) {
        if let Some(watch) = &mut watch {
            watch.ping_if_healthy(crate::heartbeat::now());
        }
        if Instant::now() >= next_status {
            send(&[NotifyState::Status(&line.render(stats))]);
            next_status = Instant::now() + STATUS_EVERY;
        }
    }
}

/// The watchdog interval systemd asks for, as sd_watchdog_enabled(3) reads it: `WATCHDOG_USEC`
/// a positive number of microseconds, and `WATCHDOG_PID`, if set, this process's pid (else the
/// watchdog is meant for another process, as after a fork).
pub fn watchdog_interval(usec: Option<&str>, pid: Option<&str>, me: u32) -> Option<Duration> {
    let usec: u64 = usec?.trim().parse().ok().filter(|&u| u > 0)?;
    if let Some(pid) = pid
        && pid.trim().parse::<u32>().ok() != Some(me)
    {
        return None;
    }
    Some(Duration::from_micros(usec))
}

/// Decides each ping from the threads' heartbeats.
pub struct Watch<'r> {
    registry: &'r Registry,
    /// A thread busy this long without progress is stuck: the watchdog interval itself, so
    /// that a slow batch is not mistaken for a hang (systemd then acts within two intervals).
    limit: Duration,
    /// The stuck threads already logged.
    reported: BTreeSet<String>,
}

impl<'r> Watch<'r> {
    pub fn new(registry: &'r Registry, interval: Duration) -> Self {
        Watch {
            registry,
            limit: interval,
            reported: BTreeSet::new(),
        }
    }

    /// Whether every registered thread is healthy at `now` (ms, [`crate::heartbeat::now`]).
    /// Each thread that is newly stuck is logged once, with STATUS= naming it.
    pub fn healthy(&mut self, now: u64) -> bool {
        let stuck = self.registry.stuck(now, self.limit);
        for s in &stuck {
            if self.reported.insert(s.name.clone()) {
                let what = format!(
                    "thread {} busy for {:.1} s without progress: stopping the watchdog pings",
                    s.name,
                    s.busy_for.as_secs_f64()
                );
                tracing::error!("{what}");
                send(&[NotifyState::Status(&format!("stuck: {what}"))]);
            }
        }
        self.reported
            .retain(|name| stuck.iter().any(|s| &s.name == name));
        stuck.is_empty()
    }

    /// WATCHDOG=1 if [`healthy`](Self::healthy); returns whether it was sent.
    pub fn ping_if_healthy(&mut self, now: u64) -> bool {
        let healthy = self.healthy(now);
        if healthy {
            send(&[NotifyState::Watchdog]);
        }
        healthy
    }
}

/// STOPPING=1 with a last STATUS=.
pub fn stopping(why: &str) {
    if supervised() {
        send(&[
            NotifyState::Stopping,
            NotifyState::Status(&format!("stopping: {why}")),
        ]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_follows_sd_watchdog_enabled() {
        let secs = |s| Some(Duration::from_secs(s));
        assert_eq!(watchdog_interval(Some("30000000"), None, 7), secs(30));
        assert_eq!(watchdog_interval(Some("30000000"), Some("7"), 7), secs(30));
        assert_eq!(
            watchdog_interval(Some("30000000"), Some("8"), 7),
            None,
            "another pid's"
        );
        assert_eq!(watchdog_interval(Some("30000000"), Some("x"), 7), None);
        assert_eq!(watchdog_interval(None, Some("7"), 7), None);
        assert_eq!(watchdog_interval(Some("0"), None, 7), None);
        assert_eq!(watchdog_interval(Some("soon"), None, 7), None);
    }

    #[test]
    fn a_stuck_migrator_stops_the_pings_and_an_idle_one_does_not() {
        let registry = Registry::default();
        let mut watch = Watch::new(&registry, Duration::from_secs(30));
        let src = registry.register("pghot-src/0", 0);
        let idle = registry.register("pghot-mig/node1", 0);
        let busy = registry.register("pghot-mig/node2", 0);
        src.wait();
        idle.wait();
        // node2 works, beating after each batch: healthy for as long as it beats.
        for t in (0..=120_000).step_by(10_000) {
            busy.busy_at(t);
            assert!(watch.healthy(t + 5_000), "at {t} ms");
        }
        // Then a batch never returns: healthy up to the limit, stuck past it.
        assert!(watch.healthy(120_000 + 30_000));
        assert!(!watch.healthy(120_000 + 30_001));
        assert!(!watch.healthy(1_000_000), "stays stuck");
        assert!(watch.reported.contains("pghot-mig/node2"));
        assert_eq!(watch.reported.len(), 1, "the idle node1 is not named");
        // The idle migrator alone, blocked for ever, keeps the pings going.
        registry.deregister(&busy);
        assert!(watch.healthy(100_000_000));
        assert!(watch.reported.is_empty());
    }
}
