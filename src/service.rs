//! systemd integration (`Type=notify`): READY=1 once every source and migrator thread runs,
//! STATUS= with a one-line summary (at start, then every [`STATUS_EVERY`] on
//! `pghot-notify`), and STOPPING=1 when shutdown begins. Outside systemd (`NOTIFY_SOCKET`
//! unset) every call is a no-op.
//!
//! The sd-notify crate sends the datagrams; a failed send is logged once and otherwise
//! ignored, since a daemon that cannot reach its supervisor still does its job (and
//! systemd's start timeout reports the missing READY).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sd_notify::NotifyState;

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

/// READY=1 with the first STATUS=, then a `pghot-notify` thread refreshing STATUS= until
/// `stop`. Without a notify socket nothing is sent and no thread starts.
pub fn ready(
    line: StatusLine,
    stats: Arc<Stats>,
    stop: StopToken,
) -> std::io::Result<Option<std::thread::JoinHandle<()>>> {
    if !supervised() {
        return Ok(None);
    }
    let first = line.render(&stats);
    send(&[NotifyState::Ready, NotifyState::Status(&first)]);
    tracing::info!("notified systemd: ready ({first})");
    std::thread::Builder::new()
        .name("pghot-notify".into())
        .spawn(move || {
            while crate::stop::wait_until(Instant::now() + STATUS_EVERY, &stop) {
                send(&[NotifyState::Status(&line.render(&stats))]);
            }
        })
        .map(Some)
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
